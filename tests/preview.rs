//! End-to-end tests of `tenancy-hub diff` and of `suspend` against the lab.

mod common;

use std::collections::BTreeMap;

use common::{
    fixtures::{DEADLINE, chart, tenancy, unique, wait_until},
    hub::Hub,
};
use tenancy_hub::api::crd::{ControllerSpec, ControllerStatus, TenancyController};

/// Runs `tenancy-hub diff -f FILE -o json` for the test's hub namespace: (exit code, entries, stderr).
fn diff(hub: &Hub, name: &str, spec: &ControllerSpec) -> (i32, Vec<serde_json::Value>, String) {
    let out = hub.diff(
        &hub.lab.clusters_path(),
        name,
        spec,
        &["--tenancy-policy", "permissive"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let entries = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("diff printed no JSON ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap(), entries, stderr)
}

/// `release -> action` of the entries of one cluster/namespace.
fn actions(entries: &[serde_json::Value], cluster: &str, ns: &str) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter(|e| e["cluster"] == cluster && e["namespace"] == ns)
        .map(|e| {
            (
                e["release"].as_str().unwrap().to_owned(),
                e["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn entry<'a>(entries: &'a [serde_json::Value], release: &str) -> &'a serde_json::Value {
    entries
        .iter()
        .find(|e| e["release"] == release)
        .unwrap_or_else(|| panic!("no entry for {release}: {entries:?}"))
}

/// What a namespace of a cluster holds, as resourceVersions by kind/name, with its releases.
fn state(hub: &Hub, context: &str, ns: &str) -> (String, BTreeMap<String, (i64, String)>) {
    let versions = hub.lab.kubectl(
        context,
        &[
            "get",
            "deployments,statefulsets,services,secrets,configmaps",
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
        ],
    );
    (versions, hub.lab.releases(context, ns))
}

fn condition<'a>(status: &'a ControllerStatus, type_: &str) -> Option<&'a str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn diff_previews_what_applying_a_file_does_changes_nothing_and_the_operator_then_does_it() {
    let hub = Hub::new("preview").await;
    let ns = unique("pv");
    let before = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![
                chart("deployment-example", "web", &[("replicaCount", "1")]),
                chart("deployment-example", "keep", &[]),
                chart("statefulset-example", "db", &[]),
            ],
        )],
        ..Default::default()
    };
    hub.apply("app", before).await;
    hub.releases_become("member-1", &ns, &[("web", 1), ("keep", 1), ("db", 1)])
        .await;
    let file = ControllerSpec {
        tenancies: vec![
            tenancy(
                &ns,
                &["member-1"],
                vec![
                    chart("deployment-example", "web", &[("replicaCount", "2")]),
                    chart("deployment-example", "keep", &[]),
                    chart("deployment-example", "extra", &[]),
                ],
            ),
            tenancy(
                &ns,
                &["member-2"],
                vec![chart("no-such-chart", "ghost", &[])],
            ),
        ],
        ..Default::default()
    };
    // The operator keeps writing the status; the spec and its generation are what diff could change.
    let hub_version = |c: TenancyController| (c.metadata.generation, c.spec);
    let controller_before = hub_version(hub.api().get("app").await.unwrap());
    let world_before = (state(&hub, "member-1", &ns), state(&hub, "member-2", &ns));

    let (code, entries, stderr) = diff(&hub, "app", &file);

    assert_eq!(code, 1, "something would change: {entries:?}\n{stderr}");
    let expected: BTreeMap<String, String> = [
        ("db", "uninstall"),
        ("extra", "install"),
        ("keep", "unchanged"),
        ("web", "upgrade"),
    ]
    .map(|(r, a)| (r.to_owned(), a.to_owned()))
    .into();
    assert_eq!(actions(&entries, "member-1", &ns), expected);
    assert_eq!(actions(&entries, "member-2", &ns)["ghost"], "refused");
    assert!(
        entry(&entries, "ghost")["reason"]
            .as_str()
            .unwrap()
            .contains("no-such-chart")
    );
    let web = entry(&entries, "web")["diff"].as_str().unwrap();
    assert!(
        web.contains("\n-  replicas: 1\n") && web.contains("\n+  replicas: 2\n"),
        "{web}"
    );
    assert!(
        entry(&entries, "extra")["diff"]
            .as_str()
            .unwrap()
            .contains("+kind: Deployment")
    );
    assert!(
        entry(&entries, "db")["diff"]
            .as_str()
            .unwrap()
            .contains("-kind: StatefulSet")
    );
    assert!(entry(&entries, "keep").get("diff").is_none());
    assert!(stderr.contains("Reading the releases of cluster member-1"));
    assert_eq!(
        (state(&hub, "member-1", &ns), state(&hub, "member-2", &ns)),
        world_before,
        "diff changed something in a cluster"
    );
    assert_eq!(
        hub_version(hub.api().get("app").await.unwrap()),
        controller_before
    );

    // What diff said is what the operator does.
    hub.apply("app", file.clone()).await;
    hub.releases_become("member-1", &ns, &[("web", 2), ("keep", 1), ("extra", 1)])
        .await;
    assert!(hub.lab.releases("member-2", &ns).is_empty());

    // Once applied (without the refused tenancy), the same file changes nothing: exit code 0.
    let mut valid = file;
    valid.tenancies.pop();
    hub.apply("app", valid.clone()).await;
    let (code, entries, stderr) = diff(&hub, "app", &valid);
    assert_eq!(code, 0, "{entries:?}\n{stderr}");
    assert!(
        entries.iter().all(|e| e["action"] == "unchanged"),
        "{entries:?}"
    );
    hub.delete_and_wait_gone("app").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_suspended_controller_makes_no_helm_call_until_resumed_and_deleted_leaves_its_release() {
    let hub = Hub::new("suspend").await;
    let ns = unique("sus");
    let spec = |replicas: &str, suspend: bool| ControllerSpec {
        suspend,
        ..common::fixtures::web(&ns, &["member-1"], replicas)
    };
    hub.apply("app", spec("1", false)).await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;

    // A change while suspended: reported as held back, and no helm call (revision 1 stays).
    hub.apply("app", spec("2", true)).await;
    let generation = hub.api().get("app").await.unwrap().metadata.generation;
    let status = hub
        .status_until("app", "the change to be held back", |s| {
            s.observed_generation == generation
                && condition(s, "Suspended") == Some("True")
                && s.updated_tenancies
                    .iter()
                    .flat_map(|t| &t.chart_messages)
                    .any(|m| m.phase == "Suspended")
        })
        .await;
    assert_eq!(condition(&status, "Ready"), Some("False"));
    assert_eq!(hub.lab.releases("member-1", &ns)["web"].0, 1);
    let (code, entries, _) = diff(&hub, "app", &spec("2", true));
    assert_eq!(
        code, 0,
        "a suspended change makes no helm call: {entries:?}"
    );
    assert!(
        entry(&entries, "web")["reason"]
            .as_str()
            .unwrap()
            .contains("suspended")
    );

    // Resuming delivers the newest spec.
    hub.apply("app", spec("3", false)).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    assert_eq!(hub.lab.values("member-1", &ns, "web")["replicaCount"], 3);
    hub.status_until("app", "Suspended to be False", |s| {
        condition(s, "Suspended") == Some("False")
    })
    .await;

    // Deleting a suspended Controller makes no helm call: the release stays.
    hub.apply("app", spec("3", true)).await;
    let generation = hub.api().get("app").await.unwrap().metadata.generation;
    hub.status_until("app", "the suspension to be seen", |s| {
        s.observed_generation == generation
    })
    .await;
    hub.delete_and_wait_gone("app").await;
    assert_eq!(hub.lab.releases("member-1", &ns)["web"].0, 2);
    wait_until("the test's release to be removed", DEADLINE, || async {
        hub.lab
            .try_helm("member-1", &["uninstall", "web", "-n", &ns])
            .ok()
    })
    .await;
}
