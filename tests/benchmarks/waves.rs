//! The `waves` scenario: one release on every member of the lab, then a change rolled out in three
//! health-gated waves (a tenth of the members, then three tenths, then the rest), `maxUnavailable`
//! 25 %: the time from the change's apply to the rollout `Complete` and the Controller `Ready`, and
//! each wave's span (its first member given the change → its last member healthy), from the
//! rollout's own status.

use std::time::Instant;

use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use serde_json::{Value, json};
use tenancy_hub::api::crd::{ClusterSelector, ControllerStatus, Rollout, RolloutCluster, Wave};

use super::{
    Args, LONG, bench_identity, bench_operator,
    common::{
        fixtures::{ready, unique, wait_until, web},
        hub::Hub,
        lab::Lab,
    },
    progress, usage,
};

/// The label of each member's wave in the scenario's registration file.
const WAVE_LABEL: &str = "wave";

/// The wave (1, 2 or 3) of the `i`th of `n` members: a tenth (at least one), three tenths (at
/// least one), the rest.
fn wave_of(i: usize, n: usize) -> usize {
    let first = n.div_ceil(10).max(1);
    let second = (n * 3).div_ceil(10).max(1);
    if i < first {
        1
    } else if i < first + second {
        2
    } else {
        3
    }
}

/// Seconds since the epoch of an RFC 3339 time of the rollout's status.
fn seconds(at: Option<&String>) -> f64 {
    let at: Timestamp = at
        .expect("a time the rollout status sets")
        .parse()
        .expect("RFC 3339");
    at.as_millisecond() as f64 / 1000.0
}

/// The span of wave `wave`: its first member given the change → its last member healthy.
fn span(clusters: &[RolloutCluster], wave: i32) -> (f64, f64) {
    let of_wave = clusters.iter().filter(|c| c.wave == wave);
    let start = of_wave
        .clone()
        .map(|c| seconds(c.started_at.as_ref()))
        .fold(f64::INFINITY, f64::min);
    let end = of_wave
        .map(|c| seconds(c.healthy_at.as_ref()))
        .fold(f64::NEG_INFINITY, f64::max);
    (start, end)
}

/// A change across every member of the lab in three waves.
pub(crate) async fn waves(_a: &Args) -> Value {
    let lab = Lab::get();
    let members: Vec<String> = lab.contexts().into_iter().filter(|c| c != "hub").collect();
    let n = members.len();
    assert!(
        n >= 3,
        "the waves scenario needs at least three members: kind/up.sh --members 20"
    );
    let file = lab.dir.join(format!("{}.yaml", unique("waves")));
    let entries: String = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            format!(
                "  - {{name: {m}, context: {m}, kubeconfig: {}, labels: {{{WAVE_LABEL}: \"{}\"}}}}\n",
                lab.kubeconfig_path().display(),
                wave_of(i, n)
            )
        })
        .collect();
    std::fs::write(&file, format!("clusters:\n{entries}")).unwrap();
    let hub = Hub::without_operator(Lab::get(), unique("bench-wv")).await;
    let operator = bench_operator(&lab, &hub, &bench_identity(&lab), &file);
    let ns = unique("wv");
    let targets: Vec<&str> = members.iter().map(String::as_str).collect();
    let spec = |replicas: &str| {
        let mut spec = web(&ns, &targets, replicas);
        spec.rollout = Some(Rollout {
            max_unavailable: Some(IntOrString::String("25%".into())),
            waves: (1..=3)
                .map(|w| Wave {
                    cluster_selector: ClusterSelector {
                        match_labels: [(WAVE_LABEL.to_owned(), w.to_string())].into(),
                    },
                })
                .collect(),
            ..Rollout::default()
        });
        spec
    };
    let api = hub.api();
    let complete = |generation: i64| {
        let api = api.clone();
        async move {
            wait_until(
                "the rollout complete and the Controller Ready",
                LONG,
                || async {
                    let s: ControllerStatus = api.get("wv").await.ok()?.status?;
                    let r = s.rollout.as_ref()?;
                    if let Some(halt) = &r.halted {
                        panic!("the rollout halted: {halt:?}");
                    }
                    (r.generation == generation && r.phase == "Complete" && ready(&s)).then_some(s)
                },
            )
            .await
        }
    };
    progress(&format!("waves: one release on each of {n} members"));
    let installed = Instant::now();
    hub.apply("wv", spec("1")).await;
    complete(1).await;
    let install_seconds = installed.elapsed().as_secs_f64();

    progress(&format!(
        "waves: a change across {n} members in three waves"
    ));
    let (_, _, cpu0) = usage(operator.pid());
    let started = Instant::now();
    hub.apply("wv", spec("2")).await;
    let status = complete(2).await;
    let took = started.elapsed().as_secs_f64();
    let (rss, _, cpu1) = usage(operator.pid());
    let rollout = status.rollout.expect("a rollout status");
    let clusters = &rollout.clusters;
    assert_eq!(clusters.len(), n, "every member in the rollout");
    let spans: Vec<(f64, f64)> = (1..=3).map(|w| span(clusters, w)).collect();
    // Between a wave's last member healthy and the next wave's first member given the change.
    let handoffs: Vec<f64> = spans.windows(2).map(|w| w[1].0 - w[0].1).collect();
    let sizes: Vec<usize> = (1..=3)
        .map(|w| clusters.iter().filter(|c| c.wave == w).count())
        .collect();
    hub.delete_and_wait_gone("wv").await;
    drop(operator);
    let _ = std::fs::remove_file(&file);
    json!({
        "members": n,
        "wave_members": sizes,
        "max_unavailable": "25%",
        "install_seconds": install_seconds,
        "rollout_seconds": took,
        "wave_seconds": spans.iter().map(|(s, e)| e - s).collect::<Vec<_>>(),
        "handoff_seconds": handoffs,
        "operator_cpu_seconds": cpu1 - cpu0,
        "operator_rss_kib": rss,
    })
}
