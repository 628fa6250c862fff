//! End-to-end tests of per-release Helm settings: a chart's own install timeout and wait, beside a chart that keeps the operator's defaults.

mod common;

use std::{path::Path, time::Duration};

use common::{
    agent::{deployed_revision, hub_cli, join},
    fixtures::{DEADLINE, chart, message, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
};
use tenancy_hub::api::{
    crd::{ControllerSpec, Install, Uninstall, Upgrade},
    policy::{HelmRule, TenancyPolicySpec},
};

/// A chart whose one object is a Job that never completes: its pod asks for a node no cluster
/// has, so it is never scheduled (on the lab's kwok nodes, a Job's pod that runs completes).
fn write_job_chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: job-example\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      nodeSelector:\n        tenancy-hub.test/none: \"none\"\n      containers:\n        - name: work\n          image: busybox\n          command: [sleep, \"3600\"]\n",
    )
    .unwrap();
}

/// The description of the first revision of release `slow` in `namespace` of member-1 once Helm
/// recorded it failed.
fn first_revision_failed(hub: &Hub, namespace: &str) -> Option<String> {
    let history = hub
        .lab
        .try_helm(
            "member-1",
            &["history", "slow", "-n", namespace, "-o", "json"],
        )
        .ok()?;
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).ok()?;
    let first = history.first()?;
    (first["status"] == "failed").then(|| first["description"].as_str().unwrap_or("").to_owned())
}

/// Whether a release's error says Helm timed out.
fn timed_out(error: &str) -> bool {
    ["timed out", "deadline", "timeout"]
        .iter()
        .any(|w| error.contains(w))
}

/// Copies the chart directory `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_chart_waiting_for_its_jobs_fails_at_its_own_timeout_and_a_fast_chart_beside_it_is_not_held()
 {
    held_at_its_own_timeout(&[]).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_helm_binary_executor_holds_a_chart_to_its_own_timeout_too() {
    held_at_its_own_timeout(&["--executor", "cli"]).await;
}

/// A chart installing with `waitForJobs` and a 20 s timeout of its own, beside one with the
/// operator's defaults, on an operator run with `extra` arguments.
async fn held_at_its_own_timeout(extra: &[&str]) {
    let home = tempfile::tempdir().unwrap();
    write_job_chart(&home.path().join("job-example"));
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example"),
        &home.path().join("deployment-example"),
    );
    let args = [&["--chart-home", home.path().to_str().unwrap()][..], extra].concat();
    let hub = Hub::with_args("helm-settings", &args).await;
    let ns = unique("helm-settings-tenant");
    let mut slow = chart("job-example", "slow", &[]);
    slow.install = Some(Install {
        timeout: Some("20s".into()),
        wait_for_jobs: true,
        ..Install::default()
    });
    let fast = chart("deployment-example", "fast", &[]);
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![slow, fast])],
        ..Default::default()
    };
    let started = tokio::time::Instant::now();
    hub.apply("waits", spec).await;

    // The fast chart is deployed while the slow one still waits for its Job.
    let api = hub.api();
    let at = wait_until(
        "the fast release deployed",
        Duration::from_secs(120),
        || async {
            let status = api.get("waits").await.ok()?.status?;
            let fast = message(&status, "member-1", "fast")?;
            (fast.phase == "Deployed").then(|| {
                message(&status, "member-1", "slow")
                    .map(|s| s.error_message.clone())
                    .unwrap_or_default()
            })
        },
    )
    .await;
    assert!(
        !timed_out(&at) || started.elapsed() >= Duration::from_secs(20),
        "the slow release timed out before the fast one was deployed, and before its own 20s: {at}"
    );

    // The slow one fails at its own 20 s, long before the operator's 300 s: its first revision,
    // as Helm recorded it, failed for its Job not being ready.
    let failed = wait_until(
        "the slow release to fail",
        Duration::from_secs(150),
        || async { first_revision_failed(&hub, &ns) },
    )
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(20) && took < Duration::from_secs(150),
        "failed after {took:?}: {failed}"
    );
    assert!(failed.contains("not ready"), "{failed}");
    // The failed revision is the operator's own, sealed whichever executor wrote it: the
    // release reads as failing on its own timeout (Failed, or Pending while it is tried again),
    // not as a Conflict with records of no one's.
    let error = wait_until(
        "the slow release reported failing on its timeout",
        Duration::from_secs(60),
        || async {
            let status = api.get("waits").await.ok()?.status?;
            let slow = message(&status, "member-1", "slow")?;
            (["Failed", "Pending"].contains(&slow.phase.as_str()) && timed_out(&slow.error_message))
                .then(|| slow.error_message.clone())
        },
    )
    .await;
    assert!(!error.contains("did not seal"), "{error}");
    hub.delete_and_wait_gone("waits").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_deleted_controller_uninstalls_keeping_the_history_its_chart_asks_to_keep() {
    let hub = Hub::new("helm-settings-history").await;
    let ns = unique("helm-settings-history-tenant");
    let mut kept = chart("deployment-example", "kept", &[]);
    kept.uninstall = Some(Uninstall {
        keep_history: true,
        timeout: Some("30s".into()),
        ..Uninstall::default()
    });
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![kept, chart("deployment-example", "gone", &[])],
        )],
        ..Default::default()
    };
    hub.apply("history", spec).await;
    hub.releases_become("member-1", &ns, &[("gone", 1), ("kept", 1)])
        .await;
    // Deletion ends: the release whose records stay, marked uninstalled, is not taken for one
    // still there.
    hub.delete_and_wait_gone("history").await;
    let history = hub
        .lab
        .helm("member-1", &["history", "kept", "-n", &ns, "-o", "json"]);
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["status"], "uninstalled", "{history:?}");
    assert!(
        hub.lab
            .try_helm("member-1", &["history", "gone", "-n", &ns])
            .is_err(),
        "the other release is gone with its history"
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_policy_forbidding_disabled_hooks_refuses_that_release_and_not_its_neighbour() {
    let hub = Hub::with_args("helm-settings-hooks", &["--tenancy-policy", "enforce"]).await;
    let policy = TenancyPolicySpec {
        helm: Some(HelmRule {
            allow_disable_hooks: false,
            ..HelmRule::default()
        }),
        ..allow_all(&hub.namespace, &[])
    };
    hub.policy(&hub.namespace, policy).await;
    let ns = unique("helm-settings-hooks-tenant");
    let mut hookless = chart("deployment-example", "hookless", &[]);
    hookless.upgrade = Some(Upgrade {
        disable_hooks: true,
        ..Upgrade::default()
    });
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![hookless, chart("deployment-example", "hooked", &[])],
        )],
        ..Default::default()
    };
    hub.apply("hooks", spec).await;
    let api = hub.api();
    let refused = wait_until(
        "the hookless release forbidden, its neighbour deployed",
        Duration::from_secs(120),
        || async {
            let status = api.get("hooks").await.ok()?.status?;
            let hooked = message(&status, "member-1", "hooked")?;
            let hookless = message(&status, "member-1", "hookless")?;
            (hooked.phase == "Deployed" && hookless.phase == "Forbidden")
                .then(|| hookless.error_message.clone())
        },
    )
    .await;
    assert!(refused.contains("allowDisableHooks"), "{refused}");
    assert!(
        hub.lab
            .try_helm("member-1", &["history", "hookless", "-n", &ns])
            .is_err(),
        "no Helm call for the forbidden release"
    );
    hub.delete_and_wait_gone("hooks").await;
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_members_agent_uninstalls_keeping_the_history_its_chart_asks_to_keep() {
    let hub = Hub::new("helm-settings-pull").await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge-s");
    let _agent = join(&hub.lab, &edge, "pull-2", dir.path());
    let ns = unique("helm-settings-pull-tenant");
    let mut kept = chart("deployment-example", "kept", &[]);
    kept.uninstall = Some(Uninstall {
        keep_history: true,
        ..Uninstall::default()
    });
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &[&edge], vec![kept])],
        ..Default::default()
    };
    hub.apply("kept", spec).await;
    wait_until(
        "the release deployed on the pull member",
        DEADLINE,
        || async { (deployed_revision(&hub.lab, "pull-2", &ns, "kept") == Some(1)).then_some(()) },
    )
    .await;
    hub.delete_and_wait_gone("kept").await;
    // The agent uninstalled it as the chart entry asked: its one record stays, marked so.
    let statuses = hub.lab.try_pull_kubectl(
        "pull-2",
        &[
            "get",
            "secrets",
            "-n",
            &ns,
            "-l",
            "owner=helm,name=kept",
            "-o",
            "jsonpath={.items[*].metadata.labels.status}",
        ],
    );
    assert_eq!(statuses.as_deref().map(str::trim), Ok("uninstalled"));
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}
