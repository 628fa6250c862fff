//! Tests of Git charts' dependencies: what packing asks for (Chart.lock, vendored archives, refusals, bounds), `.helmignore` when packing, the policy's refusal, and the cache resolving them from a repository into a deterministic archive.

use std::{os::unix::fs::PermissionsExt as _, path::Path, sync::Arc};

use sha2::{Digest as _, Sha256};

use super::*;
use crate::{
    api::crd::RefKind,
    charts::{
        cache::git::package::pack,
        fetch::testing::{Answer, Server},
        store::hex,
    },
    metrics::Metrics,
    policy::{access::Trust, source::SourceUrl},
};

use crate::charts::cache::git::tests::{entries, write};

/// A chart `name` at `dir` with `extra` appended to its Chart.yaml.
fn chart(root: &Path, dir: &str, name: &str, extra: &str) {
    write(
        root,
        &format!("{dir}/Chart.yaml"),
        &format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n{extra}"),
    );
    write(
        root,
        &format!("{dir}/templates/cm.yaml"),
        "kind: ConfigMap\n",
    );
}

fn names(bytes: &[u8]) -> Vec<String> {
    entries(bytes).into_iter().map(|e| e.0).collect()
}

fn request(name: &str, repository: &str) -> DependencyRequest {
    DependencyRequest {
        chart: "charts/web".into(),
        at: "web".into(),
        name: name.into(),
        repository: repository.into(),
        version: Some(">=1.0.0".into()),
        locked: false,
    }
}

// --- refusals first ---

#[test]
fn a_dependency_from_a_repository_outside_the_policy_is_refused_naming_chart_dependency_and_repository()
 {
    let refuse: DependencyAdmission = Arc::new(|tenant: &str, chart: &Chart| {
        assert_eq!(tenant, "team-a");
        assert_eq!(
            chart.repo.as_deref(),
            Some("https://user:pw@elsewhere.example.com/charts")
        );
        Err("no TenancyPolicy governing namespace team-a lists a chart source holding it".into())
    });
    let why = admit(
        Some(&refuse),
        true,
        "team-a",
        "web",
        &request("redis", "https://user:pw@elsewhere.example.com/charts"),
    )
    .unwrap_err();
    assert!(
        why.contains("chart web")
            && why.contains("\"redis\"")
            && why.contains("charts/web/Chart.yaml")
            && why.contains("elsewhere.example.com")
            && why.contains("chartSources")
            && why.contains("namespace team-a")
            && why.contains("under charts/"),
        "{why}"
    );
    assert!(!why.contains("pw@"), "credentials are redacted: {why}");
    // A process that admits none says so.
    let none = admit(
        None,
        true,
        "team-a",
        "web",
        &request("redis", "https://c.example.com"),
    )
    .unwrap_err();
    assert!(none.contains("admits no dependency"), "{none}");
}

#[test]
fn a_dependency_whose_source_requires_signatures_is_admitted_with_its_rules_only_where_they_are_checked()
 {
    let rule = crate::policy::access::TrustRule {
        policy: "team-a".into(),
        prefix: "https://charts.example.com/".into(),
        verify: serde_json::from_value(serde_json::json!({
            "provider": "cosign", "secretRef": {"name": "keys"}
        }))
        .unwrap(),
    };
    let trust = Trust {
        rules: vec![rule],
        tags: None,
    };
    let rules = trust.clone();
    let signed: DependencyAdmission = Arc::new(move |_: &str, chart: &Chart| {
        Ok(Scope::Under(
            SourceUrl::parse(chart.repo.as_deref().unwrap()).unwrap(),
            Credentials::None,
            rules.clone(),
        ))
    });
    let redis = request("redis", "https://charts.example.com/");

    let unchecked = admit(Some(&signed), false, "team-a", "web", &redis).unwrap_err();
    let (_, _, checked) = admit(Some(&signed), true, "team-a", "web", &redis).unwrap();

    assert!(
        unchecked.contains("signature rules")
            && unchecked.contains("\"redis\"")
            && unchecked.contains("--verifier"),
        "{unchecked}"
    );
    assert_eq!(checked, trust, "the rules go with it, to be checked");
}

#[test]
fn a_dependency_of_a_named_repository_is_refused_with_what_to_write() {
    for repository in ["@stable", "alias:stable"] {
        let dir = tempfile::tempdir().unwrap();
        chart(
            dir.path(),
            "web",
            "web",
            &format!(
                "dependencies:\n- name: redis\n  version: 1.0.0\n  repository: \"{repository}\"\n"
            ),
        );
        let why = pack(dir.path(), "web", "web", 1 << 20).unwrap_err();
        assert!(
            why.contains("\"redis\"") && why.contains("write the repository's URL"),
            "{why}"
        );
    }
}

#[test]
fn more_dependencies_than_the_bound_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = String::from("dependencies:\n");
    for i in 0..=package::MAX_DEPENDENCIES {
        extra.push_str(&format!(
            "- name: d{i}\n  repository: https://charts.example.com/\n"
        ));
    }
    chart(dir.path(), "web", "web", &extra);
    let why = pack(dir.path(), "web", "web", 1 << 20).unwrap_err();
    assert!(why.contains("more than 64 dependencies"), "{why}");
}

#[test]
fn a_chart_lock_out_of_sync_is_refused_and_one_in_sync_pins_the_versions() {
    let deps = "dependencies:\n- name: redis\n  version: \">=1.0.0\"\n  repository: https://charts.example.com/\n";
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), "web", "web", deps);
    let wanted: serde_yaml::Value = serde_yaml::from_str(deps).unwrap();
    let wanted = wanted["dependencies"].as_sequence().unwrap().clone();
    let locked: Vec<serde_yaml::Value> = vec![
        serde_yaml::from_str(
            "name: redis\nrepository: https://charts.example.com/\nversion: 1.4.2\n",
        )
        .unwrap(),
    ];
    let digest = super::super::lock::hash_req(&wanted, &locked);
    write(
        dir.path(),
        "web/Chart.lock",
        &format!(
            "dependencies:\n- name: redis\n  repository: https://charts.example.com/\n  version: 1.4.2\ndigest: {digest}\ngenerated: \"2026-01-01T00:00:00Z\"\n"
        ),
    );
    let packed = pack(dir.path(), "web", "web", 1 << 20).unwrap();
    assert_eq!(packed.requests.len(), 1);
    assert_eq!(packed.requests[0].version.as_deref(), Some("1.4.2"));
    assert!(packed.requests[0].locked);
    // Chart.yaml changed since the lock: refused, saying what to run.
    chart(
        dir.path(),
        "web",
        "web",
        &deps.replace(">=1.0.0", ">=2.0.0"),
    );
    let why = pack(dir.path(), "web", "web", 1 << 20).unwrap_err();
    assert!(
        why.contains("out of sync") && why.contains("helm dependency update"),
        "{why}"
    );
}

// --- what packing asks for ---

#[test]
fn without_a_lock_the_constraint_is_asked_for_and_a_vendored_archive_wins() {
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        "charts/web",
        "web",
        "dependencies:\n- name: redis\n  version: \">=1.0.0\"\n  repository: https://charts.example.com/\n  alias: cache\n  condition: cache.enabled\n- name: pg\n  version: 2.0.0\n  repository: oci://registry.example.com/charts\n- name: common\n  repository: file://../common\n",
    );
    chart(
        dir.path(),
        "charts/common",
        "common",
        "dependencies:\n- name: lib\n  version: ~1.2\n  repository: https://charts.example.com/\n",
    );
    let packed = pack(dir.path(), "charts/web", "web", 1 << 20).unwrap();
    let asked: Vec<(&str, &str, Option<&str>)> = packed
        .requests
        .iter()
        .map(|r| (r.name.as_str(), r.at.as_str(), r.version.as_deref()))
        .collect();
    assert_eq!(
        asked,
        [
            ("redis", "web", Some(">=1.0.0")),
            ("pg", "web", Some("2.0.0")),
            ("lib", "web/charts/common", Some("~1.2")),
        ]
    );
    assert_eq!(
        as_chart(&packed.requests[1]).chart_name,
        "oci://registry.example.com/charts/pg"
    );
    write(dir.path(), "charts/web/charts/redis-1.0.3.tgz", "vendored");
    let vendored = pack(dir.path(), "charts/web", "web", 1 << 20).unwrap();
    assert!(vendored.requests.iter().all(|r| r.name != "redis"));
}

#[test]
fn helmignore_leaves_files_out_of_the_chart_and_of_its_file_dependencies() {
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        "web",
        "web",
        "dependencies:\n- name: common\n  repository: file://../common\n",
    );
    write(
        dir.path(),
        "web/.helmignore",
        "# editor files\n*.swp\nsecrets/\n/NOTES.local\n",
    );
    write(dir.path(), "web/templates/cm.yaml.swp", "x");
    write(dir.path(), "web/secrets/key.pem", "x");
    write(dir.path(), "web/NOTES.local", "x");
    write(dir.path(), "web/templates/.hidden.yaml", "x");
    chart(dir.path(), "common", "common", "");
    write(dir.path(), "common/.helmignore", "*.md\n");
    write(dir.path(), "common/README.md", "x");
    let packed = pack(dir.path(), "web", "web", 1 << 20).unwrap();
    assert_eq!(
        names(&packed.bytes),
        [
            "web/.helmignore",
            "web/Chart.yaml",
            "web/charts/common/.helmignore",
            "web/charts/common/Chart.yaml",
            "web/charts/common/templates/cm.yaml",
            "web/templates/cm.yaml",
        ]
    );
    write(dir.path(), "web/.helmignore", "**/x\n");
    let why = pack(dir.path(), "web", "web", 1 << 20).unwrap_err();
    assert!(why.contains("web/.helmignore line 1"), "{why}");
}

#[test]
fn archives_are_added_under_charts_deterministically_and_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), "web", "web", "");
    let base = pack(dir.path(), "web", "web", 1 << 20).unwrap().bytes;
    let added = vec![("web/charts/redis-1.0.3.tgz".to_owned(), b"tgz".to_vec())];
    let one = package::add_archives(&base, &added, 1 << 20).unwrap();
    let two = package::add_archives(&base, &added, 1 << 20).unwrap();
    assert_eq!(one, two);
    assert!(names(&one).contains(&"web/charts/redis-1.0.3.tgz".to_owned()));
    let other = vec![("web/charts/redis-1.0.4.tgz".to_owned(), b"tgz".to_vec())];
    assert_ne!(package::add_archives(&base, &other, 1 << 20).unwrap(), one);
    let big = vec![("web/charts/x.tgz".to_owned(), vec![0; 4096])];
    assert!(
        package::add_archives(&base, &big, 1024)
            .unwrap_err()
            .contains("size bound")
    );
}

// --- the cache resolving them ---

/// A stand-in fetcher writing chart `web` depending on `common` (`>=1.0.0`) of the repository
/// written in its directory's `repo`.
fn stand_in(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("fetcher.sh");
    let body = r#"#!/bin/sh
here=$(dirname "$0")
request=$(cat)
commit=1111111111111111111111111111111111111111
case "$request" in
  *'"op":"resolve"'*)
    printf '{"protocol":1,"ok":{"commit":"%s","ref":"refs/heads/main"}}' "$commit" ;;
  *)
    out=$(printf '%s' "$request" | sed 's/.*"out":"\([^"]*\)".*/\1/')
    mkdir -p "$out/charts/web/templates"
    printf 'apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: common\n  version: ">=1.0.0"\n  repository: %s\n' "$(cat "$here/repo")" > "$out/charts/web/Chart.yaml"
    printf '{"protocol":1,"ok":{"commit":"%s","ref":"refs/heads/main","paths":[{"path":"charts/web","written":true}]}}' "$commit" ;;
esac
"#;
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A repository serving chart `common` at each (version, archive content).
async fn repository(versions: &[(&str, &[u8])]) -> Server {
    let versions: Vec<(String, Vec<u8>)> = versions
        .iter()
        .map(|(v, c)| (v.to_string(), c.to_vec()))
        .collect();
    Server::serve_with(move |_| {
        let mut index = String::from("apiVersion: v1\nentries:\n  common:\n");
        let mut answers = Vec::new();
        for (version, content) in &versions {
            index.push_str(&format!(
                "  - apiVersion: v2\n    name: common\n    version: {version}\n    digest: {}\n    urls:\n    - common-{version}.tgz\n",
                hex(&Sha256::digest(content))
            ));
            answers.push((format!("/repo/common-{version}.tgz"), Answer::Body(content.clone())));
        }
        answers.push(("/repo/index.yaml".into(), Answer::Body(index.into_bytes())));
        answers
    })
    .await
}

/// Chart `web` of the stand-in's repository at `reference`, for namespace team-a.
fn web(reference: &RefKind) -> GitChart<'_> {
    GitChart {
        url: "https://git.example.com/team-a/charts.git",
        path: "charts/web",
        reference,
        chart: "web",
        tenant: "team-a",
        interval: std::time::Duration::from_secs(3600),
    }
}

/// Admits every repository under `allowed` (as its own scope), refuses the others.
fn admitting(allowed: String) -> DependencyAdmission {
    Arc::new(move |_: &str, chart: &Chart| {
        let url = chart.repo.clone().unwrap_or_default();
        match url.starts_with(&allowed) {
            true => Ok(Scope::Under(
                SourceUrl::parse(&allowed).unwrap(),
                Credentials::None,
                Trust::default(),
            )),
            false => Err(
                "no TenancyPolicy governing namespace team-a lists a chart source holding it"
                    .into(),
            ),
        }
    })
}

#[tokio::test]
async fn a_dependency_is_resolved_from_the_repository_and_a_new_version_changes_the_digest() {
    let lab = tempfile::tempdir().unwrap();
    let fetcher = stand_in(lab.path());
    let server = repository(&[
        ("1.0.0", b"one"),
        ("1.1.0", b"eleven"),
        ("2.0.0-rc.1", b"rc"),
    ])
    .await;
    let repo = format!("{}/repo", server.origin);
    std::fs::write(lab.path().join("repo"), &repo).unwrap();
    let reference = RefKind::Branch("main".into());
    let chart = web(&reference);
    let dir = tempfile::tempdir().unwrap();
    let open = |dir: &Path| {
        ChartCache::open(dir, 1 << 30, "helm".into(), Arc::new(Metrics::new()))
            .unwrap()
            .with_git_fetcher(Some(fetcher.clone()))
    };
    let cache = open(dir.path());
    // Refused while no policy allows the repository: nothing fetched from it.
    cache.admit_git_dependencies(admitting("https://charts.example.com/".into()));
    let refused = cache
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert_eq!(
        refused.archive, None,
        "nothing of a refused chart is kept for it"
    );
    let why = refused.git.unwrap().refused.unwrap();
    assert!(
        why.contains("\"common\"") && why.contains("is refused"),
        "{why}"
    );
    assert_eq!(server.hits("/repo/index.yaml"), 0);
    // Another cache admitting it: the newest 1.x, added as charts/common-1.1.0.tgz.
    let other = tempfile::tempdir().unwrap();
    let cache = open(other.path());
    cache.admit_git_dependencies(admitting(repo.clone()));
    let resolved = cache
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    let archive = resolved.archive.clone().unwrap();
    let bytes = std::fs::read(other.path().join(format!("{archive}.tgz"))).unwrap();
    assert!(
        names(&bytes).contains(&"web/charts/common-1.1.0.tgz".to_owned()),
        "{:?}",
        names(&bytes)
    );
    let found = resolved.git.clone().unwrap();
    assert_eq!(found.dependencies.len(), 1);
    assert!(
        found.dependencies[0].starts_with("common 1.1.0 sha256:"),
        "{found:?}"
    );
    assert_eq!(resolved.digest, Some(format!("sha256:{archive}")));
    // Asked again within the interval: the same archive, the index not fetched again.
    let again = cache
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert_eq!(again, resolved);
    assert_eq!(server.hits("/repo/index.yaml"), 1);
    // A third cache packs the same commit and dependency to the same digest.
    let third = tempfile::tempdir().unwrap();
    let cache3 = open(third.path());
    cache3.admit_git_dependencies(admitting(repo.clone()));
    let same = cache3
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert_eq!(same.archive, resolved.archive);
    // The repository publishes 1.2.0: past the interval the range picks it, a new digest.
    drop(server);
    let newer = repository(&[("1.1.0", b"eleven"), ("1.2.0", b"twelve")]).await;
    let repo2 = format!("{}/repo", newer.origin);
    std::fs::write(lab.path().join("repo"), &repo2).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let cache4 = open(fresh.path());
    cache4.admit_git_dependencies(admitting(repo2));
    let moved = cache4
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert_ne!(moved.archive, resolved.archive);
    assert!(moved.git.unwrap().dependencies[0].starts_with("common 1.2.0"));
}

#[tokio::test]
async fn a_policy_that_stops_allowing_the_repository_refuses_the_chart_at_the_next_look() {
    let lab = tempfile::tempdir().unwrap();
    let fetcher = stand_in(lab.path());
    let server = repository(&[("1.0.0", b"one")]).await;
    let repo = format!("{}/repo", server.origin);
    std::fs::write(lab.path().join("repo"), &repo).unwrap();
    let reference = RefKind::Branch("main".into());
    let chart = web(&reference);
    let dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::open(dir.path(), 1 << 30, "helm".into(), Arc::new(Metrics::new()))
        .unwrap()
        .with_git_fetcher(Some(fetcher));
    let allowed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let admission = admitting(repo);
    let flag = allowed.clone();
    cache.admit_git_dependencies(Arc::new(move |tenant: &str, chart: &Chart| {
        match flag.load(std::sync::atomic::Ordering::SeqCst) {
            true => admission(tenant, chart),
            false => Err("no TenancyPolicy governing namespace team-a lists it".into()),
        }
    }));
    let first = cache
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert!(first.archive.is_some());
    allowed.store(false, std::sync::atomic::Ordering::SeqCst);
    let then = cache
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap();
    assert_eq!(then.archive, None);
    assert!(then.git.unwrap().refused.unwrap().contains("is refused"));
}

mod signatures;
