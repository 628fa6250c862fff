//! What planning speaks of: owners and their labels on release records, chart sources, desired releases, what is applied, jobs and problems.

use std::{fmt, path::PathBuf};

use serde::Serialize;

use crate::{
    api::crd::{DriftDetection, Install, TenancyController, Test, Uninstall, Upgrade},
    api::key::ReleaseKey,
    api::policy::Impersonation,
    policy::access::{Credentials, Trust},
};

use crate::plan::limits;

/// Label on every release tenancy-hub manages.
pub(crate) const MANAGED_BY_LABEL: &str = "multitenancy.dev/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub(crate) const MANAGED_BY: &str = "tenancy-hub";
/// Label naming the namespace of the owning `Controller`.
pub(crate) const OWNER_NAMESPACE_LABEL: &str = "multitenancy.dev/controller-namespace";
/// Label naming the owning `Controller`.
pub(crate) const OWNER_NAME_LABEL: &str = "multitenancy.dev/controller-name";
/// Label holding the fingerprint of the spec a release was applied from.
pub(crate) const SPEC_HASH_LABEL: &str = "multitenancy.dev/spec-hash";

/// The `Controller` resource that owns a release.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct OwnerId {
    /// Namespace of the resource on the hub.
    pub namespace: String,
    /// Name of the resource.
    pub name: String,
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The owner id of a resource.
pub(crate) fn owner_id(c: &TenancyController) -> OwnerId {
    OwnerId {
        namespace: kube::ResourceExt::namespace(c).unwrap_or_default(),
        name: kube::ResourceExt::name_any(c),
    }
}

/// When a resource was created, in Unix seconds; the end of time when not known.
pub(crate) fn created_secs(c: &TenancyController) -> i64 {
    kube::Resource::meta(c)
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second())
}

/// Where a chart comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum ChartSource {
    /// A chart directory under the chart home.
    Directory(PathBuf),
    /// A chart in a Helm repository.
    Repository {
        /// Repository URL.
        url: String,
        /// Chart name in the repository.
        chart: String,
    },
    /// An `oci://` reference.
    Oci(String),
    /// A chart directory of a Git repository at a ref.
    Git {
        /// The repository, as the spec writes it.
        url: String,
        /// The chart's directory in it, in normal form.
        path: String,
        /// The ref it is taken at.
        reference: crate::api::crd::RefKind,
        /// The chart's name, its Chart.yaml's.
        chart: String,
        /// Seconds between resolutions of the ref. Not part of the fingerprint.
        interval_secs: u64,
    },
}

/// A release the spec asks for, fully resolved. Its `Debug` form leaves out the values when some
/// came from a Secret.
#[derive(Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct Release {
    /// Where it goes.
    pub(crate) key: ReleaseKey,
    /// Who asks for it.
    pub(crate) owner: OwnerId,
    /// Chart as named in the spec.
    pub(crate) chart_name: String,
    /// Where the chart comes from.
    pub(crate) source: ChartSource,
    /// Chart version to install: the spec's, or the exact one it resolved to.
    pub(crate) version: Option<String>,
    /// Digest of the chart's content, when known.
    pub(crate) chart_digest: Option<String>,
    /// `--set` pairs in spec order.
    pub(crate) settings: Vec<(String, String)>,
    /// Values passed as a values file.
    pub(crate) values: Option<serde_json::Value>,
    /// Roll back a failed upgrade to the last good revision.
    pub(crate) rollback_on_failure: bool,
    /// Fingerprint of everything above that Helm sees.
    pub(crate) spec_hash: String,
    /// Whom Helm impersonates in the target cluster, as the tenancy policy allowing the release
    /// says; the operator's own credentials when None. Not part of the fingerprint: a changed
    /// identity applies from the next change on.
    pub(crate) identity: Option<Impersonation>,
    /// How drift of its live objects from its manifest is handled. Not part of the fingerprint:
    /// Helm never sees it, so changing only the mode or the ignore rules must not make a revision.
    pub(crate) drift: DriftDetection,
    /// How its objects' health is judged (`healthCheckExprs`), checked to compile when planned.
    /// Not part of the fingerprint: Helm never sees it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) health: Vec<crate::api::crd::HealthCheckExpr>,
    /// How Helm is asked to install, upgrade and uninstall it. Not part of the fingerprint: it
    /// changes how Helm acts, not what is deployed, so changing it alone makes no revision.
    #[serde(default)]
    pub(crate) helm: HelmSettings,
    /// What of its values came from Secrets, masked wherever it could show.
    pub(crate) masked: Masked,
    /// Its post-render patches and common metadata, run by the Helm executor over the rendered
    /// manifest. Part of the fingerprint (the allowance of sensitive kinds aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) post_render: Option<crate::plan::post_render::PostRender>,
    /// Whose credentials the hub fetched its chart with: the key its archive is checked out of
    /// the chart cache by. Not part of the fingerprint, and never sent to a member.
    #[serde(skip)]
    pub(crate) credentials: Credentials,
    /// Its chart's signatures as checked at the hub, when a policy requires them: the archive
    /// checked is the one checked out, by its digest. Never sent to a member (what it gets is
    /// that archive).
    #[serde(skip)]
    pub(crate) verified: Option<Verified>,
    /// Whether it may take over an existing release of its key tenancy-hub does not own, as the
    /// chart entry and the policies say. Not part of the fingerprint; decided on the hub.
    #[serde(skip)]
    pub(crate) adoption: Adoption,
    /// The commit a Git chart was packed from, shown with its source. Part of the fingerprint
    /// through the archive's digest only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) commit: Option<String>,
}

impl Release {
    /// The sha256 (hex) of the archive it must be installed from, when only that one will do:
    /// the archive its signatures were checked on, or a Git chart's packed archive.
    pub(crate) fn exact_archive(&self) -> Option<&str> {
        match (&self.verified, &self.source) {
            (Some(verified), _) => Some(&verified.archive),
            (None, ChartSource::Git { .. }) => self
                .chart_digest
                .as_deref()
                .and_then(|d| d.strip_prefix("sha256:")),
            (None, _) => None,
        }
    }
}

/// Whether a release may take over an existing release of its key that tenancy-hub does not own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Adoption {
    /// Its chart entry does not ask to (`adopt` unset).
    #[default]
    NotAsked,
    /// Asked, and the policy whose identity acts for it sets `allowAdoption`.
    Allowed,
    /// Asked, and refused: why, and what to do.
    Refused(String),
}

impl fmt::Debug for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: &dyn fmt::Debug = if self.masked.is_empty() {
            &self.values
        } else {
            &"<values holding Secret content, not shown>"
        };
        f.debug_struct("Release")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("chart_name", &self.chart_name)
            .field("source", &self.source)
            .field("version", &self.version)
            .field("chart_digest", &self.chart_digest)
            .field("settings", &self.settings)
            .field("values", values)
            .field("rollback_on_failure", &self.rollback_on_failure)
            .field("spec_hash", &self.spec_hash)
            .field("identity", &self.identity)
            .field("drift", &self.drift)
            .field("health", &self.health)
            .field("helm", &self.helm)
            .field("masked", &self.masked)
            .field("post_render", &self.post_render)
            .field("credentials", &self.credentials.to_string())
            .finish()
    }
}

/// A chart entry's Helm settings (`install`, `upgrade`, `test`, `uninstall`, `maxHistory`), absent ones
/// left to the executor's defaults (the operator's flags, or a pull member's agent's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct HelmSettings {
    /// How the first install goes.
    #[serde(default)]
    pub(crate) install: Install,
    /// How an upgrade goes.
    #[serde(default)]
    pub(crate) upgrade: Upgrade,
    /// How an uninstall goes, when the entry is still there to say.
    #[serde(default)]
    pub(crate) uninstall: Uninstall,
    /// Whether and which of the chart's tests run after an install or upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) test: Option<Test>,
    /// Revisions kept (the schema keeps it from 1 to 100).
    #[serde(default)]
    pub(crate) max_history: Option<u32>,
}

impl HelmSettings {
    /// The longest timeout of an install or upgrade these settings name themselves, in seconds.
    pub(crate) fn apply_timeout_secs(&self) -> Option<i64> {
        [&self.install.timeout, &self.upgrade.timeout]
            .into_iter()
            .filter_map(|t| {
                t.as_deref()
                    .and_then(crate::plan::rollout::parse_duration_ms)
            })
            .max()
            .map(|ms| ms / 1000)
    }
}

/// The pieces of text a release's values took from Secrets (each string of at least a few
/// characters), replaced by [`MASK`] in any message that could show them: helm's errors, `diff`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub(crate) struct Masked(std::sync::Arc<Vec<String>>);

impl From<Vec<String>> for Masked {
    fn from(pieces: Vec<String>) -> Self {
        Self::new(pieces)
    }
}

impl From<Masked> for Vec<String> {
    fn from(m: Masked) -> Self {
        m.0.as_ref().clone()
    }
}

/// What stands in for masked text.
pub(crate) const MASK: &str = "******";

impl Masked {
    /// Masks `pieces`, the longest first (so a piece holding another is masked whole).
    pub(crate) fn new(mut pieces: Vec<String>) -> Self {
        pieces.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        pieces.dedup();
        Self(std::sync::Arc::new(pieces))
    }

    /// These pieces and `more`.
    pub(crate) fn with(&self, more: impl IntoIterator<Item = String>) -> Self {
        Self::new(self.0.iter().cloned().chain(more).collect())
    }

    /// True when `piece` is masked.
    pub(crate) fn holds(&self, piece: &str) -> bool {
        self.0.iter().any(|p| p == piece)
    }

    /// True when nothing is masked.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `value` with every string holding a masked piece masked in it, and every number that is
    /// one masked whole.
    pub(crate) fn redact_value(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.is_empty() {
            return value.clone();
        }
        match value {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Number(n) if self.0.contains(&n.to_string()) => Value::String(MASK.into()),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.redact_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.redact(k), self.redact_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `text` with every masked piece replaced by [`MASK`].
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for piece in self.0.iter() {
            if out.contains(piece.as_str()) {
                out = out.replace(piece.as_str(), MASK);
            }
        }
        out
    }
}

impl fmt::Debug for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Masked({} pieces)", self.0.len())
    }
}

/// One hub object a release reads values from: its kind, namespace (the Controller's own) and
/// name, rendered for the release's cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValuesSource {
    /// Secret or ConfigMap.
    pub kind: crate::api::crd::ValuesKind,
    /// The hub namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl fmt::Display for ValuesSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A values file of a Git repository one rendering reads: the repository (as the spec writes
/// it), the ref, the file's path for the cluster (normal form), how often the ref is looked up
/// and whose credentials fetch it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitFileSource {
    /// The repository.
    pub url: String,
    /// The ref.
    pub reference: crate::api::crd::RefKind,
    /// The file's path, per-cluster references replaced.
    pub path: String,
    /// Seconds between resolutions of the ref.
    pub interval_secs: u64,
    /// Whose credentials fetch it.
    pub credentials: Credentials,
    /// The signature rules its commit must pass.
    pub trust: Trust,
}

impl fmt::Display for GitFileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "values file {} of Git repository {} at {}",
            self.path,
            crate::policy::source::redact(&self.url),
            self.reference
        )
    }
}

/// What is known of a Git values file (a parameter, so planning stays pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitFileLookup {
    /// The file at the commit the ref names now.
    Found {
        /// The commit.
        commit: String,
        /// Its content.
        content: String,
    },
    /// The commit the ref names holds no such file.
    Missing {
        /// The commit.
        commit: String,
    },
    /// It cannot be read now: why, without any credential.
    Unreadable(String),
}

/// What is known of a hub object values are read from (a parameter, so planning stays pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValuesLookup {
    /// The object, its data by key (text) and its labels.
    Found {
        /// Its keys' content.
        data: std::collections::BTreeMap<String, String>,
        /// Its labels, for the policies' rules.
        labels: std::collections::BTreeMap<String, String>,
    },
    /// There is no such object.
    Missing,
    /// It cannot be read now (why, without its content).
    Unreadable(String),
}

/// A release found drifted from the manifest of the revision it was compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drifted {
    /// The Helm revision whose manifest the live objects were compared with.
    pub(crate) revision: i64,
    /// Where they differ, in a few words, for the repair's Helm description.
    pub(crate) summary: String,
}

/// What a cluster holds for one release, read from Helm's release records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// Where it is.
    pub(crate) key: ReleaseKey,
    /// The owning resource, when tenancy-hub manages it.
    pub(crate) owner: Option<OwnerId>,
    /// Fingerprint of the spec it was applied from.
    pub(crate) spec_hash: Option<String>,
    /// Helm revision of the newest record.
    pub(crate) revision: i64,
    /// Helm status of the newest record (deployed, failed, pending-upgrade, ...).
    pub(crate) status: String,
    /// When the newest record was written (Unix seconds).
    pub(crate) modified_at: Option<i64>,
}

impl Applied {
    /// True while Helm reports an operation in progress.
    pub(crate) fn is_pending(&self) -> bool {
        self.status.starts_with("pending-")
    }
}

/// Work for the Helm queue.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub(crate) enum Job {
    /// Install or upgrade to this release; `stale_pending` names a revision left pending to clear first.
    Apply {
        /// The release.
        release: Box<Release>,
        /// A revision stuck in a pending state, to be cleared before applying.
        stale_pending: Option<i64>,
        /// Set when the release is applied again, unchanged, to repair drift: what drifted.
        repair: Option<String>,
        /// Takes over the release of the same key tenancy-hub does not own (`adopt: true`, a
        /// policy's `allowAdoption`): the executor lets Helm read its newest record once checked.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        adopt: bool,
        /// Set when the release was not installed when planned: a failure is an install's, which
        /// `install.remediation` retries (an upgrade's otherwise).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        installing: bool,
        /// Which try this is, from 1, set by the queue as it starts the job (0 before): what a
        /// failure of it is remediated with follows from it (see [`Job::remediate`]).
        #[serde(default, skip_serializing_if = "is_zero")]
        attempt: u32,
    },
    /// Uninstall a release no longer asked for.
    Uninstall {
        /// Where it is.
        key: ReleaseKey,
        /// Who owned it.
        owner: OwnerId,
        /// Whom Helm impersonates to uninstall it; the operator's own credentials when None.
        identity: Option<Impersonation>,
        /// The chart entry's `uninstall` settings, when it is still there to say (a deleted
        /// Controller); the executor's defaults otherwise.
        #[serde(default)]
        settings: Uninstall,
    },
    /// Roll a release back to the revision before `from` (a halted rollout's `rollbackOnHalt`).
    Rollback {
        /// Where it is.
        key: ReleaseKey,
        /// Who owns it.
        owner: OwnerId,
        /// The revision rolled back from: the one the halted rollout made.
        from: i64,
        /// Whom Helm impersonates, as for the release's other jobs.
        identity: Option<Impersonation>,
        /// The chart entry's Helm settings: the rollback takes its upgrade's timeout and its
        /// `maxHistory`.
        #[serde(default)]
        helm: Box<HelmSettings>,
    },
}

impl Release {
    /// The fingerprint of the job applying this release as planned (see [`Job::fingerprint`]):
    /// its spec hash, and a digest of its Helm settings when it has some. The status reads the
    /// outcome of the job with this fingerprint.
    pub(crate) fn apply_fingerprint(&self) -> String {
        if self.helm == HelmSettings::default() {
            return format!("apply:{}", self.spec_hash);
        }
        use sha2::Digest as _;
        let text = serde_json::to_vec(&self.helm).expect("plain data serializes");
        let digest = sha2::Sha256::digest(text);
        let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("apply:{}:{short}", self.spec_hash)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Job {
    /// The job as try `attempt` (from 1) of it.
    pub(crate) fn at_try(mut self, n: u32) -> Self {
        if let Job::Apply { attempt, .. } = &mut self {
            *attempt = n;
        }
        self
    }

    /// The release the job is about.
    pub(crate) fn key(&self) -> &ReleaseKey {
        match self {
            Job::Apply { release, .. } => &release.key,
            Job::Uninstall { key, .. } | Job::Rollback { key, .. } => key,
        }
    }

    /// The resource the job is done for.
    pub(crate) fn owner(&self) -> &OwnerId {
        match self {
            Job::Apply { release, .. } => &release.owner,
            Job::Uninstall { owner, .. } | Job::Rollback { owner, .. } => owner,
        }
    }

    /// Identifies the desired end state: two jobs with one fingerprint do the same thing. An
    /// apply's names the release's Helm settings too, when it has some: they make no revision
    /// of their own, but a job queued with others is replaced, and a release that failed
    /// settles no longer once they change (a longer timeout is tried).
    pub(crate) fn fingerprint(&self) -> String {
        match self {
            Job::Apply { release, .. } => release.apply_fingerprint(),
            Job::Uninstall { .. } => "uninstall".to_owned(),
            Job::Rollback { from, .. } => format!("rollback:{from}"),
        }
    }
}

/// A part of the spec that cannot be carried out as written; it waits for a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A tenancy names a cluster that is not registered.
    UnknownCluster {
        /// The tenancy's namespace.
        namespace: String,
        /// The unknown name.
        cluster: String,
        /// Registered names: a few, and how many more.
        known: String,
    },
    /// A tenancy's cluster selector matches no registered cluster.
    NoClusterSelected {
        /// The tenancy's namespace.
        namespace: String,
    },
    /// A chart's signatures do not pass a rule of the policies.
    Unverified {
        /// The release.
        key: ReleaseKey,
        /// The chart as named.
        chart: String,
        /// Which rule, and why the chart fails it.
        reason: String,
    },
    /// A chart cannot be found (or is named in a way that is refused).
    MissingChart {
        /// The release.
        key: ReleaseKey,
        /// The chart as named.
        chart: String,
        /// Where it was looked for and why it is not there.
        reason: String,
    },
    /// One resource asks for the same release key more than once: one problem per key.
    Duplicate {
        /// The release.
        key: ReleaseKey,
        /// The chart of the first entry asking for it.
        chart: String,
        /// The first few entries asking for it, as `tenancies[i] chart NAME`.
        entries: Vec<String>,
        /// How many entries ask for it in all.
        count: usize,
    },
    /// Another resource, or something outside tenancy-hub, holds the release.
    Conflict {
        /// The release.
        key: ReleaseKey,
        /// Who holds it.
        holder: String,
    },
    /// A setting key Helm cannot take literally, or would build too large a list for.
    InvalidSetting {
        /// The release.
        key: ReleaseKey,
        /// The setting key.
        setting: String,
        /// What is wrong with it.
        why: String,
    },
    /// The resource asks for more than one resource may; nothing of it is planned.
    TooLarge {
        /// The resource.
        owner: OwnerId,
        /// What is counted: `charts` or `releases`.
        what: &'static str,
        /// How many it asks for.
        count: usize,
        /// How many it may.
        limit: usize,
    },
    /// The tenancy policies do not allow the release, or its chart source breaks a source rule.
    Forbidden {
        /// The release.
        key: ReleaseKey,
        /// The chart as named.
        chart: String,
        /// The rule it breaks, and the policies that govern its hub namespace.
        rule: String,
    },
    /// The release's values cannot be made for its cluster: a reference that does not render,
    /// a `valuesFrom` object or key missing or not allowed. Never holds a Secret's content.
    InvalidValues {
        /// The release.
        key: ReleaseKey,
        /// What is wrong and what to do.
        why: String,
    },
    /// A `dependsOn` entry names a release this resource does not release on the same cluster.
    UnknownDependency {
        /// The release whose chart names it.
        key: ReleaseKey,
        /// The chart as named.
        chart: String,
        /// The entry, as written.
        dependency: String,
        /// The releases this resource names on that cluster: a few, and how many more.
        releases: String,
    },
    /// The chart's `healthCheckExprs` cannot be used: an expression does not compile or breaks
    /// a bound.
    InvalidHealthCheck {
        /// The release.
        key: ReleaseKey,
        /// The Controller asking for it.
        owner: OwnerId,
        /// The chart as named.
        chart: String,
        /// Which expression, and what is wrong.
        why: String,
    },
    /// The release is on a cycle of `dependsOn`: no order can install it.
    DependencyCycle {
        /// The release.
        key: ReleaseKey,
        /// The chart as named.
        chart: String,
        /// The cycle, spelled out from this release: `web → api → web`.
        cycle: String,
    },
}

impl Problem {
    /// The release the problem is about, when it is about one.
    pub(crate) fn release(&self) -> Option<&ReleaseKey> {
        match self {
            Problem::MissingChart { key, .. }
            | Problem::Unverified { key, .. }
            | Problem::Duplicate { key, .. }
            | Problem::Conflict { key, .. }
            | Problem::InvalidSetting { key, .. }
            | Problem::Forbidden { key, .. }
            | Problem::InvalidValues { key, .. }
            | Problem::UnknownDependency { key, .. }
            | Problem::DependencyCycle { key, .. }
            | Problem::InvalidHealthCheck { key, .. } => Some(key),
            Problem::UnknownCluster { .. }
            | Problem::NoClusterSelected { .. }
            | Problem::TooLarge { .. } => None,
        }
    }

    /// A short CamelCase reason, for conditions and events.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Problem::UnknownCluster { .. } => "UnknownCluster",
            Problem::NoClusterSelected { .. } => "NoClusterSelected",
            Problem::MissingChart { .. } => "ChartNotFound",
            Problem::Unverified { .. } => "Unverified",
            Problem::Duplicate { .. } => "DuplicateRelease",
            Problem::Conflict { .. } => "Conflict",
            Problem::InvalidSetting { .. } => "InvalidSetting",
            Problem::Forbidden { .. } => "Forbidden",
            Problem::TooLarge { .. } => "SpecTooLarge",
            Problem::InvalidValues { .. } => "InvalidValues",
            Problem::UnknownDependency { .. } => "UnknownDependency",
            Problem::DependencyCycle { .. } => "DependencyCycle",
            Problem::InvalidHealthCheck { .. } => "InvalidHealthCheck",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::UnknownCluster {
                namespace,
                cluster,
                known,
            } => write!(
                f,
                "tenancy {namespace}: cluster {cluster:?} is not registered (registered: {known}); register it in the clusters file or fix spec.tenancies[].clusters"
            ),
            Problem::NoClusterSelected { namespace } => write!(
                f,
                "tenancy {namespace}: clusterSelector matches no registered cluster; check the labels in the clusters file"
            ),
            Problem::MissingChart { key, chart, reason } => write!(
                f,
                "release {key}: chart {chart:?} not found: {reason}; what runs is left as it is until the chart is found or the spec changes"
            ),
            Problem::Unverified { key, chart, reason } => write!(
                f,
                "release {key}: chart {chart:?} is not verified: {reason}; it reaches no member, and what runs is left as it is until a signed chart is published or the spec changes"
            ),
            Problem::Duplicate {
                key,
                entries,
                count,
                ..
            } => write!(
                f,
                "release {key} is asked for more than once in this Controller, by {count} entries ({}); none of them is applied until all but one get another releaseName, namespace or cluster",
                limits::few(entries, *count)
            ),
            Problem::Conflict { key, holder } => write!(
                f,
                "release {key} is already held by {holder}; it is left to its holder: rename the release or remove it from one of them"
            ),
            Problem::InvalidSetting { key, setting, why } => write!(
                f,
                "release {key}: setting key {setting:?} {why}; use values instead"
            ),
            Problem::TooLarge {
                owner,
                what,
                count,
                limit,
            } => write!(
                f,
                "Controller {owner} asks for {count} {what}, more than the {limit} one Controller may; nothing of it is planned and what runs stays as it is: split it into several Controllers"
            ),
            Problem::Forbidden { key, rule, .. } => write!(
                f,
                "release {key} is forbidden: {rule}; nothing is installed or changed for it (what runs stays as it is)"
            ),
            Problem::InvalidValues { key, why } => write!(
                f,
                "release {key}: its values for cluster {} cannot be made: {why}; what runs stays as it is until they can",
                key.scope.cluster
            ),
            Problem::UnknownDependency {
                key,
                dependency,
                releases,
                ..
            } => write!(
                f,
                "release {key}: dependsOn names {dependency}, which this resource does not release on cluster {} (its releases there: {releases}); nothing is installed or changed for it until the spec names a release it has there (what runs stays as it is)",
                key.scope.cluster
            ),
            Problem::InvalidHealthCheck {
                key,
                owner,
                chart,
                why,
            } => write!(
                f,
                "release {key}: Controller {owner}, chart {chart:?}: {why}; nothing is installed or changed for it until the expression is fixed (what runs stays as it is)"
            ),
            Problem::DependencyCycle { key, cycle, .. } => write!(
                f,
                "release {key}: dependsOn forms a cycle: {cycle}; nothing is installed or changed for it until the cycle is broken (what runs stays as it is)"
            ),
        }
    }
}

/// What is known of a chart outside planning: the chart home's directories, and repository and
/// OCI charts resolved against their sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChartLookup {
    /// The chart is there.
    Found {
        /// The exact version to install, when resolved from a constraint; None keeps the spec's.
        version: Option<String>,
        /// A digest of the chart's content, when known.
        digest: Option<String>,
        /// Its signatures as checked, when a policy requires them.
        verified: Option<Verified>,
        /// The commit of a Git chart.
        commit: Option<String>,
    },
    /// The chart cannot be found: where it was looked for and why it is not there.
    Missing(String),
    /// The chart was found, but its signatures do not pass a rule a policy sets: why.
    Unverified(String),
}

/// What is known of a chart fetched with these credentials, under these signature rules, at
/// this version constraint: the planner's one question about charts.
pub type ChartLookupFn<'a> =
    dyn Fn(&ChartSource, &Credentials, &Trust, Option<&str>) -> ChartLookup + 'a;

/// A chart whose signatures passed every rule of the policies: by whom, and the archive checked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verified {
    /// Who signed it, per rule (`cosign: key sha256:…`), joined for the status.
    pub by: String,
    /// The sha256 (hex) of the archive checked: the one the hub installs and ships.
    pub archive: String,
}
