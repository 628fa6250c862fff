//! End-to-end tests of the live picture: watchers per cluster/namespace and the aggregated status.

mod common;

use std::time::{Duration, Instant};

use common::{
    fixtures::{
        DEADLINE, SEED, chart, create_seed, entry, ready, tenancy, unique, wait_until, web,
    },
    hub::{Hub, READER, create_namespace, reader_token},
    operator::Operator,
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
    let (code, body) = op_b.get_as("/api/v1/clusters/member-1", &token_b);
    assert_eq!(code, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        detail["namespaces"][0]["namespace"],
        ns_b.as_str(),
        "{detail}"
    );
    // A cluster no Controller A may read targets answers as one that is not registered.
    let (code, hidden) = op_b.get_as("/api/v1/clusters/member-1", &token_a);
    let (unknown_code, unknown) = op_b.get_as("/api/v1/clusters/no-such-cluster", &token_a);
    assert_eq!((code, unknown_code), (404, 404), "{hidden}");
    assert_eq!(hidden.replace("member-1", "no-such-cluster"), unknown);
    // The list shows each caller the clusters its Controllers target, and no other.
    assert_eq!(cluster_names(op_b, &token_a), Vec::<String>::new());
    assert_eq!(cluster_names(op_b, &token_b), ["member-1"]);
    assert_eq!(cluster_names(op_a, &token_a), ["member-1"]);

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

/// The clusters `/api/v1/clusters` lists for `token`.
fn cluster_names(op: &Operator, token: &str) -> Vec<String> {
    let (code, body) = op.get_as("/api/v1/clusters", token);
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The operator's count of reviews of `kind` asked of the hub.
fn reviews(op: &Operator, kind: &str) -> f64 {
    op.metric(&format!(
        "tenancy_hub_status_api_reviews_total{{kind=\"{kind}\"}}"
    ))
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_flood_of_calls_from_one_token_costs_the_hub_a_few_reviews_and_others_are_answered() {
    let hub = Hub::new("review-flood").await;
    let ns = unique("review-flood");
    hub.apply("web", web(&ns, &["member-1"], "1")).await;
    let op = hub.operator.as_ref().unwrap();
    let token = hub.reader_token().await;
    wait_until("the reader to see its cluster", DEADLINE, || async {
        (cluster_names(op, &token) == ["member-1"]).then_some(())
    })
    .await;
    // A fresh token of the same account is a caller the operator knows nothing of (its
    // credential differs); another team's reader, one that may read none of these Controllers.
    let flood = hub
        .lab
        .kubectl("hub", &["create", "token", READER, "-n", &hub.namespace])
        .trim()
        .to_owned();
    let other_ns = unique("review-other");
    create_namespace(&hub.client, &other_ns).await;
    let other = reader_token(&hub.lab, &hub.client, &other_ns).await;
    let (sars, tokens) = (
        reviews(op, "SubjectAccessReview"),
        reviews(op, "TokenReview"),
    );
    let started = Instant::now();
    let answers: Vec<(bool, u16, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..200)
            .map(|i| (i % 10 != 0, if i % 10 == 0 { &other } else { &flood }))
            .map(|(flooding, token)| {
                scope.spawn(move || {
                    let (code, body) = op.get_as("/api/v1/clusters", token);
                    (flooding, code, body)
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (flooding, code, body) in &answers {
        assert_eq!(*code, 200, "{body}");
        let expected = if *flooding {
            r#""name":"member-1""#
        } else {
            "[]"
        };
        assert!(body.contains(expected), "{flooding}: {body}");
    }
    // Each caller's questions were asked once, however many asked them at the same moment:
    // one TokenReview per token, a review cluster-wide and one of the hub namespace per caller.
    assert_eq!(reviews(op, "TokenReview") - tokens, 2.0);
    assert_eq!(reviews(op, "SubjectAccessReview") - sars, 4.0);
    eprintln!("200 concurrent calls answered in {:?}", started.elapsed());
    hub.delete_and_wait_gone("web").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_slow_client_is_cut_off_and_connections_past_the_cap_are_closed_at_once() {
    use std::io::{Read, Write};
    const CAP: usize = 256;
    let hub = Hub::new("slow-headers").await;
    let op = hub.operator.as_ref().unwrap();
    let started = Instant::now();
    // A client sending its headers a line at a time, forever.
    let trickle = std::thread::spawn({
        let addr = op.http;
        move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            let at = Instant::now();
            while at.elapsed() < Duration::from_secs(60) {
                if s.write_all(b"X-Slow: 1\r\n").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200)); // the client's pace, not a wait
            }
            at.elapsed()
        }
    });
    // Clients holding every other slot with headers begun and never finished.
    let slow: Vec<std::net::TcpStream> = (0..CAP - 1)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(op.http).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // Past the cap, a connection is closed at once, with no answer.
    wait_until(
        "a connection past the cap to be closed",
        DEADLINE,
        || async {
            let mut s = std::net::TcpStream::connect(op.http).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut answer = Vec::new();
            let closed = match s.read_to_end(&mut answer) {
                Ok(_) => answer.is_empty(),
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            };
            closed.then_some(())
        },
    )
    .await;
    // Each slow client is cut off within the header timeout (10 s), and the server answers again.
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    let cut = started.elapsed();
    assert!(
        cut < Duration::from_secs(25),
        "the slow clients held on for {cut:?}"
    );
    let trickled = trickle.join().unwrap();
    assert!(
        trickled < Duration::from_secs(20),
        "the trickling client held on for {trickled:?}"
    );
    wait_until("health to be answered again", DEADLINE, || async {
        (op.get("/healthz").0 == 200).then_some(())
    })
    .await;
}
