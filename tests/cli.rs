//! End-to-end tests of the `tenancy-hub` command line against the lab.

mod common;

use std::process::Command;

use common::{fixtures::unique, hub::Hub, lab::Lab};

fn tenancy_hub(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_names_the_helm_sdk_and_the_executor_protocol() {
    for args in [&["--version"][..], &["agent", "--version"]] {
        let (ok, stdout, stderr) = tenancy_hub(args);
        assert!(ok, "{args:?}: {stderr}");
        let line = stdout.trim();
        assert!(
            line.contains(env!("CARGO_PKG_VERSION"))
                && line.contains("Helm SDK v4.")
                && line.contains("executor protocol 4"),
            "{args:?}: {line}"
        );
    }
}

/// How many times `needle` occurs in `haystack`.
fn times(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn an_error_says_each_cause_once_naming_the_cluster_once() {
    let missing = "No such file or directory";
    let file = std::env::temp_dir().join(format!("{}.yaml", unique("controller")));
    std::fs::write(&file, "apiVersion: multitenancy.dev/v1alpha1\n").unwrap();
    let kubeconfig = [
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--context",
        "hub",
    ];
    let runs: [(Vec<&str>, i32); 3] = [
        ([&["clusters"][..], &kubeconfig].concat(), 1),
        (
            vec!["clusters", "--clusters", "/nonexistent/clusters.yaml"],
            1,
        ),
        (
            [&["diff", "-f", file.to_str().unwrap()][..], &kubeconfig].concat(),
            2,
        ),
    ];
    for (args, code) in runs {
        let out = Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(times(&stderr, missing), 1, "{args:?}: {stderr}");
        assert!(times(&stderr, "cluster hub") <= 1, "{args:?}: {stderr}");
    }
    std::fs::remove_file(&file).unwrap();
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn clusters_shows_every_lab_cluster_reachable_with_its_version() {
    let lab = Lab::get();
    let kubeconfig = lab.kubeconfig_path();
    let registration = lab.clusters_path();
    let (ok, stdout, stderr) = tenancy_hub(&[
        "clusters",
        "--clusters",
        registration.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--context",
        "hub",
        "-o",
        "json",
    ]);
    assert!(ok, "clusters failed: {stderr}\n{stdout}");
    let health: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = health
        .iter()
        .map(|h| h["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "hub");
    assert_eq!(names.len(), lab.contexts().len(), "{names:?}");
    for h in &health {
        assert_eq!(h["reachable"], true, "{h}");
        assert!(h["version"].as_str().unwrap().starts_with("v1."), "{h}");
    }
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn a_registration_with_an_unknown_context_is_refused_naming_the_entry() {
    let lab = Lab::get();
    let file = std::env::temp_dir().join(format!("{}.yaml", unique("clusters")));
    std::fs::write(
        &file,
        format!(
            "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}}}\n  - {{name: far-away, context: nowhere, kubeconfig: {k}}}\n",
            k = lab.kubeconfig_path().display()
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = tenancy_hub(&[
        "clusters",
        "--clusters",
        file.to_str().unwrap(),
        "--kubeconfig",
        lab.kubeconfig_path().to_str().unwrap(),
        "--context",
        "hub",
    ]);
    std::fs::remove_file(&file).unwrap();
    assert!(!ok, "an unknown context was accepted: {stdout}");
    assert!(
        stderr.contains("cluster far-away")
            && stderr.contains("\"nowhere\"")
            && stderr.contains("member-1"),
        "the error names the entry, the context and what is available: {stderr}"
    );
}

/// Stops the test hub's operator and returns what it logged, failing when it logged nothing.
fn logged_until_stopped(mut hub: Hub) -> String {
    let operator = hub.operator.take().expect("the hub's operator");
    let log = operator.log.clone();
    operator.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.trim().is_empty(),
        "nothing logged in {}",
        log.display()
    );
    text
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_operator_logging_to_a_file_writes_plain_lines_without_colour_codes() {
    // NO_COLOR set but empty counts as unset: only the file may keep colours out.
    let text = logged_until_stopped(Hub::with_env("plain-log", &[], &[("NO_COLOR", "")]).await);
    assert!(text.contains(" INFO "), "no plain INFO line in:\n{text}");
    assert!(!text.contains("\x1b["), "colour codes in:\n{text}");
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_operator_asked_for_json_logs_writes_one_json_object_a_line() {
    let text = logged_until_stopped(Hub::with_args("json-log", &["--log-format", "json"]).await);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["fields"].is_object(),
            "{line}"
        );
    }
}
