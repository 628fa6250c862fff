//! The `multitenancy.dev/v1alpha1` `Controller` resource: spec and schema rules; its status
//! types live in `api::controller_status` and are re-exported here.

use std::collections::BTreeMap;

use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::api::controller_status::{
    ChartMessage, ClusterStatus, ControllerStatus, DriftStatus, DriftedObject, HealthStatus,
    PodStatus, RolloutCluster, RolloutHalt, RolloutStatus, Summary, TenancyStatus, UnhealthyObject,
    WorkloadStatus,
};
pub use crate::api::crd::git::{GitRef, GitSource, GitValuesFile, GitValuesSource, RefKind};
pub use crate::api::crd::health::HealthCheckExpr;
pub use crate::api::crd::lifecycle::{
    CrdPolicy, Install, InstallRemediation, RemediationStrategy, Test, TestFilter, Uninstall,
    Upgrade, UpgradeRemediation,
};
pub use crate::api::crd::post_render::{
    CommonMetadata, Image, Kustomize, Patch, PatchTarget, PostRenderer,
};

/// Name of the cluster a tenancy goes to when it names no clusters and no selector.
pub const HUB_CLUSTER: &str = "hub";

/// Desired state: Helm charts delivered into tenant namespaces of member clusters.
// The printer columns repeat `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multitenancy.dev",
    version = "v1alpha1",
    kind = "Controller",
    // The Rust name differs from the kind, so it never meets kube-runtime's `Controller`.
    root = "TenancyController",
    namespaced,
    status = "ControllerStatus",
    shortname = "tenctl",
    category = "tenancy",
    doc = "Delivers Helm charts into tenant namespaces across member clusters and reports what runs there.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Clusters",
        type_ = "string",
        description = "Reachable clusters / targeted clusters",
        json_path = ".status.summary.clusters"
    ),
    printcolumn(
        name = "Releases",
        type_ = "string",
        description = "Deployed releases / desired releases",
        json_path = ".status.summary.releases"
    ),
    printcolumn(
        name = "Pods",
        type_ = "string",
        description = "Ready pods / pods",
        json_path = ".status.summary.pods"
    ),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        description = "Clusters healthy on the newest generation / clusters of the rollout",
        json_path = ".status.rollout.progress"
    ),
    printcolumn(
        name = "Suspended",
        type_ = "boolean",
        description = "No Helm call is made while true",
        json_path = ".spec.suspend"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.tenancies) || self.tenancies.map(t, has(t.charts) ? size(t.charts) : 0).sum() <= 10000")
        .message("a Controller names at most 10000 charts over all its tenancies: split it into several Controllers")
)]
pub struct ControllerSpec {
    /// Tenancies to deliver: each is a namespace, the clusters it goes to, and its charts; at
    /// most 1,000 tenancies and 10,000 charts in all, and 20,000 releases once `clusters` and
    /// `clusterSelector` are resolved (each chart once per cluster).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub tenancies: Vec<Tenancy>,

    /// What deleting this resource does to its releases: `Delete` (the default) uninstalls them
    /// everywhere and waits for every cluster that holds them; `Orphan` leaves them in place and
    /// lets the resource go at once. May be set on a resource already being deleted, for example
    /// when a cluster it waits for is gone for good.
    #[serde(default, skip_serializing_if = "DeletionPolicy::is_default")]
    pub deletion_policy: DeletionPolicy,

    /// Stops every Helm call for this resource while true: no install, upgrade, uninstall or
    /// repair; status keeps being reported and shows the changes held back. Setting it back to
    /// false applies the newest spec. A suspended resource that is deleted leaves its releases in
    /// place, as with `deletionPolicy: Orphan`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,

    /// Delivers a new generation cluster by cluster, each step gated on the health of the clusters
    /// before it. Absent: every cluster gets every change at once. One rollout covers the whole
    /// resource, every tenancy together: an application is one blast radius, and a rollout per
    /// tenancy would leave one application half-updated across its own tenancies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
}

/// Progressive delivery of a new generation across the targeted clusters.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Clusters changing at once: a number (at least 1) or a percentage of the targeted clusters
    /// such as "25%" (rounded down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,

    /// Ordered groups of clusters; a wave starts once every cluster of the waves before it is
    /// healthy. A cluster goes to the first wave whose selector matches it; clusters matched by
    /// none, and clusters registered while a rollout runs, go last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub waves: Vec<Wave>,

    /// How long a cluster may take to become healthy on the new generation before the rollout
    /// halts: a duration such as "10m", "90s" or "1h30m". Default "10m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub progress_deadline: Option<String>,

    /// How long to wait after a wave is healthy before the next one starts, for example "5m".
    /// Default "0s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    pub pause_between_waves: Option<String>,

    /// When the rollout halts, roll the releases of the cluster that failed back to their
    /// previous Helm revision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback_on_halt: bool,
}

/// One wave of a rollout: the registered clusters its selector matches.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    /// Selects registered clusters by the labels given in the registration file.
    pub cluster_selector: ClusterSelector,
}

/// What deleting a `Controller` does to its releases.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Uninstall every release, waiting for the clusters that hold them.
    #[default]
    Delete,
    /// Leave every release where it is; they are listed in the log and in an Event.
    Orphan,
}

impl DeletionPolicy {
    fn is_default(&self) -> bool {
        *self == Self::Delete
    }
}

/// One tenant namespace, the clusters it goes to, and the charts released into it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    // The names are mapped once (the one-element list binds them) and compared by the API
    // server's native indexOf: `charts.all(c, charts.exists_one(..))` was evaluated pairwise, and
    // the API server runs every rule on each status write too, so a Controller of 200 tenancies
    // of 16 charts took 8 s to have its status written.
    validation = Rule::new("[self.charts.map(c, has(c.releaseName) ? c.releaseName : self.__namespace__)].all(names, names.all(n, names.indexOf(n) == names.lastIndexOf(n)))")
        .message("release names must be unique within a tenancy (a chart without releaseName is released under the namespace name)"),
    validation = Rule::new("self.charts.all(c, has(c.releaseName) || size(self.__namespace__) <= 53)")
        .message("a chart without releaseName is released under the namespace name, which is then limited to 53 characters: set releaseName")
)]
pub struct Tenancy {
    /// Namespace the charts are released into, created on each target cluster if missing: a DNS-1123 label (lowercase letters, digits and '-').
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"))]
    pub namespace: String,

    /// Registered cluster names this tenancy goes to (see the registration file). With neither `clusters` nor `clusterSelector`, the tenancy goes to the hub cluster itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub clusters: Vec<String>,

    /// Selects registered clusters by the labels given in the registration file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<ClusterSelector>,

    /// Helm charts released into the namespace.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub charts: Vec<Chart>,

    /// Stops every Helm call for this tenancy's releases (its namespace on the clusters it
    /// targets) while true, uninstalls of removed charts included; status keeps being reported.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

/// Selects registered clusters by label.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    /// Every label here must be present, with this value, on the cluster's registration entry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A Secret named in the namespace the field says.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One Helm chart released into a tenancy's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.repo) && has(self.git))")
        .message("a chart comes from repo or from git, not both"),
    validation = Rule::new("!has(self.git) || !self.chartName.startsWith('oci://')")
        .message("a chart from git is named by its Chart.yaml's name, not an oci:// reference"),
    validation = Rule::new("!has(self.git) || !has(self.version)")
        .message("a chart from git takes its version from its Chart.yaml at the ref: remove version, or pick the commit with git.ref")
)]
pub struct Chart {
    /// Chart to release: a directory name under the chart home, a chart name in `repo` (or the
    /// name in the `Chart.yaml` of the `git` path), or an `oci://` reference.
    #[schemars(length(min = 1, max = 512))]
    pub chart_name: String,

    /// Helm release name. Defaults to the tenancy's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 53))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')")
        .message("must be a valid Helm release name: lowercase letters, digits, '-' and '.', at most 53 characters"))]
    pub release_name: Option<String>,

    /// Chart version to pin (a semantic version or range). The newest available when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub version: Option<String>,

    /// Helm repository URL the chart comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub repo: Option<String>,

    /// A Git repository the chart is taken from, at a ref and a path (instead of `repo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,

    /// A Secret of this resource's own hub namespace holding the credentials (and CA) of the
    /// chart's source, used instead of the platform's: allowed only where a TenancyPolicy
    /// governing the hub namespace lists it in the `tenantSecrets` of a `sources` entry whose
    /// prefix holds `repo` or the `oci://` reference. Its keys are those of a policy's
    /// `secretRef`; it is read by the hub only and never sent to a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret_ref: Option<SecretReference>,

    /// Values set one by one, as `helm --set key=value`: commas and backslashes are literal, and
    /// helm types the value ("3" is a number, "true" a boolean); a string that looks like a number
    /// goes under `values`. Removed settings return to the chart's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub settings: Vec<Setting>,

    /// Free-form values, passed to Helm as a values file; settings take precedence.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "free_form::bounded"
    )]
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<serde_json::Value>,

    /// On a failed upgrade, roll back to the last good revision so it keeps serving (on a failed
    /// install, uninstall); Helm then waits for the release's resources to be ready.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback_on_failure: bool,

    /// Whether the release's live objects are compared with its manifest, and what is done when
    /// they differ. Absent: `warn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detection: Option<DriftDetection>,

    /// Values read from Secrets and ConfigMaps of this resource's own hub namespace, merged in
    /// order under `values` (a TenancyPolicy must allow reading them). Names may refer to the
    /// target cluster, as values do: `dns-${cluster.name}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub values_from: Vec<ValuesReference>,

    /// Values files read from Git repositories, merged in order after `valuesFrom` and before
    /// `values`; their paths may refer to the target cluster (`values/${cluster.name}.yaml`). A
    /// TenancyPolicy must allow the repository, the path and the ref, as for a Git chart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub values_files: Vec<GitValuesFile>,

    /// Values and settings for the clusters a selector picks, merged in order over the chart's
    /// own `values` and `settings`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub overrides: Vec<ChartOverride>,

    /// Releases of this resource on the same cluster that must be deployed from the current spec
    /// and ready before this one is installed or upgraded (and that are uninstalled after it): a
    /// release name of the same tenancy, or `namespace/release` of another tenancy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 117)))]
    pub depends_on: Vec<String>,

    /// How Helm installs the release (Flux's `install`): timeout, wait, hooks, CRDs. Not part
    /// of what is deployed: changing it alone makes no new revision; the next install uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Install>,

    /// How Helm upgrades the release (Flux's `upgrade`): timeout, wait, hooks, force, cleanup,
    /// CRDs. Not part of what is deployed: changing it alone makes no new revision; the next
    /// upgrade (a change of chart or values, a drift repair) uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,

    /// Whether the chart's tests run after each install and upgrade (Flux's `test`), and which.
    /// Not part of what is deployed: changing it alone makes no new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,

    /// How Helm uninstalls the release when this Controller is deleted (Flux's `uninstall`): a
    /// chart removed from the spec is uninstalled with the operator's defaults, its entry being
    /// gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<Uninstall>,

    /// Revisions Helm keeps for this release (Flux's `maxHistory`), 1 to 100: unlike Helm and
    /// Flux, 0 (every revision, without bound) is not taken. Default: the operator's
    /// `--history-max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_history: Option<i32>,

    /// Take over a release of the same name already in the namespace that tenancy-hub does not
    /// own (installed by hand, by Flux, by Argo CD): its next revision is an ordinary upgrade,
    /// nothing is uninstalled, and the labels of its previous records are reported once in an
    /// `Adopted` Event. Only where a TenancyPolicy governing this hub namespace allows the
    /// release and sets `allowAdoption`, and only when every object of the existing release is
    /// one the policy's identity may create, patch and delete; never a release another
    /// Controller owns. Without it, such a release is a `Conflict`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,

    /// Kustomize patches and image overrides run over the manifest Helm rendered, in order, before
    /// the release is applied and recorded (Flux's `postRenderers`); the overrides selecting a
    /// cluster add theirs after these. Part of what is deployed: a change upgrades the release.
    /// The Helm executor only (the `helm` binary cannot run them, and refuses such a release). A
    /// TenancyPolicy may forbid them (`helm.allowPostRenderers: false`); a change to RBAC,
    /// admission webhooks or policies, or CRDs needs `helm.allowPostRenderSensitiveKinds`, and no
    /// object may be added, removed, renamed, or moved to another kind or namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub post_renderers: Vec<PostRenderer>,

    /// Labels and annotations set on every object the chart renders (Flux's `commonMetadata`),
    /// after the post-renderers; as they are, under the same policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,

    /// How objects of the kinds the chart deploys are judged (Flux's `healthCheckExprs`): CEL
    /// expressions per `apiVersion` and `kind`, at most 16. Other objects with
    /// `status.conditions` are judged by kstatus's rules (`Ready`, `Reconciling`, `Stalled`,
    /// `observedGeneration`); Deployments, StatefulSets, DaemonSets and pods by their rollout.
    /// `Ready`, `dependsOn` and rollout waves wait for every judged object to be current, and the
    /// status names the first that is not and why. Not part of what is deployed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub health_check_exprs: Vec<HealthCheckExpr>,
}

/// Where values come from on the hub: one key of a Secret or ConfigMap in the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    /// `Secret` or `ConfigMap`.
    pub kind: ValuesKind,
    /// The object's name, in the resource's own hub namespace; may refer to the target cluster
    /// (`${cluster.name}`, `${cluster.labels.region}`, …).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key whose content is read. Default: `values.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub values_key: Option<String>,
    /// Where the key's content goes, as one string value (a dotted path such as
    /// `provider.credentials`); absent: the content is a YAML values document merged at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub target_path: Option<String>,
    /// A missing object or key is skipped instead of holding the release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// The kinds of hub object values are read from.
#[derive(
    JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum ValuesKind {
    /// A Secret: its values are masked wherever they could show.
    #[default]
    Secret,
    /// A ConfigMap.
    ConfigMap,
}

impl std::fmt::Display for ValuesKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Values and settings for the clusters a selector picks.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChartOverride {
    /// The clusters it applies to, by the labels of their registration.
    pub cluster_selector: ClusterSelector,
    /// Values merged over the chart's (maps merged key by key, anything else replaced).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "free_form::bounded"
    )]
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<serde_json::Value>,
    /// Values files from Git merged before this override's `values` (see the chart's
    /// `valuesFiles`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub values_files: Vec<GitValuesFile>,
    /// Settings after the chart's; a key set again takes the later value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub settings: Vec<Setting>,
    /// Post-renderers run after the chart's own, on the selected clusters only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub post_renderers: Vec<PostRenderer>,
}

/// Drift detection of one release: its live objects compared with the fields its manifest sets.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftDetection {
    /// `enabled`: drift is reported and repaired by applying the release again (a new Helm
    /// revision, at most 3 per 10 minutes); `warn` (the default): reported only; `disabled`: not looked for.
    #[serde(default)]
    pub mode: DriftMode,

    /// Fields that are neither reported nor repaired, for example `/spec/replicas` of an autoscaled Deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ignore: Vec<DriftIgnore>,
}

/// What drift detection does.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DriftMode {
    /// Report drift and repair it by applying the release again.
    Enabled,
    /// Report drift only.
    #[default]
    Warn,
    /// Do not look for drift.
    Disabled,
}

/// Fields drift detection leaves alone, in every object of the release or in those `target` matches.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnore {
    /// JSON pointers (RFC 6901) into the object, starting with '/', for example `/spec/replicas`; everything under a pointer is ignored too.
    // A pattern, not a CEL rule: a rule over every path of every entry of every chart exceeds
    // the API server's CEL cost budget.
    #[schemars(
        length(min = 1, max = 16),
        inner(length(min = 1, max = 512), regex(pattern = "^/"))
    )]
    pub paths: Vec<String>,

    /// The objects the paths apply to; every object of the release when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DriftTarget>,
}

/// Selects objects of a release by kind, name and namespace; an omitted field matches any.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftTarget {
    /// Object kind, for example `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub kind: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// One `--set key=value` pair.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Setting {
    /// Dotted path of the value in the chart's values, for example `service.internalPort`; must not be empty.
    #[schemars(length(min = 1, max = 1024))]
    pub key: String,

    /// The value: commas, backslashes and '=' are not special; helm types it ("3" is a number).
    #[serde(default)]
    #[schemars(length(max = 65536))]
    pub value: String,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "Free-form values, passed to Helm as a values file; settings take precedence."
    })
}

/// The `Controller` CustomResourceDefinition: its schema titled with the kind users write, not
/// the Rust name of the type.
pub fn controller_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = TenancyController::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.title = Some("Controller".into());
        }
    }
    crd
}

/// The CustomResourceDefinition as YAML, exactly as `crds/` holds it.
pub fn crd_yaml() -> String {
    serde_yaml::to_string(&controller_crd()).expect("a CustomResourceDefinition always serializes")
}

pub mod depth_policy;
pub mod free_form;
pub mod git;
pub mod health;
pub mod lifecycle;
pub mod post_render;

#[cfg(test)]
mod tests;
