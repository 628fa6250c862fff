//! End-to-end tests of progressive rollouts: wave order, health gates, halts, rollback, an unreachable member.

mod common;

use std::collections::BTreeMap;

use common::{
    fixtures::{DEADLINE, chart, message, ready, tenancy, unique, wait_until},
    hub::Hub,
    lab::{Lab, start_member, stop_member},
};
use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use tenancy_hub::api::crd::{
    ClusterSelector, ControllerSpec, ControllerStatus, Rollout, RolloutStatus, Wave,
};

/// The rollout tests take turns: one of them stops a member's API server.
static LAB_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lab's first three members; the rollout tests need three (kind/up.sh --members 3).
fn members(lab: &Lab) -> [String; 3] {
    let members: Vec<String> = lab.contexts().into_iter().filter(|c| c != "hub").collect();
    assert!(
        members.len() >= 3,
        "the rollout tests need a lab with at least 3 members (kind/up.sh --members 3), this one has {members:?}"
    );
    [members[0].clone(), members[1].clone(), members[2].clone()]
}

/// One `deployment-example` release `web` in `namespace` of `clusters`, with `settings`, rolled
/// out by `rollout`.
fn spec(
    namespace: &str,
    clusters: &[String],
    settings: &[(&str, &str)],
    rollout: Rollout,
) -> ControllerSpec {
    let clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            &clusters,
            vec![chart("deployment-example", "web", settings)],
        )],
        rollout: Some(rollout),
        ..Default::default()
    }
}

/// One cluster at a time, halting after `deadline`.
fn one_at_a_time(deadline: &str) -> Rollout {
    Rollout {
        max_unavailable: Some(IntOrString::Int(1)),
        progress_deadline: Some(deadline.into()),
        ..Rollout::default()
    }
}

/// A selector on the registration label `index` the lab gives each member.
fn index(n: &str) -> Wave {
    Wave {
        cluster_selector: ClusterSelector {
            match_labels: BTreeMap::from([("index".into(), n.into())]),
        },
    }
}

/// Pods that never become ready: no kwok node has this label.
const UNSCHEDULABLE: (&str, &str) = ("nodeSelector.nowhere", "never");

fn rollout(status: &ControllerStatus) -> Option<&RolloutStatus> {
    status.rollout.as_ref()
}

fn complete(status: &ControllerStatus, generation: i64) -> bool {
    rollout(status).is_some_and(|r| r.generation == generation && r.phase == "Complete")
        && ready(status)
}

fn time(text: &str) -> Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// When helm wrote `revision` of release `web` in `namespace` of `context`.
fn revision_written(lab: &Lab, context: &str, namespace: &str, revision: i64) -> Timestamp {
    let out = lab.helm(context, &["history", "web", "-n", namespace, "-o", "json"]);
    let history: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let entry = history
        .iter()
        .find(|h| h["revision"].as_i64() == Some(revision))
        .unwrap_or_else(|| panic!("no revision {revision} of web in {context}: {out}"));
    time(entry["updated"].as_str().unwrap())
}

/// Runs the binary against the lab's hub, returning its standard output (whatever its exit code).
fn cli(hub: &Hub, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
        .args(args)
        .arg("--kubeconfig")
        .arg(hub.lab.kubeconfig_path())
        .args(["--context", "hub"])
        .env_remove("KUBECONFIG")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success() || args[0] == "status",
        "tenancy-hub {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn revision(lab: &Lab, context: &str, namespace: &str) -> Option<(i64, String)> {
    lab.releases(context, namespace).get("web").cloned()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_good_change_reaches_one_cluster_at_a_time_in_wave_order_each_after_the_previous_is_healthy()
 {
    let _turn = LAB_TURN.lock().await;
    let hub = Hub::new("rollout-good").await;
    let m = members(&hub.lab);
    let ns = unique("good");
    // Waves: the third member, then the first, then the rest: not the order of names.
    let plan = Rollout {
        waves: vec![index("3"), index("1")],
        ..one_at_a_time("2m")
    };
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "1")], plan.clone()))
        .await;
    hub.status_until("app", "the first rollout to complete", |s| complete(s, 1))
        .await;

    hub.apply("app", spec(&ns, &m, &[("replicaCount", "2")], plan))
        .await;
    let status = hub
        .status_until("app", "the change to roll out everywhere", |s| {
            complete(s, 2)
        })
        .await;
    let r = rollout(&status).unwrap();
    let order: Vec<&str> = r.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, [&m[2], &m[0], &m[1]], "wave order: {r:?}");
    assert_eq!((r.waves, r.progress.as_str()), (3, "3/3"));
    for pair in r.clusters.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let healthy = time(before.healthy_at.as_deref().unwrap());
        let started = time(after.started_at.as_deref().unwrap());
        assert!(
            started >= healthy,
            "{} started at {started} before {} was healthy at {healthy}",
            after.name,
            before.name
        );
        // Helm's own record: the revision of the next cluster was written after the one before
        // it was healthy.
        let written = revision_written(&hub.lab, &after.name, &ns, 2);
        assert!(
            written >= healthy,
            "{}'s revision 2 was written at {written}, before {} was healthy at {healthy}",
            after.name,
            before.name
        );
        let before_written = revision_written(&hub.lab, &before.name, &ns, 2);
        assert!(before_written <= healthy);
    }
    for cluster in &m {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((2, "deployed".into()))
        );
    }
    let events = hub.lab.kubectl(
        "hub",
        &["get", "events", "-n", &hub.namespace, "-o", "json"],
    );
    for reason in [
        "RolloutStarted",
        "RolloutWaveStarted",
        "RolloutWaveCompleted",
        "RolloutComplete",
    ] {
        assert!(events.contains(reason), "no {reason} Event");
    }
    let metrics = hub.operator.as_ref().unwrap().get("/metrics").1;
    assert!(
        metrics.contains("tenancy_hub_rollout_duration_seconds_count 2"),
        "two rollouts measured"
    );
}

/// Applies the good spec, waits until it is everywhere, applies the bad one and waits for the
/// halt; returns the halted status.
async fn halt_on_bad_change(
    hub: &Hub,
    m: &[String; 3],
    ns: &str,
    plan: Rollout,
) -> ControllerStatus {
    hub.apply("app", spec(ns, m, &[("replicaCount", "1")], plan.clone()))
        .await;
    hub.status_until("app", "the first rollout to complete", |s| complete(s, 1))
        .await;
    hub.apply(
        "app",
        spec(ns, m, &[("replicaCount", "1"), UNSCHEDULABLE], plan),
    )
    .await;
    hub.status_until("app", "the rollout to halt", |s| {
        rollout(s).is_some_and(|r| r.generation == 2 && r.halted.is_some())
    })
    .await
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_bad_change_halts_after_the_first_cluster_leaves_the_others_alone_and_a_revert_completes()
{
    let _turn = LAB_TURN.lock().await;
    let hub = Hub::new("rollout-bad").await;
    let m = members(&hub.lab);
    let ns = unique("bad");
    let plan = one_at_a_time("15s");
    let status = halt_on_bad_change(&hub, &m, &ns, plan.clone()).await;
    let r = rollout(&status).unwrap();
    let halt = r.halted.as_ref().unwrap();
    assert_eq!(
        (halt.cluster.as_str(), halt.release.as_str()),
        (m[0].as_str(), "web")
    );
    assert!(halt.reason.contains("progress deadline"), "{halt:?}");
    assert_eq!((r.phase.as_str(), r.failed, r.pending), ("Halted", 1, 2));
    let stalled = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RolloutHalted")
    );
    assert!(
        stalled
            .message
            .contains(&format!("cluster {} release web", m[0])),
        "{stalled:?}"
    );
    let held = message(&status, &m[1], "web").unwrap();
    assert_eq!(held.phase, "Pending");
    assert!(
        held.error_message.contains("held back by the rollout"),
        "{held:?}"
    );
    assert_eq!(revision(&hub.lab, &m[0], &ns).map(|r| r.0), Some(2));
    for cluster in &m[1..] {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((1, "deployed".into())),
            "{cluster} keeps the previous revision"
        );
    }

    // `tenancy-hub status` shows it; `tenancy-hub rollout resume` gives the failed cluster a new
    // deadline (the change is still bad, so it halts again).
    let shown = cli(&hub, &["status", "app", "-n", &hub.namespace]);
    assert!(
        shown.contains("rollout of generation 2: Halted wave 1/1, 0/3 clusters healthy"),
        "{shown}"
    );
    let first_halt = halt.at.clone();
    cli(&hub, &["rollout", "resume", "app", "-n", &hub.namespace]);
    let again = hub
        .status_until("app", "the resumed rollout to halt again", |s| {
            rollout(s).is_some_and(|r| {
                r.command.starts_with("resume-")
                    && r.halted.as_ref().is_some_and(|h| h.at != first_halt)
            })
        })
        .await;
    assert_eq!(
        rollout(&again).unwrap().halted.as_ref().unwrap().cluster,
        m[0]
    );
    for cluster in &m[1..] {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((1, "deployed".into()))
        );
    }

    // The revert is a new generation: a new rollout, which completes.
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "1")], plan))
        .await;
    let reverted = hub
        .status_until("app", "the revert to roll out", |s| complete(s, 3))
        .await;
    let r = rollout(&reverted).unwrap();
    assert!(r.halted.is_none(), "the new rollout is not halted: {r:?}");
    assert!(time(r.finished_at.as_deref().unwrap()) >= time(&r.started_at));
    assert_eq!(revision(&hub.lab, &m[0], &ns), Some((3, "deployed".into())));
    for cluster in &m[1..] {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((1, "deployed".into())),
            "{cluster} needed no change"
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn rollback_on_halt_restores_the_failed_clusters_previous_revision() {
    let _turn = LAB_TURN.lock().await;
    let hub = Hub::new("rollout-back").await;
    let m = members(&hub.lab);
    let ns = unique("back");
    let plan = Rollout {
        rollback_on_halt: true,
        ..one_at_a_time("15s")
    };
    halt_on_bad_change(&hub, &m, &ns, plan).await;
    let lab = &hub.lab;
    wait_until("the failed cluster to be rolled back", DEADLINE, || async {
        (revision(lab, &m[0], &ns) == Some((3, "deployed".into()))).then_some(())
    })
    .await;
    let values = lab.values(&m[0], &ns, "web");
    assert!(
        values.get("nodeSelector").is_none(),
        "revision 3 has revision 1's values: {values}"
    );
    let history = lab.helm(&m[0], &["history", "web", "-n", &ns, "-o", "json"]);
    assert!(history.contains("rolled back by tenancy-hub"), "{history}");
    for cluster in &m[1..] {
        assert_eq!(revision(lab, cluster, &ns), Some((1, "deployed".into())));
    }
    // Rolled back, the cluster is not given the bad generation again: the reconciler sees
    // revision 3 and holds the cluster back like one not reached.
    let status = hub
        .status_until("app", "the rolled-back cluster to be held back", |s| {
            message(s, &m[0], "web").is_some_and(|w| {
                w.revision == Some(3) && w.error_message.contains("held back by the rollout")
            }) && s
                .updated_tenancies
                .iter()
                .any(|t| t.cluster == m[0] && t.pods_total == 1 && t.pods_ready == 1)
        })
        .await;
    assert!(rollout(&status).unwrap().halted.is_some());
    assert_eq!(revision(lab, &m[0], &ns), Some((3, "deployed".into())));
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_member_stopped_mid_rollout_is_waited_for_and_the_rollout_goes_on_when_it_returns() {
    let _turn = LAB_TURN.lock().await;
    let hub = Hub::new("rollout-stop").await;
    let m = members(&hub.lab);
    let ns = unique("stop");
    let plan = one_at_a_time("5m");
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "1")], plan.clone()))
        .await;
    hub.status_until("app", "the first rollout to complete", |s| complete(s, 1))
        .await;

    stop_member(&hub.lab, &m[1]);
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "2")], plan))
        .await;
    let waiting = hub
        .status_until("app", "the rollout to reach the stopped member", |s| {
            rollout(s).is_some_and(|r| {
                r.generation == 2
                    && r.clusters
                        .iter()
                        .any(|c| c.name == m[1] && c.state == "Progressing")
            })
        })
        .await;
    // It waits: no halt, the next member untouched, for a while.
    let since = std::time::Instant::now();
    while since.elapsed() < std::time::Duration::from_secs(10) {
        let c = hub.api().get("app").await.unwrap();
        let r = c.status.unwrap().rollout.unwrap();
        assert!(
            r.halted.is_none(),
            "an unreachable member does not halt before the deadline: {r:?}"
        );
        assert!(
            r.clusters
                .iter()
                .any(|c| c.name == m[2] && c.state == "Pending"),
            "{r:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    start_member(&hub.lab, &m[1]);
    assert_eq!(rollout(&waiting).unwrap().healthy, 1);
    hub.status_until("app", "the rollout to go on and complete", |s| {
        complete(s, 2)
    })
    .await;
    for cluster in &m {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((2, "deployed".into()))
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_restarted_operator_carries_on_the_rollout_from_its_status() {
    let _turn = LAB_TURN.lock().await;
    let mut hub = Hub::new("rollout-restart").await;
    let m = members(&hub.lab);
    let ns = unique("restart");
    let plan = Rollout {
        waves: vec![index("1")],
        pause_between_waves: Some("8s".into()),
        ..one_at_a_time("2m")
    };
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "1")], plan.clone()))
        .await;
    hub.status_until("app", "the first rollout to complete", |s| complete(s, 1))
        .await;
    hub.apply("app", spec(&ns, &m, &[("replicaCount", "2")], plan))
        .await;
    let paused = hub
        .status_until(
            "app",
            "the first wave to be healthy and the pause to begin",
            |s| rollout(s).is_some_and(|r| r.generation == 2 && r.phase == "Paused"),
        )
        .await;
    hub.operator.take().unwrap().stop();
    hub.operator = Some(common::operator::Operator::start(&hub.lab, &hub.namespace));
    let done = hub
        .status_until(
            "app",
            "the rollout to complete under the new operator",
            |s| complete(s, 2),
        )
        .await;
    let (before, after) = (rollout(&paused).unwrap(), rollout(&done).unwrap());
    assert_eq!(
        after.started_at, before.started_at,
        "the same rollout went on"
    );
    assert_eq!(after.clusters[0].healthy_at, before.clusters[0].healthy_at);
    let wave_done = time(before.wave_completed_at.as_deref().unwrap());
    for c in &after.clusters[1..] {
        let started = time(c.started_at.as_deref().unwrap());
        assert!(
            started.as_millisecond() - wave_done.as_millisecond() >= 8_000,
            "{} started {started}, before the pause after {wave_done} was over",
            c.name
        );
    }
    for cluster in &m {
        assert_eq!(
            revision(&hub.lab, cluster, &ns),
            Some((2, "deployed".into()))
        );
    }
}
