//! Tests of the long-lived Helm executor: the protocol against the shared fixtures, and the pipe.

use std::{io::Write as _, path::Path, time::Duration};

use super::*;
use crate::helm::{pipe::*, protocol::*};
use crate::queue::TestResult;

/// The protocol's shared fixtures, which the executor's `go test` checks too
/// (`helm-sdk/protocol_test.go`): what the operator writes, and what the executor answers.
const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/helm/helm-sdk/testdata/protocol"
);

fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(FIXTURES).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Options with a test key, the seal vectors' (`helm-sdk/testdata/seal-vectors.json`).
fn options() -> HelmOptions {
    let key: Vec<u8> = (0..32).collect();
    HelmOptions {
        seal: crate::helm::seal::SealKey::from_bytes(&key),
        ..HelmOptions::default()
    }
}

fn release() -> Release {
    let mut release = crate::helm::cli::tests::release(ChartSource::Directory(
        "/charts/deployment-example".into(),
    ));
    release.settings.push(("note".into(), "a,b{c}\\d".into()));
    release.values =
        Some(serde_json::json!({"image": {"tag": "v2"}, "podAnnotations": {"replicas": "3"}}));
    release.rollback_on_failure = true;
    release
}

/// What the first try of `release` does when it fails.
fn first(release: &Release) -> crate::plan::remediation::Remediate {
    crate::plan::remediation::for_try(&release.helm, release.rollback_on_failure, 1)
}

/// `release()` with a chart entry's Helm settings for every action.
fn with_settings() -> Release {
    let mut release = release();
    release.helm = crate::helm::settings::example();
    release
}

/// An `uninstall` block running the delete hooks, keeping history and waiting.
fn uninstall_settings() -> crate::api::crd::Uninstall {
    crate::helm::settings::example().uninstall
}

/// A member, as an impersonated identity.
fn cluster() -> ClusterRef {
    ClusterRef {
        kubeconfig: "/tmp/tenancy-hub-scratch/kubeconfig-member-1".into(),
        context: "member-1".into(),
        digest: "5b1f0c3e9a7d2486f0e1c9b3a5d7e2f4061c8b9a3d5e7f1029384756abcdef01".into(),
        user: "system:serviceaccount:team-a:deployer".into(),
        groups: vec!["team-a-deployers".into()],
        name: "member-1".into(),
    }
}

/// Every kind of request the operator sends, by the name of its fixture.
fn requests() -> Vec<(&'static str, Request)> {
    let options = options();
    let key: ReleaseKey = "member-1/team/web".parse().unwrap();
    // The hub itself, in-cluster, with the operator's own credentials.
    let hub = ClusterRef {
        kubeconfig: String::new(),
        context: String::new(),
        digest: String::new(),
        user: String::new(),
        groups: Vec::new(),
        name: "hub".into(),
    };
    let as_operator = ClusterRef {
        user: String::new(),
        groups: Vec::new(),
        ..cluster()
    };
    let plain = crate::helm::cli::tests::release(ChartSource::Directory(
        "/charts/deployment-example".into(),
    ));
    let archive = "/var/cache/tenancy-hub/charts/deployment-example-0.1.0.tgz";
    let repair = Some("Deployment/web /spec/replicas");
    vec![
        (
            "request-upgrade",
            upgrade_request(
                7,
                &release(),
                cluster(),
                archive.into(),
                None,
                first(&release()),
                &options,
            ),
        ),
        (
            "request-repair",
            upgrade_request(
                8,
                &plain,
                hub,
                "/charts/deployment-example".into(),
                repair,
                first(&plain),
                &options,
            ),
        ),
        (
            "request-uninstall",
            release_request(9, &key, cluster(), None, &options),
        ),
        (
            "request-upgrade-settings",
            upgrade_request(
                11,
                &with_settings(),
                cluster(),
                archive.into(),
                None,
                first(&with_settings()),
                &options,
            ),
        ),
        (
            "request-uninstall-settings",
            uninstall_request(
                12,
                &key,
                cluster(),
                &crate::helm::settings::uninstall(&uninstall_settings(), &options),
                &options,
            ),
        ),
        (
            "request-upgrade-post-render",
            upgrade_request(
                13,
                &Release {
                    post_render: Some(crate::plan::post_render::tests::example()),
                    ..plain.clone()
                },
                cluster(),
                archive.into(),
                None,
                first(&plain),
                &options,
            ),
        ),
        (
            "request-rollback",
            release_request(10, &key, as_operator, Some(4), &options),
        ),
        (
            "request-adopt",
            Request {
                adopt: true,
                ..upgrade_request(
                    13,
                    &release(),
                    cluster(),
                    archive.into(),
                    None,
                    first(&release()),
                    &options,
                )
            },
        ),
    ]
}

/// Every kind of answer the executor gives, by the name of its fixture, with the kind of
/// failure the operator reads in it.
fn answers() -> Vec<(&'static str, Answer, Option<FailureKind>)> {
    let answer = |id, error: Option<&str>| Answer {
        id,
        error: error.map(str::to_owned),
        revision: 0,
        adopted: Default::default(),
        chart_version: String::new(),
        tests: Vec::new(),
        crds: None,
    };
    let applied = Answer {
        revision: 3,
        chart_version: "0.1.0".into(),
        ..answer(7, None)
    };
    let results = |failed: &str| {
        vec![
            TestResult {
                name: "test-connection".into(),
                phase: failed.into(),
            },
            TestResult {
                name: "test-schema".into(),
                phase: "Succeeded".into(),
            },
        ]
    };
    let tested = Answer {
        tests: results("Succeeded"),
        ..applied.clone()
    };
    let tests_failed = Answer {
        error: Some(
            "the tests of revision 3 failed: test-connection (Failed); rolled back to revision 2 (remediation)"
                .into(),
        ),
        tests: results("Failed"),
        ..applied.clone()
    };
    let with_crds = Answer {
        revision: 2,
        chart_version: "2.15.4".into(),
        crds: Some(crate::queue::crds::CrdReport {
            created: vec!["widgets.example.com".into()],
            replaced: vec!["sealedsecrets.bitnami.com".into()],
            unchanged: vec!["gadgets.example.com".into()],
        }),
        ..answer(12, None)
    };
    let render = "UPGRADE FAILED: execution error at \
            (deployment-example/templates/deployment.yaml:21:20): image.tag is required";
    let unreachable = "UPGRADE FAILED: Get \"https://127.0.0.1:36443/api/v1/namespaces/team/\
            secrets?labelSelector=name%3Dweb%2Cowner%3Dhelm\": dial tcp 127.0.0.1:36443: \
            connect: connection refused";
    let unauthorized =
        "uninstall: Release not loaded: web: query: failed to query with labels: Unauthorized";
    let unsealed =
        "the request carries no sealing key or cluster name: the operator must send both";
    let failed = |name, id, error, kind| (name, answer(id, Some(error)), Some(kind));
    let unknown = "unknown operation \"status\"";
    use FailureKind::{Permanent, Transient, Unavailable};
    vec![
        ("response-applied", applied, None),
        ("response-tests-passed", tested, None),
        // Deployed, then its tests failed: a verdict on the revision, not tried again.
        ("response-tests-failed", tests_failed, Some(Permanent)),
        ("response-applied-crds", with_crds, None),
        (
            "response-adopted",
            Answer {
                revision: 2,
                chart_version: "0.1.0".into(),
                adopted: [
                    ("app.kubernetes.io/managed-by", "flux"),
                    ("helm.toolkit.fluxcd.io/name", "web"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
                ..answer(13, None)
            },
            None,
        ),
        // An uninstall or a rollback done.
        ("response-done", answer(9, None), None),
        failed("response-failed-render", 7, render, Permanent),
        failed("response-failed-unreachable", 8, unreachable, Transient),
        failed("response-failed-unauthorized", 9, unauthorized, Unavailable),
        failed("response-refused-unsealed", 11, unsealed, Permanent),
        failed("response-refused-unknown-op", 12, unknown, Permanent),
    ]
}

#[test]
fn every_request_is_written_as_its_shared_fixture() {
    for (name, request) in requests() {
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            fixture(name),
            "{name}: the operator's request differs from the fixture the executor checks"
        );
    }
}

#[test]
fn every_answer_fixture_reads_as_the_answer_and_failure_it_stands_for() {
    for (name, want, kind) in answers() {
        let answer: Answer =
            serde_json::from_value(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer, want, "{name}");
        let outcome = super::applied(answer, false);
        assert_eq!(
            match outcome {
                Outcome::Failed { kind, .. } => Some(kind),
                Outcome::Applied { .. } | Outcome::Uninstalled => None,
            },
            kind,
            "{name}"
        );
    }
}

#[test]
fn the_hello_fixture_speaks_this_protocol_and_names_a_helm_4() {
    let hello: Hello = serde_json::from_value(fixture("hello")).unwrap();
    assert_eq!(hello.protocol, PROTOCOL_VERSION, "bump both sides together");
    assert!(hello.helm.starts_with("v4."), "{hello:?}");
}

#[test]
fn the_fixture_folder_holds_exactly_the_messages_both_sides_check() {
    let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".json").unwrap_or(&name).to_owned()
        })
        .collect();
    on_disk.sort();
    let mut checked: Vec<String> = requests().into_iter().map(|(n, _)| n.into()).collect();
    checked.extend(answers().into_iter().map(|(n, ..)| n.into()));
    checked.push("hello".into());
    checked.sort();
    assert_eq!(on_disk, checked);
}

#[test]
fn an_answer_with_a_field_the_operator_does_not_know_is_refused() {
    let mut answer = fixture("response-applied");
    answer["warnings"] = serde_json::json!(["deprecated"]);
    let error = serde_json::from_value::<Answer>(answer).unwrap_err();
    assert!(error.to_string().contains("warnings"), "{error}");
}

#[test]
fn the_upgrade_labels_its_records_as_the_cli_does() {
    let line = fixture("request-upgrade");
    let cli = crate::helm::args::upgrade_args(
        &release(),
        crate::helm::args::Target {
            kubeconfig: std::path::Path::new("/k"),
            context: "member-1",
            identity: None,
        },
        None,
        None,
        &options(),
        crate::helm::args::Phase::Upgrade,
    );
    let labels = cli
        .iter()
        .find_map(|a| a.to_str()?.strip_prefix("--labels="))
        .unwrap();
    let pairs: Vec<_> = labels.split(',').collect();
    assert_eq!(pairs.len(), line["labels"].as_object().unwrap().len());
    for pair in pairs {
        let (k, v) = pair.split_once('=').unwrap();
        assert_eq!(line["labels"][k], v, "label {k}");
    }
}

#[test]
fn a_drift_repair_never_replaces_even_when_the_upgrade_forces_and_runs_no_tests() {
    let repair = upgrade_request(
        1,
        &with_settings(),
        cluster(),
        "/c".into(),
        Some("x"),
        first(&with_settings()),
        &options(),
    );
    let upgrade = repair
        .upgrade
        .expect("an upgrade request says how it upgrades");
    assert!(repair.force_conflicts && !upgrade.force);
    assert!(upgrade.disable_hooks && upgrade.cleanup_on_fail);
    // It puts back what the tests passed on: they are not run again.
    assert_eq!(repair.test, None);
}

#[test]
fn an_answer_is_awaited_as_long_as_the_longest_timeout_the_request_gives_helm() {
    let request = upgrade_request(
        1,
        &with_settings(),
        cluster(),
        "/c".into(),
        None,
        first(&with_settings()),
        &options(),
    );
    // The upgrade's hour, then the tests' two minutes.
    assert_eq!(request.timeout_seconds, 3600 + 120);
    assert_eq!(request.install.unwrap().timeout_seconds, 20);
    assert_eq!(request.test.unwrap().timeout_seconds, 120);
}

#[test]
fn a_long_repair_description_is_cut_as_the_clis() {
    let long = upgrade_request(
        1,
        &release(),
        cluster(),
        "/c".into(),
        Some(&"é".repeat(500)),
        first(&release()),
        &HelmOptions::default(),
    );
    assert!(long.force_conflicts);
    assert_eq!(
        long.description,
        crate::helm::args::repair_description(&"é".repeat(500))
    );
    assert!(long.description.len() <= 200);
}

#[test]
fn failures_read_as_the_clis_stderr_would() {
    for (error, kind) in [
        (
            "UPGRADE FAILED: Get \"https://127.0.0.1:1/version\": dial tcp 127.0.0.1:1: connect: connection refused",
            FailureKind::Transient,
        ),
        (
            "execution error at (deployment-example/templates/deployment.yaml:1:3): connection refused",
            FailureKind::Permanent,
        ),
        (
            "UPGRADE FAILED: Deployment.apps \"web\" is invalid: spec.replicas: Invalid value",
            FailureKind::Permanent,
        ),
        ("Unauthorized", FailureKind::Unavailable),
    ] {
        let stderr = format!("Error: {error}\n");
        assert_eq!(
            failure(error),
            Outcome::failed(crate::queue::failure::trim_error(&stderr), kind),
            "{error}"
        );
    }
}

#[test]
fn the_executor_is_found_beside_helm_before_path_and_a_given_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let helm_path = dir.path().join("helm");
    assert_eq!(
        locate(Some(std::path::Path::new("/opt/x")), &helm_path),
        Some("/opt/x".into())
    );
    std::fs::write(dir.path().join(BINARY), "").unwrap();
    assert_eq!(locate(None, &helm_path), Some(dir.path().join(BINARY)));
}

/// A scripted executor: a Python program that notes its pid in `dir/pid`, writes `hello` as
/// its first line (when given), then runs `body`.
fn scripted(dir: &std::path::Path, hello: Option<&str>, body: &str) -> PathBuf {
    let path = dir.join("fake-executor");
    let source = dir.join("fake-executor.py");
    let mut file = std::fs::File::create(&source).unwrap();
    let pid_file = dir.join("pid");
    writeln!(file, "#!/usr/bin/env python3\nimport os").unwrap();
    writeln!(file, "open({pid_file:?}, 'w').write(str(os.getpid()))").unwrap();
    if let Some(hello) = hello {
        // A Rust string's debug form is a Python string literal too.
        writeln!(file, "print({hello:?}, flush=True)").unwrap();
    }
    writeln!(file, "{body}").unwrap();
    drop(file);
    // The executable is written by another process: a file this process held open for writing
    // could be inherited by a child another test forks at that moment, and executing it would
    // then fail with "Text file busy".
    let installed = std::process::Command::new("install")
        .arg("-m")
        .arg("755")
        .arg(&source)
        .arg(&path)
        .status()
        .unwrap();
    assert!(installed.success(), "install {}", path.display());
    path
}

/// Answers each request after as many milliseconds as the revision it asks for (so requests
/// pick their own delay), echoing the id and the revision; `crash` exits at once.
const ANSWERS_IN_ANY_ORDER: &str = r#"
import json, os, sys, threading, time
lock = threading.Lock()
def answer(req):
    time.sleep(req["revision"] / 1000)
    with lock:
        print(json.dumps({"id": req["id"], "revision": req["revision"], "chartVersion": "0.1.0"}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "crash":
        os._exit(3)
    threading.Thread(target=answer, args=(req,)).start()
"#;

/// The pid the scripted executor in `dir` noted last.
fn scripted_pid(dir: &std::path::Path) -> u32 {
    std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .parse()
        .unwrap()
}

/// Reads requests and never answers.
const SILENT: &str = "import sys\nsys.stdin.read()";

/// The shared hello fixture, on one line.
fn hello_line() -> String {
    fixture("hello").to_string()
}

/// A pipe to the scripted executor saying the shared hello and answering in any order.
fn fake(dir: &std::path::Path) -> Pipe {
    let executor = scripted(dir, Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
    Pipe::new(HelmOptions::default(), executor)
}

fn request(revision: i64) -> Request {
    let mut r = release_request(
        0,
        &"member-1/team/web".parse().unwrap(),
        cluster(),
        Some(revision),
        &HelmOptions::default(),
    );
    r.revision = revision;
    r
}

fn alive(pid: u32) -> bool {
    // A process that exited but is not reaped yet (state Z) counts as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split(' ').nth(2).is_none_or(|state| state != "Z"))
}

async fn wait_dead(pid: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "executor {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn concurrent_requests_are_matched_to_their_answers_whatever_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = fake(dir.path());
    // The slow one is sent first and answered last.
    let (slow, fast) = tokio::join!(pipe.call(request(400)), pipe.call(request(10)));
    assert_eq!(slow.unwrap().revision, 400);
    assert_eq!(fast.unwrap().revision, 10);
}

#[tokio::test]
async fn an_abandoned_request_kills_the_executor_and_the_next_starts_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = fake(dir.path());
    assert!(pipe.call(request(1)).await.is_ok());
    let first = pipe.process.lock().await.as_ref().unwrap().pid;
    // Leadership lost: the running job's future is dropped before the answer.
    let abandoned = tokio::time::timeout(Duration::from_millis(200), pipe.call(request(5_000)));
    assert!(abandoned.await.is_err(), "answered before it was abandoned");
    wait_dead(first).await;
    let answer = pipe.call(request(2)).await.unwrap();
    assert_eq!(answer.revision, 2);
    let second = pipe.process.lock().await.as_ref().unwrap().pid;
    assert_ne!(first, second);
}

#[tokio::test]
async fn an_executor_that_dies_fails_its_waiting_requests_and_is_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = fake(dir.path());
    let mut crash = request(0);
    crash.op = "crash";
    let (waiting, crashed) = tokio::join!(pipe.call(request(3_000)), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pipe.call(crash).await
    });
    assert!(
        matches!(waiting, Err(ExecutorError::Stopped)),
        "{waiting:?}"
    );
    assert!(crashed.is_err());
    assert_eq!(pipe.call(request(1)).await.unwrap().revision, 1);
}

#[tokio::test]
async fn an_idle_executor_exits_and_the_next_job_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let options = HelmOptions {
        executor_idle: Duration::from_millis(300),
        ..HelmOptions::default()
    };
    let executor = scripted(dir.path(), Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
    let pipe = Pipe::new(options, executor);
    // Busy past the idle time: a waiting request keeps it.
    assert_eq!(pipe.call(request(600)).await.unwrap().revision, 600);
    let first = pipe.process.lock().await.as_ref().unwrap().pid;
    wait_dead(first).await;
    assert!(
        pipe.process.lock().await.is_none(),
        "the slot still holds it"
    );
    assert_eq!(pipe.call(request(1)).await.unwrap().revision, 1);
    let second = pipe.process.lock().await.as_ref().unwrap().pid;
    assert_ne!(first, second);
}

#[tokio::test]
async fn a_missing_executor_says_how_to_go_on() {
    let pipe = Pipe::new(
        HelmOptions::default(),
        "/nonexistent/tenancy-hub-helm".into(),
    );
    let error = pipe.call(request(1)).await.unwrap_err();
    assert_says(&error, &["/nonexistent/tenancy-hub-helm", "--executor cli"]);
}

/// Fails unless the error's text holds every one of `parts`.
fn assert_says(error: &ExecutorError, parts: &[&str]) {
    let text = error.to_string();
    for part in parts {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

#[tokio::test]
async fn an_executor_of_another_protocol_is_stopped_with_an_error_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    // A newer executor: its hello has a field this operator does not know, too.
    let hello = r#"{"protocol": 99, "helm": "v4.9.0", "features": ["later"]}"#;
    let executor = scripted(dir.path(), Some(hello), SILENT);
    let pipe = Pipe::new(HelmOptions::default(), executor.clone());
    let error = pipe.call(request(1)).await.unwrap_err();
    assert!(
        matches!(
            error,
            ExecutorError::Mismatch {
                executor: 99,
                operator: PROTOCOL_VERSION,
                ..
            }
        ),
        "{error:?}"
    );
    assert_says(
        &error,
        &[
            executor.to_str().unwrap(),
            "speaks protocol 99 (Helm v4.9.0)",
            &format!("this operator protocol {PROTOCOL_VERSION}"),
            "kind/executor.sh",
        ],
    );
    assert!(pipe.process.lock().await.is_none(), "it was kept");
    wait_dead(scripted_pid(dir.path())).await;
    let probed = probe(&executor).await.unwrap_err();
    assert!(
        matches!(probed, ExecutorError::Mismatch { .. }),
        "{probed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_executor_that_says_no_hello_is_refused_after_the_hello_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let executor = scripted(dir.path(), None, SILENT);
    let pipe = Pipe::new(HelmOptions::default(), executor.clone());
    let error = pipe.call(request(1)).await.unwrap_err();
    assert!(matches!(error, ExecutorError::NoHello { .. }), "{error:?}");
    assert_says(
        &error,
        &[
            executor.to_str().unwrap(),
            "nothing within 10s",
            &format!("this operator speaks protocol {PROTOCOL_VERSION}"),
            "kind/executor.sh",
        ],
    );
}

#[tokio::test]
async fn an_executor_that_begins_with_anything_else_is_refused_quoting_it() {
    let dir = tempfile::tempdir().unwrap();
    let executor = scripted(dir.path(), Some("tenancy-hub-helm ready"), SILENT);
    let error = probe(&executor).await.unwrap_err();
    assert_says(&error, &[r#"it began with "tenancy-hub-helm ready""#]);
}

#[tokio::test]
async fn a_probe_tells_the_executors_helm_and_leaves_nothing_running() {
    let dir = tempfile::tempdir().unwrap();
    let executor = scripted(dir.path(), Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
    let hello = probe(&executor).await.unwrap();
    assert_eq!(hello, serde_json::from_value(fixture("hello")).unwrap());
    wait_dead(scripted_pid(dir.path())).await;
}

#[test]
fn a_rollback_takes_the_chart_entrys_upgrade_timeout_and_history_and_else_the_operators() {
    let key: ReleaseKey = "member-1/team/web".parse().unwrap();
    let own = rollback_request(1, &key, cluster(), 4, &with_settings().helm, &options());
    assert_eq!((own.op, own.revision), ("rollback", 4));
    assert_eq!((own.timeout_seconds, own.history_max), (3600, 12));
    let plain = rollback_request(1, &key, cluster(), 4, &Default::default(), &options());
    let defaults = options();
    assert_eq!(
        (plain.timeout_seconds, plain.history_max),
        (defaults.timeout.as_secs(), defaults.history_max)
    );
}
