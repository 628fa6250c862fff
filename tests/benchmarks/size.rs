//! The `size` scenario: plan time (the planner in process) and the operator's memory (on the lab) against the size of one Controller, with and without duplicates.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tenancy_hub::{
    api::{crd::ControllerSpec, key::ClusterName},
    plan::{ChartLookup, ChartSource, Inputs, OwnerId, Plan, fleet::Fleet, plan},
    policy::{
        Admission,
        access::{Credentials, Trust},
    },
};

use super::{
    Args,
    common::{
        fixtures::{chart, tenancy, unique, wait_until},
        hub::Hub,
    },
    median, progress, usage,
};

/// Charts per tenancy in the scenario's specs.
const PER_TENANCY: usize = 10;

/// A spec of `charts` charts on the hub, `PER_TENANCY` per tenancy: each tenancy its own
/// namespace, or, with `duplicates`, every tenancy the same namespace and releases, so each release
/// is asked for `charts / PER_TENANCY` times. Suspended, so the operator makes no helm call.
fn spec_of(charts: usize, duplicates: bool) -> ControllerSpec {
    let run = unique("size");
    let tenancies = (0..charts / PER_TENANCY)
        .map(|i| {
            let namespace = if duplicates {
                run.clone()
            } else {
                format!("{run}-{i}")
            };
            let charts = (0..PER_TENANCY)
                .map(|r| chart("deployment-example", &format!("r{r}"), &[]))
                .collect();
            tenancy(&namespace, &[], charts)
        })
        .collect();
    ControllerSpec {
        tenancies,
        suspend: true,
        ..Default::default()
    }
}

/// The median of five plans of `spec` in process, in milliseconds.
fn plan_ms(spec: &ControllerSpec) -> f64 {
    let clusters = BTreeMap::from([("hub".parse().unwrap(), BTreeMap::new())]);
    let owner = OwnerId {
        namespace: "bench".into(),
        name: "size".into(),
    };
    let times = plan_times(
        &owner,
        spec,
        &clusters,
        &Admission::permissive(),
        &tenancy_hub::plan::fleet::Fleet::none(),
        5,
        |_| {},
    );
    median(&times)
}

/// `runs` plans of `spec` for `owner` over `clusters` (every one synced, nothing applied, every
/// chart found), each timed in milliseconds; `each` sees every plan.
pub fn plan_times(
    owner: &OwnerId,
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    admission: &Admission,
    fleet: &Fleet<'_>,
    runs: usize,
    mut each: impl FnMut(&Plan),
) -> Vec<f64> {
    let synced: BTreeSet<_> = clusters.keys().cloned().collect();
    let found = |_: &ChartSource, _: &Credentials, _: &Trust, _: Option<&str>| ChartLookup::Found {
        verified: None,
        version: None,
        digest: None,
        commit: None,
    };
    let (applied, claims, drifted) = (HashMap::new(), HashMap::new(), HashMap::new());
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            let p = plan(&Inputs {
                owner,
                spec,
                clusters,
                synced: &synced,
                applied: &applied,
                claims: &claims,
                admission,
                chart_home: Path::new("/charts"),
                chart_lookup: &found,
                now: 0,
                pending_timeout_secs: 600,
                drifted: &drifted,
                fleet,
            });
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            each(&p);
            std::hint::black_box(p);
            elapsed
        })
        .collect()
}

/// A fresh operator given `spec`: its resident memory before (MiB), its peak once the status
/// reports the spec (MiB), and how long that took (seconds from the apply's answer).
async fn operator_memory(spec: ControllerSpec) -> (f64, f64, f64) {
    let hub = Hub::new("size").await;
    let pid = hub.operator.as_ref().unwrap().pid();
    let (before, _, _) = usage(pid);
    hub.apply("size", spec).await;
    let applied = Instant::now();
    let api = hub.api();
    wait_until(
        "the status to report the Controller",
        Duration::from_secs(600),
        || async {
            let status = api.get("size").await.ok()?.status?;
            (status.observed_generation == Some(1)).then_some(())
        },
    )
    .await;
    let reported = applied.elapsed().as_secs_f64();
    let (_, peak, _) = usage(pid);
    hub.delete_and_wait_gone("size").await;
    (before as f64 / 1024.0, peak as f64 / 1024.0, reported)
}

/// Plan time and operator memory for Controllers of `a.sizes` charts, without and with
/// duplicates, each with the figure per chart.
pub async fn size(a: &Args) -> Value {
    let mut points = Vec::new();
    for &charts in &a.sizes {
        for duplicates in [false, true] {
            progress(&format!("size: {charts} charts, duplicates {duplicates}"));
            let spec = spec_of(charts, duplicates);
            let plan = plan_ms(&spec);
            let (before, peak, reported) = operator_memory(spec).await;
            points.push(json!({
                "charts": charts,
                "duplicates": if duplicates { "yes" } else { "no" },
                "plan_ms": plan,
                "plan_us_per_chart": plan * 1000.0 / charts as f64,
                "rss_before_mib": before,
                "rss_peak_mib": peak,
                "rss_added_kib_per_chart": (peak - before) * 1024.0 / charts as f64,
                "status_reported_s": reported,
            }));
        }
    }
    json!({ "points": points })
}
