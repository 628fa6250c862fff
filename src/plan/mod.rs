//! Planning: the releases a spec asks for, compared with those applied in the clusters, become Helm jobs (pure).

pub(crate) mod claims;
pub(crate) mod limits;
pub(crate) mod rollout;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, hash_map},
    fmt,
    path::{Path, PathBuf},
};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    api::crd::{
        Chart, Controller, ControllerSpec, DriftDetection, DriftMode, HUB_CLUSTER, Tenancy,
    },
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    api::policy::Impersonation,
    policy::{Admission, Verdict},
};

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
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
pub(crate) fn owner_id(c: &Controller) -> OwnerId {
    OwnerId {
        namespace: kube::ResourceExt::namespace(c).unwrap_or_default(),
        name: kube::ResourceExt::name_any(c),
    }
}

/// When a resource was created, in Unix seconds; the end of time when not known.
pub(crate) fn created_secs(c: &Controller) -> i64 {
    kube::Resource::meta(c)
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second())
}

/// Where a chart comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
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
}

/// A release the spec asks for, fully resolved.
#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Job {
    /// Install or upgrade to this release; `stale_pending` names a revision left pending to clear first.
    Apply {
        /// The release.
        release: Box<Release>,
        /// A revision stuck in a pending state, to be cleared before applying.
        stale_pending: Option<i64>,
        /// Set when the release is applied again, unchanged, to repair drift: what drifted.
        repair: Option<String>,
    },
    /// Uninstall a release no longer asked for.
    Uninstall {
        /// Where it is.
        key: ReleaseKey,
        /// Who owned it.
        owner: OwnerId,
        /// Whom Helm impersonates to uninstall it; the operator's own credentials when None.
        identity: Option<Impersonation>,
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
    },
}

impl Job {
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

    /// Identifies the desired end state: two jobs with one fingerprint do the same thing.
    pub(crate) fn fingerprint(&self) -> String {
        match self {
            Job::Apply { release, .. } => format!("apply:{}", release.spec_hash),
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
}

impl Problem {
    /// The release the problem is about, when it is about one.
    pub(crate) fn release(&self) -> Option<&ReleaseKey> {
        match self {
            Problem::MissingChart { key, .. }
            | Problem::Duplicate { key, .. }
            | Problem::Conflict { key, .. }
            | Problem::InvalidSetting { key, .. }
            | Problem::Forbidden { key, .. } => Some(key),
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
            Problem::Duplicate { .. } => "DuplicateRelease",
            Problem::Conflict { .. } => "Conflict",
            Problem::InvalidSetting { .. } => "InvalidSetting",
            Problem::Forbidden { .. } => "Forbidden",
            Problem::TooLarge { .. } => "SpecTooLarge",
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
    },
    /// The chart cannot be found: where it was looked for and why it is not there.
    Missing(String),
}

/// Everything planning needs to know, gathered by the reconciler.
pub struct Inputs<'a> {
    /// The resource planned for.
    pub owner: &'a OwnerId,
    /// Its spec.
    pub spec: &'a ControllerSpec,
    /// Registered clusters (the hub included) and their labels.
    pub clusters: &'a BTreeMap<ClusterName, BTreeMap<String, String>>,
    /// Clusters whose applied releases are fully known; others are not planned for yet.
    pub synced: &'a BTreeSet<ClusterName>,
    /// Releases in the clusters, by key.
    pub applied: &'a HashMap<ReleaseKey, Applied>,
    /// Which resource holds each release key claimed by several.
    pub claims: &'a HashMap<ReleaseKey, OwnerId>,
    /// What the tenancy policies allow.
    pub admission: &'a Admission,
    /// Chart directory root.
    pub chart_home: &'a Path,
    /// What is known of a chart (a parameter so planning stays pure): its exact version and
    /// content digest, or why it cannot be found.
    pub chart_lookup: &'a dyn Fn(&ChartSource, Option<&str>) -> ChartLookup,
    /// Now, in Unix seconds.
    pub now: i64,
    /// How long a pending release may stay pending before it is cleared.
    pub pending_timeout_secs: i64,
    /// Releases whose live objects differ from their manifest.
    pub drifted: &'a HashMap<ReleaseKey, Drifted>,
}

/// The outcome of planning.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Releases the spec asks for and this resource holds.
    pub(crate) desired: Vec<Release>,
    /// Helm work to do.
    pub(crate) jobs: Vec<Job>,
    /// Parts of the spec that wait for a change.
    pub(crate) problems: Vec<Problem>,
    /// Releases on clusters whose state is not known yet.
    pub(crate) waiting: Vec<ReleaseKey>,
    /// Seconds until a release now pending counts as stuck, when one is pending.
    pub(crate) recheck_in: Option<i64>,
    /// What enforcing the tenancy policies would refuse, in permissive mode.
    pub(crate) warnings: Vec<String>,
    /// Releases whose Helm work (an install, upgrade or uninstall) is held back by `suspend`.
    pub(crate) suspended: Vec<ReleaseKey>,
    /// What the spec suspends, in words, when it suspends anything.
    pub(crate) suspension: Option<String>,
    /// Releases whose Helm work waits for the rollout to reach their cluster.
    pub(crate) rollout_held: Vec<ReleaseKey>,
    /// Where the rollout stands, in words, when it holds anything back.
    pub(crate) rollout_note: Option<String>,
}

/// What `suspend` holds back in a spec (the whole resource, or suspended tenancies' cluster
/// namespaces), worked out once and asked for each release. Whatever would run Helm for a release
/// (planning, deletion, drift repair) asks it first.
pub(crate) struct Held {
    all: bool,
    scopes: HashSet<ClusterNamespace>,
}

impl Held {
    /// What `spec` holds back with the clusters registered now.
    pub(crate) fn of(
        spec: &ControllerSpec,
        clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    ) -> Self {
        let scopes = spec
            .tenancies
            .iter()
            .filter(|t| t.suspend && !spec.suspend)
            .flat_map(|t| {
                targets(t, clusters)
                    .0
                    .into_iter()
                    .filter_map(|c| ClusterNamespace::new(c, &t.namespace).ok())
            })
            .collect();
        Self {
            all: spec.suspend,
            scopes,
        }
    }

    /// True when no Helm call may be made for `key`.
    pub(crate) fn holds(&self, key: &ReleaseKey) -> bool {
        self.all || self.scopes.contains(&key.scope)
    }
}

/// What a spec suspends, in words; None when it suspends nothing.
pub(crate) fn suspension(spec: &ControllerSpec) -> Option<String> {
    if spec.suspend {
        return Some("spec.suspend is true: no Helm call is made for this resource".into());
    }
    let tenancies: Vec<&str> = spec
        .tenancies
        .iter()
        .filter(|t| t.suspend)
        .map(|t| t.namespace.as_str())
        .collect();
    (!tenancies.is_empty()).then(|| {
        format!(
            "tenancies {} are suspended: no Helm call is made for their releases",
            tenancies.join(", ")
        )
    })
}

/// The clusters a tenancy goes to, or the problems that keep it from going anywhere.
pub(crate) fn targets(
    tenancy: &Tenancy,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
) -> (BTreeSet<ClusterName>, Vec<Problem>) {
    let mut out = BTreeSet::new();
    let mut problems = Vec::new();
    let known = || limits::few(clusters.keys().map(ClusterName::as_str), clusters.len());
    for name in &tenancy.clusters {
        match name
            .parse::<ClusterName>()
            .ok()
            .filter(|c| clusters.contains_key(c))
        {
            Some(c) => {
                out.insert(c);
            }
            None => problems.push(Problem::UnknownCluster {
                namespace: tenancy.namespace.clone(),
                cluster: name.clone(),
                known: known(),
            }),
        }
    }
    if let Some(selector) = &tenancy.cluster_selector {
        let before = out.len();
        out.extend(
            clusters
                .iter()
                .filter(|(_, labels)| {
                    selector
                        .match_labels
                        .iter()
                        .all(|(k, v)| labels.get(k) == Some(v))
                })
                .map(|(c, _)| c.clone()),
        );
        if out.len() == before && tenancy.clusters.is_empty() {
            problems.push(Problem::NoClusterSelected {
                namespace: tenancy.namespace.clone(),
            });
        }
    }
    if tenancy.clusters.is_empty() && tenancy.cluster_selector.is_none() {
        out.insert(HUB_CLUSTER.parse().expect("the hub's name is valid"));
    }
    (out, problems)
}

/// Where a chart comes from, as the spec names it.
pub(crate) fn source_of(chart: &Chart, chart_home: &Path) -> ChartSource {
    if chart.chart_name.starts_with("oci://") {
        ChartSource::Oci(chart.chart_name.clone())
    } else if let Some(url) = &chart.repo {
        ChartSource::Repository {
            url: url.clone(),
            chart: chart.chart_name.clone(),
        }
    } else {
        ChartSource::Directory(chart_home.join(&chart.chart_name))
    }
}

/// What a spec asks for: the releases that can be planned, the problems of those that cannot,
/// and every release key the spec names at all.
#[derive(Debug, Default)]
pub(crate) struct Desired {
    /// Releases resolved and ready to plan.
    pub(crate) releases: Vec<Release>,
    /// Parts of the spec that cannot be carried out as written.
    pub(crate) problems: Vec<Problem>,
    /// Every release key the spec names, whether or not it could be resolved: what runs under
    /// these keys is never uninstalled because of a problem.
    pub(crate) named: BTreeSet<ReleaseKey>,
    /// What enforcing the tenancy policies would refuse, in permissive mode.
    pub(crate) warnings: Vec<String>,
    /// True when the spec asks for more than one resource may: nothing of it is resolved, and
    /// nothing it holds is uninstalled either (its keys are not even listed in `named`).
    pub(crate) too_large: bool,
}

/// One chart entry of the spec for one release key: the key, the tenancy's index, the chart.
type Asked<'a> = (ReleaseKey, usize, &'a Chart);

/// The entries asking for one key more than once: the first, a few named, and how many in all.
struct Repeated {
    entries: Vec<String>,
    count: usize,
}

fn describe(asked: &Asked<'_>) -> String {
    format!("tenancies[{}] chart {}", asked.1, asked.2.chart_name)
}

/// The keys asked for more than once, by the position of their first entry, found in one pass
/// with a map from each key to its first entry; and that map.
fn repeats<'a>(
    asked: &'a [Asked<'_>],
) -> (HashMap<&'a ReleaseKey, usize>, HashMap<usize, Repeated>) {
    let mut first: HashMap<&ReleaseKey, usize> = HashMap::with_capacity(asked.len());
    let mut repeated: HashMap<usize, Repeated> = HashMap::new();
    for (i, entry) in asked.iter().enumerate() {
        match first.entry(&entry.0) {
            hash_map::Entry::Vacant(v) => {
                v.insert(i);
            }
            hash_map::Entry::Occupied(o) => {
                let at = *o.get();
                let r = repeated.entry(at).or_insert_with(|| Repeated {
                    entries: vec![describe(&asked[at])],
                    count: 1,
                });
                if r.entries.len() < limits::NAMED {
                    r.entries.push(describe(entry));
                }
                r.count += 1;
            }
        }
    }
    (first, repeated)
}

/// Every (key, tenancy, chart) a spec asks for, or the problem of a spec asking for more than one
/// resource may, counted before any key is made.
fn asked<'a>(
    owner: &OwnerId,
    spec: &'a ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    problems: &mut Vec<Problem>,
) -> Result<Vec<Asked<'a>>, Box<Problem>> {
    let too_large = |what, count, limit| {
        Box::new(Problem::TooLarge {
            owner: owner.clone(),
            what,
            count,
            limit,
        })
    };
    let charts = limits::charts_named(spec);
    if charts > limits::MAX_CHARTS {
        return Err(too_large("charts", charts, limits::MAX_CHARTS));
    }
    let mut targeted = Vec::with_capacity(spec.tenancies.len());
    for tenancy in &spec.tenancies {
        let (targets, mut found) = targets(tenancy, clusters);
        problems.append(&mut found);
        targeted.push(targets);
    }
    let releases: usize = spec
        .tenancies
        .iter()
        .zip(&targeted)
        .map(|(t, clusters)| t.charts.len().saturating_mul(clusters.len()))
        .fold(0, usize::saturating_add);
    if releases > limits::MAX_RELEASES {
        let what = "releases (each chart once per cluster its tenancy goes to)";
        return Err(too_large(what, releases, limits::MAX_RELEASES));
    }
    let mut asked = Vec::with_capacity(releases);
    for (index, (tenancy, targets)) in spec.tenancies.iter().zip(targeted).enumerate() {
        for cluster in targets {
            let Ok(scope) = ClusterNamespace::new(cluster, &tenancy.namespace) else {
                continue; // the schema only admits DNS-1123 labels
            };
            for chart in &tenancy.charts {
                let release = chart
                    .release_name
                    .clone()
                    .unwrap_or_else(|| tenancy.namespace.clone());
                let key = ReleaseKey {
                    scope: scope.clone(),
                    release,
                };
                asked.push((key, index, chart));
            }
        }
    }
    Ok(asked)
}

/// The releases a spec asks for, resolved, with the problems found on the way. A key asked for
/// twice is one problem naming a few of the entries that ask for it, and none of them is planned;
/// a release the tenancy policies do not allow is `Forbidden` and its chart is not even looked
/// up. A spec asking for more than one resource may (see [`limits`]) is one problem and nothing
/// else. The work is linear in the number of releases asked for.
pub(crate) fn desired(
    owner: &OwnerId,
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    chart_home: &Path,
    lookup: &dyn Fn(&ChartSource, Option<&str>) -> ChartLookup,
    admission: &Admission,
) -> Desired {
    let mut out = Desired::default();
    let asked = match asked(owner, spec, clusters, &mut out.problems) {
        Ok(asked) => asked,
        Err(problem) => {
            out.problems = vec![*problem];
            out.too_large = true;
            return out;
        }
    };
    let (first, mut repeated) = repeats(&asked);
    for (i, (key, _, chart)) in asked.iter().enumerate() {
        out.named.insert(key.clone());
        if let Some(r) = repeated.remove(&i) {
            out.problems.push(Problem::Duplicate {
                key: key.clone(),
                chart: chart.chart_name.clone(),
                entries: r.entries,
                count: r.count,
            });
            continue;
        }
        if first[key] != i {
            continue; // a later entry of a key asked for more than once, told with the first
        }
        let identity = match admission.admit(
            &owner.namespace,
            key,
            clusters.get(&key.scope.cluster),
            chart,
        ) {
            Verdict::Refused(rule) => {
                out.problems.push(Problem::Forbidden {
                    key: key.clone(),
                    chart: chart.chart_name.clone(),
                    rule,
                });
                continue;
            }
            Verdict::Allowed { identity, warning } => {
                if let Some(warning) = warning {
                    out.warnings.push(format!("release {key}: {warning}"));
                }
                identity
            }
        };
        match resolve(owner, key.clone(), chart, chart_home, lookup) {
            Ok(release) => out.releases.push(Release {
                identity,
                ..release
            }),
            Err(problem) => out.problems.push(*problem),
        }
    }
    out
}

/// One chart entry of the spec, for one key, as a release ready to plan.
fn resolve(
    owner: &OwnerId,
    key: ReleaseKey,
    chart: &Chart,
    chart_home: &Path,
    lookup: &dyn Fn(&ChartSource, Option<&str>) -> ChartLookup,
) -> Result<Release, Box<Problem>> {
    let source = source_of(chart, chart_home);
    if let Some((setting, why)) = limits::refused_setting(&chart.settings) {
        return Err(Box::new(Problem::InvalidSetting { key, setting, why }));
    }
    let (version, chart_digest) = match lookup(&source, chart.version.as_deref()) {
        ChartLookup::Found { version, digest } => {
            (version.or_else(|| chart.version.clone()), digest)
        }
        ChartLookup::Missing(reason) => {
            return Err(Box::new(Problem::MissingChart {
                key,
                chart: chart.chart_name.clone(),
                reason,
            }));
        }
    };
    let mut release = Release {
        key,
        owner: owner.clone(),
        chart_name: chart.chart_name.clone(),
        source,
        version,
        chart_digest,
        settings: chart
            .settings
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect(),
        values: chart.values.clone(),
        rollback_on_failure: chart.rollback_on_failure,
        spec_hash: String::new(),
        identity: None,
        drift: chart.drift_detection.clone().unwrap_or_default(),
    };
    release.spec_hash = spec_hash(&release);
    Ok(release)
}

/// Fingerprint of what Helm is given for a release: 16 hex digits. It covers the chart's resolved
/// version and content digest, so a changed chart rolls out while an unchanged one makes no call.
pub(crate) fn spec_hash(release: &Release) -> String {
    #[derive(Serialize)]
    struct Hashed<'a> {
        source: &'a ChartSource,
        version: &'a Option<String>,
        digest: &'a Option<String>,
        settings: &'a [(String, String)],
        values: &'a Option<serde_json::Value>,
        rollback: bool,
    }
    let source = match &release.source {
        // The chart home may move between replicas; the chart's name identifies it.
        ChartSource::Directory(_) => &ChartSource::Directory(PathBuf::from(&release.chart_name)),
        other => other,
    };
    let text = serde_json::to_vec(&Hashed {
        source,
        version: &release.version,
        digest: &release.chart_digest,
        settings: &release.settings,
        values: &release.values,
        rollback: release.rollback_on_failure,
    })
    .expect("plain data serializes");
    let digest = Sha256::digest(text);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A resource asking for release keys: who, when it was created, and the keys.
pub(crate) type Claimant = (OwnerId, i64, Vec<ReleaseKey>);

/// A resource as a claimant: the release keys its spec names that `admission` lets it claim,
/// whatever its charts say (so an unresolved release still holds its key). A key the policies
/// refuse claims nothing: refused for its source, or no governing policy allows its cluster and
/// namespace. With [`Admission::permissive`], every key the spec names.
pub(crate) fn claimant(
    owner: OwnerId,
    created: i64,
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    chart_home: &Path,
    admission: &Admission,
) -> Claimant {
    let any_chart = |_: &ChartSource, _: Option<&str>| ChartLookup::Found {
        version: None,
        digest: None,
    };
    let desired = desired(&owner, spec, clusters, chart_home, &any_chart, admission);
    let refused: BTreeSet<&ReleaseKey> = desired
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::Forbidden { .. }))
        .filter_map(Problem::release)
        .collect();
    let claimed = desired
        .named
        .iter()
        .filter(|k| !refused.contains(k))
        .filter(|k| {
            admission
                .identity_for_removal(&owner.namespace, k, clusters.get(&k.scope.cluster))
                .is_ok()
        })
        .cloned()
        .collect();
    (owner, created, claimed)
}

/// Who holds each release key asked for by several resources: one rule, used by every planner.
/// The resource whose release is installed there holds it, if it still asks for it; otherwise
/// the oldest resource asking (then the smallest namespace/name). So one of them always wins.
pub(crate) fn claims(
    claimants: impl IntoIterator<Item = Claimant>,
    applied: &HashMap<ReleaseKey, Applied>,
) -> HashMap<ReleaseKey, OwnerId> {
    let mut best: HashMap<ReleaseKey, (bool, i64, OwnerId)> = HashMap::new();
    for (owner, created, keys) in claimants {
        for key in keys {
            let installed = applied
                .get(&key)
                .is_some_and(|a| a.owner.as_ref() == Some(&owner));
            // Smaller wins: installed first, then older, then by name.
            let candidate = (!installed, created, owner.clone());
            best.entry(key)
                .and_modify(|held| {
                    if candidate < *held {
                        *held = candidate.clone();
                    }
                })
                .or_insert(candidate);
        }
    }
    best.into_iter().map(|(k, (_, _, o))| (k, o)).collect()
}

/// Compares what the spec asks for with what the clusters hold and decides the Helm work.
/// Only a release the spec no longer names is uninstalled: one that cannot be planned (a missing
/// chart, a refused setting, a duplicate) keeps running as it is and is reported. A suspended
/// release gets no job at all; it is listed in `suspended` when it would have had one.
pub fn plan(inputs: &Inputs<'_>) -> Plan {
    let Desired {
        releases,
        mut problems,
        named,
        warnings,
        too_large,
    } = desired(
        inputs.owner,
        inputs.spec,
        inputs.clusters,
        inputs.chart_home,
        inputs.chart_lookup,
        inputs.admission,
    );
    let mut plan = Plan {
        warnings,
        suspension: suspension(inputs.spec),
        ..Plan::default()
    };
    let held = Held::of(inputs.spec, inputs.clusters);
    let held = |key: &ReleaseKey| held.holds(key);
    for release in &releases {
        let applied = inputs.applied.get(&release.key);
        let holder = match inputs.claims.get(&release.key) {
            Some(h) if h != inputs.owner => Some(format!("Controller {h}")),
            _ => match applied.map(|a| &a.owner) {
                Some(Some(o)) if o != inputs.owner => Some(format!("Controller {o}")),
                Some(None) => Some("a Helm release not managed by tenancy-hub".into()),
                _ => None,
            },
        };
        if let Some(holder) = holder {
            problems.push(Problem::Conflict {
                key: release.key.clone(),
                holder,
            });
            continue;
        }
        plan.desired.push(release.clone());
        if !inputs.synced.contains(&release.key.scope.cluster) {
            plan.waiting.push(release.key.clone());
            continue;
        }
        let mut repair = None;
        let job = match applied {
            None => Some(None),
            Some(a) if a.is_pending() => {
                let age = a.modified_at.map_or(i64::MAX, |t| inputs.now - t);
                let left = inputs.pending_timeout_secs.saturating_sub(age) + 1;
                if left > 0 {
                    plan.recheck_in = Some(plan.recheck_in.map_or(left, |r| r.min(left)));
                }
                (age > inputs.pending_timeout_secs).then_some(Some(a.revision))
            }
            Some(a)
                if a.status == "deployed" && a.spec_hash.as_deref() == Some(&release.spec_hash) =>
            {
                // Deployed as asked: applied again, unchanged, only to repair drift found in
                // this very revision (a repair makes a new one, which is compared afresh).
                repair = inputs
                    .drifted
                    .get(&release.key)
                    .filter(|d| {
                        d.revision == a.revision && release.drift.mode == DriftMode::Enabled
                    })
                    .map(|d| d.summary.clone());
                repair.is_some().then_some(None)
            }
            Some(_) => Some(None),
        };
        if job.is_some() && held(&release.key) {
            plan.suspended.push(release.key.clone());
        } else if let Some(stale_pending) = job {
            plan.jobs.push(Job::Apply {
                release: Box::new(release.clone()),
                stale_pending,
                repair,
            });
        }
    }
    // A spec too large to plan names no key, and uninstalls nothing either.
    let mut removals: Vec<&Applied> = inputs
        .applied
        .values()
        .filter(|a| !too_large && a.owner.as_ref() == Some(inputs.owner))
        .filter(|a| !named.contains(&a.key) && inputs.synced.contains(&a.key.scope.cluster))
        .filter(|a| a.status != "uninstalling")
        .collect();
    removals.sort_by(|a, b| a.key.cmp(&b.key));
    let (kept, removals): (Vec<&Applied>, Vec<&Applied>) =
        removals.into_iter().partition(|a| held(&a.key));
    plan.suspended
        .extend(kept.into_iter().map(|a| a.key.clone()));
    for a in removals {
        match inputs.admission.identity_for_removal(
            &inputs.owner.namespace,
            &a.key,
            inputs.clusters.get(&a.key.scope.cluster),
        ) {
            Ok(identity) => plan.jobs.push(Job::Uninstall {
                key: a.key.clone(),
                owner: inputs.owner.clone(),
                identity,
            }),
            // Nothing runs with the operator's rights on the tenant's behalf: left in place.
            Err(rule) => problems.push(Problem::Forbidden {
                key: a.key.clone(),
                chart: a.key.release.clone(),
                rule,
            }),
        }
    }
    plan.problems = problems;
    plan
}

/// Runs CPU-heavy work of `size` units (charts named, Controllers) with `block_in_place` when it
/// is big and the runtime is multi-threaded, so the worker's other tasks (lease renewal among
/// them) move to another thread meanwhile; in place otherwise (tests use current-thread runtimes,
/// where `block_in_place` is not allowed).
pub(crate) fn offload<T>(size: usize, work: impl FnOnce() -> T) -> T {
    const BIG: usize = 64;
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if size >= BIG && multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
