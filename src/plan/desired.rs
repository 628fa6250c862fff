//! The releases a spec asks for: its tenancies' targets, charts resolved and admitted, duplicates found in one pass, what `suspend` holds back, and each release's fingerprint (pure).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, hash_map},
    path::{Path, PathBuf},
};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    api::crd::{Chart, ControllerSpec, HUB_CLUSTER, HealthCheckExpr, RefKind, Tenancy, Uninstall},
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    plan::health::Rules,
    policy::{
        Admission, Verdict,
        access::{Credentials, Trust},
    },
};

use crate::plan::{
    fleet::{self, Fleet},
    limits,
    post_render::PostRender,
    release::*,
};

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

/// The release key of `chart` of `tenancy` in `scope`: its `releaseName`, or (as in the seed) the
/// tenancy's namespace.
pub(crate) fn release_key(
    scope: &ClusterNamespace,
    tenancy: &Tenancy,
    chart: &Chart,
) -> ReleaseKey {
    ReleaseKey {
        scope: scope.clone(),
        release: chart
            .release_name
            .clone()
            .unwrap_or_else(|| tenancy.namespace.clone()),
    }
}

/// The `uninstall` settings `spec` gives the release `key`: those of the first chart entry of a
/// tenancy of its namespace releasing it; the executor's defaults when none does.
pub(crate) fn uninstall_settings(spec: &ControllerSpec, key: &ReleaseKey) -> Uninstall {
    spec.tenancies
        .iter()
        .filter(|t| t.namespace == key.scope.namespace)
        .flat_map(|t| t.charts.iter().map(move |c| (t, c)))
        .find(|(t, c)| c.release_name.as_ref().unwrap_or(&t.namespace) == &key.release)
        .and_then(|(_, c)| c.uninstall.clone())
        .unwrap_or_default()
}

/// Where a chart comes from, as the spec names it.
pub(crate) fn source_of(chart: &Chart, chart_home: &Path) -> ChartSource {
    if let Some(git) = &chart.git {
        // Admission refuses a path that climbs out and a ref naming none or several before
        // anything is planned or fetched; what it refuses never gets here.
        ChartSource::Git {
            url: git.url.clone(),
            path: crate::policy::git::clean_path(&git.path).unwrap_or_else(|_| git.path.clone()),
            reference: git
                .reference
                .kind()
                .unwrap_or_else(|_| RefKind::Branch(String::new())),
            chart: chart.chart_name.clone(),
            interval_secs: git.interval_secs(),
        }
    } else if chart.chart_name.starts_with("oci://") {
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
    /// The hub objects `valuesFrom` read (found or not), to be watched.
    pub(crate) sources: BTreeSet<ValuesSource>,
    /// The Git values files `valuesFiles` read (found or not), to be loaded.
    pub(crate) git_files: BTreeSet<GitFileSource>,
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
                asked.push((release_key(&scope, tenancy, chart), index, chart));
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
    lookup: &ChartLookupFn<'_>,
    admission: &Admission,
    fleet: &Fleet<'_>,
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
    let mut health_checked: HashMap<&[HealthCheckExpr], Option<String>> = HashMap::new();
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
        if chart.repo.is_some() && chart.git.is_some() {
            out.problems.push(Problem::MissingChart {
                key: key.clone(),
                chart: chart.chart_name.clone(),
                reason: "it names both repo and git, and a chart comes from one source: remove one of them".into(),
            });
            continue;
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
        let labels = clusters.get(&key.scope.cluster);
        let rendered = match fleet::render(
            owner,
            key,
            chart,
            labels.unwrap_or(&BTreeMap::new()),
            fleet,
            admission,
        ) {
            Ok(rendered) => rendered,
            Err(unrendered) => {
                out.sources.extend(unrendered.sources);
                out.git_files.extend(unrendered.git_files);
                out.problems.push(Problem::InvalidValues {
                    key: key.clone(),
                    why: unrendered.why,
                });
                continue;
            }
        };
        out.sources.extend(rendered.sources.iter().cloned());
        out.git_files.extend(rendered.git_files.iter().cloned());
        // Compiled once per set of expressions, however many clusters the chart goes to.
        let exprs = chart.health_check_exprs.as_slice();
        let refused = health_checked
            .entry(exprs)
            .or_insert_with(|| Rules::compile(exprs).err().map(|e| e.to_string()));
        if let Some(why) = refused {
            out.problems.push(Problem::InvalidHealthCheck {
                key: key.clone(),
                owner: owner.clone(),
                chart: chart.chart_name.clone(),
                why: why.clone(),
            });
            continue;
        }
        // Admitted above, so its credentials are too.
        let credentials = admission
            .credentials(&owner.namespace, chart)
            .unwrap_or_default();
        let trust = admission.trust(&owner.namespace, chart);
        match resolve(
            owner,
            key.clone(),
            chart,
            chart_home,
            lookup,
            rendered,
            (&credentials, &trust),
        ) {
            Ok(mut release) => {
                if let Some(post_render) = &mut release.post_render {
                    post_render.allow_sensitive_kinds = admission.post_render_sensitive_allowed(
                        &owner.namespace,
                        key,
                        labels,
                        chart,
                    );
                }
                out.releases.push(Release {
                    identity,
                    adoption: adoption(admission, &owner.namespace, key, labels, chart),
                    ..release
                })
            }
            Err(problem) => out.problems.push(*problem),
        }
    }
    out
}

/// Whether an admitted chart entry may take over an existing release of its key that
/// tenancy-hub does not own: only when it asks (`adopt`) and the policies allow it.
fn adoption(
    admission: &Admission,
    hub_namespace: &str,
    key: &ReleaseKey,
    labels: Option<&BTreeMap<String, String>>,
    chart: &Chart,
) -> Adoption {
    if !chart.adopt {
        return Adoption::NotAsked;
    }
    match admission.adoption(hub_namespace, key, labels, chart) {
        Ok(()) => Adoption::Allowed,
        Err(why) => Adoption::Refused(why),
    }
}

/// One chart entry of the spec, for one key, with its values made for the key's cluster, as a
/// release ready to plan.
fn resolve(
    owner: &OwnerId,
    key: ReleaseKey,
    chart: &Chart,
    chart_home: &Path,
    lookup: &ChartLookupFn<'_>,
    rendered: fleet::Rendered,
    (credentials, trust): (&Credentials, &Trust),
) -> Result<Release, Box<Problem>> {
    let source = source_of(chart, chart_home);
    let every_setting =
        std::iter::once(&chart.settings).chain(chart.overrides.iter().map(|o| &o.settings));
    for settings in every_setting {
        if let Some((setting, why)) = limits::refused_setting(settings) {
            return Err(Box::new(Problem::InvalidSetting { key, setting, why }));
        }
    }
    let helm = helm_settings(chart);
    let found = lookup(&source, credentials, trust, chart.version.as_deref());
    let (version, chart_digest, verified, commit) = match found {
        ChartLookup::Found {
            version,
            digest,
            verified,
            commit,
        } => (
            version.or_else(|| chart.version.clone()),
            digest,
            verified,
            commit,
        ),
        ChartLookup::Missing(reason) => {
            return Err(Box::new(Problem::MissingChart {
                key,
                chart: chart.chart_name.clone(),
                reason,
            }));
        }
        ChartLookup::Unverified(reason) => {
            return Err(Box::new(Problem::Unverified {
                key,
                chart: chart.chart_name.clone(),
                reason,
            }));
        }
    };
    // A rule of the policies asks for signatures: nothing unverified is planned.
    if !trust.is_empty() && verified.is_none() {
        return Err(Box::new(Problem::Unverified {
            key,
            chart: chart.chart_name.clone(),
            reason: "its signatures are not checked yet".into(),
        }));
    }
    let mut release = Release {
        adoption: Default::default(),
        commit,
        key,
        owner: owner.clone(),
        chart_name: chart.chart_name.clone(),
        source,
        version,
        chart_digest,
        settings: rendered.settings,
        values: rendered.values,
        rollback_on_failure: chart.rollback_on_failure,
        spec_hash: String::new(),
        identity: None,
        drift: chart.drift_detection.clone().unwrap_or_default(),
        health: chart.health_check_exprs.clone(),
        helm,
        masked: rendered.masked,
        post_render: rendered.post_render,
        credentials: credentials.clone(),
        verified,
    };
    release.spec_hash = spec_hash(&release);
    Ok(release)
}

/// A chart entry's Helm settings. What a policy lets a tenant ask of Helm (hooks skipped, CRDs
/// replaced) is the admission's to refuse (`policy::TenancyPolicies::refusal`).
fn helm_settings(chart: &Chart) -> HelmSettings {
    HelmSettings {
        install: chart.install.clone().unwrap_or_default(),
        upgrade: chart.upgrade.clone().unwrap_or_default(),
        uninstall: chart.uninstall.clone().unwrap_or_default(),
        test: chart.test.clone().filter(|t| t.enable),
        max_history: chart
            .max_history
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
    }
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
        // Absent when none, so the fingerprint of a release without one is what it always was.
        #[serde(skip_serializing_if = "Option::is_none")]
        post_render: Option<PostRender>,
    }
    let source = match &release.source {
        // The chart home may move between replicas; the chart's name identifies it.
        ChartSource::Directory(_) => &ChartSource::Directory(PathBuf::from(&release.chart_name)),
        // How often the ref is looked at is not what is deployed.
        ChartSource::Git {
            url,
            path,
            reference,
            chart,
            ..
        } => &ChartSource::Git {
            url: url.clone(),
            path: path.clone(),
            reference: reference.clone(),
            chart: chart.clone(),
            interval_secs: 0,
        },
        other => other,
    };
    let text = serde_json::to_vec(&Hashed {
        source,
        version: &release.version,
        digest: &release.chart_digest,
        settings: &release.settings,
        values: &release.values,
        rollback: release.rollback_on_failure,
        post_render: release.post_render.as_ref().map(PostRender::deployed),
    })
    .expect("plain data serializes");
    let digest = Sha256::digest(text);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
