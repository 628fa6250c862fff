//! End-to-end tests of a chart's own tests (`helm test`) run after each install and upgrade: results per cluster in status, a failure failing the release, rolled back or left marked failed.

mod common;

use std::{collections::BTreeMap, path::Path, time::Duration};

use common::{
    agent::{deployed_revision, hub_cli, join},
    fixtures::{chart, message, tenancy, unique, wait_until},
    hub::Hub,
};
use tenancy_hub::api::crd::{
    Chart, ChartMessage, ClusterSelector, ControllerSpec, Rollout, Test, Wave,
};

/// How long one chart's tests may take before they count as failed.
const TEST_TIMEOUT: &str = "15s";

/// The example chart with one test: a Job that completes (on the lab's kwok nodes, a Job's pod
/// that runs completes) when `testPasses` is true, and whose pod is never scheduled otherwise,
/// so the test fails at its timeout.
fn write_tested_chart(dir: &Path) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    std::fs::create_dir_all(dir.join("templates/tests")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: tested-example\nversion: 0.1.0\n",
    )
    .unwrap();
    for file in [
        "values.yaml",
        "templates/deployment.yaml",
        "templates/service.yaml",
    ] {
        std::fs::copy(example.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(
        dir.join("templates/tests/connection.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-test\n  annotations:\n    helm.sh/hook: test\n    helm.sh/hook-delete-policy: before-hook-creation\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      {{- if not .Values.testPasses }}\n      nodeSelector:\n        tenancy-hub.test/none: \"none\"\n      {{- end }}\n      containers:\n        - name: check\n          image: busybox\n          command: [wget, -qO-, \"http://{{ .Release.Name }}\"]\n",
    )
    .unwrap();
}

/// The tested chart as release `release`, its test passing or not, its tests run after each
/// install and upgrade.
fn tested(release: &str, passes: bool) -> Chart {
    let passes = if passes { "true" } else { "false" };
    Chart {
        test: Some(Test {
            enable: true,
            timeout: Some(TEST_TIMEOUT.into()),
            ..Test::default()
        }),
        ..chart("tested-example", release, &[("testPasses", passes)])
    }
}

/// The test results a release's status shows.
fn results(m: &ChartMessage) -> BTreeMap<&str, &str> {
    m.tests
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Revision `revision` of `release` in `namespace` of member-1 as Helm recorded it: its status
/// and description.
fn revision(hub: &Hub, namespace: &str, release: &str, revision: i64) -> Option<(String, String)> {
    let history = hub
        .lab
        .try_helm(
            "member-1",
            &["history", release, "-n", namespace, "-o", "json"],
        )
        .ok()?;
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).ok()?;
    let entry = history.iter().find(|h| h["revision"] == revision)?;
    Some((
        entry["status"].as_str()?.to_owned(),
        entry["description"].as_str().unwrap_or_default().to_owned(),
    ))
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_charts_tests_report_per_cluster_and_a_failing_test_fails_the_release_rolled_back_or_marked()
 {
    let home = tempfile::tempdir().unwrap();
    write_tested_chart(&home.path().join("tested-example"));
    let hub = Hub::with_args(
        "chart-tests",
        &["--chart-home", home.path().to_str().unwrap()],
    )
    .await;
    let ns = unique("chart-tests-tenant");
    let guarded = |passes| Chart {
        rollback_on_failure: true,
        ..tested("guarded", passes)
    };
    // Its test fails from the start, and is only reported.
    let mut lenient = tested("lenient", false);
    lenient.test.as_mut().unwrap().ignore_failures = true;
    let spec = |passes| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![tested("checked", passes), guarded(passes), lenient.clone()],
        )],
        ..Default::default()
    };
    hub.apply("tested", spec(true)).await;
    let api = hub.api();
    wait_until(
        "the three releases deployed with their tests' results",
        Duration::from_secs(180),
        || async {
            let status = api.get("tested").await.ok()?.status?;
            let shown = |release| {
                message(&status, "member-1", release)
                    .filter(|m| m.phase == "Deployed")
                    .map(|m| {
                        results(m)
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v.to_owned()))
                            .collect::<Vec<_>>()
                    })
            };
            let pass = |name: &str| vec![(name.to_owned(), "Succeeded".to_owned())];
            (shown("checked")? == pass("checked-test")
                && shown("guarded")? == pass("guarded-test")
                && shown("lenient")? == vec![("lenient-test".to_owned(), "Failed".to_owned())])
            .then_some(())
        },
    )
    .await;

    // An upgrade whose test fails: the release is Failed, naming the test; its revision is
    // marked failed where Helm keeps it, or rolled back with rollbackOnFailure.
    hub.apply("tested", spec(false)).await;
    let (checked, guarded) = wait_until(
        "both upgraded releases failed on their tests",
        Duration::from_secs(180),
        || async {
            let status = api.get("tested").await.ok()?.status?;
            let failed = |release| {
                message(&status, "member-1", release)
                    .filter(|m| m.phase == "Failed")
                    .map(|m| m.error_message.clone())
            };
            Some((failed("checked")?, failed("guarded")?))
        },
    )
    .await;
    assert!(
        checked.contains("the tests of revision 2 failed: checked-test (Failed)"),
        "{checked}"
    );
    assert!(
        guarded.contains("the tests of revision 2 failed: guarded-test (Failed)")
            && guarded.contains("rolled back to revision 1"),
        "{guarded}"
    );
    let (status, description) = revision(&hub, &ns, "checked", 2).expect("revision 2 recorded");
    assert_eq!(status, "failed", "{description}");
    assert!(description.contains("Test failed"), "{description}");
    let (status, description) = revision(&hub, &ns, "guarded", 3).expect("the rollback recorded");
    assert_eq!(status, "deployed", "{description}");
    assert!(description.contains("tests"), "{description}");
    // The lenient release is untouched by the change, still deployed at revision 1.
    assert_eq!(
        revision(&hub, &ns, "lenient", 1).map(|(s, _)| s).as_deref(),
        Some("deployed")
    );
    hub.delete_and_wait_gone("tested").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_helm_binary_executor_refuses_a_release_asking_for_tests_and_installs_nothing() {
    let home = tempfile::tempdir().unwrap();
    write_tested_chart(&home.path().join("tested-example"));
    let hub = Hub::with_args(
        "chart-tests-cli",
        &[
            "--chart-home",
            home.path().to_str().unwrap(),
            "--executor",
            "cli",
        ],
    )
    .await;
    let ns = unique("chart-tests-cli-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![tested("refused", true)])],
        ..Default::default()
    };
    hub.apply("refused", spec).await;
    let api = hub.api();
    let error = wait_until("the release refused", Duration::from_secs(90), || async {
        let status = api.get("refused").await.ok()?.status?;
        message(&status, "member-1", "refused")
            .filter(|m| m.phase == "Failed")
            .map(|m| m.error_message.clone())
    })
    .await;
    assert!(
        error.contains("test.enable is refused by the helm binary executor"),
        "{error}"
    );
    assert!(
        hub.lab
            .try_helm("member-1", &["history", "refused", "-n", &ns])
            .is_err(),
        "nothing was installed"
    );
    hub.delete_and_wait_gone("refused").await;
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_members_tests_are_reported_and_a_failing_one_halts_the_rollout_before_the_next_wave()
 {
    let home = tempfile::tempdir().unwrap();
    write_tested_chart(&home.path().join("tested-example"));
    let hub = Hub::with_args(
        "chart-tests-pull",
        &["--chart-home", home.path().to_str().unwrap()],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge-t");
    // `cluster add --pull` labels it kind=edge, which member-1 is not: the edge's wave goes first.
    let _agent = join(&hub.lab, &edge, "pull-1", dir.path());
    let ns = unique("chart-tests-pull-tenant");
    let spec = |passes| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1", &edge],
            vec![tested("web", passes)],
        )],
        rollout: Some(Rollout {
            progress_deadline: Some("2m".into()),
            waves: vec![Wave {
                cluster_selector: ClusterSelector {
                    match_labels: BTreeMap::from([("kind".into(), "edge".into())]),
                },
            }],
            ..Rollout::default()
        }),
        ..Default::default()
    };
    hub.apply("web", spec(true)).await;
    let status = hub
        .status_until(
            "web",
            "the first rollout complete with both clusters' tests",
            |s| {
                let passed = |cluster: &str| {
                    message(s, cluster, "web").is_some_and(|m| {
                        m.tests.get("web-test").map(String::as_str) == Some("Succeeded")
                    })
                };
                s.rollout
                    .as_ref()
                    .is_some_and(|r| r.generation == 1 && r.phase == "Complete")
                    && passed(&edge)
                    && passed("member-1")
            },
        )
        .await;
    assert_eq!(message(&status, &edge, "web").unwrap().revision, Some(1));

    // The change fails its test on the edge, in the first wave: the rollout halts there and
    // member-1, in the next wave, keeps revision 1.
    hub.apply("web", spec(false)).await;
    let status = hub
        .status_until("web", "the rollout halted on the edge's failed test", |s| {
            s.rollout
                .as_ref()
                .is_some_and(|r| r.generation == 2 && r.phase == "Halted")
        })
        .await;
    let failed = message(&status, &edge, "web").expect("the edge's release in status");
    assert_eq!(failed.phase, "Failed", "{failed:?}");
    assert!(
        failed
            .error_message
            .contains("the tests of revision 2 failed: web-test (Failed)"),
        "{failed:?}"
    );
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &ns, "web"),
        None,
        "revision 2 is marked failed"
    );
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.delete_and_wait_gone("web").await;
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}
