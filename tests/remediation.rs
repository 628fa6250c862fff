//! End-to-end tests of a chart's `remediation` (Flux's words): a failed upgrade or install tried again, rolled back or uninstalled between tries, the last failure left or remediated as asked.

mod common;

use std::{path::Path, time::Duration};

use common::{
    fixtures::{chart, message, tenancy, unique, wait_until},
    hub::Hub,
};
use tenancy_hub::api::crd::{
    Chart, ControllerSpec, Install, InstallRemediation, RemediationStrategy, Upgrade,
    UpgradeRemediation,
};

/// How long a broken action waits for its Job before it fails.
const TIMEOUT: &str = "5s";

/// A chart of one ConfigMap and, when `broken` is true, a Job that never completes (its pod asks
/// for a node no cluster has): an action waiting for Jobs fails at its timeout.
fn write_flaky_chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: flaky\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "broken: false\n").unwrap();
    std::fs::write(
        dir.join("templates/objects.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  broken: {{ .Values.broken | quote }}\n{{- if .Values.broken }}\n---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      nodeSelector:\n        tenancy-hub.test/none: \"none\"\n      containers:\n        - name: work\n          image: busybox\n          command: [sleep, \"3600\"]\n{{- end }}\n",
    )
    .unwrap();
}

/// The flaky chart as `release`, broken or not, whose upgrade waits for its Jobs at most
/// [`TIMEOUT`] and is remediated as `remediation` says; history kept long enough to read.
fn upgrading(release: &str, broken: bool, remediation: UpgradeRemediation) -> Chart {
    Chart {
        upgrade: Some(Upgrade {
            timeout: Some(TIMEOUT.into()),
            wait_for_jobs: true,
            remediation: Some(remediation),
            ..Upgrade::default()
        }),
        max_history: Some(20),
        ..chart(
            "flaky",
            release,
            &[("broken", if broken { "true" } else { "false" })],
        )
    }
}

/// The statuses Helm recorded for `release` in `namespace` of member-1, oldest first; None when
/// it has no records.
fn history(hub: &Hub, namespace: &str, release: &str) -> Option<Vec<String>> {
    let out = hub
        .lab
        .try_helm(
            "member-1",
            &["history", release, "-n", namespace, "-o", "json"],
        )
        .ok()?;
    let entries: Vec<serde_json::Value> = serde_json::from_str(&out).ok()?;
    Some(
        entries
            .iter()
            .map(|e| e["status"].as_str().unwrap_or_default().to_owned())
            .collect(),
    )
}

/// What the operator logged of each failed try of `release` (its `Failed` Events say the same,
/// but the API server folds repeated Events into one series that keeps the first message).
fn failures(hub: &Hub, release: &str) -> Vec<String> {
    let failed = format!("/{release} failed: ");
    hub.log()
        .lines()
        .filter(|l| l.contains(&failed))
        .map(str::to_owned)
        .collect()
}

/// Waits until `release` failed for the last time (the operator says it is not tried again), then
/// returns its chart message's phase and error.
async fn settled(hub: &Hub, release: &str) -> (String, String) {
    let api = hub.api();
    wait_until(
        &format!("{release} failed for the last time"),
        Duration::from_secs(180),
        || async {
            let last = failures(hub, release)
                .iter()
                .any(|m| m.contains("not retried"));
            let status = api.get("flaky").await.ok()?.status?;
            let m = message(&status, "member-1", release)?;
            // Stalled: a failure the queue reads as transient (a wait past its timeout).
            (last && ["Failed", "Stalled"].contains(&m.phase.as_str()))
                .then(|| (m.phase.clone(), m.error_message.clone()))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn failed_upgrades_and_installs_are_tried_again_and_remediated_as_each_chart_asks() {
    let home = tempfile::tempdir().unwrap();
    write_flaky_chart(&home.path().join("flaky"));
    let hub = Hub::with_args(
        "remediation",
        &["--chart-home", home.path().to_str().unwrap()],
    )
    .await;
    let ns = unique("remediation-tenant");
    // Rolled back between three tries and after the last (remediateLastFailure by default).
    let rolled = |broken| {
        upgrading(
            "rolled",
            broken,
            UpgradeRemediation {
                retries: Some(2),
                ..Default::default()
            },
        )
    };
    // Rolled back between two tries, the last failed revision left for a person.
    let left = |broken| {
        upgrading(
            "left",
            broken,
            UpgradeRemediation {
                retries: Some(1),
                remediate_last_failure: Some(false),
                ..Default::default()
            },
        )
    };
    // Uninstalled after its one try.
    let removed = |broken| {
        upgrading(
            "removed",
            broken,
            UpgradeRemediation {
                retries: Some(0),
                remediate_last_failure: Some(true),
                strategy: Some(RemediationStrategy::Uninstall),
            },
        )
    };
    // Broken from its install: installed twice, uninstalled after each failure.
    let fresh = Chart {
        install: Some(Install {
            timeout: Some(TIMEOUT.into()),
            wait_for_jobs: true,
            remediation: Some(InstallRemediation {
                retries: Some(1),
                remediate_last_failure: None,
            }),
            ..Install::default()
        }),
        ..chart("flaky", "fresh", &[("broken", "true")])
    };
    let spec = |broken| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![rolled(broken), left(broken), removed(broken), fresh.clone()],
        )],
        ..Default::default()
    };
    hub.apply("flaky", spec(false)).await;
    hub.releases_become(
        "member-1",
        &ns,
        &[("left", 1), ("removed", 1), ("rolled", 1)],
    )
    .await;

    // The install broken from the start: tried twice, uninstalled after each try.
    let (phase, error) = settled(&hub, "fresh").await;
    assert!(
        ["Failed", "Stalled"].contains(&phase.as_str()),
        "{phase}: {error}"
    );
    assert!(error.contains("uninstalled"), "{error}");
    assert_eq!(
        history(&hub, &ns, "fresh"),
        None,
        "uninstalled after its last try"
    );
    let tries = failures(&hub, "fresh");
    assert!(
        tries.iter().any(|m| m.contains("retrying in")),
        "{tries:#?}"
    );

    // The upgrade breaks all three.
    hub.apply("flaky", spec(true)).await;
    let (_, error) = settled(&hub, "rolled").await;
    assert!(error.contains("rolled back"), "{error}");
    // Revision 1, then three failed tries each rolled back: it serves revision 1's objects.
    assert_eq!(
        history(&hub, &ns, "rolled").unwrap(),
        [
            "superseded",
            "failed",
            "superseded",
            "failed",
            "superseded",
            "failed",
            "deployed"
        ]
    );

    // Two tries, the first rolled back (revision 3), the last failed revision left as it is
    // beside the rollback, which keeps serving.
    settled(&hub, "left").await;
    assert_eq!(
        history(&hub, &ns, "left").unwrap(),
        ["superseded", "failed", "deployed", "failed"]
    );

    let (_, error) = settled(&hub, "removed").await;
    assert!(error.contains("uninstalled"), "{error}");
    assert_eq!(
        history(&hub, &ns, "removed"),
        None,
        "uninstalled by its strategy"
    );
    let tries = failures(&hub, "removed");
    assert!(
        tries.iter().all(|m| !m.contains("retrying in")),
        "no retries: {tries:#?}"
    );

    hub.delete_and_wait_gone("flaky").await;
}
