//! Hostile tenants against the lab: a Controller over the size limit, one full of duplicates, a tenant whose jobs are slow; none of them blocks, starves or crashes another.

mod common;

use std::time::{Duration, Instant};

use common::{
    fixtures::{chart, tenancy, unique, wait_until},
    hub::{Hub, all_gone, create_namespace},
    lab::Lab,
    operator::Operator,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use tenancy_hub::api::crd::{Chart, ControllerSpec, ControllerStatus, TenancyController};

/// `tenancies` tenancies of `namespace` on the hub, each with releases r0 … r(charts-1): every
/// release is asked for `tenancies` times.
fn same_releases(namespace: &str, tenancies: usize, charts: usize) -> ControllerSpec {
    let charts: Vec<Chart> = (0..charts)
        .map(|i| chart("deployment-example", &format!("r{i}"), &[]))
        .collect();
    ControllerSpec {
        tenancies: (0..tenancies)
            .map(|_| tenancy(namespace, &[], charts.clone()))
            .collect(),
        ..Default::default()
    }
}

/// The resident memory of process `pid`, in MiB, from /proc.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib / 1024
}

fn condition<'a>(status: &'a ControllerStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| (c.reason.as_str(), c.message.as_str()))
}

/// The operator's resident memory stays under this while it plans a Controller of hundreds of
/// duplicates (one of 400 × 16 took it to 865 MiB before planning was linear; about 40 MiB idle).
const RSS_BOUND_MIB: u64 = 200;

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_controller_over_the_chart_limit_is_refused_by_the_api_server_naming_the_limit() {
    let hub = Hub::new("oversize").await;
    // 626 tenancies of 16 charts: 10,016 charts, each tenancy valid on its own.
    let spec = same_releases(&unique("big"), 626, 16);
    let c = TenancyController::new("big", spec);
    let err = hub
        .api()
        .patch(
            "big",
            &PatchParams::apply("tenancy-hub-tests").force(),
            &Patch::Apply(&c),
        )
        .await
        .expect_err("the API server refuses it");
    let text = err.to_string();
    assert!(
        text.contains("a Controller names at most 10000 charts over all its tenancies")
            && text.contains("split it into several Controllers"),
        "{text}"
    );
    // At the limit it is taken.
    hub.apply("at-limit", same_releases(&unique("big"), 625, 16))
        .await;
    hub.delete_and_wait_gone("at-limit").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn hundreds_of_duplicates_are_invalid_quickly_within_bounded_memory_while_another_delivers() {
    let hub = Hub::new("duplicates").await;
    let pid = hub.operator.as_ref().unwrap().pid();
    let before = rss_mib(pid);
    // 200 tenancies of the same 16 releases: each key asked for 200 times, 3,200 entries.
    hub.apply("hostile", same_releases(&unique("dup"), 200, 16))
        .await;
    let applied = Instant::now();
    let good_ns = unique("good");
    hub.apply(
        "good",
        ControllerSpec {
            tenancies: vec![tenancy(
                &good_ns,
                &["member-1"],
                vec![chart("deployment-example", "web", &[])],
            )],
            ..Default::default()
        },
    )
    .await;
    let mut peak = before;
    let api = hub.api();
    let status = wait_until(
        "the duplicates to be reported Invalid",
        Duration::from_secs(90),
        || {
            peak = peak.max(rss_mib(pid));
            let api = api.clone();
            async move {
                let status = api.get("hostile").await.ok()?.status?;
                let (reason, _) = condition(&status, "Stalled")?;
                (reason == "InvalidSpec").then_some(status)
            }
        },
    )
    .await;
    let invalid_after = applied.elapsed();
    let messages: Vec<&str> = status
        .updated_tenancies
        .iter()
        .flat_map(|t| &t.chart_messages)
        .map(|m| m.error_message.as_str())
        .collect();
    assert_eq!(messages.len(), 16, "one message per release key");
    for m in &messages {
        assert!(
            m.contains("asked for more than once in this Controller, by 200 entries")
                && m.contains("and 197 more")
                && m.len() < 600,
            "{m}"
        );
    }
    hub.releases_become("member-1", &good_ns, &[("web", 1)])
        .await;
    peak = peak.max(rss_mib(pid));
    eprintln!("operator RSS {before} MiB before, peak {peak} MiB; Invalid after {invalid_after:?}");
    assert!(
        peak < RSS_BOUND_MIB,
        "operator RSS peaked at {peak} MiB (bound {RSS_BOUND_MIB} MiB)"
    );
    // The operator plans it in well under a second; the rest is the hub writing a status to a
    // large object, which takes tens of seconds on a loaded machine.
    assert!(
        invalid_after < Duration::from_secs(60),
        "reported after {invalid_after:?}"
    );
    assert!(
        hub.lab
            .releases("hub", &unique_namespace(&status))
            .is_empty(),
        "no helm call for a duplicate"
    );
    hub.delete_and_wait_gone("hostile").await;
    hub.delete_and_wait_gone("good").await;
}

/// The namespace of the first entry of a status.
fn unique_namespace(status: &ControllerStatus) -> String {
    status.updated_tenancies[0].namespace.clone()
}

/// The label the slow-tenant test selects its Controllers by.
const TEST_LABEL: &str = "multitenancy.dev/test";

/// Server-side applies Controller `namespace/name` with `spec`, labelled `TEST_LABEL=id`.
async fn apply_labelled(hub: &Hub, namespace: &str, name: &str, id: &str, spec: ControllerSpec) {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some([(TEST_LABEL.to_owned(), id.to_owned())].into());
    hub.apply_in(namespace, &c).await;
}

/// How long each helm call of the slow-tenant test may take: its stuck releases hold a worker
/// this long.
const SLOW_HELM: Duration = Duration::from_secs(30);

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_slow_tenant_with_several_controllers_does_not_hold_back_another_tenants_release() {
    // Two tenants (hub namespaces) on one operator of two workers: by default each tenant may
    // run one job at a time, so the slow tenant's three Controllers hold one worker, not both.
    let id = unique("fair");
    let (slow, fast) = (format!("{id}-slow"), format!("{id}-fast"));
    let mut hub = Hub::without_operator(Lab::get(), slow.clone()).await;
    create_namespace(&hub.client, &fast).await;
    let selector = format!("{TEST_LABEL}={id}");
    let timeout = SLOW_HELM.as_secs().to_string();
    hub.operator = Some(Operator::start_with(
        &hub.lab,
        &slow,
        &[
            "--selector",
            &selector,
            "--lease-name",
            &id,
            "--workers",
            "2",
            "--helm-timeout",
            &timeout,
        ],
    ));
    // Pods that are never scheduled, with rollbackOnFailure: helm waits the whole timeout.
    let mut stuck = chart(
        "deployment-example",
        "stuck",
        &[("nodeSelector.nowhere", "yes")],
    );
    stuck.rollback_on_failure = true;
    let slow_namespaces: Vec<String> = (0..3).map(|i| format!("{id}-s{i}")).collect();
    for (i, ns) in slow_namespaces.iter().enumerate() {
        let spec = ControllerSpec {
            tenancies: vec![tenancy(ns, &["member-1"], vec![stuck.clone()])],
            ..Default::default()
        };
        apply_labelled(&hub, &slow, &format!("slow-{i}"), &id, spec).await;
    }
    wait_until(
        "a slow release to be installing",
        Duration::from_secs(30),
        || async {
            slow_namespaces
                .iter()
                .any(|ns| {
                    hub.lab
                        .releases("member-1", ns)
                        .values()
                        .any(|r| r.1 == "pending-install")
                })
                .then_some(())
        },
    )
    .await;
    let web_ns = format!("{id}-web");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &web_ns,
            &["member-1"],
            vec![chart("deployment-example", "web", &[])],
        )],
        ..Default::default()
    };
    let asked = Instant::now();
    apply_labelled(&hub, &fast, "fast", &id, spec).await;
    hub.releases_become("member-1", &web_ns, &[("web", 1)])
        .await;
    let delivered = asked.elapsed();
    eprintln!("the other tenant's release was delivered {delivered:?} after it was asked for");
    assert!(
        delivered < SLOW_HELM,
        "delivered after {delivered:?}, not before a slow job ended"
    );
    let pending = slow_namespaces
        .iter()
        .filter(|ns| {
            hub.lab
                .releases("member-1", ns)
                .values()
                .any(|r| r.1 == "pending-install")
        })
        .count();
    assert_eq!(
        pending, 1,
        "the slow tenant runs one job at a time, and one still waits on helm"
    );
    for (namespace, name) in [(&fast, "fast".to_owned())]
        .into_iter()
        .chain((0..3).map(|i| (&slow, format!("slow-{i}"))))
    {
        let api = Api::<TenancyController>::namespaced(hub.client.clone(), namespace);
        api.delete(&name, &Default::default()).await.unwrap();
    }
    for namespace in [&fast, &slow] {
        let api = Api::<TenancyController>::namespaced(hub.client.clone(), namespace);
        all_gone(&api, Duration::from_secs(90)).await;
    }
}
