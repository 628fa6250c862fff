//! The messages of the pull protocol: the calls the hub publishes for one member (signed, see [`crate::member::pull::wire`]) and the reports its agent writes, with the object names and labels they live under in the member's hub namespace.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    ByteString,
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    api::key::{ClusterName, ReleaseKey},
    api::member_cluster::AGENT_LEASE,
    member::link::DriftCheck,
    member::pull::watching::Watched,
    member::pull::wire::{AgentConfig, WireError},
    observe::model::{PodInfo, WorkloadInfo},
    observe::records::Deployed,
    observe::release_check::Checked,
    plan::{Job, OwnerId},
    queue::Outcome,
};

/// Label on the hub's calls and chart chunks: `work`, `ask`, `watch` or `chart`.
pub const CALL_LABEL: &str = "multitenancy.dev/pull-call";
/// The annotation of a work call naming its id, read by a later leader (see
/// `PullHub::publish_work`).
pub(crate) const WORK_ID: &str = "multitenancy.dev/pull-work-id";
/// The annotation of a work call holding its job's digest.
pub(crate) const WORK_CONTENT: &str = "multitenancy.dev/pull-work-content";
/// Label on the agent's reports: `answer`, `reply`, `records` (a manifest), `records-piece`,
/// `observed` or `status`.
pub(crate) const REPORT_LABEL: &str = "multitenancy.dev/pull-report";
/// The [`REPORT_LABEL`] of a piece of the release records (see [`crate::member::pull::pieces`]).
pub(crate) const PIECE_KIND: &str = "records-piece";
/// Secret data key of a report's JSON.
pub(crate) const REPORT_KEY: &str = "report";
/// The agent's status report.
pub const STATUS_NAME: &str = "agent-status";
/// The field manager of what the agent writes on the hub (its Lease and reports).
pub const AGENT_MANAGER: &str = "tenancy-hub-agent";
/// The largest call or report, in bytes: well under an object's 1 MiB.
pub(crate) const MAX_MESSAGE: usize = 768 * 1024;

/// One call the hub publishes for a member's agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// The cluster it is signed for.
    pub(crate) cluster: ClusterName,
    /// Unique per call: the answer or reply names it.
    pub(crate) id: String,
    /// What to do.
    pub(crate) body: CallBody,
}

/// What a call asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum CallBody {
    /// Carry out one Helm job, with its chart as published beside it.
    Work {
        /// The job, exactly as the hub planned and admitted it.
        job: Job,
        /// The chart's archive, for an install or upgrade.
        chart: Option<ChartRef>,
    },
    /// Compare a release's revision with the live objects.
    Drift(DriftCheck),
    /// Read a revision's manifest and values.
    Manifest {
        /// The release.
        key: ReleaseKey,
        /// The revision.
        revision: i64,
    },
    /// Watch the pods and workloads of these namespaces: those of one shard's Controllers (see
    /// [`crate::member::pull::watching`]).
    Watch {
        /// The namespaces.
        namespaces: BTreeSet<String>,
        /// The shard whose Controllers target them.
        #[serde(default)]
        shard: u32,
        /// The shard count of the replica that wrote the call.
        #[serde(default = "one")]
        shards: u32,
        /// When the call was written, in milliseconds since the epoch.
        #[serde(default)]
        at_millis: u64,
    },
}

impl Call {
    /// Opens the call that the Secret `name` holds in `data`: only one signed by the hub's work
    /// key for `config`'s cluster opens.
    pub fn open(
        config: &AgentConfig,
        name: &str,
        data: &BTreeMap<String, ByteString>,
    ) -> Result<Self, WireError> {
        let bytes = config.open(name, data)?;
        let call: Call = serde_json::from_slice(bytes).map_err(|e| WireError::Malformed {
            what: name.to_owned(),
            detail: e.to_string(),
        })?;
        config.check_cluster(name, &call.cluster)?;
        Ok(call)
    }

    /// Its id, which the answer names.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What a work call asks, told without its job; None for any other call.
    pub fn work(&self) -> Option<Work> {
        let CallBody::Work { job, .. } = &self.body else {
            return None;
        };
        let release = match job {
            Job::Apply { release, .. } => Some(release),
            _ => None,
        };
        Some(Work {
            key: job.key().clone(),
            owner: job.owner().clone(),
            uninstall: matches!(job, Job::Uninstall { .. }),
            spec_hash: release.map(|r| r.spec_hash.clone()),
            chart_version: release.and_then(|r| r.version.clone()),
        })
    }

    /// The reply of a member where nothing drifted, to a drift check call; None for any other
    /// call.
    pub fn nothing_drifted(&self) -> Option<Replied> {
        matches!(self.body, CallBody::Drift(_)).then(|| Replied {
            cluster: self.cluster.clone(),
            id: self.id.clone(),
            reply: Reply::Drift(Ok(Checked::default())),
        })
    }

    /// What a watch call asks the agent to watch; None for any other call.
    pub fn watched(&self) -> Option<Watched> {
        match &self.body {
            CallBody::Watch {
                namespaces,
                shards,
                at_millis,
                ..
            } => Some(Watched {
                shards: *shards,
                at_millis: *at_millis,
                namespaces: namespaces.clone(),
            }),
            _ => None,
        }
    }
}

/// What one work call asks, as [`Call::work`] tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Work {
    /// The release.
    pub key: ReleaseKey,
    /// The Controller it is done for.
    pub owner: OwnerId,
    /// True for an uninstall.
    pub uninstall: bool,
    /// The spec hash an apply's records are to carry; None for an uninstall or a rollback.
    pub spec_hash: Option<String>,
    /// The chart version an apply installs, when the Controller names one.
    pub chart_version: Option<String>,
}

/// The agent's Lease of `cluster`, renewed now and held `seconds`: written in the member's hub
/// namespace under [`AGENT_LEASE`].
pub fn lease(cluster: &ClusterName, seconds: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(AGENT_LEASE.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(cluster.to_string()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

/// A chart archive published for an agent, in chunks, by its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChartRef {
    /// SHA-256 of the archive, hex.
    pub(crate) digest: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// How many chunks hold it.
    pub(crate) chunks: u32,
}

/// What the agent answers for one work call, under [`answer_name`] of its release.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Answer {
    /// The cluster it reports for.
    pub cluster: ClusterName,
    /// The release.
    pub key: ReleaseKey,
    /// The call answered.
    pub id: String,
    /// How it went.
    pub outcome: Outcome,
}

/// What the agent replies to an ask, under [`reply_name`] of its id.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Reply {
    /// A drift check's finding: drift, and the health of the objects judged.
    Drift(Result<Checked, String>),
    /// A revision's manifest and values (None: the record is gone).
    Manifest(Result<Option<Deployed>, String>),
}

/// A reply with the cluster it is for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Replied {
    /// The cluster it reports for.
    pub(crate) cluster: ClusterName,
    /// The ask replied to.
    pub(crate) id: String,
    /// The reply.
    pub(crate) reply: Reply,
}

/// What runs in one watched namespace, under [`observed_name`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Observed {
    /// The cluster it reports for.
    pub cluster: ClusterName,
    /// The namespace.
    pub namespace: String,
    /// Its pods.
    pub pods: Vec<PodInfo>,
    /// Its workloads.
    pub workloads: Vec<WorkloadInfo>,
    /// Why its watches are not live, when they are not.
    pub problem: Option<String>,
}

/// The agent's own state, under [`STATUS_NAME`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The cluster it reports for.
    pub cluster: Option<ClusterName>,
    /// The agent's version.
    pub version: String,
    /// The member's Kubernetes version.
    pub kube_version: Option<String>,
    /// The API versions the member serves.
    pub api_versions: Vec<String>,
    /// What keeps it from working, when something does.
    pub problem: Option<String>,
}

/// 16 hex digits naming a release's objects in the member's hub namespace.
fn short(key: &ReleaseKey) -> String {
    let digest = Sha256::digest(key.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The work call of a release: one per release, the newest replacing the last.
pub fn work_name(key: &ReleaseKey) -> String {
    format!("work-{}", short(key))
}

/// The agent's answer for a release's work.
pub fn answer_name(key: &ReleaseKey) -> String {
    format!("answer-{}", short(key))
}

/// An ask call.
pub(crate) fn ask_name(id: &str) -> String {
    format!("ask-{id}")
}

/// The agent's reply to an ask.
pub fn reply_name(id: &str) -> String {
    format!("reply-{id}")
}

/// One chunk of a published chart.
pub(crate) fn chunk_name(digest: &str, index: u32) -> String {
    format!("chart-{}-{index}", &digest[..digest.len().min(40)])
}

/// The observation report of a namespace.
pub fn observed_name(namespace: &str) -> String {
    format!("observed-{namespace}")
}

/// The shard count of a watch call that names none: one.
fn one() -> u32 {
    1
}

/// A fresh call id: 32 hex digits from the operating system's randomness.
pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .expect("the system's randomness is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `id` has the form [`new_id`] gives.
pub(crate) fn is_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_of_the_form_new_id_gives_are_taken_back() {
        assert!(is_id(&new_id()));
        assert!(!is_id(""));
        assert!(!is_id(&"A".repeat(32)));
        assert!(!is_id(&"0".repeat(33)));
        assert!(!is_id("../../../../../../etc/passwd/0000"));
    }

    #[test]
    fn object_names_are_valid_and_differ_per_release() {
        let a: ReleaseKey = "edge-1/team-a/web".parse().unwrap();
        let b: ReleaseKey = "edge-1/team-a/api".parse().unwrap();
        assert_ne!(work_name(&a), work_name(&b));
        assert_eq!(work_name(&a).len(), "work-".len() + 16);
        assert!(answer_name(&a).starts_with("answer-"));
        let id = new_id();
        assert_eq!(id.len(), 32);
        assert_ne!(id, new_id());
        assert!(chunk_name(&"f".repeat(64), 3).len() <= 63);
    }

    #[test]
    fn a_work_call_round_trips_through_json_with_its_helm_settings() {
        let key: ReleaseKey = "edge-1/team-a/web".parse().unwrap();
        let sent = Job::Uninstall {
            key: key.clone(),
            owner: crate::plan::OwnerId {
                namespace: "team-a".into(),
                name: "c".into(),
            },
            identity: None,
            settings: crate::api::crd::Uninstall {
                timeout: Some("90s".into()),
                disable_hooks: Some(false),
                keep_history: true,
                wait: true,
            },
        };
        let call = Call {
            cluster: "edge-1".parse().unwrap(),
            id: new_id(),
            body: CallBody::Work {
                job: sent.clone(),
                chart: None,
            },
        };
        let read: Call = serde_json::from_slice(&serde_json::to_vec(&call).unwrap()).unwrap();
        let CallBody::Work { job, .. } = read.body else {
            panic!("not work")
        };
        assert_eq!(job.key(), &key);
        assert_eq!(
            job, sent,
            "the agent runs the uninstall as the hub asked it"
        );
    }
}
