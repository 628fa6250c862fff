//! The peer scenario: Flux's helm-controller and source-controller against the operator on the convergence scenario's releases, alternating runs, medians and ratios.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams},
};
use serde_json::{Value, json};
use tenancy_hub::api::crd::ControllerSpec;

use super::{
    Args, LONG, children_cpu, common,
    common::{
        fixtures::{chart, ready, tenancy, unique, wait_until},
        hub::{Hub, allow_all, create_namespace},
        lab::Lab,
        repo::ChartRepo,
    },
    median, progress, usage,
};

/// The chart every run installs, as served by the loopback repository.
const CHART: &str = "deployment-example";
/// Its one published version; both sides pin it.
const VERSION: &str = "0.1.0";
/// The release name on every cluster, as in the convergence scenario.
const RELEASE: &str = "app";
/// How often resident sets are sampled (helm children live for about a second).
const SAMPLE: Duration = Duration::from_millis(100);
/// A fixed settle period after convergence before the idle figures are read.
const IDLE_SETTLE: Duration = Duration::from_secs(10);

/// How a peer run is set up (`--peer-targets`, `--peer-workers`, `--peer-setups`).
#[derive(Clone, Copy)]
struct Peer<'a> {
    /// The clusters every release goes to.
    targets: &'a [&'a str],
    /// Workers of each side: Flux's `--concurrent`, the operator's `--workers`.
    workers: usize,
}

impl Peer<'_> {
    /// The operator's `--per-cluster`: the workers shared over the targets, at least 2.
    fn per_cluster(self) -> usize {
        self.workers.div_ceil(self.targets.len()).max(2)
    }
}

/// How a Flux run finds its chart and when it calls a release done.
#[derive(Clone, Copy, PartialEq)]
enum Setup {
    /// One HelmChart per HelmRelease (`spec.chart.spec`), Flux's usual set-up; no waiting.
    PerRelease,
    /// Every HelmRelease naming one shared HelmChart (`spec.chartRef`); no waiting.
    SharedChart,
    /// Like [`Setup::PerRelease`], with Helm waiting for the workloads (no `disableWait`).
    Waiting,
}

impl Setup {
    /// The name of its side in the figures.
    fn label(self) -> &'static str {
        match self {
            Setup::PerRelease => "flux",
            Setup::SharedChart => "flux_shared",
            Setup::Waiting => "flux_wait",
        }
    }
}

/// Where kind/peer-flux.sh left the controllers (`bin/`) and their CRDs (`crds/`).
fn flux_dir() -> PathBuf {
    std::env::var_os("TENANCY_HUB_FLUX_DIR")
        .map(PathBuf::from)
        .expect(
            "the peer scenario needs Flux: run kind/bench.sh --only peer --peer flux, or set \
             TENANCY_HUB_FLUX_DIR to the directory kind/peer-flux.sh prints",
        )
}

/// The Flux versions pinned in kind/versions.env, as `(name, version)`.
fn flux_versions() -> Vec<(String, String)> {
    let pins = include_str!("../../kind/versions.env");
    pins.lines()
        .filter_map(|l| l.strip_prefix("FLUX_")?.split_once('='))
        .map(|(k, v)| (k.to_lowercase(), v.to_owned()))
        .collect()
}

/// A loopback address nothing listens on now.
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// The lab's kubeconfig cut down to one context, with its credentials inline.
fn kubeconfig_of(lab: &Lab, context: &str) -> String {
    let out = Command::new(lab.bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(lab.kubeconfig_path())
        .args([
            "config",
            "view",
            "--minify",
            "--flatten",
            "--context",
            context,
        ])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl config view --context {context}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One Flux controller process, run against the hub and stopped (SIGTERM) when dropped.
struct FluxProcess {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl FluxProcess {
    /// Starts `name` from `bin`, watching only hub namespace `namespace`, with `extra` arguments,
    /// and waits until its health endpoint answers and its `controllers` have started workers.
    fn start(
        lab: &Lab,
        bin: &Path,
        name: &'static str,
        kubeconfig: &Path,
        namespace: &str,
        extra: &[String],
        controllers: &[&str],
    ) -> Self {
        let log = lab.dir.join(format!("{}.log", unique(name)));
        let file = std::fs::File::create(&log).unwrap();
        let health = free_addr();
        let child = Command::new(bin.join(name))
            .args([
                "--watch-all-namespaces=false",
                "--enable-leader-election=false",
                "--log-encoding=json",
                &format!("--metrics-addr={}", free_addr()),
                &format!("--health-addr={health}"),
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUNTIME_NAMESPACE", namespace)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let mut process = Self { child, name, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(exit)) = process.child.try_wait() {
                panic!("{name} exited ({exit}); see {}", process.log.display());
            }
            let healthy = std::net::TcpStream::connect(health).is_ok()
                && common::operator::http_get(health, "/readyz", None).0 == 200;
            let logged = process.logged();
            let started = controllers.iter().all(|c| {
                logged.lines().any(|l| {
                    l.contains("\"Starting workers\"")
                        && l.contains(&format!("\"controller\":\"{c}\""))
                })
            });
            if healthy && started {
                return process;
            }
            assert!(
                Instant::now() < deadline,
                "{name} was not ready within 60 s; see {}",
                process.log.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FluxProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "{} did not stop within 30 s of SIGTERM; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `NAME:   N kB` figure of a process's file under /proc, in KiB, if it still runs.
fn proc_kib(pid: u32, file: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The resident set of a process now, in KiB, if it still runs.
fn rss_kib(pid: u32) -> Option<u64> {
    proc_kib(pid, "status", "VmRSS")
}

/// The proportional set of a process now, in KiB, if it still runs: its own pages plus its share
/// of pages it shares (concurrent helm processes share their binary's ~48 MiB), so a sum over
/// processes counts a shared page once, as a pod's memory does.
fn pss_kib(pid: u32) -> Option<u64> {
    proc_kib(pid, "smaps_rollup", "Pss")
}

/// The processes whose parent is `pid` now (helm, for the operator), from /proc.
fn live_children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Samples the summed resident and proportional sets of some processes (and, if asked, of their
/// live children) every [`SAMPLE`] on a thread of its own until [`PeakRss::stop`].
struct PeakRss {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl PeakRss {
    fn start(pids: Vec<u32>, with_children: bool) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut pss) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                let all: Vec<u32> = pids
                    .iter()
                    .flat_map(|p| {
                        let children = if with_children {
                            live_children(*p)
                        } else {
                            Vec::new()
                        };
                        std::iter::once(*p).chain(children)
                    })
                    .collect();
                rss = rss.max(all.iter().filter_map(|p| rss_kib(*p)).sum());
                pss = pss.max(all.iter().filter_map(|p| pss_kib(*p)).sum());
                std::thread::sleep(SAMPLE); // the sampling interval
            }
            (rss, pss)
        });
        Self { done, thread }
    }

    /// The largest sums seen, resident and proportional, in KiB.
    fn stop(self) -> (u64, u64) {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// CPU seconds of `pids` so far (their own, plus their reaped children's with `children`).
fn cpu_seconds(pids: &[u32], children: bool) -> f64 {
    pids.iter()
        .map(|p| usage(*p).2 + if children { children_cpu(*p) } else { 0.0 })
        .sum()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The Flux kinds the runs create or read.
fn flux_api(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version, plural) = match kind {
        "HelmRelease" => ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
        "HelmRepository" => ("source.toolkit.fluxcd.io", "v1", "helmrepositories"),
        "HelmChart" => ("source.toolkit.fluxcd.io", "v1", "helmcharts"),
        other => panic!("no Flux kind {other} in the peer scenario"),
    };
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates a Flux object from its JSON.
async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", object.metadata.name));
}

/// Whether a Flux object's condition `type` is `status`, and that condition's message.
fn condition(object: &DynamicObject, type_: &str, status: &str) -> Option<String> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == status)
        .map(|c| c["message"].as_str().unwrap_or_default().to_owned())
}

/// Secret `<cluster>-kubeconfig` (key `value`) in `namespace` for each member, as HelmReleases'
/// `spec.kubeConfig.secretRef` name it.
async fn kubeconfig_secrets(lab: &Lab, client: &Client, namespace: &str, peer: Peer<'_>) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for cluster in peer.targets.iter().filter(|c| **c != "hub") {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{cluster}-kubeconfig")},
            "stringData": {"value": kubeconfig_of(lab, cluster)},
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

/// HelmRelease `<cluster>-<i>` for release [`RELEASE`] in `<run>-<i>` of `cluster`.
fn helm_release(setup: Setup, run: &str, i: usize, cluster: &str) -> Value {
    let namespace = format!("{run}-{i}");
    let no_wait = setup != Setup::Waiting;
    let mut spec = json!({
        "interval": "10m",
        "releaseName": RELEASE,
        "targetNamespace": namespace,
        "storageNamespace": namespace,
        "install": {"createNamespace": true, "disableWait": no_wait},
        "upgrade": {"disableWait": no_wait},
    });
    spec["chart"] = json!({"spec": {
        "chart": CHART, "version": VERSION, "interval": "10m",
        "sourceRef": {"kind": "HelmRepository", "name": "charts"},
    }});
    if setup == Setup::SharedChart {
        spec["chartRef"] = json!({"kind": "HelmChart", "name": "shared"});
        spec.as_object_mut().unwrap().remove("chart");
    }
    if cluster != "hub" {
        spec["kubeConfig"] = json!({"secretRef": {"name": format!("{cluster}-kubeconfig")}});
    }
    json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": format!("{cluster}-{i}")},
        "spec": spec,
    })
}

/// Deletes every object of `kind` in `namespace` and waits until they are gone (finalizers run).
async fn delete_all(client: &Client, namespace: &str, kind: &str) {
    let api = flux_api(client, namespace, kind);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    wait_until(&format!("every {kind} gone"), LONG, || async {
        api.list(&ListParams::default())
            .await
            .ok()
            .filter(|l| l.items.is_empty())
            .map(|_| ())
    })
    .await;
}

/// Deletes the run's target namespaces on every cluster, without waiting.
fn delete_namespaces(lab: &Lab, run: &str, releases: usize, peer: Peer<'_>) {
    let names: Vec<String> = (0..releases).map(|i| format!("{run}-{i}")).collect();
    for c in peer.targets {
        let mut args = vec!["delete", "namespace", "--wait=false", "--ignore-not-found"];
        args.extend(names.iter().map(String::as_str));
        lab.kubectl(c, &args);
    }
}

/// One Flux run: fresh controllers in a hub namespace of their own, the repository and one
/// HelmRelease per release created at once, timed until every HelmRelease is Ready; then the
/// idle figures, and everything removed (the releases uninstalled by helm-controller).
async fn flux_run(
    lab: &Lab,
    repo: &ChartRepo,
    setup: Setup,
    releases: usize,
    peer: Peer<'_>,
) -> Value {
    let bin = flux_dir().join("bin");
    let client = lab.client("hub").await;
    let namespace = unique("bench-flux");
    create_namespace(&client, &namespace).await;
    kubeconfig_secrets(lab, &client, &namespace, peer).await;
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig = scratch.path().join("hub.kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_of(lab, "hub")).unwrap();
    let storage = free_addr();
    std::fs::create_dir(scratch.path().join("storage")).unwrap();
    let source = FluxProcess::start(
        lab,
        &bin,
        "source-controller",
        &kubeconfig,
        &namespace,
        &[
            format!(
                "--storage-path={}",
                scratch.path().join("storage").display()
            ),
            format!("--storage-addr={storage}"),
            format!("--storage-adv-addr={storage}"),
            format!("--concurrent={}", peer.workers),
        ],
        &["helmrepository", "helmchart"],
    );
    let helm = FluxProcess::start(
        lab,
        &bin,
        "helm-controller",
        &kubeconfig,
        &namespace,
        &[format!("--concurrent={}", peer.workers)],
        &["helmrelease"],
    );
    let pids = [helm.pid(), source.pid()];
    let run = unique("pf");
    let total = releases * peer.targets.len();
    let hrs = flux_api(&client, &namespace, "HelmRelease");

    let cpu0 = cpu_seconds(&pids, false);
    let peak = PeakRss::start(pids.to_vec(), false);
    let started = Instant::now();
    create(
        &flux_api(&client, &namespace, "HelmRepository"),
        json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
            "metadata": {"name": "charts"},
            "spec": {"url": repo.url, "interval": "10m"},
        }),
    )
    .await;
    if setup == Setup::SharedChart {
        create(
            &flux_api(&client, &namespace, "HelmChart"),
            json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmChart",
                "metadata": {"name": "shared"},
                "spec": {"chart": CHART, "version": VERSION, "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts"}},
            }),
        )
        .await;
    }
    for i in 0..releases {
        for cluster in peer.targets {
            create(&hrs, helm_release(setup, &run, i, cluster)).await;
        }
    }
    wait_until("every HelmRelease Ready", LONG, || async {
        let list = hrs.list(&ListParams::default()).await.ok()?;
        if let Some((hr, why)) = list
            .items
            .iter()
            .find_map(|hr| Some((hr, condition(hr, "Stalled", "True")?)))
        {
            panic!("HelmRelease {:?} stalled: {why}", hr.metadata.name);
        }
        let done = list
            .items
            .iter()
            .filter(|hr| condition(hr, "Ready", "True").is_some())
            .count();
        (done == total).then_some(())
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(&pids, false) - cpu0;
    let (peak, peak_pss) = peak.stop();
    let hwm: u64 = pids.iter().map(|p| usage(*p).1).sum();
    let idle_cpu0 = cpu_seconds(&pids, false);
    tokio::time::sleep(IDLE_SETTLE).await; // the named settle period before idle figures
    let idle_cpu = (cpu_seconds(&pids, false) - idle_cpu0) / IDLE_SETTLE.as_secs_f64();
    let idle: u64 = pids.iter().filter_map(|p| rss_kib(*p)).sum();

    delete_all(&client, &namespace, "HelmRelease").await;
    delete_all(&client, &namespace, "HelmChart").await;
    delete_all(&client, &namespace, "HelmRepository").await;
    drop(helm);
    drop(source);
    delete_namespaces(lab, &run, releases, peer);
    lab.kubectl(
        "hub",
        &["delete", "namespace", "--wait=false", namespace.as_str()],
    );
    let figures = json!({
        "side": setup.label(), "releases": total, "deployed_seconds": seconds,
        "releases_per_second": total as f64 / seconds,
        "cpu_seconds": cpu, "cpu_seconds_per_release": cpu / total as f64,
        "peak_rss_mib": mib(peak), "peak_pss_mib": mib(peak_pss), "peak_rss_hwm_sum_mib": mib(hwm),
        "idle_rss_mib": mib(idle), "idle_cpu_cores": idle_cpu,
    });
    progress(&format!("peer: {figures}"));
    figures
}

/// One run of the operator (4 workers, 2 per cluster) naming the same repository chart: timed to
/// every release deployed (`summary.releases` 30/30) and, in the same run, to `Ready`.
async fn ours_run(lab: &Lab, repo: &ChartRepo, releases: usize, peer: Peer<'_>) -> Value {
    let workers = peer.workers.to_string();
    let per_cluster = peer.per_cluster().to_string();
    let hub = Hub::with_args(
        "bench-peer",
        &["--workers", &workers, "--per-cluster", &per_cluster],
    )
    .await;
    // A plain-http repository is used only under a prefix a policy lists.
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[&repo.url]))
        .await;
    let pid = hub.operator.as_ref().unwrap().pid();
    let run = unique("po");
    let total = releases * peer.targets.len();
    let mut from_repo = chart(CHART, RELEASE, &[]);
    from_repo.repo = Some(repo.url.clone());
    from_repo.version = Some(VERSION.into());
    let spec = ControllerSpec {
        tenancies: (0..releases)
            .map(|i| tenancy(&format!("{run}-{i}"), peer.targets, vec![from_repo.clone()]))
            .collect(),
        ..Default::default()
    };
    let operator = hub.operator.as_ref().unwrap();
    // The API servers the releases go through (and the hub's, which takes the status), and etcd.
    let planes: Vec<u32> = std::iter::once("hub")
        .chain(peer.targets.iter().copied().filter(|t| *t != "hub"))
        .map(|c| format!("{c}-kube-apiserver"))
        .chain(["etcd".to_owned()])
        .map(|p| lab.pid(&p))
        .collect();
    let cpu0 = (cpu_seconds(&[pid], false), helm_cpu(pid));
    let planes_cpu0 = cpu_seconds(&planes, false);
    let writes0 = operator.metric("tenancy_hub_status_writes_total");
    let with_helm = PeakRss::start(vec![pid], true);
    let started = Instant::now();
    hub.apply("peer", spec).await;
    let want = format!("{total}/{total}");
    let api = hub.api();
    // When each quarter of the releases was deployed, to see whether the rate falls as they grow.
    let quarters = std::sync::Mutex::new(Vec::<f64>::new());
    let status_bytes = wait_until("every release deployed", LONG, || async {
        let status = api.get("peer").await.ok()?.status?;
        let refused = status
            .updated_tenancies
            .iter()
            .flat_map(|t| &t.chart_messages)
            .find(|m| ["Forbidden", "Invalid", "Conflict"].contains(&m.phase.as_str()));
        if let Some(m) = refused {
            panic!("release {} refused: {}", m.release_name, m.error_message);
        }
        let releases = status.summary.as_ref()?.releases.clone();
        let deployed: usize = releases.split('/').next()?.parse().ok()?;
        let mut quarters = quarters.lock().unwrap();
        while quarters.len() < 4 && deployed * 4 >= total * (quarters.len() + 1) {
            quarters.push(started.elapsed().as_secs_f64());
        }
        (releases == want).then(|| serde_json::to_vec(&status).map_or(0, |b| b.len()))
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let own = cpu_seconds(&[pid], false) - cpu0.0;
    let helm = helm_cpu(pid) - cpu0.1;
    let planes_cpu = cpu_seconds(&planes, false) - planes_cpu0;
    let status_writes = operator.metric("tenancy_hub_status_writes_total") - writes0;
    let quarters = quarters.into_inner().unwrap();
    let quarter_seconds: Vec<f64> = quarters
        .iter()
        .scan(0.0, |last, t| {
            let took = t - *last;
            *last = *t;
            Some(took)
        })
        .collect();
    let (peak, peak_pss) = with_helm.stop();
    let (_, alone, _) = usage(pid);
    wait_until("the Controller Ready", LONG, || async {
        let status = api.get("peer").await.ok()?.status?;
        ready(&status).then_some(())
    })
    .await;
    let ready_seconds = started.elapsed().as_secs_f64();
    let idle_cpu0 = cpu_seconds(&[pid], false) + helm_cpu(pid);
    tokio::time::sleep(IDLE_SETTLE).await; // the named settle period before idle figures
    let idle_cpu =
        (cpu_seconds(&[pid], false) + helm_cpu(pid) - idle_cpu0) / IDLE_SETTLE.as_secs_f64();
    // The operator and its live helm executor, as a pod's memory counts them.
    let idle = tree_rss_kib(pid);
    // Then once the executor has exited for want of work (`--executor-idle`).
    wait_until("the idle helm executor to exit", LONG, || async {
        live_children(pid).is_empty().then_some(())
    })
    .await;
    let idle_after_exit = rss_kib(pid).unwrap_or(0);
    hub.delete_and_wait_gone("peer").await;
    lab.kubectl(
        "hub",
        &[
            "delete",
            "tenancypolicies.multitenancy.dev",
            "--ignore-not-found",
            hub.namespace.as_str(),
        ],
    );
    delete_namespaces(lab, &run, releases, peer);
    lab.kubectl(
        "hub",
        &[
            "delete",
            "namespace",
            "--wait=false",
            hub.namespace.as_str(),
        ],
    );
    let figures = json!({
        "side": "ours", "releases": total, "deployed_seconds": seconds,
        "releases_per_second": total as f64 / seconds, "ready_seconds": ready_seconds,
        "cpu_seconds": own + helm, "operator_cpu_seconds": own, "helm_cpu_seconds": helm,
        "cpu_seconds_per_release": (own + helm) / total as f64,
        "control_planes_cpu_seconds": planes_cpu,
        "control_planes_cpu_seconds_per_release": planes_cpu / total as f64,
        "status_writes": status_writes, "status_bytes_at_end": status_bytes,
        "quarter_seconds": quarter_seconds,
        "peak_rss_mib": mib(peak), "peak_pss_mib": mib(peak_pss), "operator_peak_rss_mib": mib(alone),
        "idle_rss_mib": mib(idle), "idle_rss_after_executor_exit_mib": mib(idle_after_exit),
        "idle_cpu_cores": idle_cpu,
    });
    progress(&format!("peer: {figures}"));
    figures
}

/// CPU seconds of the operator's helm work so far: its reaped children's (helm processes, an
/// executor that exited) plus its live children's (the long-lived executor).
fn helm_cpu(pid: u32) -> f64 {
    children_cpu(pid)
        + live_children(pid)
            .iter()
            .filter_map(|c| with_reaped_children_cpu(*c))
            .sum::<f64>()
}

/// CPU seconds a process has used, its reaped children's included, if it still runs.
fn with_reaped_children_cpu(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: Option<f64> = fields[11..15].iter().map(|f| f.parse::<f64>().ok()).sum();
    Some(ticks? / 100.0)
}

/// The resident set of a process and its live children now, in KiB.
fn tree_rss_kib(pid: u32) -> u64 {
    std::iter::once(pid)
        .chain(live_children(pid))
        .filter_map(rss_kib)
        .sum()
}

/// Applies Flux's CRDs (kind/peer-flux.sh copied them from the modules) to the hub and waits
/// until they are established.
fn install_flux_crds(lab: &Lab) {
    let crds = flux_dir().join("crds");
    let crds = crds.to_str().unwrap();
    lab.kubectl("hub", &["apply", "--server-side", "-f", crds]);
    lab.kubectl(
        "hub",
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "-f",
            crds,
        ],
    );
}

/// The medians of `figures` over the runs of one side, as `<side>_median_<figure>`.
fn medians(side: &str, runs: &[Value], figures: &[&str], out: &mut serde_json::Map<String, Value>) {
    for figure in figures {
        let values: Vec<f64> = runs
            .iter()
            .filter(|r| r["side"] == side)
            .filter_map(|r| r[*figure].as_f64())
            .collect();
        if !values.is_empty() {
            out.insert(format!("{side}_median_{figure}"), json!(median(&values)));
        }
    }
}

/// Flux (helm-controller and source-controller) against the operator on the convergence
/// scenario's releases (`--releases` × `--peer-targets`, default hub, member-1, member-2) from a
/// loopback Helm repository, `--runs` times each, alternating: ours, then each of
/// `--peer-setups`: Flux with one HelmChart per HelmRelease (`flux`), with one shared HelmChart
/// (`flux_shared`), waiting for the workloads (`flux_wait`). Both sides run `--peer-workers`
/// workers (default 4). Medians of each side and the ratios ours/Flux.
pub async fn peer(a: &Args) -> Value {
    match a.peer.as_deref() {
        Some("flux") => {}
        other => {
            panic!("the peer scenario compares with --peer flux (the only peer), not {other:?}")
        }
    }
    let lab = Lab::get();
    install_flux_crds(&lab);
    let repo = ChartRepo::serve(&lab, &[VERSION]);
    repo.wait_ready().await;
    let targets: Vec<&str> = a.peer_targets.iter().map(String::as_str).collect();
    let peer = Peer {
        targets: &targets,
        workers: a.peer_workers,
    };
    let setups: Vec<Setup> = [Setup::PerRelease, Setup::SharedChart, Setup::Waiting]
        .into_iter()
        .filter(|s| a.peer_setups.iter().any(|named| named == s.label()))
        .collect();
    let mut runs = Vec::new();
    for run in 1..=a.runs {
        progress(&format!("peer: run {run}/{}, ours", a.runs));
        runs.push(ours_run(&lab, &repo, a.releases, peer).await);
        for &setup in &setups {
            progress(&format!("peer: run {run}/{}, {}", a.runs, setup.label()));
            runs.push(flux_run(&lab, &repo, setup, a.releases, peer).await);
        }
    }
    let mut out = serde_json::Map::new();
    for (name, version) in flux_versions() {
        out.insert(name, json!(version));
    }
    out.insert("releases".into(), json!(a.releases * targets.len()));
    out.insert("targets".into(), json!(targets));
    out.insert("workers".into(), json!(a.peer_workers));
    out.insert("per_cluster".into(), json!(peer.per_cluster()));
    let figures = [
        "deployed_seconds",
        "releases_per_second",
        "ready_seconds",
        "cpu_seconds",
        "operator_cpu_seconds",
        "helm_cpu_seconds",
        "cpu_seconds_per_release",
        "peak_rss_mib",
        "peak_pss_mib",
        "operator_peak_rss_mib",
        "peak_rss_hwm_sum_mib",
        "idle_rss_mib",
        "idle_rss_after_executor_exit_mib",
        "idle_cpu_cores",
    ];
    for side in ["ours", "flux", "flux_shared", "flux_wait"] {
        medians(side, &runs, &figures, &mut out);
    }
    // (ratio, numerator, denominator), each a median figure above.
    let ratios = [
        (
            "throughput_ours_over_flux",
            "ours_median_releases_per_second",
            "flux_median_releases_per_second",
        ),
        (
            "throughput_ours_over_flux_shared",
            "ours_median_releases_per_second",
            "flux_shared_median_releases_per_second",
        ),
        (
            "ready_speed_ours_over_flux_wait",
            "flux_wait_median_deployed_seconds",
            "ours_median_ready_seconds",
        ),
        (
            "cpu_per_release_ours_over_flux",
            "ours_median_cpu_seconds_per_release",
            "flux_median_cpu_seconds_per_release",
        ),
        (
            "peak_rss_ours_with_helm_over_flux",
            "ours_median_peak_rss_mib",
            "flux_median_peak_rss_mib",
        ),
        (
            "peak_pss_ours_with_helm_over_flux",
            "ours_median_peak_pss_mib",
            "flux_median_peak_pss_mib",
        ),
        (
            "peak_rss_operator_over_flux",
            "ours_median_operator_peak_rss_mib",
            "flux_median_peak_rss_mib",
        ),
        (
            "idle_rss_ours_over_flux",
            "ours_median_idle_rss_mib",
            "flux_median_idle_rss_mib",
        ),
        (
            "idle_rss_after_executor_exit_ours_over_flux",
            "ours_median_idle_rss_after_executor_exit_mib",
            "flux_median_idle_rss_mib",
        ),
    ];
    // A ratio whose Flux side was not run (`--peer-setups`) is left out.
    for (ratio, over, under) in ratios {
        if let (Some(over), Some(under)) = (
            out.get(over).and_then(Value::as_f64),
            out.get(under).and_then(Value::as_f64),
        ) {
            out.insert(format!("ratio_{ratio}"), json!(over / under));
        }
    }
    out.insert("runs".into(), Value::Array(runs));
    Value::Object(out)
}
