//! Tests of Git charts in the chart cache: the protocol's request and answer, deterministic packing, a source Secret's keys, and the cache driving a scripted stand-in fetcher.

use std::{collections::BTreeMap, os::unix::fs::PermissionsExt as _, path::Path, sync::Arc};

use futures::future::BoxFuture;

use super::*;
use crate::{api::policy::VerifyProvider, charts::credentials::SecretData};
use crate::{
    charts::credentials::{ReadSecret, SourceSecrets},
    metrics::Metrics,
};

/// Writes `text` at `path` under `root`, making its directories.
pub(super) fn write(root: &Path, path: &str, text: &str) {
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
}

fn chart_dir(root: &Path, dir: &str, name: &str, extra: &str) {
    write(
        root,
        &format!("{dir}/Chart.yaml"),
        &format!("apiVersion: v2\nname: {name}\nversion: 1.2.0\n{extra}"),
    );
    write(root, &format!("{dir}/values.yaml"), "replicas: 1\n");
    write(
        root,
        &format!("{dir}/templates/cm.yaml"),
        "kind: ConfigMap\n",
    );
}

/// The entries of an archive: path, mode, time, owner.
pub(super) fn entries(bytes: &[u8]) -> Vec<(String, u32, u64, u64)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let h = e.header();
            (
                e.path().unwrap().to_string_lossy().into_owned(),
                h.mode().unwrap(),
                h.mtime().unwrap(),
                h.uid().unwrap(),
            )
        })
        .collect()
}

// --- the protocol ---

#[test]
fn a_resolve_request_is_written_as_the_protocol_says() {
    let access = Access {
        auth: Some(protocol::Auth {
            username: Some("u".into()),
            password: Some("p4ssword".into()),
            ..Default::default()
        }),
        ca_bundle: Some("PEM".into()),
    };
    let request = Request::resolve(
        "https://git.example.com/team/charts.git",
        &RefKind::Branch("main".into()),
        // Tag patterns go with a semver range only.
        Some(&["v*".to_owned()][..]),
        &access,
        60,
    );
    let json: serde_json::Value = serde_json::from_slice(&request.to_bytes().unwrap()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "protocol": 1, "op": "resolve", "url": "https://git.example.com/team/charts.git",
            "ref": {"branch": "main"}, "timeoutSeconds": 60,
            "auth": {"username": "u", "password": "p4ssword"}, "caBundle": "PEM"
        })
    );
    let shown = format!("{request:?}");
    assert!(
        !shown.contains("p4ssword") && !shown.contains("PEM"),
        "{shown}"
    );
}

#[test]
fn a_fetch_request_names_the_commit_the_paths_the_bound_and_the_keys() {
    let request = Request::fetch(
        "ssh://git@git.example.com/team/charts.git",
        &RefKind::Semver(">=1.0.0 <2.0.0".into()),
        &Access::default(),
        120,
        &"a".repeat(40),
        (Path::new("/tmp/out"), 1024),
        vec![
            WantedPath {
                path: "charts/web".into(),
                kind: PathKind::Dir,
                optional: false,
            },
            WantedPath {
                path: "values/m.yaml".into(),
                kind: PathKind::File,
                optional: true,
            },
        ],
        Some(VerifyKeys {
            ssh_keys: vec!["ssh-ed25519 AAAA x".into()],
            ..Default::default()
        }),
    );
    let json: serde_json::Value = serde_json::from_slice(&request.to_bytes().unwrap()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "protocol": 1, "op": "fetch", "url": "ssh://git@git.example.com/team/charts.git",
            "ref": {"semver": ">=1.0.0 <2.0.0"}, "timeoutSeconds": 120,
            "commit": "a".repeat(40), "maxBytes": 1024, "out": "/tmp/out",
            "paths": [{"path": "charts/web", "kind": "dir"},
                      {"path": "values/m.yaml", "kind": "file", "optional": true}],
            "verify": {"sshKeys": ["ssh-ed25519 AAAA x"]}
        })
    );
}

#[test]
fn answers_are_read_bounded_checked_and_masked() {
    let ok = br#"{"protocol":1,"ok":{"commit":"ABCDEF0123456789abcdef0123456789abcdef01","ref":"refs/heads/main","paths":[{"path":"charts/web","written":true}],"signedBy":"SHA256:xyz"}}"#;
    let Answer::Ok(found) = protocol::parse_answer(ok, &[]).unwrap() else {
        panic!("not ok");
    };
    assert_eq!(found.commit, "abcdef0123456789abcdef0123456789abcdef01");
    assert_eq!(
        (found.reference.as_str(), found.signed_by.as_str()),
        ("refs/heads/main", "SHA256:xyz")
    );
    assert!(found.paths[0].written);
    let error = br#"{"protocol":1,"error":{"kind":"auth","message":"server said: bad password s3cr3t for https://u:s3cr3t@h/x"}}"#;
    let Answer::Error { kind, message } = protocol::parse_answer(error, &["s3cr3t"]).unwrap()
    else {
        panic!("not an error");
    };
    assert_eq!(kind, "auth");
    assert!(
        !message.contains("s3cr3t") && message.contains("***"),
        "{message}"
    );
    let refused =
        br#"{"protocol":1,"refused":{"code":"symlink","message":"charts/web/x points outside"}}"#;
    assert!(
        matches!(protocol::parse_answer(refused, &[]).unwrap(), Answer::Refused { code, .. } if code == "symlink")
    );
    for (hostile, needle) in [
        (&br#"{"protocol":2,"ok":{"commit":"x"}}"#[..], "protocol 2"),
        (br#"{"protocol":1}"#, "not exactly one"),
        (
            br#"{"protocol":1,"ok":{"commit":"abc"},"error":{"kind":"x","message":"y"}}"#,
            "not exactly one",
        ),
        (br#"{"protocol":1,"ok":{"commit":"zz"}}"#, "40 hex"),
        (b"not json at all", "not protocol JSON"),
    ] {
        let why = protocol::parse_answer(hostile, &[]).unwrap_err();
        assert!(why.contains(needle), "{why}");
    }
    let huge = vec![b' '; protocol::MAX_ANSWER + 1];
    assert!(
        protocol::parse_answer(&huge, &[])
            .unwrap_err()
            .contains("more than")
    );
}

#[test]
fn the_fetchers_own_protocol_examples_parse_when_present() {
    // The Go side's examples, when its branch is merged: every answer parses, every request
    // reads back into the operator's type.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/charts/git/testdata/protocol");
    let Ok(files) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut read = 0;
    for file in files.flatten() {
        read += 1;
        let name = file.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(file.path()).unwrap();
        if name.contains("answer") {
            protocol::parse_answer(&bytes, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if name.contains("request") {
            // What the operator would write of it is the example itself.
            let request: Request =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let written: serde_json::Value =
                serde_json::from_slice(&request.to_bytes().unwrap()).unwrap();
            let example: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(written, example, "{name}");
        }
    }
    assert!(read > 0, "{} holds no examples", dir.display());
}

// --- packing ---

#[test]
fn the_same_chart_packs_to_the_same_bytes_whatever_its_files_times_or_order() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    chart_dir(a.path(), "charts/web", "web", "");
    // b written in another order, with other times.
    write(
        b.path(),
        "charts/web/templates/cm.yaml",
        "kind: ConfigMap\n",
    );
    write(b.path(), "charts/web/values.yaml", "replicas: 1\n");
    write(
        b.path(),
        "charts/web/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 1.2.0\n",
    );
    let old = std::fs::File::options()
        .write(true)
        .open(b.path().join("charts/web/values.yaml"))
        .unwrap();
    old.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(12345))
        .unwrap();
    let one = package::pack(a.path(), "charts/web", "web", 1 << 20).unwrap();
    let two = package::pack(b.path(), "charts/web", "web", 1 << 20).unwrap();
    assert_eq!(one.bytes, two.bytes);
    assert_eq!(one.version, "1.2.0");
    assert_eq!(
        entries(&one.bytes),
        vec![
            ("web/Chart.yaml".to_owned(), 0o644, 0, 0),
            ("web/templates/cm.yaml".to_owned(), 0o644, 0, 0),
            ("web/values.yaml".to_owned(), 0o644, 0, 0),
        ]
    );
    // An executable file keeps its bit, and changes the archive.
    let script = b.path().join("charts/web/templates/cm.yaml");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let three = package::pack(b.path(), "charts/web", "web", 1 << 20).unwrap();
    assert_ne!(three.bytes, one.bytes);
    assert!(entries(&three.bytes).contains(&("web/templates/cm.yaml".into(), 0o755, 0, 0)));
}

#[test]
fn file_dependencies_are_packed_under_charts_and_others_are_asked_of_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    chart_dir(
        dir.path(),
        "charts/web",
        "web",
        "dependencies:\n- name: common\n  version: 1.2.0\n  repository: file://../common\n",
    );
    chart_dir(dir.path(), "charts/common", "common", "");
    let packed = package::pack(dir.path(), "charts/web", "web", 1 << 20).unwrap();
    let names: Vec<String> = entries(&packed.bytes).into_iter().map(|e| e.0).collect();
    assert!(
        names.contains(&"web/charts/common/Chart.yaml".to_owned()),
        "{names:?}"
    );
    // A dependency from a repository that is not in charts/ is asked of the cache (helm never
    // fetches it); one vendored in charts/ is not.
    let other = tempfile::tempdir().unwrap();
    chart_dir(
        other.path(),
        "web",
        "web",
        "dependencies:\n- name: redis\n  version: 1.0.0\n  repository: https://charts.example.com/\n",
    );
    let asked = package::pack(other.path(), "web", "web", 1 << 20).unwrap();
    assert_eq!(asked.requests.len(), 1);
    assert_eq!(asked.requests[0].name, "redis");
    write(other.path(), "web/charts/redis-1.0.0.tgz", "archive");
    let vendored = package::pack(other.path(), "web", "web", 1 << 20).unwrap();
    assert!(vendored.requests.is_empty());
}

#[test]
fn hostile_charts_are_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    chart_dir(dir.path(), "web", "not-web", "");
    assert!(
        package::pack(dir.path(), "web", "web", 1 << 20)
            .unwrap_err()
            .contains("must be the name")
    );
    let dir = tempfile::tempdir().unwrap();
    chart_dir(dir.path(), "web", "web", "");
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("web/templates/x.yaml")).unwrap();
    assert!(
        package::pack(dir.path(), "web", "web", 1 << 20)
            .unwrap_err()
            .contains("symbolic link")
    );
    let dir = tempfile::tempdir().unwrap();
    chart_dir(
        dir.path(),
        "web",
        "web",
        "dependencies:\n- name: x\n  repository: file://../../../etc\n",
    );
    assert!(
        package::pack(dir.path(), "web", "web", 1 << 20)
            .unwrap_err()
            .contains("leaves the repository")
    );
    let dir = tempfile::tempdir().unwrap();
    chart_dir(dir.path(), "web", "web", "");
    write(dir.path(), "web/big.bin", &"x".repeat(4096));
    assert!(
        package::pack(dir.path(), "web", "web", 1024)
            .unwrap_err()
            .contains("size bound")
    );
    // A dependency naming itself nests until the bound, and stops there.
    let dir = tempfile::tempdir().unwrap();
    chart_dir(
        dir.path(),
        "web",
        "web",
        "dependencies:\n- name: web\n  repository: file://.\n",
    );
    assert!(
        package::pack(dir.path(), "web", "web", 1 << 20)
            .unwrap_err()
            .contains("nest deeper")
    );
}

// --- a source's Secret ---

fn secret(pairs: &[(&str, &str)]) -> SecretData {
    SecretData::of(pairs)
}

#[test]
fn a_git_secret_gives_basic_auth_a_token_or_an_ssh_key_with_known_hosts() {
    let basic = access_of(
        Some(&secret(&[("username", "u"), ("password", "pw")])),
        false,
    )
    .unwrap();
    assert_eq!(basic.auth.unwrap().password.as_deref(), Some("pw"));
    let token = access_of(Some(&secret(&[("bearerToken", "t0ken")])), false).unwrap();
    assert_eq!(token.auth.unwrap().bearer_token.as_deref(), Some("t0ken"));
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n";
    let ssh = access_of(
        Some(&secret(&[
            ("identity", key),
            ("known_hosts", "h ssh-ed25519 AAAA"),
            ("password", "phrase"),
        ])),
        true,
    )
    .unwrap();
    let auth = ssh.auth.unwrap();
    assert_eq!(auth.ssh_passphrase.as_deref(), Some("phrase"));
    assert!(auth.known_hosts.is_some());
    assert_eq!(access_of(None, true).unwrap(), Access::default());
    for (pairs, ssh, needle) in [
        (&[("identity", key)][..], true, "known_hosts"),
        (
            &[("identity", key), ("known_hosts", "h k")][..],
            false,
            "https:// source does not take",
        ),
        (
            &[("username", "u"), ("password", "p")][..],
            true,
            "ssh:// source does not take",
        ),
        (&[("username", "u")][..], false, "no key password"),
        (&[("ca.crt", "not pem")][..], false, "no PEM certificate"),
        (&[("other", "x")][..], false, "holds none of the keys"),
        (
            &[
                ("identity", "ssh-ed25519 AAAA public"),
                ("known_hosts", "h k"),
            ][..],
            true,
            "no PEM private key",
        ),
    ] {
        let why = access_of(Some(&secret(pairs)), ssh).unwrap_err();
        assert!(why.contains(needle), "{pairs:?}: {why}");
        assert!(!why.contains("AAAA"), "{why}");
    }
}

#[test]
fn signature_rules_take_pgp_keys_from_asc_and_ssh_keys_from_pub() {
    let pgp = secret(&[
        ("team.asc", "-----BEGIN PGP PUBLIC KEY BLOCK-----\nx"),
        ("other", "y"),
    ]);
    assert_eq!(
        verify_keys(VerifyProvider::Pgp, &pgp)
            .unwrap()
            .pgp_keys
            .len(),
        1
    );
    let ssh = secret(&[("a.pub", "ssh-ed25519 AAAA a\n# note\nssh-ed25519 BBBB b\n")]);
    assert_eq!(
        verify_keys(VerifyProvider::Ssh, &ssh)
            .unwrap()
            .ssh_keys
            .len(),
        2
    );
    assert!(
        verify_keys(VerifyProvider::Ssh, &pgp)
            .unwrap_err()
            .contains(".pub")
    );
    assert!(verify_keys(VerifyProvider::Cosign, &pgp).is_err());
}

// --- the cache with a stand-in fetcher ---

/// Secrets in a map, counting reads.
#[derive(Default)]
struct Map(
    BTreeMap<(String, String), SecretData>,
    std::sync::Mutex<usize>,
);

impl ReadSecret for Map {
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SecretData>, String>> {
        *self.1.lock().unwrap() += 1;
        let found = self
            .0
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned();
        Box::pin(async move { Ok(found) })
    }
    fn labels<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>> {
        Box::pin(async { Ok(None) })
    }
}

/// A stand-in fetcher: a shell script answering resolve with the commit in `commit` of its
/// directory and fetch by writing a chart whose values hold that commit; it logs each op and
/// its argv, and keeps each request.
fn stand_in(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("fetcher.sh");
    let body = r#"#!/bin/sh
here=$(dirname "$0")
request=$(cat)
echo "$request" >> "$here/requests"
echo "argv: $*" >> "$here/argv"
commit=$(cat "$here/commit")
case "$request" in
  *'"op":"resolve"'*)
    echo resolve >> "$here/ops"
    printf '{"protocol":1,"ok":{"commit":"%s","ref":"refs/heads/main"}}' "$commit" ;;
  *)
    echo fetch >> "$here/ops"
    out=$(printf '%s' "$request" | sed 's/.*"out":"\([^"]*\)".*/\1/')
    mkdir -p "$out/charts/web/templates"
    printf 'apiVersion: v2\nname: web\nversion: 0.1.0\n' > "$out/charts/web/Chart.yaml"
    printf 'commit: %s\n' "$commit" > "$out/charts/web/values.yaml"
    printf '{"protocol":1,"ok":{"commit":"%s","ref":"refs/heads/main","paths":[{"path":"charts/web","written":true}]}}' "$commit" ;;
esac
"#;
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A fetcher that is the shell script `body`, in `dir`.
fn script_fetcher(dir: &Path, body: &str) -> std::path::PathBuf {
    let script = dir.join("fetcher.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn cache_in(dir: &Path, fetcher: &Path, secrets: Arc<Map>) -> ChartCache {
    ChartCache::open(dir, 1 << 30, "helm".into(), Arc::new(Metrics::new()))
        .unwrap()
        .with_git_fetcher(Some(fetcher.to_owned()))
        .with_secrets(SourceSecrets {
            reader: secrets,
            operator_namespace: "tenancy-hub".into(),
        })
}

fn platform() -> Credentials {
    Credentials::Platform {
        secret: "git-team-a".into(),
        policy: "team-a".into(),
        prefix: "https://git.example.com/team-a".into(),
    }
}

#[tokio::test]
async fn a_commit_is_resolved_once_per_interval_fetched_once_and_packed_the_same_everywhere() {
    let lab = tempfile::tempdir().unwrap();
    let fetcher = stand_in(lab.path());
    let first = "1".repeat(40);
    std::fs::write(lab.path().join("commit"), &first).unwrap();
    let mut map = Map::default();
    map.0.insert(
        ("tenancy-hub".into(), "git-team-a".into()),
        secret(&[("username", "reader"), ("password", "hunter22")]),
    );
    let secrets = Arc::new(map);
    let reference = RefKind::Branch("main".into());
    let chart = GitChart {
        url: "https://git.example.com/team-a/charts.git",
        path: "charts/web",
        reference: &reference,
        chart: "web",
        tenant: "team-a",
        interval: Duration::from_secs(3600),
    };
    let one = tempfile::tempdir().unwrap();
    let cache = cache_in(one.path(), &fetcher, secrets.clone());
    let a = cache
        .git(&chart, &platform(), &Trust::default())
        .await
        .unwrap();
    let b = cache
        .git(&chart, &platform(), &Trust::default())
        .await
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(lines(&lab.path().join("ops")), ["resolve", "fetch"]);
    assert_eq!(a.version, "0.1.0");
    assert_eq!(a.git.as_ref().unwrap().commit, first);
    let digest = a.archive.clone().unwrap();
    assert_eq!(
        a.digest.as_deref(),
        Some(format!("sha256:{digest}").as_str())
    );
    assert!(one.path().join(format!("{digest}.tgz")).is_file());
    // The password went on the pipe only.
    assert!(lines(&lab.path().join("requests"))[0].contains("hunter22"));
    assert!(
        lines(&lab.path().join("argv"))
            .iter()
            .all(|l| l == "argv: ")
    );
    // Another cache (a restart, another hub) packs the same commit to the same digest.
    let two = tempfile::tempdir().unwrap();
    let again = cache_in(two.path(), &fetcher, secrets.clone())
        .git(&chart, &platform(), &Trust::default())
        .await
        .unwrap();
    assert_eq!(again.archive, a.archive);
    // Past the interval a new commit is resolved and fetched once.
    let short = GitChart {
        interval: Duration::ZERO,
        ..chart.clone()
    };
    std::fs::write(lab.path().join("commit"), "2".repeat(40)).unwrap();
    let c = cache
        .git(&short, &platform(), &Trust::default())
        .await
        .unwrap();
    assert_ne!(c.archive, a.archive);
    assert_eq!(c.git.unwrap().commit, "2".repeat(40));
}

#[tokio::test]
async fn a_fetchers_failure_names_the_repository_and_masks_the_secret() {
    let lab = tempfile::tempdir().unwrap();
    let script = script_fetcher(
        lab.path(),
        "cat >/dev/null\nprintf '{\"protocol\":1,\"error\":{\"kind\":\"auth\",\"message\":\"authentication failed for hunter22\"}}'",
    );
    let mut map = Map::default();
    map.0.insert(
        ("tenancy-hub".into(), "git-team-a".into()),
        secret(&[("username", "reader"), ("password", "hunter22")]),
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), &script, Arc::new(map));
    let reference = RefKind::Tag("v1".into());
    let chart = GitChart {
        url: "https://git.example.com/team-a/charts",
        path: "charts/web",
        reference: &reference,
        chart: "web",
        tenant: "team-a",
        interval: Duration::from_secs(60),
    };
    let why = cache
        .git(&chart, &platform(), &Trust::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("git.example.com/team-a/charts") && why.contains("auth"),
        "{why}"
    );
    assert!(!why.contains("hunter22"), "{why}");
    // No fetcher at all says how to get one.
    let none =
        ChartCache::open(dir.path(), 1 << 30, "helm".into(), Arc::new(Metrics::new())).unwrap();
    let why = none
        .git(&chart, &Credentials::None, &Trust::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(why.contains("--git-fetcher"), "{why}");
}

#[tokio::test]
async fn a_semver_range_is_sent_with_its_tag_patterns_and_a_tag_outside_them_is_refused() {
    let lab = tempfile::tempdir().unwrap();
    // A fetcher that ignores the patterns (an older one, or a broken one).
    let script = script_fetcher(
        lab.path(),
        "cat >> \"$(dirname \"$0\")/requests\"\nprintf '{\"protocol\":1,\"ok\":{\"commit\":\"%s\",\"ref\":\"refs/tags/v1.3.0\"}}' 3333333333333333333333333333333333333333",
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), &script, Arc::new(Map::default()));
    let reference = RefKind::Semver(">=1.0.0".into());
    let chart = GitChart {
        url: "https://git.example.com/team-a/charts",
        path: "charts/web",
        reference: &reference,
        chart: "web",
        interval: Duration::from_secs(60),
        tenant: "team-a",
    };
    let trust = Trust {
        tags: Some(vec!["v1.2*".into()]),
        ..Trust::default()
    };
    let why = cache
        .git(&chart, &Credentials::None, &trust)
        .await
        .unwrap_err()
        .to_string();
    assert!(why.contains("v1.3.0") && why.contains("v1.2*"), "{why}");
    let sent = lines(&lab.path().join("requests"));
    assert!(
        sent[0].contains(r#""ref":{"semver":">=1.0.0","tags":["v1.2*"]}"#),
        "{sent:?}"
    );
    // No pattern at all: nothing is asked, the refusal says what to do.
    let none = Trust {
        tags: Some(Vec::new()),
        ..Trust::default()
    };
    let why = cache
        .git(&chart, &Credentials::None, &none)
        .await
        .unwrap_err()
        .to_string();
    assert!(why.contains("no tag") && why.contains("tags"), "{why}");
    assert_eq!(lines(&lab.path().join("requests")).len(), 1);
}
