//! End-to-end tests of the live picture: watchers per cluster/namespace and the aggregated status.

mod common;

use std::time::{Duration, Instant};

use common::{
    fixtures::{
        DEADLINE, SEED, chart, create_seed, entry, ready, tenancy, unique, wait_until, web,
    },
    hub::Hub,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{DeleteParams, ListParams},
};
use tenancy_hub::api::crd::ControllerSpec;

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_seed_example_shows_its_running_pods_and_ready_workloads() {
    let hub = Hub::new("seed-status").await;
    create_seed(&hub.api()).await;
    let status = hub
        .status_until(SEED, "5 ready pods and ready workloads in hub/foo", |s| {
            ready(s)
                && entry(s, "hub", "foo").is_some_and(|t| {
                    t.pods_ready == 5
                        && t.replication_controller_status.len() == 2
                        && t.replication_controller_status
                            .iter()
                            .all(|w| w.ready.split_once('/').is_some_and(|(r, d)| r == d))
                })
        })
        .await;
    let foo = entry(&status, "hub", "foo").unwrap();
    assert!(foo.fresh);
    assert_eq!(foo.pods_total, 5);
    assert_eq!(
        foo.pod_status
            .iter()
            .filter(|p| p.phase == "Running" && p.ready)
            .count(),
        5
    );
    let workloads: Vec<(String, String, String)> = foo
        .replication_controller_status
        .iter()
        .map(|w| {
            (
                w.kind.clone(),
                w.replication_controller_name.clone(),
                w.ready.clone(),
            )
        })
        .collect();
    assert_eq!(
        workloads,
        [
            (
                "Deployment".to_string(),
                "foo".to_string(),
                "2/2".to_string()
            ),
            (
                "StatefulSet".to_string(),
                "nginx".to_string(),
                "3/3".to_string()
            )
        ]
    );
    assert_eq!(status.summary.as_ref().unwrap().pods, "5/5");
    assert_eq!(status.clusters[0].name, "hub");
    assert!(status.clusters[0].reachable);

    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
        .args([
            "status",
            SEED,
            "-n",
            &hub.namespace,
            "--context",
            "hub",
            "-o",
            "json",
        ])
        .arg("--kubeconfig")
        .arg(hub.lab.kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "status exits 0 when Ready: {}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    let tenancy = &shown[0]["tenancies"][0];
    assert_eq!(
        (tenancy["cluster"].as_str(), tenancy["podsReady"].as_i64()),
        (Some("hub"), Some(5)),
        "{shown}"
    );

    let (code, body) = hub.operator.as_ref().unwrap().get_as(
        "/api/v1/clusters/hub/namespaces/foo",
        &hub.reader_token().await,
    );
    assert_eq!(code, 200, "{body}");
    let scope: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(scope["pods"].as_array().map(Vec::len), Some(5), "{scope}");
    assert_eq!(scope["live"], true);
    hub.delete_and_wait_gone(SEED).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn scaling_pod_replacement_and_tenancy_removal_show_up_per_cluster() {
    let hub = Hub::new("live").await;
    let ns = unique("live");
    let spec = |replicas: &str, with_tenancy: bool| ControllerSpec {
        tenancies: if with_tenancy {
            vec![tenancy(
                &ns,
                &["member-1", "member-2"],
                vec![chart(
                    "deployment-example",
                    "web",
                    &[("replicaCount", replicas)],
                )],
            )]
        } else {
            vec![]
        },
        ..Default::default()
    };
    hub.apply("live", spec("1", true)).await;
    hub.status_until("live", "one ready pod on each member", |s| {
        ["member-1", "member-2"]
            .iter()
            .all(|c| entry(s, c, &ns).is_some_and(|t| t.fresh && t.pods_ready == 1))
    })
    .await;

    let scaled = Instant::now();
    hub.apply("live", spec("3", true)).await;
    hub.status_until("live", "three ready pods on each member", |s| {
        ["member-1", "member-2"]
            .iter()
            .all(|c| entry(s, c, &ns).is_some_and(|t| t.pods_ready == 3 && t.pods_total == 3))
    })
    .await;
    let took = scaled.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "scaling took {took:?} to show"
    );

    let pods: Api<Pod> = Api::namespaced(hub.lab.client("member-2").await, &ns);
    let victim = pods.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let status = hub
        .status_until(
            "live",
            "the deleted pod replaced in member-2's entry",
            |s| {
                entry(s, "member-2", &ns).is_some_and(|t| {
                    t.pods_ready == 3
                        && t.pods_total == 3
                        && t.pod_status.iter().all(|p| p.pod_name != victim)
                })
            },
        )
        .await;
    assert_eq!(entry(&status, "member-1", &ns).unwrap().pods_ready, 3);

    let operator = hub.operator.as_ref().unwrap();
    let token = hub.reader_token().await;
    assert_eq!(
        operator
            .get_as(
                &format!("/api/v1/clusters/member-1/namespaces/{ns}"),
                &token
            )
            .0,
        200
    );
    hub.apply("live", spec("3", false)).await;
    hub.status_until("live", "the tenancy's entries to go", |s| {
        s.updated_tenancies.is_empty()
    })
    .await;
    wait_until(
        "the watchers of the tenancy's namespaces to stop",
        DEADLINE,
        || async {
            let gone = ["member-1", "member-2"].iter().all(|c| {
                operator
                    .get_as(&format!("/api/v1/clusters/{c}/namespaces/{ns}"), &token)
                    .0
                    == 404
            });
            gone.then_some(())
        },
    )
    .await;

    assert_eq!(
        hub.log()
            .lines()
            .filter(|l| l.contains("stopped watching") && l.contains(&ns))
            .count(),
        2,
        "the namespace stopped being watched once per member"
    );
    hub.delete_and_wait_gone("live").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn five_hundred_pods_keep_the_status_small_and_the_writes_paced() {
    let hub = Hub::new("big").await;
    let ns = unique("big");
    let operator = hub.operator.as_ref().unwrap();
    let writes_before = operator.metric("tenancy_hub_status_writes_total");
    let started = Instant::now();
    hub.apply(
        "big",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1"],
                vec![chart(
                    "deployment-example",
                    "web",
                    &[("replicaCount", "500")],
                )],
            )],
            ..Default::default()
        },
    )
    .await;
    let status = hub
        .status_until("big", "500 ready pods", |s| {
            entry(s, "member-1", &ns).is_some_and(|t| t.pods_ready == 500)
        })
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let writes = operator.metric("tenancy_hub_status_writes_total") - writes_before;
    let events = operator.metric("tenancy_hub_watch_events_total");
    let size = serde_json::to_vec(&status).unwrap().len();
    eprintln!(
        "500 pods: {size} bytes of status, {writes} writes in {elapsed:.1}s, {events} watch events"
    );
    assert!(size < 256 * 1024, "status is {size} bytes");
    let t = entry(&status, "member-1", &ns).unwrap();
    assert_eq!(t.pods_total, 500);
    assert!(t.pod_status.len() <= tenancy_hub::status::build::POD_LIST_LIMIT);
    assert!(
        writes / elapsed <= 2.2,
        "{writes} status writes in {elapsed:.1}s"
    );
    assert!(
        events > 500.0,
        "every pod was seen through the watch ({events} events)"
    );
    hub.delete_and_wait_gone("big").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_token_sees_only_the_scopes_of_the_hub_namespaces_it_may_read() {
    // Two tenants, each with a hub namespace, a Controller delivering to member-1, an operator
    // of its own (the harness scopes each with --namespace) and a reader token of its own.
    let (a, b) = (Hub::new("auth-a").await, Hub::new("auth-b").await);
    let (ns_a, ns_b) = (unique("auth-a"), unique("auth-b"));
    a.apply("web", web(&ns_a, &["member-1"], "1")).await;
    b.apply("web", web(&ns_b, &["member-1"], "1")).await;
    let (token_a, token_b) = (a.reader_token().await, b.reader_token().await);
    let (op_a, op_b) = (a.operator.as_ref().unwrap(), b.operator.as_ref().unwrap());
    let scope_a = format!("/api/v1/clusters/member-1/namespaces/{ns_a}");
    let scope_b = format!("/api/v1/clusters/member-1/namespaces/{ns_b}");
    wait_until(
        "each tenant's token to see its own scope",
        DEADLINE,
        || async {
            let a_sees = op_a.get_as(&scope_a, &token_a);
            let b_sees = op_b.get_as(&scope_b, &token_b);
            (a_sees.0 == 200 && b_sees.0 == 200).then_some(())
        },
    )
    .await;
    let (_, body) = op_a.get_as(&scope_a, &token_a);
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["namespace"], ns_a.as_str(), "{view}");

    // A's token on B's operator: B's scope answers exactly as a namespace no one watches.
    let (code, hidden) = op_b.get_as(&scope_b, &token_a);
    let (unwatched_code, unwatched) = op_b.get_as(
        "/api/v1/clusters/member-1/namespaces/never-watched",
        &token_a,
    );
    assert_eq!((code, unwatched_code), (404, 404), "{hidden}");
    assert_eq!(hidden.replace(&ns_b, "never-watched"), unwatched);
    let namespaces_of = |token: &str| -> Vec<String> {
        let (code, body) = op_b.get_as("/api/v1/clusters/member-1", token);
        assert_eq!(code, 200, "{body}");
        let detail: serde_json::Value = serde_json::from_str(&body).unwrap();
        detail["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["namespace"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(namespaces_of(&token_a), Vec::<String>::new());
    assert_eq!(namespaces_of(&token_b), [ns_b.as_str()]);
    let member_1_count = |token: &str| {
        let (code, body) = op_b.get_as("/api/v1/clusters", token);
        assert_eq!(code, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // The hub and every member of the lab, however many it has, then any pull member
        // joined on the hub (another test's, while it runs).
        let contexts = a.lab.contexts();
        assert!(names.len() >= contexts.len(), "{names:?}");
        assert_eq!(names[..contexts.len()], contexts, "every cluster is listed");
        list[1]["namespaces"].as_u64().unwrap()
    };
    assert_eq!((member_1_count(&token_a), member_1_count(&token_b)), (0, 1));

    // No token, or one the hub rejects: 401 with a JSON error. Health and metrics stay open.
    for (code, body) in [
        op_a.get("/api/v1/clusters"),
        op_a.get_as(&scope_a, "not-a-token"),
    ] {
        assert_eq!(code, 401, "{body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].is_string(), "{error}");
    }
    assert_eq!(op_a.get("/metrics").0, 200);
    assert_eq!(op_a.get("/healthz").0, 200);
    assert!(
        !op_a.logged().contains(&token_a) && !op_b.logged().contains(&token_a),
        "a token reached a log"
    );

    a.delete_and_wait_gone("web").await;
    b.delete_and_wait_gone("web").await;
}
