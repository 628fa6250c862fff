//! Tests of Git charts' dependencies from sources with signature rules: checked as chart entries of those sources are, a refusal refusing the chart by name, a pass packed with who signed it, and each archive checked once per resolution while the rules stay the same.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use super::{names, repository, stand_in, web};
use crate::{
    api::crd::{Chart, RefKind},
    charts::cache::{
        ChartCache, Resolved,
        git::dependencies::{
            DependencyAdmission, DependencyCheck, DependencyVerdict, DependencyVerification,
            VerdictFuture,
        },
    },
    metrics::Metrics,
    policy::{
        Scope,
        access::{Credentials, Trust, TrustRule},
        source::SourceUrl,
    },
};

/// A provenance rule of policy `policy` over `prefix`, its keyring in Secret `keys`.
fn provenance_rule(policy: &str, prefix: &str) -> TrustRule {
    TrustRule {
        policy: policy.into(),
        prefix: prefix.into(),
        verify: serde_json::from_value(serde_json::json!({
            "provider": "provenance", "secretRef": {"name": "keys"}
        }))
        .unwrap(),
    }
}

/// Admits every repository under `allowed` (as its own scope) under the rules `trust` holds
/// at the time it is asked.
fn admitting_under(allowed: String, trust: Arc<Mutex<Trust>>) -> DependencyAdmission {
    Arc::new(move |_: &str, chart: &Chart| {
        let url = chart.repo.clone().unwrap_or_default();
        assert!(url.starts_with(&allowed), "{url}");
        Ok(Scope::Under(
            SourceUrl::parse(&allowed).unwrap(),
            Credentials::None,
            trust.lock().unwrap().clone(),
        ))
    })
}

/// A verifier that answers `verdict`, counting its checks and keeping the last one asked.
fn verifier(
    verdict: DependencyVerdict,
    checks: Arc<AtomicUsize>,
    asked: Arc<Mutex<Option<DependencyCheck>>>,
) -> DependencyVerification {
    Arc::new(move |check: DependencyCheck| -> VerdictFuture {
        checks.fetch_add(1, Ordering::SeqCst);
        *asked.lock().unwrap() = Some(check);
        let verdict = verdict.clone();
        Box::pin(async move { Ok(verdict) })
    })
}

/// A stand-in fetcher packing chart `web` that depends on `common` of a repository serving
/// 1.0.0, and a cache using it.
struct Setup {
    /// The repository's URL.
    repo: String,
    /// The repository, counting what is asked of it.
    server: crate::charts::fetch::testing::Server,
    /// The cache under test.
    cache: ChartCache,
    /// The cache's directory.
    dir: tempfile::TempDir,
    /// The stand-in fetcher's directory, kept while the cache runs it.
    _fetcher: tempfile::TempDir,
}

/// A [`Setup`] of its own for one test.
async fn set_up() -> Setup {
    let fetcher = tempfile::tempdir().unwrap();
    let script = stand_in(fetcher.path());
    let server = repository(&[("1.0.0", b"one")]).await;
    let repo = format!("{}/repo", server.origin);
    std::fs::write(fetcher.path().join("repo"), &repo).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::open(dir.path(), 1 << 30, "helm".into(), Arc::new(Metrics::new()))
        .unwrap()
        .with_git_fetcher(Some(script));
    Setup {
        repo,
        server,
        cache,
        dir,
        _fetcher: fetcher,
    }
}

/// Chart `web` of branch main as the cache resolves it at a look.
async fn look(cache: &ChartCache) -> Resolved {
    let reference = RefKind::Branch("main".into());
    cache
        .git(&web(&reference), &Credentials::None, &Trust::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_dependency_its_source_rule_refuses_refuses_the_chart_naming_it_and_nothing_is_packed() {
    let setup = set_up().await;
    let Setup { repo, cache, .. } = &setup;
    let trust = Trust {
        rules: vec![provenance_rule("platform", repo)],
        tags: None,
    };
    cache.admit_git_dependencies(admitting_under(
        repo.clone(),
        Arc::new(Mutex::new(trust.clone())),
    ));
    let (checks, asked) = (Arc::default(), Arc::default());
    cache.verify_git_dependencies(verifier(
        DependencyVerdict::Refused(
            "refused by provenance (TenancyPolicy platform, source …): no provenance file".into(),
        ),
        Arc::clone(&checks),
        Arc::clone(&asked),
    ));

    let refused = look(cache).await;

    assert_eq!(
        refused.archive, None,
        "nothing of a refused chart is planned"
    );
    let why = refused.git.unwrap().refused.unwrap();
    assert!(
        why.contains("chart web")
            && why.contains("dependency \"common\"")
            && why.contains("charts/web/Chart.yaml")
            && why.contains("127.0.0.1")
            && why.contains("version 1.0.0 is not verified")
            && why.contains("no provenance file"),
        "{why}"
    );
    let check = asked.lock().unwrap().take().unwrap();
    assert_eq!(check.trust, trust, "checked under its source's rules");
    assert_eq!(check.oci, None, "a repository chart, checked by provenance");
    assert_eq!(
        check.resolved.provenance.as_deref(),
        Some(format!("{repo}/common-1.0.0.tgz.prov").as_str()),
        "the .prov beside the archive the index lists"
    );
    // Asked again within the interval: still refused, not checked again.
    let again = look(cache).await;
    assert_eq!(again.archive, None);
    assert_eq!(checks.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_verified_dependency_is_packed_with_its_signer_and_checked_again_only_under_new_rules() {
    let setup = set_up().await;
    let Setup {
        repo,
        server,
        cache,
        dir,
        ..
    } = &setup;
    let rules = Arc::new(Mutex::new(Trust {
        rules: vec![provenance_rule("platform", repo)],
        tags: None,
    }));
    cache.admit_git_dependencies(admitting_under(repo.clone(), Arc::clone(&rules)));
    let (checks, asked) = (Arc::new(AtomicUsize::new(0)), Arc::default());
    cache.verify_git_dependencies(verifier(
        DependencyVerdict::Signed("provenance: Lab Charts <charts@lab.test>".into()),
        Arc::clone(&checks),
        asked,
    ));

    let resolved = look(cache).await;

    let archive = resolved
        .archive
        .clone()
        .expect("a verified dependency is packed");
    let bytes = std::fs::read(dir.path().join(format!("{archive}.tgz"))).unwrap();
    assert!(
        names(&bytes).contains(&"web/charts/common-1.0.0.tgz".to_owned()),
        "{:?}",
        names(&bytes)
    );
    let found = resolved.git.clone().unwrap();
    assert_eq!(
        found.signed_by,
        vec!["dependency common 1.0.0: provenance: Lab Charts <charts@lab.test>".to_owned()],
        "who signed it goes with the commit's signers"
    );
    assert_eq!(found.refused, None);
    // Looked at again and again with the same rules: the same archive, checked once.
    for _ in 0..3 {
        let again = look(cache).await;
        assert_eq!(again, resolved);
    }
    assert_eq!(checks.load(Ordering::SeqCst), 1, "one check per resolution");
    assert_eq!(server.hits("/repo/index.yaml"), 1);
    // A policy adds a rule: the next look checks the dependency under the new rules.
    rules
        .lock()
        .unwrap()
        .rules
        .push(provenance_rule("security", repo));
    let checked = look(cache).await;
    assert_eq!(
        checks.load(Ordering::SeqCst),
        2,
        "new rules are checked at once"
    );
    assert_eq!(checked.archive, resolved.archive, "the same content");
}

#[tokio::test]
async fn without_a_verifier_a_dependency_under_signature_rules_is_refused_unfetched() {
    let setup = set_up().await;
    let Setup {
        repo,
        server,
        cache,
        ..
    } = &setup;
    cache.admit_git_dependencies(admitting_under(
        repo.clone(),
        Arc::new(Mutex::new(Trust {
            rules: vec![provenance_rule("platform", repo)],
            tags: None,
        })),
    ));

    let refused = look(cache).await;

    assert_eq!(refused.archive, None);
    let why = refused.git.unwrap().refused.unwrap();
    assert!(
        why.contains("\"common\"") && why.contains("checks no signatures"),
        "{why}"
    );
    assert_eq!(
        server.hits("/repo/index.yaml"),
        0,
        "nothing fetched unchecked"
    );
}
