//! Benchmarks on the lab: convergence, status latency, write load, footprint, breadth, growth (namespaces, Controllers, clusters), shards, rollout, queue fairness, Controller size and a peer (Flux), as a table and JSON.
//!
//! Run with `kind/bench.sh` (it brings the lab up and builds in release mode), or on a running lab:
//! `TENANCY_HUB_LAB_DIR=.lab cargo bench --bench lab -- [--only NAME] [--json FILE] [--pods P]
//! [--namespaces 10,100,500] [--unrelated-pods N] [--controllers 10,100,1000]
//! [--clusters 1,5,10,20] [--quiet-seconds S] [--runs 3] [--shard-controllers 10] [--wave N] [--samples K]
//! [--sizes 100,1000,10000] [--readers 1,10,100] [--peer flux] [--peer-targets hub,member-1,member-2] [--peer-workers 4]
//! [--peer-setups flux,flux_shared,flux_wait] [--envelope 100,500,1000] [--envelope-replicas 1,2,4]
//! [--envelope-controllers 8] [--signed 1,10,30] [--view-clusters 1000] [--view-controllers 8]
//! [--view-streams 50] [--view-burst-seconds 30]`.
//! `TENANCY_HUB_OPERATOR=PATH` runs another build of the operator (a baseline) in every scenario.
//! The `rollout` scenario needs three members, `clusters` as many as its largest count
//! (`kind/up.sh --members 20`), `pull` as many pull members (`kind/up.sh --members 1 --pull-members 20`:
//! the hub's cost per pull member and a spec change's latency, pull against push); they, the other growth scenarios, `shards` and `fairness`
//! (`--wave N` installs, 1,000 by default, `--samples K` small changes, 5 by default) and `size`
//! (plan time and operator memory against one Controller of `--sizes` charts, with and without
//! duplicates) and `fleets` (plan time of 100 clusters × 10 charts with per-cluster values
//! against the same spec written out, and the hub's Secret requests for `--readers` Controllers
//! reading one Secret) run only when named in `--only`. So does `peer` (`--only peer --peer flux`, the convergence scenario's releases
//! from a loopback Helm repository, `--runs` times each side): it needs Flux's controllers, built by
//! kind/peer-flux.sh into the directory named by `TENANCY_HUB_FLUX_DIR` (kind/bench.sh does both).
//! So does `envelope` (`--only envelope --envelope 100,500,1000`): the hub with that many simulated
//! pull members against the real operator (any lab; the members are generated, see BENCHMARKS.md);
//! with `--envelope-replicas 1,2,4`, the same members again against 1, 2 and 4 replicas run as
//! that many shards, `--envelope-controllers 8` Controllers dividing the members between them.
//! So does `signed` (`--only signed --signed 1,10,30`): one cosign-signed OCI chart delivered to that
//! many namespaces of every cluster, `--runs` times under a policy asking the signature and as many
//! under one that does not, with the checks the operator ran.
//! So does `view` (`--only view --view-clusters 1000 --view-controllers 8 --view-streams 50`): the
//! fleet view against that many simulated pull members divided between that many Controllers
//! (the envelope's), its matrix's first render in headless Chromium, one live update, and the
//! operator's memory and CPU idle and over a burst of changes (`--view-burst-seconds`), without
//! views and with that many live streams open.

#[path = "../common/mod.rs"]
mod common;
mod envelope;
mod fleets;
mod flux;
mod procs;
mod pull;
mod signed;
mod size;
mod view;
mod waves;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use common::{
    fixtures::{DEADLINE, chart, entry, ready, spread, tenancy, unique, wait_until, web},
    hub::Hub,
    lab::Lab,
    operator::usage,
    repo::example_chart,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::{
    Api,
    api::DeleteParams,
    api::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use tenancy_hub::api::crd::{ControllerSpec, ControllerStatus, DeletionPolicy, TenancyController};
use tokio::sync::watch;

const LONG: Duration = Duration::from_secs(900);

struct Args {
    only: Option<String>,
    json: Option<String>,
    pods: usize,
    changes: usize,
    releases: usize,
    breadth: usize,
    namespaces: Vec<usize>,
    unrelated_pods: usize,
    controllers: Vec<usize>,
    wave: usize,
    samples: usize,
    clusters: Vec<usize>,
    quiet_seconds: u64,
    runs: usize,
    shard_controllers: usize,
    sizes: Vec<usize>,
    fleet_readers: Vec<usize>,
    peer: Option<String>,
    peer_targets: Vec<String>,
    peer_workers: usize,
    peer_setups: Vec<String>,
    envelope: Vec<usize>,
    envelope_replicas: Vec<usize>,
    envelope_controllers: usize,
    signed: Vec<usize>,
    view_clusters: usize,
    view_controllers: usize,
    view_streams: usize,
    view_burst_seconds: u64,
}

fn args() -> Args {
    let mut a = Args {
        only: None,
        json: None,
        pods: 3000,
        changes: 100,
        releases: 10,
        breadth: 21,
        namespaces: vec![10, 100, 500],
        unrelated_pods: 10_000,
        controllers: vec![10, 100, 1000],
        wave: 1000,
        samples: 5,
        clusters: vec![1, 5, 10, 20],
        quiet_seconds: 20,
        runs: 3,
        shard_controllers: 10,
        sizes: vec![100, 1000, 10_000],
        fleet_readers: vec![1, 10, 100],
        peer: None,
        peer_targets: CLUSTERS.map(String::from).to_vec(),
        peer_workers: 4,
        peer_setups: ["flux", "flux_shared", "flux_wait"]
            .map(String::from)
            .to_vec(),
        envelope: vec![100, 500, 1000],
        envelope_replicas: Vec::new(),
        envelope_controllers: 8,
        signed: vec![1, 10, 30],
        view_clusters: 1000,
        view_controllers: 8,
        view_streams: 50,
        view_burst_seconds: 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--only" => a.only = Some(value()),
            "--json" => a.json = Some(value()),
            "--pods" => a.pods = value().parse().expect("--pods N"),
            "--changes" => a.changes = value().parse().expect("--changes N"),
            "--releases" => a.releases = value().parse().expect("--releases N"),
            "--breadth" => a.breadth = value().parse().expect("--breadth N"),
            "--namespaces" => a.namespaces = counts(&flag, &value()),
            "--unrelated-pods" => a.unrelated_pods = value().parse().expect("--unrelated-pods N"),
            "--controllers" => a.controllers = counts(&flag, &value()),
            "--wave" => a.wave = value().parse().expect("--wave N"),
            "--samples" => a.samples = value().parse().expect("--samples K"),
            "--clusters" => a.clusters = counts(&flag, &value()),
            "--quiet-seconds" => a.quiet_seconds = value().parse().expect("--quiet-seconds S"),
            "--runs" => a.runs = value().parse().expect("--runs N"),
            "--shard-controllers" => {
                a.shard_controllers = value().parse().expect("--shard-controllers N")
            }
            "--sizes" => a.sizes = counts(&flag, &value()),
            "--readers" => a.fleet_readers = counts(&flag, &value()),
            "--peer" => a.peer = Some(value()),
            "--peer-targets" => a.peer_targets = names(&value()),
            "--peer-workers" => a.peer_workers = value().parse().expect("--peer-workers N"),
            "--peer-setups" => a.peer_setups = names(&value()),
            "--envelope" => a.envelope = counts(&flag, &value()),
            "--envelope-replicas" => a.envelope_replicas = counts(&flag, &value()),
            "--envelope-controllers" => {
                a.envelope_controllers = value().parse().expect("--envelope-controllers N")
            }
            "--signed" => a.signed = counts(&flag, &value()),
            "--view-clusters" => a.view_clusters = value().parse().expect("--view-clusters N"),
            "--view-controllers" => {
                a.view_controllers = value().parse().expect("--view-controllers N")
            }
            "--view-streams" => a.view_streams = value().parse().expect("--view-streams N"),
            "--view-burst-seconds" => {
                a.view_burst_seconds = value().parse().expect("--view-burst-seconds S")
            }
            "--bench" => {}
            other => panic!("unknown argument {other}; see the top of tests/benchmarks/lab.rs"),
        }
    }
    a
}

/// A comma-separated list of names, as `--peer-targets member-1` takes.
fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// A comma-separated list of counts, as `--namespaces 10,100,500` takes.
fn counts(flag: &str, list: &str) -> Vec<usize> {
    list.split(',')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("{flag} takes counts like 10,100,500, not {list:?}"))
        })
        .collect()
}

fn progress(msg: &str) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let since = START.get_or_init(Instant::now).elapsed();
    eprintln!("[bench {:>7.1}s] {msg}", since.as_secs_f64());
}

const CLUSTERS: [&str; 3] = ["hub", "member-1", "member-2"];

/// Busy and total CPU time of the whole machine so far, in ticks (from /proc/stat).
fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The share of the machine's CPU used between two readings of [`machine_cpu`].
fn busy_between(before: (u64, u64), after: (u64, u64)) -> f64 {
    (after.0 - before.0) as f64 / (after.1 - before.1).max(1) as f64
}

async fn operator_convergence(workers: &str, per_cluster: &str, releases: usize) -> (f64, f64) {
    let hub = Hub::with_args(
        "bench-cv",
        &["--workers", workers, "--per-cluster", per_cluster],
    )
    .await;
    let run = unique("cv");
    let total = releases * CLUSTERS.len();
    let cpu = machine_cpu();
    let started = Instant::now();
    let spec = spread(
        "app",
        (0..releases).map(|i| (format!("{run}-{i}"), CLUSTERS.to_vec())),
    );
    hub.apply("cv", spec).await;
    let want = format!("{total}/{total}");
    wait_until("every release deployed", LONG, || async {
        let c = hub.api().get("cv").await.ok()?;
        (c.status?.summary?.releases == want).then_some(())
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    let busy = busy_between(cpu, machine_cpu());
    hub.delete_and_wait_gone("cv").await;
    (took, busy)
}

fn raw_helm_convergence(lab: &Lab, releases: usize) -> (f64, f64) {
    let run = unique("raw");
    let chart = example_chart();
    let chart = chart.to_str().unwrap();
    let cpu = machine_cpu();
    let started = Instant::now();
    for i in 0..releases {
        for c in CLUSTERS {
            lab.helm(
                c,
                &[
                    "upgrade",
                    "--install",
                    "app",
                    chart,
                    "-n",
                    &format!("{run}-{i}"),
                    "--create-namespace",
                ],
            );
        }
    }
    let took = started.elapsed().as_secs_f64();
    let busy = busy_between(cpu, machine_cpu());
    for i in 0..releases {
        for c in CLUSTERS {
            lab.helm(c, &["uninstall", "app", "-n", &format!("{run}-{i}")]);
        }
    }
    (took, busy)
}

async fn convergence(a: &Args) -> Value {
    let lab = Lab::get();
    let total = a.releases * CLUSTERS.len();
    progress(&format!(
        "convergence: {total} releases by raw sequential helm"
    ));
    let (raw, raw_busy) = raw_helm_convergence(&lab, a.releases);
    progress("convergence: operator with 1 worker (the seed's sequential FIFO)");
    let (one, one_busy) = operator_convergence("1", "1", a.releases).await;
    progress("convergence: operator with the default 4 workers, 2 per cluster");
    let (four, four_busy) = operator_convergence("4", "2", a.releases).await;
    json!({
        "releases": a.releases, "clusters": CLUSTERS.len(), "total": total,
        "raw_helm_seconds": raw, "one_worker_seconds": one, "four_workers_seconds": four,
        "speedup_over_one_worker": one / four,
        "speedup_target": 0.8 * 4.0,
        "overhead_over_raw_helm": one / raw - 1.0,
        "machine_cpu_busy_raw_helm": raw_busy, "machine_cpu_busy_one_worker": one_busy,
        "machine_cpu_busy_four_workers": four_busy,
    })
}

/// Pod names in a member namespace, with readiness, updated by a watch; each change is timestamped.
fn member_pods(api: Api<Pod>) -> watch::Receiver<(Instant, BTreeMap<String, bool>)> {
    let (tx, rx) = watch::channel((Instant::now(), BTreeMap::new()));
    tokio::spawn(async move {
        let mut pods: BTreeMap<String, bool> = BTreeMap::new();
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let ready = tenancy_hub::observe::watch::pod_info(&p).ready;
                    pods.insert(p.metadata.name.unwrap_or_default(), ready);
                }
                watcher::Event::Delete(p) => {
                    pods.remove(&p.metadata.name.unwrap_or_default());
                }
                watcher::Event::Init => pods.clear(),
                watcher::Event::InitDone => {}
            }
            let _ = tx.send((Instant::now(), pods.clone()));
        }
    });
    rx
}

/// The resource's status, updated by a watch; each change is timestamped.
fn hub_status(
    api: Api<TenancyController>,
    name: &str,
) -> watch::Receiver<(Instant, ControllerStatus)> {
    let (tx, rx) = watch::channel((Instant::now(), ControllerStatus::default()));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(c)) = events.next().await {
            let _ = tx.send((Instant::now(), c.status.unwrap_or_default()));
        }
    });
    rx
}

async fn when<T: Clone>(
    rx: &mut watch::Receiver<(Instant, T)>,
    what: &str,
    pred: impl Fn(&T) -> bool,
) -> Instant {
    when_within(rx, what, Duration::from_secs(60), pred).await
}

async fn when_within<T: Clone>(
    rx: &mut watch::Receiver<(Instant, T)>,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&T) -> bool,
) -> Instant {
    let got = tokio::time::timeout(timeout, rx.wait_for(|(_, v)| pred(v)))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the watch runs");
    got.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn latency(a: &Args) -> Value {
    let hub = Hub::with_args("bench-lat", &[]).await;
    let ns = unique("lat");
    hub.apply("lat", web(&ns, &["member-1"], "3")).await;
    hub.status_until("lat", "3 ready pods", |s| {
        entry(s, "member-1", &ns).is_some_and(|t| t.pods_ready == 3)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(hub.lab.client("member-1").await, &ns);
    let mut member = member_pods(pods.clone());
    let mut status = hub_status(hub.api(), "lat");
    let operator = hub.operator.as_ref().unwrap();
    let (events0, writes0) = (
        operator.metric("tenancy_hub_watch_events_total"),
        operator.metric("tenancy_hub_status_writes_total"),
    );
    let churn = Instant::now();
    let listed = |s: &ControllerStatus| -> BTreeMap<String, bool> {
        entry(s, "member-1", &ns)
            .map(|t| {
                t.pod_status
                    .iter()
                    .map(|p| (p.pod_name.clone(), p.ready))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut samples = Vec::new();
    progress(&format!(
        "latency: {} pod deletions and replacements on member-1",
        a.changes
    ));
    for _ in 0..a.changes {
        when(&mut member, "3 ready pods in member-1", |p| {
            p.values().filter(|r| **r).count() == 3
        })
        .await;
        when(&mut status, "3 ready pods in status", |s| {
            listed(s).values().filter(|r| **r).count() == 3
        })
        .await;
        let victim = member.borrow().1.keys().next().cloned().unwrap();
        pods.delete(&victim, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        let gone = when(&mut member, "the deleted pod to leave member-1", |p| {
            !p.contains_key(&victim)
        })
        .await;
        let shown = when(&mut status, "the deleted pod to leave the status", |s| {
            !listed(s).contains_key(&victim)
        })
        .await;
        samples.push(shown.saturating_duration_since(gone).as_secs_f64());
        let up = when(
            &mut member,
            "the replacement to be ready in member-1",
            |p| p.values().filter(|r| **r).count() == 3,
        )
        .await;
        let shown = when(
            &mut status,
            "the replacement to be ready in the status",
            |s| listed(s).values().filter(|r| **r).count() == 3,
        )
        .await;
        samples.push(shown.saturating_duration_since(up).as_secs_f64());
    }
    let seconds = churn.elapsed().as_secs_f64();
    let events = operator.metric("tenancy_hub_watch_events_total") - events0;
    let writes = operator.metric("tenancy_hub_status_writes_total") - writes0;
    samples.sort_by(|x, y| x.total_cmp(y));
    hub.delete_and_wait_gone("lat").await;
    json!({
        "changes": samples.len(),
        "p50_seconds": percentile(&samples, 0.5), "p95_seconds": percentile(&samples, 0.95),
        "p99_seconds": percentile(&samples, 0.99), "max_seconds": samples[samples.len() - 1],
        "churn_seconds": seconds, "watch_events_per_second": events / seconds,
        "status_writes_per_second": writes / seconds,
    })
}

/// Resident set now, peak resident set (both KiB) and CPU seconds used, from /proc.
async fn cpu_over(pid: u32, window: Duration) -> f64 {
    let (_, _, before) = usage(pid);
    tokio::time::sleep(window).await; // a measurement window, not a wait for a condition
    let (_, _, after) = usage(pid);
    (after - before) / window.as_secs_f64()
}

async fn footprint(a: &Args) -> Value {
    let hub = Hub::with_args("bench-fp", &[]).await;
    let operator = hub.operator.as_ref().unwrap();
    let pid = operator.pid();
    let idle_cpu = cpu_over(pid, Duration::from_secs(5)).await;
    let (idle_rss, _, _) = usage(pid);
    let ns = unique("fp");
    let pods = a.pods.to_string();
    hub.apply("fp", web(&ns, &CLUSTERS, &pods)).await;
    progress(&format!(
        "footprint: {} × {} kwok pods",
        CLUSTERS.len(),
        a.pods
    ));
    let (events0, writes0, cpu0) = (
        operator.metric("tenancy_hub_watch_events_total"),
        operator.metric("tenancy_hub_status_writes_total"),
        usage(pid).2,
    );
    let started = Instant::now();
    let mut peak_sampled = 0;
    loop {
        let s = hub
            .api()
            .get("fp")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        peak_sampled = peak_sampled.max(usage(pid).0);
        let done = CLUSTERS
            .iter()
            .all(|c| entry(&s, c, &ns).is_some_and(|t| t.pods_ready as usize == a.pods));
        if done {
            break;
        }
        assert!(
            started.elapsed() < LONG,
            "{} pods per cluster were not ready in time",
            a.pods
        );
        tokio::time::sleep(Duration::from_millis(500)).await; // sampling interval of RSS
    }
    let churn = started.elapsed().as_secs_f64();
    let events = operator.metric("tenancy_hub_watch_events_total") - events0;
    let writes = operator.metric("tenancy_hub_status_writes_total") - writes0;
    let churn_cpu = (usage(pid).2 - cpu0) / churn;
    let steady_cpu = cpu_over(pid, Duration::from_secs(10)).await;
    let (steady_rss, peak_rss, _) = usage(pid);
    let status = hub
        .api()
        .get("fp")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let bytes = serde_json::to_vec(&status).unwrap().len();
    hub.delete_and_wait_gone("fp").await;
    json!({
        "clusters": CLUSTERS.len(), "pods_per_cluster": a.pods,
        "idle_rss_mib": idle_rss as f64 / 1024.0, "steady_rss_mib": steady_rss as f64 / 1024.0,
        "peak_rss_mib": peak_rss.max(peak_sampled) as f64 / 1024.0,
        "idle_cpu_cores": idle_cpu, "churn_cpu_cores": churn_cpu, "steady_cpu_cores": steady_cpu,
        "churn_seconds": churn, "watch_events_per_second": events / churn,
        "status_writes_per_second": writes / churn, "status_bytes": bytes,
    })
}

/// Growth in the number of Controllers: for each count K, K suspended Controllers (planned and
/// reported, no Helm call) each naming one release on the hub are created with no operator
/// running; then an operator starts, lists them and reconciles every one (a forced "reconcile
/// everything", as after a restart or failover). Measured: the time and operator CPU seconds until
/// each is reconciled, the CPU share over a quiet window after, RSS, and the status writes to the hub.
async fn controllers(a: &Args) -> Value {
    let lab = Lab::get();
    // The operator runs as the bench account, so the hub counts its requests apart.
    let kubeconfig = bench_identity(&lab);
    let admin = lab.client("hub").await;
    let mut points = Vec::new();
    for &k in &a.controllers {
        let hub = Hub::without_operator(Lab::get(), unique("bench-ctl")).await;
        progress(&format!("controllers: creating {k} suspended Controllers"));
        for i in 0..k {
            let mut spec = web(&format!("ctl-{i}"), &["hub"], "1");
            spec.suspend = true;
            hub.apply(&format!("c{i}"), spec).await;
        }
        let requests0 = hub_requests(&admin).await;
        let operator = common::operator::Operator::start_with(
            &lab,
            &hub.namespace,
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
        );
        let pid = operator.pid();
        let started = Instant::now();
        let cpu0 = usage(pid).2;
        let reconciled = || operator.metric("tenancy_hub_reconciles_total");
        // Each Controller is reconciled twice on start: the finalizer is added, then it is planned.
        wait_until("every Controller reconciled", LONG, || async {
            (reconciled() >= 2.0 * k as f64).then_some(())
        })
        .await;
        let all_seconds = started.elapsed().as_secs_f64();
        let all_cpu = usage(pid).2 - cpu0;
        // Every status written: the requests of a start are all in.
        wait_until("every Controller's status written", LONG, || async {
            (operator.metric("tenancy_hub_status_writes_total") >= k as f64).then_some(())
        })
        .await;
        let requests1 = hub_requests(&admin).await;
        let quiet = Duration::from_secs(a.quiet_seconds);
        let quiet_cpu = cpu_over(pid, quiet).await;
        let requests2 = hub_requests(&admin).await;
        let (rss, peak, _) = usage(pid);
        let point = json!({
            "controllers": k,
            "all_seconds": all_seconds,
            "all_cpu_seconds": all_cpu,
            "cpu_ms_per_reconcile": all_cpu * 1000.0 / reconciled(),
            "quiet_cpu_cores": quiet_cpu,
            "rss_mib": rss as f64 / 1024.0,
            "peak_rss_mib": peak as f64 / 1024.0,
            "status_writes": operator.metric("tenancy_hub_status_writes_total"),
            "hub_requests_to_start": requests1 - requests0,
            "hub_requests_per_controller": (requests1 - requests0) / k as f64,
            "hub_requests_per_minute_quiet": (requests2 - requests1) * 60.0 / quiet.as_secs_f64(),
        });
        progress(&format!("controllers: {k}: {point}"));
        points.push(point);
        // The operator removes the finalizers, then stops.
        delete_every_controller(&lab, &hub).await;
        operator.stop();
    }
    fitted(
        points,
        "controllers",
        &[
            "rss_mib",
            "all_cpu_seconds",
            "cpu_ms_per_reconcile",
            "hub_requests_to_start",
            "hub_requests_per_minute_quiet",
        ],
        10_000.0,
    )
}

/// What one relist of a member's Helm release records downloads, with the selectors before and
/// after the narrowed metadata watches: `--releases` releases of ours and as many of others in one
/// namespace of member-1, each upgraded to 3 revisions by helm itself. Bytes are the JSON of the
/// list as received (re-encoded), so they compare selectors, not transports.
async fn records(a: &Args) -> Value {
    use kube::api::ListParams;
    use tenancy_hub::observe::records::{FOREIGN_SELECTOR, MANAGED_SELECTOR};
    let lab = Lab::get();
    let ns = unique("rec");
    let chart =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    let chart = chart.to_str().unwrap();
    let n = a.releases;
    progress(&format!(
        "records: {n} releases of ours and {n} of others, 3 revisions each, on member-1"
    ));
    for revision in 1..=3 {
        for i in 0..n {
            for (name, labels) in [
                (
                    format!("ours-{i}"),
                    "multitenancy.dev/managed-by=tenancy-hub",
                ),
                (format!("theirs-{i}"), "team=other"),
            ] {
                let replicas = format!("replicaCount={revision}");
                lab.helm(
                    "member-1",
                    &[
                        "upgrade",
                        "--install",
                        "--create-namespace",
                        "-n",
                        &ns,
                        "--labels",
                        labels,
                        "--set",
                        &replicas,
                        &name,
                        chart,
                    ],
                );
            }
        }
    }
    let client = lab.client("member-1").await;
    let secrets: Api<Secret> = Api::all(client);
    let mut out = serde_json::Map::new();
    let full = secrets
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap();
    let record = |figure: &str, items: usize, json: Vec<u8>, out: &mut serde_json::Map<_, _>| {
        out.insert(format!("{figure}_items"), json!(items));
        out.insert(format!("{figure}_bytes"), json!(json.len()));
    };
    record(
        "full_secrets",
        full.items.len(),
        serde_json::to_vec(&full).unwrap(),
        &mut out,
    );
    for (figure, selector) in [
        ("metadata_owner_helm", "owner=helm"),
        ("metadata_ours_newest", MANAGED_SELECTOR),
        ("metadata_others_newest", FOREIGN_SELECTOR),
    ] {
        let list = secrets
            .list_metadata(&ListParams::default().labels(selector))
            .await
            .unwrap();
        record(
            figure,
            list.items.len(),
            serde_json::to_vec(&list).unwrap(),
            &mut out,
        );
    }
    lab.kubectl("member-1", &["delete", "namespace", "--wait=false", &ns]);
    progress(&format!("records: {}", Value::Object(out.clone())));
    Value::Object(out)
}

/// Least squares of `y = a + b·x` over `points`: (a, b, r²).
fn linear_fit(points: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        1.0
    };
    (my - b * mx, b, r2)
}

/// Fits of one figure against `x`: linear (intercept, slope, r², value at `at`) and power law
/// `y = c·x^p` (p and r² of the log-log line; absent when a value is not positive), as JSON keys
/// prefixed with the figure's name.
fn fits(figure: &str, points: &[(f64, f64)], at: f64, out: &mut serde_json::Map<String, Value>) {
    let (a, b, r2) = linear_fit(points);
    out.insert(format!("{figure}_linear_intercept"), json!(a));
    out.insert(format!("{figure}_linear_slope"), json!(b));
    out.insert(format!("{figure}_linear_r2"), json!(r2));
    out.insert(format!("{figure}_linear_at_{at}"), json!(a + b * at));
    if points.iter().all(|p| p.0 > 0.0 && p.1 > 0.0) {
        let logs: Vec<(f64, f64)> = points.iter().map(|p| (p.0.ln(), p.1.ln())).collect();
        let (ln_c, p, r2) = linear_fit(&logs);
        out.insert(format!("{figure}_power_exponent"), json!(p));
        out.insert(format!("{figure}_power_r2"), json!(r2));
        out.insert(
            format!("{figure}_power_at_{at}"),
            json!(ln_c.exp() * at.powf(p)),
        );
    }
}

/// The points of a growth scenario and the fits (see [`fits`]) of each of `figures` against `x`,
/// extrapolated to `at`.
fn fitted(points: Vec<Value>, x: &str, figures: &[&str], at: f64) -> Value {
    let mut out = serde_json::Map::new();
    for figure in figures {
        let xy: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p[x].as_f64().unwrap(), p[*figure].as_f64().unwrap()))
            .collect();
        if xy.len() >= 2 {
            fits(figure, &xy, at, &mut out);
        }
    }
    out.insert("points".into(), Value::Array(points));
    Value::Object(out)
}

/// CPU seconds used by the reaped children of a process (helm, for the operator), from /proc.
fn children_cpu(pid: u32) -> f64 {
    common::operator::cpu_seconds(pid, 13)
}

/// The identity the `clusters` scenario gives its operators on the hub: a service account with
/// cluster-admin, matched by a FlowSchema of its own so the hub API server counts its requests.
const BENCH_ACCOUNT: &str = "tenancy-hub-bench";

/// Creates [`BENCH_ACCOUNT`] (in hub namespace `tenancy-hub`), its binding and FlowSchema, and
/// writes a kubeconfig whose context `hub` acts as it; returns the kubeconfig's path.
fn bench_identity(lab: &Lab) -> std::path::PathBuf {
    let manifest = lab.dir.join(format!("{BENCH_ACCOUNT}.yaml"));
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1
kind: ServiceAccount
metadata: {{name: {BENCH_ACCOUNT}, namespace: tenancy-hub}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {BENCH_ACCOUNT}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{kind: ServiceAccount, name: {BENCH_ACCOUNT}, namespace: tenancy-hub}}]
"
        ),
    )
    .unwrap();
    lab.kubectl("hub", &["apply", "-f", manifest.to_str().unwrap()]);
    let subject = format!(
        "        - {{kind: ServiceAccount, serviceAccount: {{name: {BENCH_ACCOUNT}, namespace: tenancy-hub}}}}\n"
    );
    common::envelope::flow_schema(lab, BENCH_ACCOUNT, "workload-high", 100, &subject);
    let token = lab.kubectl(
        "hub",
        &[
            "create",
            "token",
            BENCH_ACCOUNT,
            "-n",
            "tenancy-hub",
            "--duration",
            "12h",
        ],
    );
    let hub = lab
        .kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == "hub")
        .and_then(|c| c.cluster.clone())
        .expect("the lab's kubeconfig has cluster hub");
    let path = lab.dir.join(format!("{BENCH_ACCOUNT}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: hub, cluster: {{server: \"{}\", certificate-authority-data: {}}}}}]
users: [{{name: bench, user: {{token: {}}}}}]
contexts: [{{name: hub, context: {{cluster: hub, user: bench}}}}]
current-context: hub
",
            hub.server.unwrap(),
            hub.certificate_authority_data.unwrap(),
            token.trim()
        ),
    )
    .unwrap();
    path
}

/// Requests the hub API server has dispatched for [`BENCH_ACCOUNT`] so far (its FlowSchema's
/// `apiserver_flowcontrol_dispatched_requests_total`).
async fn hub_requests(hub: &kube::Client) -> f64 {
    common::envelope::dispatched(hub, BENCH_ACCOUNT).await
}

/// Growth in member clusters: for each count k, an operator registered with the first k members
/// of the lab and one Controller with one small release (`deployment-example`, 1 replica) on each.
/// Measured after convergence: RSS, CPU over a quiet window, CPU and time to converge (operator and
/// helm apart), open watch streams, and the hub API requests of the operator (counted by the hub
/// API server for the operator's own identity), with least-squares fits and their value at 1,000.
async fn clusters(a: &Args) -> Value {
    let lab = Lab::get();
    let members: Vec<String> = lab.contexts().into_iter().filter(|c| c != "hub").collect();
    let counts = counts_within(&a.clusters, members.len(), "members", "--members");
    let kubeconfig = bench_identity(&lab);
    let admin = lab.client("hub").await;
    let mut points = Vec::new();
    for &k in &counts {
        let names = &members[..k];
        let file = lab.dir.join(format!("{}.yaml", unique("clusters")));
        let entries: String = names
            .iter()
            .map(|n| {
                format!(
                    "  - {{name: {n}, context: {n}, kubeconfig: {}}}\n",
                    lab.kubeconfig_path().display()
                )
            })
            .collect();
        std::fs::write(&file, format!("clusters:\n{entries}")).unwrap();
        let hub = Hub::without_operator(Lab::get(), unique("bench-cl")).await;
        progress(&format!(
            "clusters: {k} member clusters, one release on each"
        ));
        let apiserver = lab.pid("hub-kube-apiserver");
        let (_, _, api0) = usage(apiserver);
        let requests0 = hub_requests(&admin).await;
        let started = Instant::now();
        let operator = bench_operator(&lab, &hub, &kubeconfig, &file);
        let pid = operator.pid();
        let ns = unique("cl");
        let targets: Vec<&str> = names.iter().map(String::as_str).collect();
        hub.apply("cl", web(&ns, &targets, "1")).await;
        let want = format!("{k}/{k}");
        wait_until("every release deployed and ready", LONG, || async {
            let s = hub.api().get("cl").await.ok()?.status?;
            (s.summary.as_ref()?.releases == want && ready(&s)).then_some(())
        })
        .await;
        let converge_seconds = started.elapsed().as_secs_f64();
        let (_, _, converge_cpu) = usage(pid);
        let helm_cpu = children_cpu(pid);
        // Helm's work with the long-lived executor: the operator's live and reaped children.
        let executor_cpu = procs::tree_cpu(pid) - converge_cpu;
        let (_, _, api1) = usage(apiserver);
        let requests1 = hub_requests(&admin).await;
        let quiet = Duration::from_secs(a.quiet_seconds);
        let quiet_cpu = cpu_over(pid, quiet).await;
        let (_, _, api2) = usage(apiserver);
        let requests2 = hub_requests(&admin).await;
        let (rss, peak, _) = usage(pid);
        let connections = procs::connections(pid, &lab);
        let point = json!({
            "clusters": k,
            "hub_apiserver_cpu_seconds_to_converge": api1 - api0,
            "quiet_hub_apiserver_cores": (api2 - api1) / quiet.as_secs_f64(),
            "hub_connections": connections.get("hub").copied().unwrap_or(0),
            "member_connections": connections.iter().filter(|(c, _)| *c != "hub").map(|(_, n)| n).sum::<usize>(),
            "converge_seconds": converge_seconds,
            "converge_cpu_seconds": converge_cpu,
            "helm_cpu_seconds": helm_cpu,
            "executor_cpu_seconds": executor_cpu,
            "quiet_cpu_cores": quiet_cpu,
            "rss_mib": rss as f64 / 1024.0,
            "peak_rss_mib": peak as f64 / 1024.0,
            "watch_streams": operator.metric("tenancy_hub_watch_streams"),
            "workload_streams": operator.metric("tenancy_hub_watch_streams{source=\"workloads\"}"),
            "record_streams": operator.metric("tenancy_hub_watch_streams{source=\"release_records\"}"),
            "hub_requests_to_converge": requests1 - requests0,
            "hub_requests_per_minute_quiet": (requests2 - requests1) * 60.0 / quiet.as_secs_f64(),
        });
        progress(&format!("clusters: {k}: {point}"));
        points.push(point);
        hub.delete_and_wait_gone("cl").await;
        operator.stop();
        std::fs::remove_file(&file).unwrap();
    }
    fitted(
        points,
        "clusters",
        &[
            "rss_mib",
            "converge_cpu_seconds",
            "helm_cpu_seconds",
            "executor_cpu_seconds",
            "quiet_cpu_cores",
            "watch_streams",
            "hub_requests_to_converge",
            "hub_requests_per_minute_quiet",
            "hub_apiserver_cpu_seconds_to_converge",
            "quiet_hub_apiserver_cores",
            "hub_connections",
            "member_connections",
        ],
        1000.0,
    )
}

/// The counts of `wanted` that the lab's `have` members (of the kind `what`) allow; a panic
/// saying how to start a lab with enough (kind/up.sh `flag` N) when none does.
fn counts_within(wanted: &[usize], have: usize, what: &str, flag: &str) -> Vec<usize> {
    let counts: Vec<usize> = wanted.iter().copied().filter(|k| *k <= have).collect();
    assert!(
        !counts.is_empty(),
        "the lab has {have} {what}; start one with kind/up.sh {flag} N"
    );
    counts
}

/// An operator for hub namespace `hub` acting as the benchmarks' counted identity (the
/// kubeconfig of [`bench_identity`]) with the registration file `clusters`.
fn bench_operator(
    lab: &Lab,
    hub: &Hub,
    kubeconfig: &std::path::Path,
    clusters: &std::path::Path,
) -> common::operator::Operator {
    common::operator::Operator::start_with(
        lab,
        &hub.namespace,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--clusters",
            clusters.to_str().unwrap(),
        ],
    )
}

/// The Lease base name of the `shards` scenario's replicas.
const SHARD_LEASE: &str = "bench-sh";

/// `n` Controller names of hub namespace `namespace`, as evenly split between two shards as
/// [`tenancy_hub::api::shard::shard_of`] allows (alternating, first come).
fn balanced(namespace: &str, n: usize) -> Vec<String> {
    let mut per_shard: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut i = 0;
    while per_shard.iter().map(Vec::len).sum::<usize>() < n {
        let name = format!("c{i}");
        let shard = tenancy_hub::api::shard::shard_of(namespace, &name, 2) as usize;
        if per_shard[shard].len() < n.div_ceil(2) {
            per_shard[shard].push(name);
        }
        i += 1;
    }
    per_shard.concat()
}

/// Who holds each Lease of `names` now (absent or empty holders left out).
async fn lease_holders(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    names: &[String],
) -> Vec<String> {
    let mut held = Vec::new();
    for name in names {
        if let Ok(Some(lease)) = leases.get_opt(name).await
            && let Some(holder) = lease.spec.and_then(|s| s.holder_identity)
            && !holder.is_empty()
        {
            held.push(holder);
        }
    }
    held
}

/// One wave on `shards` replicas run with `--leader-elect --shards <shards>`: the Controllers of
/// [`balanced`], each with one release on the hub and each member of [`CLUSTERS`], applied at
/// once once every shard is led by its own replica; timed until every release is deployed.
async fn shard_wave(shards: u32, controllers: usize) -> Value {
    let lab = Lab::get();
    let hub = Hub::without_operator(Lab::get(), unique("bench-sh")).await;
    let ns = hub.namespace.clone();
    let count = shards.to_string();
    let args = [
        "--leader-elect",
        "--lease-namespace",
        ns.as_str(),
        "--lease-name",
        SHARD_LEASE,
        "--shards",
        count.as_str(),
    ];
    let replicas: Vec<common::operator::Operator> = (0..shards)
        .map(|_| common::operator::Operator::start_with(&lab, &ns, &args))
        .collect();
    let leases = Api::namespaced(hub.client.clone(), &ns);
    let lease_names: Vec<String> = if shards == 1 {
        vec![SHARD_LEASE.to_owned()]
    } else {
        (0..shards)
            .map(|s| format!("{SHARD_LEASE}-shard-{s}-of-{shards}"))
            .collect()
    };
    wait_until("every shard led, each by its own replica", LONG, || async {
        let held = lease_holders(&leases, &lease_names).await;
        let distinct: std::collections::BTreeSet<&String> = held.iter().collect();
        (held.len() == lease_names.len() && distinct.len() == lease_names.len()).then_some(())
    })
    .await;
    let names = balanced(&ns, controllers);
    let run = unique("sh");
    let pids: Vec<u32> = replicas.iter().map(|r| r.pid()).collect();
    let cpu = |pids: &[u32]| -> (f64, f64) {
        pids.iter()
            .map(|p| (usage(*p).2, children_cpu(*p)))
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let (own0, helm0) = cpu(&pids);
    let machine0 = machine_cpu();
    let started = Instant::now();
    for name in &names {
        hub.apply(name, web(&format!("{run}-{name}"), &CLUSTERS, "1"))
            .await;
    }
    let want = format!("{0}/{0}", CLUSTERS.len());
    wait_until("every release deployed", LONG, || async {
        let list = hub.api().list(&Default::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.summary.as_ref())
                    .is_some_and(|s| s.releases == want)
            })
            .count();
        (done == names.len()).then_some(())
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let busy = busy_between(machine0, machine_cpu());
    let (own1, helm1) = cpu(&pids);
    let releases = names.len() * CLUSTERS.len();
    progress(&format!(
        "shards: {shards}: {releases} releases in {seconds:.2}s, operator {:.2} CPU s, helm {:.2} CPU s",
        own1 - own0,
        helm1 - helm0
    ));
    delete_every_controller(&lab, &hub).await;
    drop(replicas);
    json!({
        "shards": shards, "releases": releases, "seconds": seconds,
        "releases_per_second": releases as f64 / seconds,
        "operator_cpu_seconds": own1 - own0, "helm_cpu_seconds": helm1 - helm0,
        "helm_cpu_seconds_per_release": (helm1 - helm0) / releases as f64,
        "machine_cpu_busy": busy,
    })
}

/// Throughput of 2 shards (two replicas) against 1 (one replica, same flags), on the same wave of
/// releases over the hub and two members, in alternating runs; medians of each figure.
async fn shards(a: &Args) -> Value {
    let mut runs: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    for run in 0..a.runs {
        for shards in [1, 2] {
            progress(&format!(
                "shards: run {}/{}, {shards} shard(s), {} Controllers × {} releases",
                run + 1,
                a.runs,
                a.shard_controllers,
                CLUSTERS.len()
            ));
            let wave = shard_wave(shards, a.shard_controllers).await;
            runs.entry(shards).or_default().push(wave);
        }
    }
    let mut out = serde_json::Map::new();
    for (shards, waves) in &runs {
        for figure in [
            "seconds",
            "releases_per_second",
            "operator_cpu_seconds",
            "helm_cpu_seconds",
            "helm_cpu_seconds_per_release",
            "machine_cpu_busy",
        ] {
            let values: Vec<f64> = waves.iter().map(|w| w[figure].as_f64().unwrap()).collect();
            out.insert(format!("s{shards}_median_{figure}"), json!(median(&values)));
        }
    }
    let speedup =
        out["s1_median_seconds"].as_f64().unwrap() / out["s2_median_seconds"].as_f64().unwrap();
    out.insert("speedup_of_2_over_1".into(), json!(speedup));
    out.insert(
        "runs".into(),
        Value::Array(runs.into_values().flatten().collect()),
    );
    Value::Object(out)
}

async fn breadth(a: &Args) -> Value {
    let lab = Lab::get();
    let names: Vec<String> = (1..=a.breadth).map(|i| format!("c{i:02}")).collect();
    let file = lab.dir.join(format!("{}.yaml", unique("breadth")));
    let k = lab.kubeconfig_path();
    let entries: String = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "  - {{name: {n}, context: {}, kubeconfig: {}}}\n",
                CLUSTERS[i % 3],
                k.display()
            )
        })
        .collect();
    std::fs::write(&file, format!("clusters:\n{entries}")).unwrap();
    let hub = Hub::with_args("bench-br", &["--clusters", file.to_str().unwrap()]).await;
    let run = unique("br");
    let spec = spread(
        "app",
        names
            .iter()
            .map(|n| (format!("{run}-{n}"), vec![n.as_str()])),
    );
    progress(&format!(
        "breadth: one release on each of {} registered clusters",
        names.len()
    ));
    let started = Instant::now();
    hub.apply("br", spec).await;
    let mut done: BTreeMap<String, f64> = BTreeMap::new();
    while done.len() < names.len() {
        let s = hub
            .api()
            .get("br")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        for t in &s.updated_tenancies {
            if t.chart_messages.iter().all(|m| m.phase == "Deployed")
                && !t.chart_messages.is_empty()
            {
                done.entry(t.cluster.clone())
                    .or_insert_with(|| started.elapsed().as_secs_f64());
            }
        }
        assert!(started.elapsed() < LONG, "breadth did not converge");
        tokio::time::sleep(Duration::from_millis(100)).await; // sampling interval of completion times
    }
    let total = started.elapsed().as_secs_f64();
    let mut times: Vec<f64> = done.values().copied().collect();
    times.sort_by(|x, y| x.total_cmp(y));
    let status_ready = ready(
        &hub.api()
            .get("br")
            .await
            .unwrap()
            .status
            .unwrap_or_default(),
    );
    hub.delete_and_wait_gone("br").await;
    std::fs::remove_file(&file).unwrap();
    json!({
        "clusters": names.len(), "seconds": total, "ready": status_ready,
        "first_cluster_seconds": times[0], "median_cluster_seconds": percentile(&times, 0.5),
        "last_cluster_seconds": times[times.len() - 1],
    })
}

/// A Controller, suspended (planned and watched, no helm call), with one release in each of
/// `namespaces` on member-1 and member-2.
fn suspended_over(namespaces: &[String]) -> tenancy_hub::api::crd::ControllerSpec {
    let mut spec = spread(
        "app",
        namespaces
            .iter()
            .map(|ns| (ns.clone(), vec!["member-1", "member-2"])),
    );
    spec.suspend = true;
    spec
}

/// Pods in a cluster, counted with a paginated metadata list.
async fn pod_count(api: &Api<Pod>) -> usize {
    let mut params = kube::api::ListParams::default().limit(500);
    let mut count = 0;
    loop {
        let page = api.list_metadata(&params).await.unwrap();
        count += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return count,
        }
    }
}

/// Watch streams and cost of watching: as tenant namespaces grow (10 -> 500 on two members),
/// then the relist a new namespace costs in a member holding many unrelated pods.
async fn namespaces(a: &Args) -> Value {
    let lab = Lab::get();
    // The operator runs as the bench account, so the hub counts its requests apart.
    let kubeconfig = bench_identity(&lab);
    let admin = lab.client("hub").await;
    let hub = Hub::with_args("bench-ns", &["--kubeconfig", kubeconfig.to_str().unwrap()]).await;
    let operator = hub.operator.as_ref().unwrap();
    let pid = operator.pid();
    let run = unique("ns");
    let mut points = Vec::new();
    for &n in &a.namespaces {
        let names: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
        progress(&format!("namespaces: {n} tenant namespaces on 2 members"));
        let cpu0 = usage(pid).2;
        let requests0 = hub_requests(&admin).await;
        let started = Instant::now();
        hub.apply("ns", suspended_over(&names)).await;
        wait_until("every namespace listed", LONG, || async {
            (operator.metric("tenancy_hub_watched_namespaces") as usize >= 2 * n).then_some(())
        })
        .await;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = usage(pid).2 - cpu0;
        let requests1 = hub_requests(&admin).await;
        let quiet = Duration::from_secs(a.quiet_seconds);
        let quiet_cpu = cpu_over(pid, quiet).await;
        let requests2 = hub_requests(&admin).await;
        let (rss, _, _) = usage(pid);
        points.push(json!({
            "namespaces": n, "watched": 2 * n,
            "workload_streams": operator.metric("tenancy_hub_watch_streams{source=\"workloads\"}"),
            "record_streams": operator.metric("tenancy_hub_watch_streams{source=\"release_records\"}"),
            "seconds_to_listed": seconds, "cpu_seconds": cpu, "rss_mib": rss as f64 / 1024.0,
            "hub_requests_to_listed": requests1 - requests0,
            "hub_requests_per_minute_quiet": (requests2 - requests1) * 60.0 / quiet.as_secs_f64(),
            "quiet_cpu_cores": quiet_cpu,
        }));
    }
    let widest = *a.namespaces.iter().max().unwrap_or(&10);
    let names: Vec<String> = (0..widest).map(|i| format!("{run}-{i}")).collect();

    // The trade-off: a member with many pods in namespaces no tenancy targets.
    let member = lab.client("member-1").await;
    let unrelated = unique("unrelated");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(member.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": unrelated}})).unwrap(),
        )
        .await
        .unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(member.clone(), &unrelated);
    let labels = json!({"app": "unrelated"});
    deployments
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "unrelated"},
                "spec": {"replicas": a.unrelated_pods, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "c", "image": "unrelated:1"}]}}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    progress(&format!(
        "namespaces: {} unrelated pods on member-1",
        a.unrelated_pods
    ));
    let all_pods: Api<Pod> = Api::all(member.clone());
    let in_unrelated: Api<Pod> = Api::namespaced(member.clone(), &unrelated);
    wait_until("the unrelated pods to exist", LONG, || async {
        (pod_count(&in_unrelated).await >= a.unrelated_pods).then_some(())
    })
    .await;
    let listed = Instant::now();
    let mut bytes = 0;
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        let page = all_pods.list(&params).await.unwrap();
        bytes += serde_json::to_vec(&page.items).unwrap().len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let list_seconds = listed.elapsed().as_secs_f64();
    let member_pods = pod_count(&all_pods).await;
    let (rss_before, _, cpu0) = usage(pid);
    let started = Instant::now();
    let mut wider = names.clone();
    wider.push(format!("{run}-added"));
    hub.apply("ns", suspended_over(&wider)).await;
    wait_until("the added namespace listed", LONG, || async {
        (operator.metric("tenancy_hub_watched_namespaces") as usize >= 2 * wider.len())
            .then_some(())
    })
    .await;
    let relist_seconds = started.elapsed().as_secs_f64();
    let (rss_after, _, cpu1) = usage(pid);
    hub.delete_and_wait_gone("ns").await;
    namespaces
        .delete(&unrelated, &DeleteParams::default())
        .await
        .unwrap();
    json!({
        "points": points,
        "member_pods": member_pods, "unrelated_pods": a.unrelated_pods,
        "pod_list_seconds": list_seconds, "pod_list_mib": bytes as f64 / 1048576.0,
        "namespace_added_seconds": relist_seconds, "namespace_added_cpu_seconds": cpu1 - cpu0,
        "rss_before_mib": rss_before as f64 / 1024.0, "rss_after_mib": rss_after as f64 / 1024.0,
    })
}

/// Deletes every Controller of the hub's namespace at once and waits until they are gone.
async fn delete_every_controller(lab: &Lab, hub: &Hub) {
    lab.kubectl(
        "hub",
        &[
            "delete",
            "controllers.multitenancy.dev",
            "--all",
            "-n",
            &hub.namespace,
            "--wait=false",
        ],
    );
    wait_until("every Controller gone", LONG, || async {
        hub.api()
            .list(&Default::default())
            .await
            .ok()
            .filter(|l| l.items.is_empty())
            .map(|_| ())
    })
    .await;
}

/// Whether Deployment `web` in `namespace` has rolled out `replicas` replicas, all ready.
async fn rolled_out(api: &Api<k8s_openapi::api::apps::v1::Deployment>, replicas: i32) -> bool {
    let Ok(Some(d)) = api.get_opt("web").await else {
        return false;
    };
    let (Some(spec), Some(status)) = (d.spec, d.status) else {
        return false;
    };
    spec.replicas == Some(replicas)
        && status.observed_generation >= d.metadata.generation
        && status.updated_replicas == Some(replicas)
        && status.ready_replicas == Some(replicas)
        && status.available_replicas == Some(replicas)
        && status.replicas == Some(replicas)
}

/// Raw helm, one member after the other, each step waiting until its Deployment has rolled out:
/// the floor of a health-gated rollout. Returns the seconds of each step.
async fn gated_steps_by_hand(lab: &Lab, members: &[String], namespace: &str) -> Vec<f64> {
    let chart = example_chart();
    let chart = chart.to_str().unwrap();
    let upgrade = |member: &str, replicas: &str| {
        lab.helm(
            member,
            &[
                "upgrade",
                "--install",
                "web",
                chart,
                "-n",
                namespace,
                "--create-namespace",
                "--set",
                &format!("replicaCount={replicas}"),
            ],
        );
    };
    for m in members {
        upgrade(m, "1");
    }
    let mut steps = Vec::new();
    for m in members {
        let api = Api::namespaced(lab.client(m).await, namespace);
        wait_until("the first release to roll out", LONG, || async {
            rolled_out(&api, 1).await.then_some(())
        })
        .await;
        let started = Instant::now();
        upgrade(m, "2");
        loop {
            if rolled_out(&api, 2).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        steps.push(started.elapsed().as_secs_f64());
    }
    for m in members {
        lab.helm(m, &["uninstall", "web", "-n", namespace]);
    }
    steps
}

/// A good change crossing three members one at a time (`maxUnavailable: 1`), against the floor:
/// the sum of the same three health-gated steps done by hand with helm.
async fn rollout(_a: &Args) -> Value {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use tenancy_hub::api::crd::Rollout;
    let lab = Lab::get();
    let members: Vec<String> = lab
        .contexts()
        .into_iter()
        .filter(|c| c != "hub")
        .take(3)
        .collect();
    assert!(
        members.len() == 3,
        "the rollout scenario needs 3 members: kind/up.sh --members 3"
    );
    progress("rollout: three health-gated steps by hand (the floor)");
    let steps = gated_steps_by_hand(&lab, &members, &unique("floor")).await;
    let floor: f64 = steps.iter().sum();

    progress("rollout: the operator, maxUnavailable 1");
    let hub = Hub::new("bench-ro").await;
    let ns = unique("ro");
    let targets: Vec<&str> = members.iter().map(String::as_str).collect();
    let spec = |replicas: &str| {
        let mut spec = web(&ns, &targets, replicas);
        spec.rollout = Some(Rollout {
            max_unavailable: Some(IntOrString::Int(1)),
            ..Rollout::default()
        });
        spec
    };
    let complete = |generation: i64| {
        let api = hub.api();
        async move {
            wait_until("the rollout to complete", LONG, || async {
                let s = api.get("ro").await.ok()?.status?;
                let r = s.rollout.as_ref()?;
                (r.generation == generation && r.phase == "Complete" && ready(&s)).then_some(s)
            })
            .await
        }
    };
    hub.apply("ro", spec("1")).await;
    complete(1).await;
    let started = Instant::now();
    hub.apply("ro", spec("2")).await;
    let status = complete(2).await;
    let took = started.elapsed().as_secs_f64();
    let r = status.rollout.unwrap();
    let at = |t: &Option<String>| {
        t.as_deref()
            .unwrap()
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_millisecond() as f64
            / 1000.0
    };
    // Between a member found healthy and the next one given the change: the gate alone.
    let handoffs: Vec<f64> = r
        .clusters
        .windows(2)
        .map(|w| at(&w[1].started_at) - at(&w[0].healthy_at))
        .collect();
    let gated: Vec<f64> = r
        .clusters
        .iter()
        .map(|c| at(&c.healthy_at) - at(&c.started_at))
        .collect();
    hub.delete_and_wait_gone("ro").await;
    json!({
        "clusters": 3, "floor_seconds": floor,
        "floor_step_seconds": steps,
        "operator_seconds": took,
        "operator_step_seconds": gated,
        "overhead_per_cluster_seconds": (took - floor) / 3.0,
        "handoff_seconds": handoffs,
        "max_handoff_seconds": handoffs.iter().cloned().fold(0.0, f64::max),
    })
}

/// The newest deployed revision of release `web`, from its release records (Secret metadata)
/// in one namespace, updated by a watch; each change is timestamped.
fn deployed_revision(api: Api<PartialObjectMeta<Secret>>) -> watch::Receiver<(Instant, i64)> {
    let (tx, rx) = watch::channel((Instant::now(), 0));
    let config = watcher::Config::default().labels("owner=helm,name=web");
    tokio::spawn(async move {
        let mut records: BTreeMap<String, (i64, bool)> = BTreeMap::new();
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    let labels = s.metadata.labels.clone().unwrap_or_default();
                    let version = labels.get("version").and_then(|v| v.parse().ok());
                    let deployed = labels.get("status").is_some_and(|s| s == "deployed");
                    records.insert(
                        s.metadata.name.unwrap_or_default(),
                        (version.unwrap_or(0), deployed),
                    );
                }
                watcher::Event::Delete(s) => {
                    records.remove(&s.metadata.name.unwrap_or_default());
                }
                watcher::Event::Init => records.clear(),
                watcher::Event::InitDone => {}
            }
            let newest = records
                .values()
                .filter(|(_, deployed)| *deployed)
                .map(|(v, _)| *v)
                .max()
                .unwrap_or(0);
            let _ = tx.send((Instant::now(), newest));
        }
    });
    rx
}

/// Releases of a resource deployed so far, from its status summary ("deployed/desired").
async fn deployed(api: &Api<TenancyController>, name: &str) -> usize {
    let summary = api.get(name).await.ok().and_then(|c| c.status?.summary);
    summary
        .and_then(|s| s.releases.split('/').next()?.parse().ok())
        .unwrap_or(0)
}

/// Owner B's small change: release `web` of `namespace` on member-1 upgraded to `replicas`.
/// Returns the seconds from the spec patch to its release record showing `revision` deployed,
/// and the seconds of those that helm ran (from the operator's log), so the rest, the queue's
/// wait and the operator's own work, can be told apart from a slower helm on a busier machine.
async fn small_change(
    hub: &Hub,
    namespace: &str,
    replicas: usize,
    revision: i64,
    records: &mut watch::Receiver<(Instant, i64)>,
) -> (f64, f64) {
    let started = Instant::now();
    hub.apply(
        "small",
        web(namespace, &["member-1"], &replicas.to_string()),
    )
    .await;
    let what = format!("revision {revision} of the small change");
    let shown = when_within(records, &what, LONG, |r| *r >= revision).await;
    let took = shown.saturating_duration_since(started).as_secs_f64();
    let logged = format!("upgraded member-1/{namespace}/web (");
    let revision = format!("revision {revision})");
    let helm = wait_until("the operator to log the change", DEADLINE, || async {
        let log = hub.log();
        let line = log
            .lines()
            .find(|l| l.contains(&logged) && l.contains(&revision))?;
        let ms = line
            .split("elapsed_ms=")
            .nth(1)?
            .split_whitespace()
            .next()?;
        ms.parse::<f64>().ok().map(|ms| ms / 1000.0)
    })
    .await;
    (took, helm)
}

/// The median of `samples`.
fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|x, y| x.total_cmp(y));
    percentile(&sorted, 0.5)
}

/// Releases of the wave per namespace and cluster (a tenancy holds at most 16 charts).
const WAVE_CHARTS: usize = 10;

/// A wave of `releases` `deployment-example` releases (no pods), [`WAVE_CHARTS`] per namespace,
/// each namespace on every cluster in `clusters`, with `deletionPolicy` as given.
fn wave_spec(run: &str, clusters: &[&str], releases: usize, orphan: bool) -> ControllerSpec {
    let per_namespace = WAVE_CHARTS * clusters.len();
    let tenancies = (0..releases.div_ceil(per_namespace))
        .map(|i| {
            let charts = (0..WAVE_CHARTS)
                .map(|j| {
                    chart(
                        "deployment-example",
                        &format!("r-{j}"),
                        &[("replicaCount", "0")],
                    )
                })
                .collect();
            tenancy(&format!("{run}-{i}"), clusters, charts)
        })
        .collect();
    ControllerSpec {
        tenancies,
        deletion_policy: if orphan {
            DeletionPolicy::Orphan
        } else {
            DeletionPolicy::Delete
        },
        ..Default::default()
    }
}

/// Owner B's small change (an upgrade of one release) on an idle queue and while owner A's wave
/// of installs runs, with the default queue (4 workers, 2 per cluster, 3 per owner).
async fn fairness(a: &Args) -> Value {
    let hub = Hub::with_args("bench-fair", &[]).await;
    let lab = &hub.lab;
    let contexts = lab.contexts();
    let clusters: Vec<&str> = contexts.iter().map(String::as_str).collect();
    let small = unique("fair-b");
    hub.apply("small", web(&small, &["member-1"], "1")).await;
    let records =
        Api::<PartialObjectMeta<Secret>>::namespaced(lab.client("member-1").await, &small);
    let mut records = deployed_revision(records);
    when_within(&mut records, "the small release", LONG, |r| *r >= 1).await;
    let mut revision = 1;
    let mut change = async |records: &mut watch::Receiver<(Instant, i64)>| {
        revision += 1;
        // 1 replica at revision 1, then 2, 1, 2 …: each change makes a new revision.
        let replicas = if revision % 2 == 0 { 2 } else { 1 };
        small_change(&hub, &small, replicas, revision, records).await
    };

    progress(&format!(
        "fairness: {} small changes on an idle queue",
        a.samples
    ));
    let mut idle = Vec::new();
    for _ in 0..a.samples {
        idle.push(change(&mut records).await);
    }

    let run = unique("fair-a");
    let per_namespace = WAVE_CHARTS * clusters.len();
    let total = a.wave.div_ceil(per_namespace) * per_namespace;
    progress(&format!(
        "fairness: a wave of {total} installs over {} clusters, {} small changes spaced through it",
        clusters.len(),
        a.samples
    ));
    let api = hub.api();
    let started = Instant::now();
    hub.apply("wave", wave_spec(&run, &clusters, a.wave, false))
        .await;
    let mut during = Vec::new();
    for i in 1..=a.samples {
        let checkpoint = total * i / (a.samples + 1);
        wait_until("the wave to reach its checkpoint", LONG, || async {
            (deployed(&api, "wave").await >= checkpoint).then_some(())
        })
        .await;
        let before = deployed(&api, "wave").await;
        let at = started.elapsed().as_secs_f64();
        let (took, helm) = change(&mut records).await;
        let after = deployed(&api, "wave").await;
        progress(&format!(
            "fairness: {took:.2} s (helm {helm:.2} s) with the wave at {before}/{total} … {after}/{total}"
        ));
        during.push((at, before, after, (took, helm)));
    }
    wait_until("the wave to be deployed", LONG, || async {
        (deployed(&api, "wave").await >= total).then_some(())
    })
    .await;
    let wave_seconds = started.elapsed().as_secs_f64();
    let rate = total as f64 / wave_seconds;

    progress("fairness: cleaning up (the wave is orphaned and its namespaces deleted)");
    hub.apply("wave", wave_spec(&run, &clusters, a.wave, true))
        .await;
    hub.delete_and_wait_gone("wave").await;
    hub.delete_and_wait_gone("small").await;
    let namespaces: Vec<String> = (0..total / per_namespace)
        .map(|i| format!("{run}-{i}"))
        .collect();
    for c in &clusters {
        let mut args = vec!["delete", "namespace", "--wait=false", "--ignore-not-found"];
        args.extend(namespaces.iter().map(String::as_str));
        if *c == "member-1" {
            args.push(&small);
        }
        if *c == "hub" {
            args.push(&hub.namespace);
        }
        lab.kubectl(c, &args);
    }

    let under: Vec<(f64, f64)> = during.iter().map(|d| d.3).collect();
    let totals = |s: &[(f64, f64)]| s.iter().map(|x| x.0).collect::<Vec<_>>();
    let helm = |s: &[(f64, f64)]| s.iter().map(|x| x.1).collect::<Vec<_>>();
    let outside = |s: &[(f64, f64)]| s.iter().map(|x| x.0 - x.1).collect::<Vec<_>>();
    let (idle_median, under_median) = (median(&totals(&idle)), median(&totals(&under)));
    let (idle_outside, under_outside) = (median(&outside(&idle)), median(&outside(&under)));
    // Under the former single FIFO the change waited for every job queued before it.
    let fifo: Vec<f64> = during.iter().map(|d| (total - d.1) as f64 / rate).collect();
    json!({
        "wave_releases": total, "clusters": clusters.len(),
        "wave_seconds": wave_seconds, "wave_releases_per_second": rate,
        "idle_seconds": totals(&idle), "idle_helm_seconds": helm(&idle),
        "idle_median_seconds": idle_median, "idle_median_outside_helm_seconds": idle_outside,
        "under_wave_seconds": totals(&under), "under_wave_helm_seconds": helm(&under),
        "under_wave_median_seconds": under_median,
        "under_wave_median_outside_helm_seconds": under_outside,
        "under_wave_max_seconds": totals(&under).into_iter().fold(0.0, f64::max),
        "wave_progress_at_changes": during.iter().map(|d| json!([d.1, d.2])).collect::<Vec<_>>(),
        "ratio_median": under_median / idle_median, "ratio_target": 2.0,
        "ratio_median_outside_helm": under_outside / idle_outside,
        "single_fifo_estimate_median_seconds": median(&fifo),
    })
}

fn table(results: &BTreeMap<&str, Value>) -> String {
    let f = |v: &Value, k: &str| match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        field => field
            .and_then(Value::as_f64)
            .map_or("-".into(), |x| format!("{x:.3}")),
    };
    let mut out = String::from("scenario      figure                          value\n");
    for (name, v) in results {
        for (k, field) in v.as_object().unwrap() {
            match field.as_array() {
                // A series of points: one line per figure of each point.
                Some(points) => {
                    for (i, point) in points.iter().enumerate() {
                        for (pk, _) in point.as_object().into_iter().flatten() {
                            let label = format!("{k}[{i}].{pk}");
                            out.push_str(&format!("{name:<13} {label:<31} {}\n", f(point, pk)));
                        }
                    }
                }
                None => out.push_str(&format!("{name:<13} {k:<31} {}\n", f(v, k))),
            }
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let a = args();
    // Named in --only; the light scenarios also run when --only is not given.
    let named = |s: &str| {
        a.only
            .as_deref()
            .is_some_and(|o| o.split(',').any(|x| x == s))
    };
    let want = |s: &str| a.only.is_none() || named(s);
    let mut results: BTreeMap<&str, Value> = BTreeMap::new();
    if want("convergence") {
        results.insert("convergence", convergence(&a).await);
    }
    if want("latency") {
        results.insert("latency", latency(&a).await);
    }
    if want("breadth") {
        results.insert("breadth", breadth(&a).await);
    }
    if want("footprint") {
        results.insert("footprint", footprint(&a).await);
    }
    // Heavy (thousands of pods, hundreds of namespaces or Controllers): only when asked for.
    if named("namespaces") {
        results.insert("namespaces", namespaces(&a).await);
    }
    if named("controllers") {
        results.insert("controllers", controllers(&a).await);
    }
    // Needs a lab of many members (kind/up.sh --members 20): only when asked for.
    if named("clusters") {
        results.insert("clusters", clusters(&a).await);
    }
    // Needs a lab of pull members (kind/up.sh --pull-members 20): only when asked for.
    if named("pull") {
        results.insert("pull", pull::pull(&a).await);
    }
    if named("shards") {
        results.insert("shards", shards(&a).await);
    }
    // Needs three members (kind/up.sh --members 3): only when asked for.
    if named("rollout") {
        results.insert("rollout", rollout(&a).await);
    }
    // A change in three waves across every member of the lab (kind/up.sh --members 20): only
    // when asked for.
    if named("waves") {
        results.insert("waves", waves::waves(&a).await);
    }
    // Release records installed by helm itself: only when asked for.
    if named("records") {
        results.insert("records", records(&a).await);
    }
    // A wave of 1,000 installs: only when asked for.
    if named("fairness") {
        results.insert("fairness", fairness(&a).await);
    }
    // Controllers of up to 10,000 charts: only when asked for.
    if named("size") {
        results.insert("size", size::size(&a).await);
    }
    // Values per cluster: planning in process, and the hub's reads for up to 100 Controllers
    // reading one Secret: only when asked for.
    if named("fleets") {
        results.insert("fleets", fleets::fleets(&a).await);
    }
    // Up to 1,000 simulated pull members against the operator: only when asked for.
    if named("envelope") {
        results.insert("envelope", envelope::envelope(&a).await);
    }
    // One signed chart to 1, 10 and 30 namespaces of every cluster, with and without a
    // signature rule: only when asked for.
    if named("signed") {
        results.insert("signed", signed::signed(&a).await);
    }
    // The fleet view against up to 1,000 simulated pull members, in a browser and with 50 live
    // streams: only when asked for.
    if named("view") {
        results.insert("view", view::view(&a).await);
    }
    // Flux against the operator, alternating runs: only when asked for.
    if named("peer") {
        results.insert("peer", flux::peer(&a).await);
    }
    print!("{}", table(&results));
    if let Some(path) = &a.json {
        let doc = json!({
            "date": k8s_openapi::jiff::Timestamp::now().to_string(),
            "machine": format!("{} cores, {}", std::thread::available_parallelism().map_or(0, |n| n.get()), std::env::consts::ARCH),
            "results": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        eprintln!("wrote {path}");
    }
}
