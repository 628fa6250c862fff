//! The scale envelope on shards: the same N simulated pull members against K operator replicas run with `--shards K`, for each K of a list, with C Controllers dividing the members between them.
//!
//! The members join once, enrolled by one operator, which then stops. For each K: K replicas
//! started with `--leader-elect --lease-namespace tenancy-hub --lease-name <run>-r<K> --shards K`
//! (the operator's own namespace holds the seal key the members were enrolled with, so replicas
//! share it there); once each shard Lease is led by a replica of its own, C Controllers, the one of
//! part j delivering one release to the members of part j (member i is in part i % C, so together
//! they are the one-replica run's Controller `all`), named so that the K shards get as many each;
//! timed until each one's work is taken; a quiet window; then the Controllers deleted and the
//! replicas stopped. Requests are counted by identity, so the operator's are every replica's.

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::DeleteParams};
use serde::Serialize;
use serde_json::{Value, json};
use tenancy_hub::api::shard::shard_of;

use super::{
    super::{
        fixtures::{ready, wait_until},
        lab::Lab,
        operator::usage,
        simulated::Fleet,
    },
    Envelope, PART_LABEL, PHASE, RELEASE, Run, progress, spec, taken_status,
};

/// The hub namespace of the replicas' Leases: the operator's own, where its seal key is.
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// What a run on shards found.
#[allow(dead_code)] // used by some test crates only
pub struct Sharded {
    /// The figures of the members' join, as JSON.
    pub join: Value,
    /// One per count of replicas, in the order given.
    pub runs: Vec<OnReplicas>,
    /// What went wrong in the members, over every count.
    pub errors: Vec<String>,
}

/// What one count of replicas found.
#[derive(Serialize)]
#[allow(dead_code)] // used by some test crates only
pub struct OnReplicas {
    /// How many replicas (and shards).
    pub replicas: usize,
    /// Each Controller, once its work was taken.
    pub controllers: Vec<Taken>,
    /// Members that answered the work of their part's Controller.
    pub answered: usize,
    /// Each replica.
    pub replica: Vec<Replica>,
    /// The costs to converge and over the quiet window (`converge_*`, `quiet_*`: every replica's
    /// together), the replicas' RSS (max and sum) and the hub's watch streams per member.
    #[serde(flatten)]
    pub figures: serde_json::Map<String, Value>,
}

/// One Controller of a part, once its work was taken.
#[derive(Serialize)]
#[allow(dead_code)] // used by some test crates only
pub struct Taken {
    /// Its name.
    pub name: String,
    /// The members of its part.
    pub members: usize,
    /// Its status's releases summary (`deployed/total`).
    pub releases: String,
    /// Whether its status said Ready.
    pub ready: bool,
}

/// One replica of a count.
#[derive(Serialize)]
#[allow(dead_code)] // used by some test crates only
pub struct Replica {
    /// Its process id.
    pub pid: u32,
    /// The shards it led once every shard was led.
    pub shards: Vec<u32>,
    /// The Controllers of those shards.
    pub controllers: usize,
    /// Its RSS after the quiet window, MiB.
    pub rss_mib: f64,
    /// Its peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// Its CPU seconds from the Controllers' apply until every one's work was taken.
    pub converge_cpu_seconds: f64,
    /// The members it enrolled (applied their hub objects again): the hub's own work, done by
    /// the leader of shard 0 only.
    pub enrolled: usize,
}

/// One part's Controller on one count of replicas.
pub(super) struct Part {
    /// j: it goes to the members of part j.
    pub(super) index: usize,
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) members: usize,
    shard: u32,
}

impl Envelope {
    /// Runs it on `lab` for each count of `replicas`, with `controllers` Controllers dividing the
    /// members; the members join once.
    #[allow(dead_code)] // used by some test crates only
    pub async fn sharded(&self, lab: &Lab, replicas: &[usize], controllers: usize) -> Sharded {
        let mut run = Run::new(self, lab).await;
        run.start_operators(1, &[]).await;
        let fleet = run.join(Some(controllers)).await;
        run.stop_operators().await;
        progress(
            "members joined; the operator that enrolled them stopped",
            &run,
        );
        let mut runs = Vec::new();
        for &k in replicas {
            runs.push(run.on_replicas(&fleet, k, controllers).await);
        }
        let errors = fleet.errors();
        fleet.stop().await;
        run.remove().await;
        Sharded {
            join: Value::Object(std::mem::take(&mut run.figures)),
            runs,
            errors,
        }
    }
}

impl Run<'_> {
    /// `k` replicas, each shard led by its own; the parts' Controllers applied and taken; a quiet
    /// window; the Controllers deleted and the replicas stopped.
    async fn on_replicas(&mut self, fleet: &Fleet, k: usize, controllers: usize) -> OnReplicas {
        let base = format!("{}-r{k}", self.label);
        let leaders = self.start_replicas(k, &base).await;
        let parts = self.parts(k, controllers);
        let (before, cpu_before) = (self.counters().await, self.operators_cpu());
        for part in &parts {
            let selector = format!("{}-{}", self.label, part.index);
            let spec = spec(&part.namespace, (PART_LABEL, &selector), "3");
            self.hub.apply(&part.name, spec).await;
        }
        let controllers = self.taken_parts(&parts).await;
        let mut figures = self.costs("converge", before).await;
        let cpu: Vec<f64> = self.operators_cpu();
        progress(&format!("{k} replicas: the work of every part taken"), self);
        let answered = parts
            .iter()
            .map(|p| fleet.answered(&p.namespace, RELEASE))
            .sum();
        figures.extend(self.quiet_costs().await);
        figures.insert(
            "hub_watch_streams_per_member".into(),
            json!(self.watch_streams_per_member().await),
        );
        let cpu: Vec<f64> = cpu.iter().zip(&cpu_before).map(|(a, b)| a - b).collect();
        let replica = self.replicas(&leaders, &parts, &cpu);
        let rss: Vec<f64> = replica.iter().map(|r| r.rss_mib).collect();
        figures.insert(
            "operator_rss_mib_max".into(),
            json!(rss.iter().copied().fold(0.0, f64::max)),
        );
        figures.insert(
            "operator_rss_mib_sum".into(),
            json!(rss.iter().sum::<f64>()),
        );
        progress(&format!("{k} replicas: quiet window measured"), self);
        // Every release uninstalled by the members before the finalizers go: timed.
        let deleting = std::time::Instant::now();
        join_all(
            parts
                .iter()
                .map(|p| self.hub.delete_and_wait_gone_within(&p.name, PHASE)),
        )
        .await;
        figures.insert(
            "delete_seconds".into(),
            json!(deleting.elapsed().as_secs_f64()),
        );
        self.stop_operators().await;
        delete_leases(&self.admin, &base).await;
        OnReplicas {
            replicas: k,
            controllers,
            answered,
            replica,
            figures,
        }
    }

    /// Starts `k` replicas on Leases named after `base` and waits until each shard is led by a
    /// replica of its own; returns the process id leading each shard.
    async fn start_replicas(&mut self, k: usize, base: &str) -> Vec<u32> {
        let extra = [
            "--leader-elect",
            "--lease-namespace",
            OPERATOR_NAMESPACE,
            "--lease-name",
            base,
            "--shards",
            &k.to_string(),
        ]
        .map(String::from);
        self.start_operators(k, &extra).await;
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), OPERATOR_NAMESPACE);
        let names = shard_leases(base, k);
        let leaders = wait_until(
            "every shard led, each by a replica of its own",
            PHASE,
            || led_apart(&leases, &names),
        )
        .await;
        progress(&format!("{k} replicas: every shard led"), self);
        leaders
    }

    /// The `controllers` parts' Controllers on `k` shards: part j's in shard j % k.
    pub(super) fn parts(&self, k: usize, controllers: usize) -> Vec<Part> {
        let n = self.envelope.members;
        (0..controllers)
            .map(|index| {
                let shard = (index % k) as u32;
                let name = (0..)
                    .map(|x| format!("part-{index}-{x}"))
                    .find(|name| shard_of(&self.hub.namespace, name, k as u32) == shard)
                    .unwrap();
                Part {
                    index,
                    name,
                    namespace: format!("{}-r{k}-p{index}", self.label),
                    members: n / controllers + usize::from(index < n % controllers),
                    shard,
                }
            })
            .collect()
    }

    /// Waits until the work of every part's Controller is taken on its members.
    pub(super) async fn taken_parts(&self, parts: &[Part]) -> Vec<Taken> {
        let api = self.hub.api();
        wait_until(
            "the work of every part's Controller taken",
            PHASE,
            || async {
                let mut taken = Vec::new();
                for part in parts {
                    let status = taken_status(api.get(&part.name).await.ok()?, part.members)?;
                    taken.push(Taken {
                        name: part.name.clone(),
                        members: part.members,
                        ready: ready(&status),
                        releases: status.summary.map(|s| s.releases).unwrap_or_default(),
                    });
                }
                Some(taken)
            },
        )
        .await
    }

    /// Each replica now: the shards it leads (of `leaders`, by shard), the Controllers of `parts`
    /// in them, its RSS, and its CPU seconds to converge (`cpu`, in the replicas' order).
    fn replicas(&self, leaders: &[u32], parts: &[Part], cpu: &[f64]) -> Vec<Replica> {
        self.operators
            .iter()
            .zip(cpu)
            .map(|(operator, cpu)| {
                let (rss, peak, _) = usage(operator.pid());
                let shards: Vec<u32> = (0..leaders.len() as u32)
                    .filter(|s| leaders[*s as usize] == operator.pid())
                    .collect();
                Replica {
                    pid: operator.pid(),
                    controllers: parts.iter().filter(|p| shards.contains(&p.shard)).count(),
                    shards,
                    rss_mib: rss as f64 / 1024.0,
                    peak_rss_mib: peak as f64 / 1024.0,
                    converge_cpu_seconds: *cpu,
                    enrolled: operator.logged().matches("pull member enrolled").count(),
                }
            })
            .collect()
    }
}

/// The Leases of `k` shards named after `base`: `base` itself for one (one leader, no shards).
fn shard_leases(base: &str, k: usize) -> Vec<String> {
    if k == 1 {
        return vec![base.to_owned()];
    }
    (0..k).map(|s| format!("{base}-shard-{s}-of-{k}")).collect()
}

/// The process id of the replica leading each of `names` (identities end in `-<pid>`), once each
/// is led by a replica of its own.
async fn led_apart(leases: &Api<Lease>, names: &[String]) -> Option<Vec<u32>> {
    let mut pids = Vec::new();
    for name in names {
        let holder = leases.get_opt(name).await.ok()??.spec?.holder_identity?;
        let pid: u32 = holder.rsplit('-').next()?.parse().ok()?;
        if pids.contains(&pid) {
            return None;
        }
        pids.push(pid);
    }
    Some(pids)
}

/// Deletes the Leases of the replicas of `base` (shard and replica Leases), released or left.
async fn delete_leases(admin: &kube::Client, base: &str) {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let list = leases.list_metadata(&Default::default()).await.unwrap();
    for name in list.items.into_iter().filter_map(|l| l.metadata.name) {
        if name == base || name.starts_with(&format!("{base}-")) {
            let _ = leases.delete(&name, &DeleteParams::default()).await; // gone already is fine
        }
    }
}
