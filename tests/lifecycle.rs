//! End-to-end tests of the release lifecycle: every change ends in the state the spec asks for.

mod common;

use std::path::Path;

use common::{
    fixtures::{DEADLINE, chart, entry, message, ready, tenancy, unique, wait_until, web},
    hub::Hub,
    lab::Lab,
    operator::Operator,
    proxy::Proxy,
};
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use tenancy_hub::api::crd::{ClusterSelector, ControllerSpec, ControllerStatus};

fn condition<'a>(status: &'a ControllerStatus, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

fn phase<'a>(status: &'a ControllerStatus, cluster: &str, release: &str) -> &'a str {
    message(status, cluster, release).map_or("", |m| m.phase.as_str())
}

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn repo_charts() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts")
}

/// Changes the resource without changing its spec, which makes the operator reconcile it.
async fn touch(hub: &Hub, name: &str, n: usize) {
    let patch = serde_json::json!({"metadata": {"annotations": {"test.multitenancy.dev/touch": n.to_string()}}});
    hub.api()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Touches the resource `times` times, each time waiting until the operator reconciled again.
async fn reconcile_times(hub: &Hub, name: &str, times: usize) {
    let operator = hub.operator.as_ref().unwrap();
    for n in 0..times {
        let before = operator.metric("tenancy_hub_reconciles_total");
        touch(hub, name, n).await;
        wait_until("the operator to reconcile again", DEADLINE, || async {
            (operator.metric("tenancy_hub_reconciles_total") > before).then_some(())
        })
        .await;
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_restart_without_a_chart_uninstalls_nothing_and_delivery_resumes_when_it_is_back() {
    let home = tempfile::tempdir().unwrap();
    copy_tree(&repo_charts(), home.path());
    let home_arg = home.path().to_str().unwrap().to_owned();
    let mut hub = Hub::with_args("nochart", &["--chart-home", &home_arg]).await;
    let ns = unique("nochart-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![
                chart("deployment-example", "web", &[]),
                chart("statefulset-example", "db", &[]),
            ],
        )],
        ..Default::default()
    };
    hub.apply("shop", spec).await;
    hub.releases_become("member-1", &ns, &[("web", 1), ("db", 1)])
        .await;

    // Restarted with a chart home that lacks one chart: it is reported, nothing is removed.
    hub.operator.take().unwrap().stop();
    std::fs::remove_dir_all(home.path().join("statefulset-example")).unwrap();
    hub.operator = Some(Operator::start_with(
        &hub.lab,
        &hub.namespace,
        &["--chart-home", &home_arg],
    ));
    let status = hub
        .status_until("shop", "the missing chart to be reported Invalid", |s| {
            phase(s, "member-1", "db") == "Invalid" && phase(s, "member-1", "web") == "Deployed"
        })
        .await;
    let note = &message(&status, "member-1", "db").unwrap().error_message;
    assert!(
        note.contains("statefulset-example") && note.contains("left as it is"),
        "{note}"
    );
    assert_eq!(condition(&status, "Ready").unwrap().0, "False");
    reconcile_times(&hub, "shop", 3).await;
    assert_eq!(
        hub.lab.releases("member-1", &ns),
        [
            ("db".into(), (1, "deployed".into())),
            ("web".into(), (1, "deployed".into()))
        ]
        .into(),
        "nothing was uninstalled or upgraded"
    );
    let told = hub
        .log()
        .lines()
        .filter(|l| l.contains("spec cannot be carried out") && l.contains("/db"))
        .count();
    assert_eq!(
        told, 1,
        "one problem is logged once, not on every reconcile"
    );

    // The chart is back: the release is Deployed again, with no new revision (same content).
    copy_tree(
        &repo_charts().join("statefulset-example"),
        &home.path().join("statefulset-example"),
    );
    touch(&hub, "shop", 99).await;
    hub.status_until("shop", "the release to be deployed again", |s| {
        phase(s, "member-1", "db") == "Deployed"
    })
    .await;
    assert_eq!(hub.lab.releases("member-1", &ns)["db"].0, 1);
    hub.delete_and_wait_gone("shop").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn one_release_asked_for_twice_is_one_invalid_entry_naming_both_and_never_flaps() {
    let hub = Hub::new("dup").await;
    let ns = unique("shop");
    let mut second = tenancy(&ns, &[], vec![chart("statefulset-example", "", &[])]);
    second.charts[0].release_name = None;
    second.cluster_selector = Some(ClusterSelector {
        match_labels: [("index".to_string(), "2".to_string())].into(),
    });
    let mut first = tenancy(
        &ns,
        &["member-1", "member-2"],
        vec![chart("deployment-example", "", &[])],
    );
    first.charts[0].release_name = None;
    let spec = ControllerSpec {
        tenancies: vec![first, second],
        ..Default::default()
    };
    hub.apply("dup", spec).await;
    let status = hub
        .status_until("dup", "the duplicate to be reported on member-2", |s| {
            phase(s, "member-1", &ns) == "Deployed"
                && entry(s, "member-2", &ns).is_some_and(|t| {
                    t.chart_messages.len() == 1 && t.chart_messages[0].phase == "Invalid"
                })
        })
        .await;
    let m = &entry(&status, "member-2", &ns).unwrap().chart_messages[0];
    for entry in [
        "tenancies[0] chart deployment-example",
        "tenancies[1] chart statefulset-example",
    ] {
        assert!(
            m.error_message
                .contains("more than once in this Controller, by 2 entries")
                && m.error_message.contains(entry),
            "the one message names both entries: {}",
            m.error_message
        );
    }
    reconcile_times(&hub, "dup", 3).await;
    assert!(
        hub.lab.releases("member-2", &ns).is_empty(),
        "no helm call for a duplicate"
    );
    assert_eq!(hub.lab.releases("member-1", &ns)[&ns].0, 1);
    hub.delete_and_wait_gone("dup").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_controller_whose_release_is_installed_keeps_it_when_an_older_one_asks_too() {
    let hub = Hub::new("claims").await;
    let ns = unique("claims-tenant");
    let web = || chart("deployment-example", "web", &[]);
    let other = || chart("deployment-example", "other", &[]);
    // The older resource does not ask for web at first; the newer one installs it.
    hub.apply(
        "older",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![other()])],
            ..Default::default()
        },
    )
    .await;
    hub.status_until("older", "the older resource to deploy", ready)
        .await;
    hub.apply(
        "newer",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![web()])],
            ..Default::default()
        },
    )
    .await;
    hub.releases_become("member-1", &ns, &[("other", 1), ("web", 1)])
        .await;
    // Now the older one asks for web too: the holder keeps it, the other reports a conflict.
    hub.apply(
        "older",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![other(), web()])],
            ..Default::default()
        },
    )
    .await;
    let older = hub
        .status_until("older", "the older resource to report the conflict", |s| {
            phase(s, "member-1", "web") == "Conflict"
        })
        .await;
    assert!(
        message(&older, "member-1", "web")
            .unwrap()
            .error_message
            .contains("newer"),
        "the conflict names the holder"
    );
    reconcile_times(&hub, "newer", 2).await;
    let newer = hub.api().get("newer").await.unwrap().status.unwrap();
    assert_eq!(
        phase(&newer, "member-1", "web"),
        "Deployed",
        "one of them wins"
    );
    assert_eq!(hub.lab.releases("member-1", &ns)["web"].0, 1);
    hub.delete_and_wait_gone("older").await;
    hub.delete_and_wait_gone("newer").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_chart_removed_while_its_cluster_is_down_and_added_back_is_never_reinstalled() {
    let lab = Lab::get();
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = Proxy::to(&lab, "member-1").await;
    let registration = proxy.register(&lab, "member-1", "flaky", dir.path());
    let hub = Hub::with_args("flaky", &["--clusters", registration.to_str().unwrap()]).await;
    let ns = unique("flaky-tenant");
    let spec = |with_db: bool| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["flaky"],
            [chart("deployment-example", "web", &[])]
                .into_iter()
                .chain(with_db.then(|| chart("statefulset-example", "db", &[])))
                .collect(),
        )],
        ..Default::default()
    };
    hub.apply("flaky", spec(true)).await;
    hub.releases_become("member-1", &ns, &[("web", 1), ("db", 1)])
        .await;
    let member = lab.client("member-1").await;
    let sets: Api<StatefulSet> = Api::namespaced(member, &ns);
    let uid = sets.get("db").await.unwrap().uid();

    proxy.stop();
    hub.status_until("flaky", "the cluster to be unreachable", |s| {
        s.clusters.iter().any(|c| c.name == "flaky" && !c.reachable)
    })
    .await;
    hub.apply("flaky", spec(false)).await;
    hub.status_until("flaky", "the removal to be planned", |s| {
        message(s, "flaky", "db").is_none()
    })
    .await;
    hub.apply("flaky", spec(true)).await;
    proxy.start().await;
    hub.status_until("flaky", "everything deployed again", |s| {
        ready(s) && phase(s, "flaky", "db") == "Deployed"
    })
    .await;
    assert_eq!(
        sets.get("db").await.unwrap().uid(),
        uid,
        "the release was never uninstalled and installed again"
    );
    assert_eq!(hub.lab.releases("member-1", &ns)["db"].0, 1);
    hub.delete_and_wait_gone("flaky").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn deletion_waits_only_for_clusters_holding_its_releases_and_can_be_let_go() {
    let lab = Lab::get();
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = Proxy::to(&lab, "member-2").await;
    let flaky = proxy.register(&lab, "member-2", "flaky", dir.path());
    // member-1, and member-2 behind the proxy as "flaky" (not also as itself, or one cluster
    // would be registered twice).
    let registration = dir.path().join("clusters.yaml");
    let flaky_entries = std::fs::read_to_string(&flaky).unwrap();
    std::fs::write(
        &registration,
        format!(
            "clusters:\n  - name: member-1\n    context: member-1\n    kubeconfig: {}\n{}",
            lab.kubeconfig_path().display(),
            flaky_entries.trim_start_matches("clusters:\n")
        ),
    )
    .unwrap();
    let hub = Hub::with_args("deletion", &["--clusters", registration.to_str().unwrap()]).await;
    let (only_m1, both) = (unique("m1-only"), unique("m1-and-flaky"));
    let web = || vec![chart("deployment-example", "web", &[])];
    hub.apply(
        "innocent",
        ControllerSpec {
            tenancies: vec![tenancy(&only_m1, &["member-1"], web())],
            ..Default::default()
        },
    )
    .await;
    hub.apply(
        "holder",
        ControllerSpec {
            tenancies: vec![tenancy(&both, &["member-1", "flaky"], web())],
            ..Default::default()
        },
    )
    .await;
    hub.status_until("innocent", "innocent ready", ready).await;
    hub.status_until("holder", "holder ready", ready).await;
    proxy.stop();
    hub.status_until("holder", "flaky to be unreachable", |s| {
        s.clusters.iter().any(|c| c.name == "flaky" && !c.reachable)
    })
    .await;

    // Nothing on the unreachable cluster: deleted at once.
    hub.delete_and_wait_gone("innocent").await;
    assert!(hub.lab.releases("member-1", &only_m1).is_empty());

    // Releases on the unreachable cluster: it waits, says for what and since when.
    hub.api()
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    let status = hub
        .status_until("holder", "the deletion to say what it waits for", |s| {
            condition(s, "Ready").is_some_and(|c| c.1 == "Terminating" && c.2.contains("flaky"))
        })
        .await;
    let (_, _, note) = condition(&status, "Ready").unwrap();
    assert!(
        note.contains("last seen") && note.contains("deletionPolicy"),
        "{note}"
    );
    wait_until("member-1's release to be uninstalled", DEADLINE, || async {
        hub.lab.releases("member-1", &both).is_empty().then_some(())
    })
    .await;
    assert!(hub.api().get_opt("holder").await.unwrap().is_some());

    // The cluster is gone for good: the admin lets it go.
    let orphan = serde_json::json!({"spec": {"deletionPolicy": "Orphan"}});
    hub.api()
        .patch("holder", &PatchParams::default(), &Patch::Merge(&orphan))
        .await
        .unwrap();
    let api = hub.api();
    wait_until("the resource to be let go", DEADLINE, || async {
        api.get_opt("holder").await.ok()?.is_none().then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let listed = events.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Orphaned")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains(&format!("flaky/{both}/web")))),
        "an Event lists the releases left behind"
    );
    proxy.start().await;
    assert_eq!(
        hub.lab.releases("member-2", &both)["web"].0,
        1,
        "the release is left in place"
    );
    let operator = hub.operator.as_ref().unwrap();
    wait_until(
        "the release left without its owner to be counted",
        DEADLINE,
        || async {
            (operator.metric("tenancy_hub_orphaned_releases{reason=\"owner-gone\"}") >= 1.0)
                .then_some(())
        },
    )
    .await;
    let logged = hub
        .log()
        .lines()
        .filter(|l| {
            l.contains("release left without its Controller")
                && l.contains(&format!("release=flaky/{both}/web"))
        })
        .count();
    assert_eq!(logged, 1, "the ownerless release is logged once");
    hub.lab.helm("member-2", &["uninstall", "web", "-n", &both]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn ready_means_the_workloads_run_and_kubectl_wait_agrees() {
    let hub = Hub::new("ready").await;
    let ns = unique("ready-tenant");
    let spec = |selector: bool| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![chart(
                "deployment-example",
                "web",
                if selector {
                    &[("nodeSelector.lab/pool", "nowhere")]
                } else {
                    &[]
                },
            )],
        )],
        ..Default::default()
    };
    // Pods that can never be scheduled: the release deploys, the resource is not Ready.
    hub.apply("ready", spec(true)).await;
    let status = hub
        .status_until(
            "ready",
            "the release deployed but its workload not ready",
            |s| {
                phase(s, "member-1", "web") == "Deployed"
                    && condition(s, "Reconciling").is_some_and(|c| c.0 == "True")
            },
        )
        .await;
    let (ready_status, reason, note) = condition(&status, "Ready").unwrap();
    assert_eq!(ready_status, "False");
    assert!(
        ["WorkloadsRollingOut", "PodsNotReady"].contains(&reason) && note.contains("waiting for"),
        "{reason}: {note}"
    );
    assert_eq!(condition(&status, "Stalled").unwrap().0, "False");
    let kubectl = hub.lab.bin_dir().join("kubectl");
    let wait = |timeout: &str| {
        std::process::Command::new(&kubectl)
            .args(["--kubeconfig"])
            .arg(hub.lab.kubeconfig_path())
            .args(["--context", "hub", "-n", &hub.namespace, "wait"])
            .args([
                "--for=condition=Ready",
                "controllers.multitenancy.dev/ready",
            ])
            .arg(format!("--timeout={timeout}"))
            .output()
            .unwrap()
    };
    assert!(
        !wait("2s").status.success(),
        "kubectl wait does not see it Ready"
    );

    // Schedulable again: Ready, and kubectl wait returns.
    hub.apply("ready", spec(false)).await;
    let out = wait("90s");
    assert!(
        out.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = hub.api().get("ready").await.unwrap().status.unwrap();
    assert_eq!(condition(&status, "Reconciling").unwrap().0, "False");
    hub.delete_and_wait_gone("ready").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_failed_release_recovers_when_the_spec_is_reverted() {
    let hub = Hub::new("revert").await;
    let ns = unique("revert-tenant");
    let spec = |replicas: &str| web(&ns, &["member-1"], replicas);
    hub.apply("revert", spec("1")).await;
    hub.status_until("revert", "the good spec to be ready", ready)
        .await;
    // A negative replica count is refused by the API server: the release fails and stays so.
    hub.apply("revert", spec("-1")).await;
    let status = hub
        .status_until("revert", "the bad spec to fail", |s| {
            phase(s, "member-1", "web") == "Failed"
        })
        .await;
    assert_eq!(condition(&status, "Stalled").unwrap().0, "True");
    hub.apply("revert", spec("1")).await;
    hub.status_until("revert", "the reverted spec to be ready again", |s| {
        ready(s) && phase(s, "member-1", "web") == "Deployed"
    })
    .await;
    hub.delete_and_wait_gone("revert").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_cluster_whose_releases_are_all_invalid_is_still_reachable() {
    let hub = Hub::new("reach").await;
    let ns = unique("reach-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![chart("no-such-chart", "web", &[])],
        )],
        ..Default::default()
    };
    hub.apply("reach", spec).await;
    let status = hub
        .status_until("reach", "the invalid release to be reported", |s| {
            phase(s, "member-1", "web") == "Invalid" && !s.clusters.is_empty()
        })
        .await;
    assert!(
        status.clusters.iter().all(|c| c.reachable),
        "{:?}",
        status.clusters
    );
    assert_eq!(status.summary.unwrap().clusters, "1/1");
    hub.delete_and_wait_gone("reach").await;
}
