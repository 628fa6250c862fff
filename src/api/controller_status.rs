//! The `Controller` resource's status types: what runs per cluster and namespace, the rollout's
//! progress and drift, as reported in `.status` (re-exported by `api::crd`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state, per cluster and namespace, kept under 256 KiB.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStatus {
    /// One entry per cluster/namespace this resource delivers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updated_tenancies: Vec<TenancyStatus>,

    /// One entry per targeted cluster: reachability and readiness counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,

    /// Totals shown by `kubectl get controllers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,

    /// Ready, Degraded and other conditions, with reasons and transition times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Progress of the newest generation's rollout, when `spec.rollout` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// Where the newest generation's rollout stands. It is also the rollout's whole state: an
/// operator that restarts carries on from here.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The spec generation being rolled out.
    pub generation: i64,
    /// `Progressing`, `Paused` (between waves), `Halted` or `Complete`.
    pub phase: String,
    /// Clusters healthy on this generation / clusters of the rollout, as "2/3".
    pub progress: String,
    /// The wave in progress, from 1.
    pub wave: i32,
    /// Waves in all.
    pub waves: i32,
    /// Clusters whose releases all run this generation.
    pub updated: i32,
    /// Clusters healthy on this generation.
    pub healthy: i32,
    /// Clusters not reached yet: they keep the previous generation.
    pub pending: i32,
    /// Clusters that halted the rollout.
    pub failed: i32,
    /// When the rollout started (RFC 3339).
    pub started_at: String,
    /// When every cluster was healthy (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// When the last wave completed, while the next one waits out `pauseBetweenWaves` (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_completed_at: Option<String>,
    /// Why the rollout stopped, while it is halted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<RolloutHalt>,
    /// The last `multitenancy.dev/rollout` annotation acted on (`resume-…` or `restart-…`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Every cluster of the rollout, in the order it is reached.
    #[serde(default)]
    pub clusters: Vec<RolloutCluster>,
}

/// Why a rollout halted.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHalt {
    /// The cluster that failed.
    pub cluster: String,
    /// Its release that failed or is not healthy; empty when not known.
    #[serde(default)]
    pub release: String,
    /// What went wrong.
    pub reason: String,
    /// When it halted (RFC 3339).
    pub at: String,
}

/// One cluster of a rollout.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCluster {
    /// Registered cluster name.
    pub name: String,
    /// Its wave, from 1.
    pub wave: i32,
    /// `Pending` (keeps the previous generation), `Progressing`, `Healthy` or `Failed`.
    pub state: String,
    /// When it was given the new generation (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it was found healthy on it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_at: Option<String>,
}

/// Totals over all clusters, as "ready/total".
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Reachable clusters / targeted clusters.
    pub clusters: String,
    /// Deployed releases / desired releases.
    pub releases: String,
    /// Ready pods / pods.
    pub pods: String,
}

/// What runs in one namespace of one cluster.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenancyStatus {
    /// Registered cluster name.
    pub cluster: String,
    /// Namespace on that cluster.
    pub namespace: String,
    /// One entry per release.
    #[serde(default)]
    pub chart_messages: Vec<ChartMessage>,
    /// Deployments, StatefulSets and DaemonSets of the releases.
    #[serde(default)]
    pub replication_controller_status: Vec<WorkloadStatus>,
    /// Pods of the releases; beyond a bound, only pods that are not ready.
    #[serde(default)]
    pub pod_status: Vec<PodStatus>,
    /// Pods counted, listed or not.
    #[serde(default)]
    pub pods_total: i32,
    /// Ready pods counted, listed or not.
    #[serde(default)]
    pub pods_ready: i32,
    /// True when the entry reflects a live watch; false when the cluster is unreachable.
    #[serde(default)]
    pub fresh: bool,
    /// When the cluster last answered for this namespace (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
}

/// Outcome of one Helm release.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChartMessage {
    /// Chart as named in the spec.
    pub chart_name: String,
    /// Helm release name.
    pub release_name: String,
    /// Settings applied, key to value.
    #[serde(default)]
    pub setting_map: BTreeMap<String, String>,
    /// The values the release is given, as made for its cluster (JSON, what came from Secrets
    /// masked as `******`, at most 2 KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub values: String,
    /// Trimmed Helm or planning error; empty when the release is fine.
    #[serde(default)]
    pub error_message: String,
    /// Release phase: Pending, Deployed, Failed, Conflict, Invalid (cannot be planned as
    /// written), Forbidden (not allowed by the tenancy policies), Unverified (its chart's
    /// signatures do not pass the tenancy policies), Orphaned or Unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Helm revision deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Chart version deployed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_version: String,
    /// Where the chart comes from: its repository and name, or its `oci://` reference (never
    /// credentials); empty for a chart of the chart home.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The digest of the chart planned: the OCI manifest's, or the archive's (`sha256:…`) when
    /// its signatures were checked.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_digest: String,
    /// Who signed the chart, per signature rule of the policies (`cosign: …`), when they ask
    /// for signatures.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verified_by: String,
    /// Where the live objects differ from the deployed manifest, while they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftStatus>,
    /// The objects of the deployed revision that are not current (judged by the chart's
    /// `healthCheckExprs` or kstatus's rules), while any is; the release is not ready meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    /// The chart's tests run after this revision was deployed (`test.enable`), by name, and how
    /// each ended: `Succeeded`, `Failed` or `Unknown`. Failed tests fail the release and are
    /// named in `errorMessage`; after an operator restart this stays empty until tests run again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tests: BTreeMap<String, String>,
    /// What the last install or upgrade of this spec did with the chart's `crds/` (as its
    /// `crds` policy asked): how many were created, replaced or left unchanged, with their
    /// first names; empty when the chart brings none or the Helm executor did not say.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub crds: String,
    /// Which gate holds this release's Helm work back while it is `Pending`: `Rollout` (its
    /// cluster's wave has not come, or the rollout halted) or `DependsOn` (a release it depends
    /// on is not Ready); empty when no gate does. `errorMessage` says what it waits for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held_by: String,
}

/// The gates a release's Helm work may be held back by, as `heldBy` names them.
pub mod held_by {
    /// The rollout: the cluster's wave has not come, or the rollout halted.
    pub const ROLLOUT: &str = "Rollout";
    /// `dependsOn`: a release it depends on is not Ready.
    pub const DEPENDS_ON: &str = "DependsOn";
}

/// Drift of one release: the objects whose live state differs from the deployed manifest (at
/// most 10, each with at most 5 JSON pointers, and counts of the rest).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftStatus {
    /// The Helm revision whose manifest the live objects were compared with.
    pub revision: i64,
    /// When this drift was first found (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detected_at: String,
    /// What is done about it: `Reported` (mode warn), `Repairing` (mode enabled) or
    /// `RepairSuppressed` (mode enabled, but repaired too often lately).
    pub action: String,
    /// Objects that differ.
    #[serde(default)]
    pub objects: Vec<DriftedObject>,
    /// Objects that differ beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_objects: i32,
}

/// One object that differs from the manifest. Values are never shown, only where they differ.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftedObject {
    /// Object kind.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Object namespace; empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// True when the object does not exist at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
    /// The impersonated user the release's objects are read as, when that user may not read
    /// this one (another namespace, a cluster-scoped kind, rights taken away): it was neither
    /// compared nor found missing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub not_readable_by: String,
    /// JSON pointers of the manifest's fields that the live object lacks or holds otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Differing fields beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_paths: i32,
}

/// The health of a release's objects, while one is not current: at most 10 objects, the worst
/// first, and a count of the rest.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// The Helm revision whose objects were judged.
    pub revision: i64,
    /// The worst of them: `Failed` (halts a rollout at once), `InProgress`, or `Unknown` while
    /// the revision's objects have not been judged yet.
    pub state: String,
    /// Objects not current.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<UnhealthyObject>,
    /// Objects not current beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_objects: i32,
}

/// One object of a release that is not current, and why.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyObject {
    /// Object API version.
    pub api_version: String,
    /// Object kind.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Object namespace; empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `Failed` or `InProgress`.
    pub health: String,
    /// Why, in a few words (at most 256 bytes): the expression that held, the conditions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Readiness of one Deployment, StatefulSet or DaemonSet.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Workload name.
    pub replication_controller_name: String,
    /// For example `apps/v1`.
    pub api_version: String,
    /// Deployment, StatefulSet or DaemonSet.
    pub kind: String,
    /// "ready/desired".
    pub ready: String,
    /// Release the workload belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_name: String,
    /// Rolled out: the newest spec on every replica, all of them ready and available.
    #[serde(default)]
    pub rolled_out: bool,
}

/// State of one pod.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Pod name.
    pub pod_name: String,
    /// Pod phase: Pending, Running, Succeeded, Failed or Unknown.
    pub phase: String,
    /// Whether every container is ready.
    #[serde(default)]
    pub ready: bool,
    /// Container restarts, summed.
    #[serde(default)]
    pub restarts: i32,
    /// Waiting or terminated reason, when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Reachability and readiness of one targeted cluster.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Registered cluster name.
    pub name: String,
    /// Whether the cluster's API server answers.
    pub reachable: bool,
    /// When the cluster last answered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
    /// Deployed releases / desired releases on this cluster.
    pub releases: String,
    /// Ready pods / pods on this cluster.
    pub pods: String,
}
