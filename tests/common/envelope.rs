//! One run of the scale envelope: N simulated pull members (see `simulated`) against the real operator, hub API server and etcd, and what the run measures.
//!
//! The run: the members added as `MemberCluster`s and joined once enrolled; a Controller `all`
//! with one release on every member, until each member's work is taken; a quiet window; a
//! Controller `some` on [`Envelope::sample`] members, created and then changed, the time to each
//! of its works published timed by a watch of the work Secrets; the operator restarted and the
//! time to its full resync; then everything removed. Figures are returned as JSON.
//! [`Envelope::sharded`] (in `shards`) measures the same members against several replicas;
//! [`Envelope::divided`] (in `divided`) holds them, divided between Controllers, for a caller's
//! own measurements.

mod divided;
mod shards;

#[allow(unused_imports)] // used by some test crates only
pub use divided::Divided;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{DeleteParams, PartialObjectMeta},
    runtime::{WatchStreamExt as _, watcher},
};
use serde_json::{Value, json};
use tenancy_hub::{
    api::crd::{ClusterSelector, ControllerSpec, ControllerStatus, TenancyController},
    api::member_cluster::MemberCluster,
    member::pull::messages::{CALL_LABEL, work_name},
};

use super::{
    fixtures::{chart, ready, unique, wait_until},
    hub::Hub,
    lab::Lab,
    operator::Operator,
    simulated::{Fleet, add},
};

/// The FlowSchema that counts the simulated members' requests apart.
pub const MEMBERS_FLOW: &str = "tenancy-hub-envelope";
/// The release each Controller puts on its members.
const RELEASE: &str = "web";
/// The longest any phase may take: at 1,000 members on a machine shared with builds, the
/// convergence alone has taken over 20 minutes.
const PHASE: Duration = Duration::from_secs(2400);

/// What one run is given.
pub struct Envelope {
    /// How many members.
    pub members: usize,
    /// How many of them the timed Controller goes to (the run on shards times none).
    pub sample: usize,
    /// The quiet window over which idle costs are measured.
    pub quiet: Duration,
    /// Extra arguments for the operator (its identity on the hub).
    pub operator_args: Vec<String>,
    /// The FlowSchema that counts the operator's requests, when it has one of its own.
    pub operator_flow: Option<String>,
}

/// What a run found, beside its figures.
#[allow(dead_code)] // used by some test crates only
pub struct Found {
    /// The figures, as JSON.
    pub figures: Value,
    /// What went wrong in the members.
    pub errors: Vec<String>,
    /// Members whose work of Controller `all` was answered.
    pub answered: usize,
    /// The size in bytes of Controller `all`'s status (JSON).
    pub status_bytes: usize,
    /// The lines of the restarted operator's log that showed a member unreachable.
    pub shown_unreachable: Vec<String>,
}

/// When each work Secret (namespace/name) was last published, from one watch.
type Published = Arc<Mutex<HashMap<String, Instant>>>;

/// Says how far the run has come.
fn progress(what: &str, run: &Run<'_>) {
    eprintln!("envelope: {} members: {what}", run.envelope.members);
}

/// Requests the hub API server has dispatched under FlowSchema `flow` so far
/// (`apiserver_flowcontrol_dispatched_requests_total`).
#[allow(dead_code)] // used by some test crates only
pub async fn dispatched(admin: &Client, flow: &str) -> f64 {
    apiserver_metric(
        admin,
        "apiserver_flowcontrol_dispatched_requests_total{",
        &format!("flow_schema=\"{flow}\""),
    )
    .await
}

/// The sum of the hub API server's series of `prefix` whose labels hold `holding`.
async fn apiserver_metric(admin: &Client, prefix: &str, holding: &str) -> f64 {
    let text = admin
        .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
        .await
        .expect("the hub API server serves /metrics");
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(holding))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Watch streams open on the hub API server.
async fn watches(admin: &Client) -> f64 {
    apiserver_metric(admin, "apiserver_longrunning_requests{", "verb=\"WATCH\"").await
}

/// Gives the agent ServiceAccounts of `names` a FlowSchema of their own ([`MEMBERS_FLOW`]),
/// at the priority level of every other service account.
fn members_flow(lab: &Lab, names: &[String]) {
    let subjects: String = names
        .iter()
        .map(|n| {
            format!(
                "        - {{kind: ServiceAccount, serviceAccount: {{name: agent, namespace: tenancy-hub-member-{n}}}}}\n"
            )
        })
        .collect();
    flow_schema(lab, MEMBERS_FLOW, "workload-low", 200, &subjects);
}

/// Applies FlowSchema `name` on the hub: every request of `subjects` (YAML list items indented
/// eight spaces) at priority level `level`, told apart by user, matched at `precedence`.
#[allow(dead_code)] // used by some test crates only
pub fn flow_schema(lab: &Lab, name: &str, level: &str, precedence: u32, subjects: &str) {
    let manifest = lab.dir.join(format!("{name}-flow.yaml"));
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {name}}}
spec:
  priorityLevelConfiguration: {{name: {level}}}
  matchingPrecedence: {precedence}
  distinguisherMethod: {{type: ByUser}}
  rules:
    - subjects:
{subjects}      resourceRules:
        - {{verbs: ['*'], apiGroups: ['*'], resources: ['*'], clusterScope: true, namespaces: ['*']}}
      nonResourceRules: [{{verbs: ['*'], nonResourceURLs: ['*']}}]
"
        ),
    )
    .unwrap();
    lab.kubectl("hub", &["apply", "-f", manifest.to_str().unwrap()]);
}

/// A Controller of one small release in `namespace` of the members labelled `selector`.
fn spec(namespace: &str, selector: (&str, &str), replicas: &str) -> ControllerSpec {
    let mut tenancy = super::fixtures::tenancy(
        namespace,
        &[],
        vec![chart(
            "deployment-example",
            RELEASE,
            &[("replicaCount", replicas)],
        )],
    );
    tenancy.cluster_selector = Some(ClusterSelector {
        match_labels: BTreeMap::from([(selector.0.into(), selector.1.into())]),
    });
    ControllerSpec {
        tenancies: vec![tenancy],
        ..Default::default()
    }
}

/// Follows every work Secret of the hub, noting when each was last written; returns once the
/// watch has listed what is there.
async fn follow_published(admin: &Client) -> (Published, tokio::task::JoinHandle<()>) {
    let published: Published = Arc::default();
    let api: Api<PartialObjectMeta<Secret>> = Api::all(admin.clone());
    let config = watcher::Config::default().labels(&format!("{CALL_LABEL}=work"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let into = published.clone();
    let task = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(s)) => {
                    let key = format!(
                        "{}/{}",
                        s.metadata.namespace.unwrap_or_default(),
                        s.metadata.name.unwrap_or_default()
                    );
                    into.lock().unwrap().insert(key, Instant::now());
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(PHASE, listed).await.unwrap().unwrap();
    (published, task)
}

/// The counters read before and after each phase.
#[derive(Clone, Copy)]
struct Counters {
    at: Instant,
    operator_cpu: f64,
    /// The hub API server's and etcd's.
    hub_cpu: f64,
    /// This process's: the simulated members'.
    members_cpu: f64,
    operator_requests: f64,
    member_requests: f64,
    status_writes: f64,
}

/// A run under way.
struct Run<'a> {
    envelope: &'a Envelope,
    lab: &'a Lab,
    admin: Client,
    hub: Hub,
    /// The operator, or the replicas of a run on shards.
    operators: Vec<Operator>,
    args: Vec<String>,
    /// The registration file of no cluster the operators are given.
    clusters_file: PathBuf,
    names: Vec<String>,
    label: String,
    published: Published,
    /// Watch streams open on the hub API server before the members joined.
    watches_before: f64,
    figures: serde_json::Map<String, Value>,
    /// What the restarted operator logged of members unreachable.
    shown_unreachable: Vec<String>,
}

/// The label of every member of a run, of the sampled ones, and of each part (on shards).
const ALL_LABEL: &str = "envelope";
const SOME_LABEL: &str = "envelope-sample";
const PART_LABEL: &str = "envelope-part";

impl Envelope {
    /// Runs it on `lab`.
    #[allow(dead_code)] // used by some test crates only
    pub async fn run(&self, lab: &Lab) -> Found {
        let mut run = Run::new(self, lab).await;
        let (published, follower) = follow_published(&run.admin).await;
        run.published = published;
        run.start_operators(1, &[]).await;
        progress("operator started", &run);
        let fleet = run.join(None).await;
        progress("members joined", &run);
        let status_bytes = run.converge(&fleet).await;
        progress("work of every member taken", &run);
        run.quiet().await;
        progress("quiet window measured", &run);
        for (phase, replicas) in [("create", "1"), ("change", "2")] {
            let figures = run.placement(replicas).await;
            run.figures.insert(format!("sample_{phase}"), figures);
        }
        run.resync().await;
        progress("resynced after a restart", &run);
        let answered = fleet.answered(&run.namespace("all"), RELEASE);
        run.figures
            .insert("reports_waiting_at_end".into(), json!(fleet.waiting()));
        for controller in ["all", "some"] {
            run.hub.delete_and_wait_gone_within(controller, PHASE).await;
        }
        let errors = fleet.errors();
        fleet.stop().await;
        run.remove().await;
        follower.abort();
        Found {
            figures: Value::Object(run.figures),
            errors,
            answered,
            status_bytes,
            shown_unreachable: run.shown_unreachable,
        }
    }
}

impl<'a> Run<'a> {
    /// A run of `envelope` on `lab` with no operator yet: its members named, their FlowSchema,
    /// a hub namespace, and the operator's arguments.
    async fn new(envelope: &'a Envelope, lab: &'a Lab) -> Self {
        let admin = lab.client("hub").await;
        let label = unique("env");
        let names: Vec<String> = (0..envelope.members)
            .map(|i| format!("{label}-{i}"))
            .collect();
        members_flow(lab, &names);
        let hub = Hub::without_operator(Lab::get(), unique("bench-env")).await;
        let clusters_file = lab.dir.join(format!("{label}-clusters.yaml"));
        std::fs::write(&clusters_file, "clusters: []\n").unwrap();
        let mut args = envelope.operator_args.clone();
        args.extend([
            "--clusters".into(),
            clusters_file.to_string_lossy().into_owned(),
        ]);
        Run {
            envelope,
            lab,
            admin,
            hub,
            operators: Vec::new(),
            args,
            clusters_file,
            names,
            label,
            published: Published::default(),
            watches_before: 0.0,
            figures: serde_json::Map::new(),
            shown_unreachable: Vec::new(),
        }
    }
}

impl Run<'_> {
    /// The tenancy namespace of Controller `controller`.
    fn namespace(&self, controller: &str) -> String {
        format!("{}-{controller}", self.label)
    }

    /// Starts `count` operators with `extra` arguments beside the run's, at once (off the
    /// runtime's threads: each waits for its /readyz).
    async fn start_operators(&mut self, count: usize, extra: &[String]) {
        let starts = (0..count).map(|_| {
            let namespace = self.hub.namespace.clone();
            let args: Vec<String> = self.args.iter().chain(extra).cloned().collect();
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Operator::start_with(&Lab::get(), &namespace, &args)
            })
        });
        for started in futures::future::join_all(starts).await {
            self.operators.push(started.unwrap());
        }
    }

    /// Stops every operator with SIGTERM, at once, and waits for them to exit.
    async fn stop_operators(&mut self) {
        let stops = self
            .operators
            .drain(..)
            .map(|operator| tokio::task::spawn_blocking(move || operator.stop()));
        for stopped in futures::future::join_all(stops).await {
            stopped.unwrap();
        }
    }

    /// The operator of a run on one.
    fn operator(&self) -> &Operator {
        self.operators.first().expect("the operator runs")
    }

    /// A metric summed over the operators (read off the runtime's threads).
    fn metric(&self, name: &str) -> f64 {
        tokio::task::block_in_place(|| self.operators.iter().map(|o| o.metric(name)).sum())
    }

    /// CPU seconds so far of each operator.
    fn operators_cpu(&self) -> Vec<f64> {
        self.operators
            .iter()
            .map(|o| super::operator::usage(o.pid()).2)
            .collect()
    }

    async fn counters(&self) -> Counters {
        let flow = self.envelope.operator_flow.as_deref();
        Counters {
            at: Instant::now(),
            operator_cpu: self.operators_cpu().iter().sum(),
            hub_cpu: ["hub-kube-apiserver", "etcd"]
                .map(|p| super::operator::usage(self.lab.pid(p)).2)
                .iter()
                .sum(),
            members_cpu: super::operator::usage(std::process::id()).2,
            operator_requests: match flow {
                Some(flow) => dispatched(&self.admin, flow).await,
                None => f64::NAN,
            },
            member_requests: dispatched(&self.admin, MEMBERS_FLOW).await,
            status_writes: self.metric("tenancy_hub_status_writes_total"),
        }
    }

    /// The costs between `before` and now (every operator's together), named after `phase`.
    async fn costs(&self, phase: &str, before: Counters) -> serde_json::Map<String, Value> {
        let after = self.counters().await;
        let n = self.envelope.members as f64;
        let minutes = after.at.duration_since(before.at).as_secs_f64() / 60.0;
        [
            ("seconds", after.at.duration_since(before.at).as_secs_f64()),
            (
                "operator_cpu_seconds_per_member",
                (after.operator_cpu - before.operator_cpu) / n,
            ),
            (
                "hub_cpu_seconds_per_member",
                (after.hub_cpu - before.hub_cpu) / n,
            ),
            (
                "members_cpu_seconds_per_member",
                (after.members_cpu - before.members_cpu) / n,
            ),
            (
                "operator_requests_per_member",
                (after.operator_requests - before.operator_requests) / n,
            ),
            (
                "member_requests_per_member",
                (after.member_requests - before.member_requests) / n,
            ),
            (
                "status_writes_per_minute",
                (after.status_writes - before.status_writes) / minutes,
            ),
        ]
        .map(|(figure, value)| (format!("{phase}_{figure}"), json!(value)))
        .into_iter()
        .collect()
    }

    /// Adds and joins every member, each labelled with its part too when `parts` is given
    /// (member i in part i % parts); records the time it took and the watch streams before it.
    async fn join(&mut self, parts: Option<usize>) -> Fleet {
        self.watches_before = watches(&self.admin).await;
        let before = self.counters().await;
        let (label, sample) = (self.label.clone(), self.envelope.sample);
        add(&self.admin, &self.names, |i| {
            let mut labels = BTreeMap::from([(ALL_LABEL.to_owned(), label.clone())]);
            if i < sample {
                labels.insert(SOME_LABEL.into(), label.clone());
            }
            if let Some(parts) = parts {
                labels.insert(PART_LABEL.into(), format!("{label}-{}", i % parts));
            }
            labels
        })
        .await;
        let fleet = Fleet::join(self.lab, &self.admin, &self.names).await;
        let costs = self.costs("join", before).await;
        self.figures.extend(costs);
        fleet
    }

    /// Controller `all` on every member, until each member's work is taken (its status says so);
    /// returns the size of that status.
    async fn converge(&mut self, fleet: &Fleet) -> usize {
        let before = self.counters().await;
        let n = self.envelope.members;
        let spec = spec(&self.namespace("all"), (ALL_LABEL, &self.label), "3");
        self.hub.apply("all", spec).await;
        let status = self.taken("all", n).await;
        let costs = self.costs("converge", before).await;
        self.figures.extend(costs);
        assert_eq!(
            fleet.answered(&self.namespace("all"), RELEASE),
            n,
            "every member answered its work"
        );
        let bytes = serde_json::to_vec(&status).unwrap().len();
        self.figures.insert("status_bytes".into(), json!(bytes));
        self.figures.insert(
            "status_bytes_per_member".into(),
            json!(bytes as f64 / n as f64),
        );
        bytes
    }

    /// Waits until Controller `name`'s work is taken on its `n` members (see [`taken_status`]).
    async fn taken(&self, name: &str, n: usize) -> ControllerStatus {
        let api = self.hub.api();
        wait_until(
            &format!("the work of Controller {name} taken on {n} members"),
            PHASE,
            || async { taken_status(api.get(name).await.ok()?, n) },
        )
        .await
    }
}

/// `c`'s status when it says its `n` releases deployed, its generation observed, and Ready.
fn taken_status(c: TenancyController, n: usize) -> Option<ControllerStatus> {
    let s = c.status?;
    let current = s.observed_generation == c.metadata.generation;
    (current && s.summary.as_ref()?.releases == format!("{n}/{n}") && ready(&s)).then_some(s)
}

impl Run<'_> {
    /// Idle costs over the quiet window: operator CPU and memory, requests and status writes
    /// per minute, and the operator's own watch streams.
    async fn quiet(&mut self) {
        let costs = self.quiet_costs().await;
        self.figures.extend(costs);
        let (rss, peak, _) = super::operator::usage(self.operator().pid());
        let n = self.envelope.members as f64;
        for (figure, value) in [
            ("operator_rss_mib", rss as f64 / 1024.0),
            ("operator_peak_rss_mib", peak as f64 / 1024.0),
            ("operator_rss_kib_per_member", rss as f64 / n),
            (
                "operator_watch_streams",
                self.metric("tenancy_hub_watch_streams"),
            ),
            (
                "operator_watched_namespaces",
                self.metric("tenancy_hub_watched_namespaces"),
            ),
            (
                "hub_watch_streams_per_member",
                self.watch_streams_per_member().await,
            ),
        ] {
            self.figures.insert(figure.into(), json!(value));
        }
    }

    /// The costs over the quiet window (see [`Run::costs`]).
    async fn quiet_costs(&self) -> serde_json::Map<String, Value> {
        let before = self.counters().await;
        tokio::time::sleep(self.envelope.quiet).await; // a measurement window, not a wait
        self.costs("quiet", before).await
    }

    /// Watch streams open on the hub API server beyond those before the members joined, per member.
    async fn watch_streams_per_member(&self) -> f64 {
        (watches(&self.admin).await - self.watches_before) / self.envelope.members as f64
    }

    /// Applies Controller `some` (one release of `replicas` on the sampled members) and times
    /// each sampled member's work published, from the apply; waits until it is taken.
    async fn placement(&mut self, replicas: &str) -> Value {
        let sample = &self.names[..self.envelope.sample];
        let namespace = self.namespace("some");
        let expected: Vec<String> = sample
            .iter()
            .map(|c| {
                let key = format!("{c}/{namespace}/{RELEASE}").parse().unwrap();
                format!("tenancy-hub-member-{c}/{}", work_name(&key))
            })
            .collect();
        let spec = spec(&namespace, (SOME_LABEL, &self.label), replicas);
        let started = Instant::now();
        self.hub.apply("some", spec).await;
        let published = self.published.clone();
        let mut seconds: Vec<f64> =
            wait_until("the sampled members' work published", PHASE, || {
                let published = published.lock().unwrap();
                let times = expected
                    .iter()
                    .map(|k| {
                        published
                            .get(k)
                            .filter(|t| **t >= started)
                            .map(|t| t.duration_since(started).as_secs_f64())
                    })
                    .collect::<Option<Vec<f64>>>();
                std::future::ready(times)
            })
            .await;
        self.taken("some", sample.len()).await;
        let taken = started.elapsed().as_secs_f64();
        seconds.sort_by(f64::total_cmp);
        let at = |p: f64| {
            seconds[((seconds.len() as f64 * p).ceil() as usize).clamp(1, seconds.len()) - 1]
        };
        json!({
            "members": seconds.len(),
            "published_p50_seconds": at(0.5),
            "published_p90_seconds": at(0.9),
            "published_p99_seconds": at(0.99),
            "published_max_seconds": at(1.0),
            "taken_seconds": taken,
        })
    }

    /// Restarts the operator and times its full resync: ready, what runs in every member's
    /// namespaces read back from their reports (as many cluster namespaces watched as before),
    /// the Controllers reconciled, nothing queued or running, both statuses Ready for the current
    /// generation; counts the work it published again meanwhile (none is needed).
    async fn resync(&mut self) {
        self.stop_operators().await;
        let before = self.counters_without_operator().await;
        let started = Instant::now();
        self.start_operators(1, &[]).await;
        let ready_seconds = started.elapsed().as_secs_f64();
        let n = self.envelope.members as f64;
        let scopes = self.figures["operator_watched_namespaces"]
            .as_f64()
            .unwrap();
        let this = &*self;
        wait_until("the restarted operator resynced", PHASE, || async {
            let synced = this.metric("tenancy_hub_watched_namespaces") >= scopes
                && this.metric("tenancy_hub_reconciles_total") >= 2.0
                && this.metric("tenancy_hub_queue_depth") == 0.0
                && this.metric("tenancy_hub_jobs_running") == 0.0;
            synced.then_some(())
        })
        .await;
        self.taken("all", self.envelope.members).await;
        self.taken("some", self.envelope.sample).await;
        let resync = started.elapsed().as_secs_f64();
        let republished = self
            .published
            .lock()
            .unwrap()
            .values()
            .filter(|t| **t >= started)
            .count();
        let after = self.counters().await;
        // Every member of this run has its agent renew its Lease throughout: none of them is to
        // be shown unreachable. Members other tests joined on the same hub and left behind,
        // their agents gone, are rightly shown so, and are not this run's.
        let ours = format!("cluster={}-", self.label);
        self.shown_unreachable = self
            .operators
            .iter()
            .flat_map(|o| {
                let logged = o.logged();
                let lines = logged
                    .lines()
                    .filter(|l| l.contains("cluster is unreachable") && l.contains(&ours));
                lines.map(str::to_owned).collect::<Vec<_>>()
            })
            .collect();
        for (figure, value) in [
            (
                "resync_members_shown_unreachable",
                self.shown_unreachable.len() as f64,
            ),
            ("resync_ready_seconds", ready_seconds),
            ("resync_seconds", resync),
            ("resync_work_published_again", republished as f64),
            (
                "resync_operator_requests_per_member",
                (after.operator_requests - before.0) / n,
            ),
            (
                "resync_member_requests_per_member",
                (after.member_requests - before.1) / n,
            ),
        ] {
            self.figures.insert(figure.into(), json!(value));
        }
    }

    /// The request counters while no operator runs.
    async fn counters_without_operator(&self) -> (f64, f64) {
        let operator = match &self.envelope.operator_flow {
            Some(flow) => dispatched(&self.admin, flow).await,
            None => f64::NAN,
        };
        (operator, dispatched(&self.admin, MEMBERS_FLOW).await)
    }

    /// Deletes the members (their hub namespaces go with them), stops the operators and waits for
    /// the namespaces to be gone.
    async fn remove(&mut self) {
        let api: Api<MemberCluster> = Api::all(self.admin.clone());
        let deletes = self.names.iter().map(|name| {
            let api = api.clone();
            async move { api.delete(name, &DeleteParams::default()).await.map(|_| ()) }
        });
        let deleted: Vec<_> = futures::stream::iter(deletes)
            .buffer_unordered(16)
            .collect()
            .await;
        assert!(
            deleted.iter().all(Result::is_ok),
            "the hub deletes the MemberClusters"
        );
        self.stop_operators().await;
        // Their namespaces are gone before the next run, so it does not pay for their deletion.
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.admin.clone());
        let prefix = format!("tenancy-hub-member-{}-", self.label);
        wait_until("the members' hub namespaces deleted", PHASE, || async {
            let left = namespaces.list_metadata(&Default::default()).await.ok()?;
            let ours = left.items.iter().filter(|n| {
                n.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| n.starts_with(&prefix))
            });
            (ours.count() == 0).then_some(())
        })
        .await;
        std::fs::remove_file(&self.clusters_file).unwrap();
    }
}
