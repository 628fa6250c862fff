//! `tenancy-hub diff`: what applying a Controller file would do, from the operator's own planner, changing nothing.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt, api::ListParams};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    api::crd::{Controller, HUB_CLUSTER},
    api::key::{ClusterName, ReleaseKey},
    api::policy::TenancyPolicy,
    charts::{
        cache::{self, ChartCache},
        catalog::ChartCatalog,
    },
    cli::{ClusterArgs, PolicyMode},
    clusters::registry::ClusterRegistry,
    helm::cli::{self as helm, HelmOptions, RenderFor},
    observe::releases,
    plan::{self, Applied, Inputs, Job, Plan, Problem, created_secs, owner_id},
    policy::{Admission, NamedPolicy},
};

/// Options of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// File of one or more Controller resources (YAML, documents separated by `---`); `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Show only the releases of this cluster.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = DiffOutput::Text)]
    pub output: DiffOutput,
    /// Hub namespace of resources that name none; default: the kubeconfig context's namespace, or "default".
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Where the clusters are.
    #[command(flatten)]
    pub clusters: ClusterArgs,
    /// Directory of local charts, looked up by chartName, as the operator's `--chart-home`.
    #[arg(long, env = "CHART_HOME", default_value = "charts")]
    pub chart_home: PathBuf,
    /// How TenancyPolicy resources apply, as the operator's `--tenancy-policy`.
    #[arg(long, value_enum, default_value_t = PolicyMode::Enforce, env = "TENANCY_HUB_TENANCY_POLICY")]
    pub tenancy_policy: PolicyMode,
    /// The operator's namespace, which no policy pattern matches.
    #[arg(long, env = "POD_NAMESPACE", default_value = "tenancy-hub")]
    pub operator_namespace: String,
    /// The helm binary.
    #[arg(long, env = "TENANCY_HUB_HELM", default_value = "helm")]
    pub helm: PathBuf,
    /// Timeout of each helm call, in seconds.
    #[arg(long, default_value_t = 120)]
    pub helm_timeout: u64,
}

/// How `diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiffOutput {
    /// A header per release, then a unified diff of its manifests.
    Text,
    /// A JSON array of {cluster, namespace, release, action, reason?, diff?}.
    Json,
}

/// What applying the file would do to one release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A first `helm install`.
    Install,
    /// A `helm upgrade` to a new revision.
    Upgrade,
    /// A `helm uninstall`.
    Uninstall,
    /// No Helm call.
    Unchanged,
    /// No Helm call because the release cannot be delivered as written: invalid, in conflict, or
    /// forbidden by the tenancy policies.
    Refused,
    /// Not known: the cluster's releases could not be read.
    Unknown,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Install => "install",
            Action::Upgrade => "upgrade",
            Action::Uninstall => "uninstall",
            Action::Unchanged => "unchanged",
            Action::Refused => "refused",
            Action::Unknown => "unknown",
        }
    }
}

/// One release of the preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Registered cluster name.
    pub cluster: String,
    /// Namespace on that cluster.
    pub namespace: String,
    /// Helm release name; empty for a problem of a whole tenancy.
    pub release: String,
    /// What would happen.
    pub action: Action,
    /// Why, when it is refused, unknown, held back or could not be rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unified diff of the deployed manifest against the rendered one, Secrets' values masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Revision deployed now.
    #[serde(skip)]
    pub revision: Option<i64>,
}

impl Entry {
    fn of(key: &ReleaseKey, action: Action, revision: Option<i64>) -> Self {
        Self {
            cluster: key.scope.cluster.to_string(),
            namespace: key.scope.namespace.clone(),
            release: key.release.clone(),
            action,
            reason: None,
            diff: None,
            revision,
        }
    }

    /// `cluster/namespace/release`.
    pub fn name(&self) -> String {
        format!("{}/{}/{}", self.cluster, self.namespace, self.release)
    }
}

/// What a plan would do, release by release, sorted by cluster, namespace and release.
pub fn entries(plan: &Plan, applied: &HashMap<ReleaseKey, Applied>) -> Vec<Entry> {
    let revision = |k: &ReleaseKey| applied.get(k).map(|a| a.revision);
    let mut out: Vec<Entry> = Vec::new();
    let mut jobs: BTreeSet<&ReleaseKey> = BTreeSet::new();
    for job in &plan.jobs {
        jobs.insert(job.key());
        let action = match job {
            Job::Apply { .. } if applied.contains_key(job.key()) => Action::Upgrade,
            Job::Apply { .. } => Action::Install,
            Job::Uninstall { .. } => Action::Uninstall,
            Job::Rollback { .. } => Action::Upgrade,
        };
        out.push(Entry::of(job.key(), action, revision(job.key())));
    }
    for release in plan.desired.iter().filter(|r| !jobs.contains(&r.key)) {
        let key = &release.key;
        let mut entry = Entry::of(key, Action::Unchanged, revision(key));
        if plan.waiting.contains(key) {
            entry.action = Action::Unknown;
            entry.reason = Some(format!(
                "the releases of cluster {} could not be read",
                key.scope.cluster
            ));
        } else if plan.suspended.contains(key) {
            entry.reason = Some("suspended: this change is held back until resumed".into());
        }
        out.push(entry);
    }
    let desired: BTreeSet<&ReleaseKey> = plan.desired.iter().map(|r| &r.key).collect();
    for key in plan.suspended.iter().filter(|k| !desired.contains(k)) {
        let mut entry = Entry::of(key, Action::Unchanged, revision(key));
        entry.reason = Some("suspended: its uninstall is held back until resumed".into());
        out.push(entry);
    }
    for problem in &plan.problems {
        let mut entry = match (problem.release(), problem) {
            (Some(key), _) => Entry::of(key, Action::Refused, revision(key)),
            (
                None,
                Problem::UnknownCluster {
                    namespace, cluster, ..
                },
            ) => Entry {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                ..Entry::of(&placeholder(), Action::Refused, None)
            },
            (None, Problem::NoClusterSelected { namespace }) => Entry {
                cluster: String::new(),
                namespace: namespace.clone(),
                ..Entry::of(&placeholder(), Action::Refused, None)
            },
            (None, _) => Entry::of(&placeholder(), Action::Refused, None),
        };
        entry.reason = Some(problem.to_string());
        out.push(entry);
    }
    out.sort_by(|a, b| {
        (&a.cluster, &a.namespace, &a.release, a.action).cmp(&(
            &b.cluster,
            &b.namespace,
            &b.release,
            b.action,
        ))
    });
    out
}

fn placeholder() -> ReleaseKey {
    ReleaseKey {
        scope: crate::api::key::ClusterNamespace::new(
            HUB_CLUSTER.parse().expect("the hub's name is valid"),
            "default",
        )
        .expect("a valid namespace"),
        release: String::new(),
    }
}

/// The exit code, as `kubectl diff`: 0 when nothing would change, 1 when a release would be
/// installed, upgraded or uninstalled or is refused (the file asks for something that would not
/// be delivered), 2 when a cluster could not be read.
pub fn exit_code(entries: &[Entry]) -> u8 {
    if entries.iter().any(|e| e.action == Action::Unknown) {
        2
    } else if entries.iter().any(|e| e.action != Action::Unchanged) {
        1
    } else {
        0
    }
}

/// A Secret's value as shown in a preview: `***` and a short keyed hash, so a changed value
/// shows as a change while the value itself (even a short one) cannot be guessed from it.
fn masked(value: &str, salt: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(value.as_bytes());
    let digest = hasher.finalize();
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("*** ({short})")
}

/// One YAML document with every value of a Secret's `data` and `stringData` masked; other
/// documents unchanged.
fn mask_document(doc: &str, salt: &[u8]) -> String {
    if !doc.contains("Secret") {
        return doc.to_owned();
    }
    let Ok(mut value) = serde_yaml::from_str::<serde_yaml::Value>(doc) else {
        return "# a document that does not parse as YAML is hidden: it may hold a Secret\n".into();
    };
    if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("Secret") {
        return doc.to_owned();
    }
    for field in ["data", "stringData"] {
        if let Some(serde_yaml::Value::Mapping(values)) = value.get_mut(field) {
            for (_, v) in values.iter_mut() {
                let text = match &*v {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default(),
                };
                *v = serde_yaml::Value::String(masked(&text, salt));
            }
        }
    }
    let comments: String = doc
        .lines()
        .take_while(|l| l.trim_start().starts_with('#') || l.trim().is_empty())
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    comments + &serde_yaml::to_string(&value).unwrap_or_default()
}

/// A manifest (YAML documents separated by `---` lines) with every Secret's values masked.
pub fn mask_secrets(manifest: &str, salt: &[u8]) -> String {
    let mut out = String::new();
    let mut doc = String::new();
    for line in manifest.lines() {
        if line.trim_end() == "---" {
            out.push_str(&mask_document(&doc, salt));
            out.push_str("---\n");
            doc.clear();
        } else {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    out.push_str(&mask_document(&doc, salt));
    out
}

/// A unified diff of two manifests, empty when they are the same.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

/// The header line of an entry, as `member-1/team-a/web: upgrade (revision 3 -> 4)`.
pub fn header(entry: &Entry) -> String {
    let name = entry.name();
    let what = match (entry.action, entry.revision) {
        (Action::Install, _) => "install (revision 1)".to_owned(),
        (Action::Upgrade, Some(r)) => format!("upgrade (revision {r} -> {})", r + 1),
        (Action::Uninstall, Some(r)) => format!("uninstall (revision {r})"),
        (Action::Unchanged, Some(r)) => format!("unchanged (revision {r})"),
        (action, _) => action.word().to_owned(),
    };
    match &entry.reason {
        Some(reason) => format!("{name}: {what}: {reason}"),
        None => format!("{name}: {what}"),
    }
}

/// The preview as text: a header per release, each followed by its diff.
pub fn render_text(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(&header(entry));
        out.push('\n');
        if let Some(diff) = &entry.diff {
            out.push_str(diff);
            if !diff.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// The preview as a JSON array.
pub fn render_json(entries: &[Entry]) -> String {
    serde_json::to_string_pretty(entries).expect("plain data serializes") + "\n"
}

/// The Controllers of a file; those naming no namespace go to `namespace`.
pub fn parse_file(text: &str, namespace: &str) -> anyhow::Result<Vec<Controller>> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(doc)
            .with_context(|| format!("document {} is not YAML", index + 1))?;
        if value.is_null() {
            continue;
        }
        let kind = value.get("kind").and_then(serde_yaml::Value::as_str);
        anyhow::ensure!(
            kind == Some("Controller"),
            "document {} is a {}, not a Controller",
            index + 1,
            kind.unwrap_or("document without kind")
        );
        let mut c: Controller = serde_yaml::from_value(value)
            .with_context(|| format!("document {} is not a valid Controller", index + 1))?;
        if c.metadata.namespace.is_none() {
            c.metadata.namespace = Some(namespace.to_owned());
        }
        anyhow::ensure!(
            c.metadata.name.is_some(),
            "document {} names no Controller (metadata.name)",
            index + 1
        );
        out.push(c);
    }
    anyhow::ensure!(!out.is_empty(), "the file holds no Controller");
    Ok(out)
}

/// What a cluster is, for rendering offline: its version and served API group versions.
async fn render_for(client: kube::Client) -> RenderFor {
    let kube_version = client.apiserver_version().await.ok().map(|v| v.git_version);
    let mut api_versions = Vec::new();
    if let Ok(core) = client.list_core_api_versions().await {
        api_versions.extend(core.versions);
    }
    if let Ok(groups) = client.list_api_groups().await {
        api_versions.extend(
            groups
                .groups
                .into_iter()
                .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
        );
    }
    RenderFor {
        kube_version,
        api_versions,
        is_upgrade: false,
    }
}

/// Runs `tenancy-hub diff`: reads the hub and the clusters, plans, renders and prints; writes nothing.
pub async fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let text = if args.file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?
    };
    let registry = args.clusters.registry().await?;
    let hub_name: ClusterName = HUB_CLUSTER.parse().expect("the hub's name is valid");
    let hub = registry
        .get(&hub_name)
        .context("the cluster registry has no hub")?
        .client
        .clone();
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| hub.default_namespace().to_owned());
    let mut files = parse_file(&text, &namespace)?;
    if let Some(only) = &args.cluster {
        anyhow::ensure!(
            only.parse::<ClusterName>()
                .is_ok_and(|c| registry.get(&c).is_some()),
            "cluster {only:?} is not registered"
        );
    }
    eprintln!("Reading Controllers and TenancyPolicies from the hub…");
    let on_hub = Api::<Controller>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing Controllers on the hub")?
        .items;
    let mut policies: Vec<NamedPolicy> = Api::<TenancyPolicy>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing TenancyPolicies on the hub")?
        .items
        .into_iter()
        .map(|p| NamedPolicy {
            name: p.name_any(),
            spec: p.spec,
        })
        .collect();
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    let admission = Admission {
        mode: args.tenancy_policy.mode(),
        policies,
        operator_namespace: args.operator_namespace.clone(),
    };
    // The file's resources replace those of the same namespace and name, keeping their age.
    let now = Timestamp::now().as_second();
    let mut created: BTreeMap<plan::OwnerId, i64> = BTreeMap::new();
    for c in &on_hub {
        created.insert(owner_id(c), created_secs(c));
    }
    let file_owners: BTreeSet<plan::OwnerId> = files.iter().map(owner_id).collect();
    let clusters = registry.labels();
    let (applied, synced) = read_releases(&registry).await;
    let claimants = on_hub
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| !file_owners.contains(&owner_id(c)))
        .chain(files.iter())
        .map(|c| {
            let owner = owner_id(c);
            let age = created.get(&owner).copied().unwrap_or(now);
            plan::claimant(owner, age, &c.spec, &clusters, &args.chart_home, &admission)
        })
        .collect::<Vec<_>>();
    let claims = plan::claims(claimants, &applied);
    let helm_options = HelmOptions {
        binary: args.helm.clone(),
        timeout: Duration::from_secs(args.helm_timeout),
        ..HelmOptions::default()
    };
    // A preview's own cache, gone when it ends: it renders from the archives an upgrade would
    // install, fetched and verified the same way.
    let scratch = tempfile::Builder::new()
        .prefix("tenancy-hub-diff-")
        .tempdir()?;
    let chart_cache = Arc::new(ChartCache::open(
        scratch.path(),
        cache::DEFAULT_SIZE,
        args.helm.clone(),
        Arc::new(crate::metrics::Metrics::new()),
    )?);
    let charts = ChartCatalog::new(chart_cache.clone(), Duration::from_secs(300));
    let mut all = Vec::new();
    let mut releases_by_key = HashMap::new();
    for c in &mut files {
        let owner = owner_id(c);
        eprintln!("Planning Controller {owner}…");
        charts
            .prepare(&c.spec, &args.chart_home, &|chart| {
                admission.fetch_scope(&owner.namespace, chart)
            })
            .await;
        let lookup =
            |source: &plan::ChartSource, version: Option<&str>| charts.lookup(source, version);
        let plan = plan::plan(&Inputs {
            owner: &owner,
            spec: &c.spec,
            clusters: &clusters,
            synced: &synced,
            applied: &applied,
            claims: &claims,
            admission: &admission,
            // A preview plans what a spec asks for; drift repairs belong to the running operator.
            drifted: &HashMap::new(),
            chart_home: &args.chart_home,
            chart_lookup: &lookup,
            now,
            pending_timeout_secs: helm_options.timeout.as_secs() as i64 + 60,
        });
        for job in &plan.jobs {
            if let Job::Apply { release, .. } = job {
                releases_by_key.insert(release.key.clone(), (**release).clone());
            }
        }
        all.extend(entries(&plan, &applied));
    }
    if let Some(only) = &args.cluster {
        all.retain(|e| &e.cluster == only);
    }
    let salt = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::process::id(),
    )
    .to_le_bytes();
    let mut cluster_info: HashMap<String, RenderFor> = HashMap::new();
    for entry in all.iter_mut().filter(|e| {
        matches!(
            e.action,
            Action::Install | Action::Upgrade | Action::Uninstall
        )
    }) {
        let Ok(key) = entry.name().parse::<ReleaseKey>() else {
            continue;
        };
        let Some(member) = registry.get(&key.scope.cluster) else {
            continue;
        };
        eprintln!("Comparing {key}…");
        let deployed = match entry.revision {
            Some(revision) => releases::manifest(member.client.clone(), &key, revision)
                .await
                .map_err(anyhow::Error::msg)?
                .unwrap_or_default(),
            None => String::new(),
        };
        let rendered = match releases_by_key.get(&key) {
            Some(release) => {
                if !cluster_info.contains_key(&entry.cluster) {
                    let info = render_for(member.client.clone()).await;
                    cluster_info.insert(entry.cluster.clone(), info);
                }
                let render = RenderFor {
                    is_upgrade: entry.action == Action::Upgrade,
                    ..cluster_info[&entry.cluster].clone()
                };
                let archive = chart_cache.checkout(&release.source, release.version.as_deref());
                let archive = archive.as_ref().map(|a| a.path());
                match helm::template(&helm_options, release, archive, &render).await {
                    Ok(manifest) => manifest,
                    Err(e) => {
                        entry.reason = Some(format!("the chart does not render: {e}"));
                        continue;
                    }
                }
            }
            None => String::new(),
        };
        let old_name = match entry.revision {
            Some(r) => format!("{key} (revision {r})"),
            None => "/dev/null".to_owned(),
        };
        let new_name = match entry.action {
            Action::Uninstall => "/dev/null".to_owned(),
            _ => format!("{key} (revision {})", entry.revision.map_or(1, |r| r + 1)),
        };
        let diff = unified(
            &mask_secrets(&deployed, &salt),
            &mask_secrets(&rendered, &salt),
            &old_name,
            &new_name,
        );
        entry.diff = Some(diff).filter(|d| !d.is_empty());
        if entry.diff.is_none() && entry.action == Action::Upgrade {
            entry.reason = Some("a new revision with the same manifest".into());
        }
    }
    print!(
        "{}",
        match args.output {
            DiffOutput::Text => render_text(&all),
            DiffOutput::Json => render_json(&all),
        }
    );
    Ok(ExitCode::from(exit_code(&all)))
}

/// Every cluster's releases; clusters whose releases cannot be read are left out of `synced`.
async fn read_releases(
    registry: &ClusterRegistry,
) -> (HashMap<ReleaseKey, Applied>, BTreeSet<ClusterName>) {
    let mut applied = HashMap::new();
    let mut synced = BTreeSet::new();
    for member in registry.iter() {
        let name = &member.entry.name;
        eprintln!("Reading the releases of cluster {name}…");
        match releases::list(name, member.client.clone()).await {
            Ok(found) => {
                applied.extend(found);
                synced.insert(name.clone());
            }
            Err(e) => eprintln!("warning: cannot read the releases of cluster {name}: {e}"),
        }
    }
    (applied, synced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ChartSource, OwnerId, Release};

    fn key(k: &str) -> ReleaseKey {
        k.parse().unwrap()
    }

    fn release(k: &str) -> Release {
        Release {
            key: key(k),
            owner: OwnerId {
                namespace: "default".into(),
                name: "x".into(),
            },
            chart_name: "web".into(),
            source: ChartSource::Directory("/charts/web".into()),
            version: None,
            chart_digest: None,
            settings: Vec::new(),
            values: None,
            rollback_on_failure: false,
            spec_hash: "h".into(),
            identity: None,
            drift: Default::default(),
        }
    }

    fn applied(k: &str, revision: i64) -> (ReleaseKey, Applied) {
        (
            key(k),
            Applied {
                key: key(k),
                owner: None,
                spec_hash: Some("h".into()),
                revision,
                status: "deployed".into(),
                modified_at: None,
            },
        )
    }

    fn apply(k: &str) -> Job {
        Job::Apply {
            release: Box::new(release(k)),
            stale_pending: None,
            repair: None,
        }
    }

    #[test]
    fn each_release_of_a_plan_gets_one_action_sorted_by_cluster_namespace_and_release() {
        let plan = Plan {
            desired: ["m/a/new", "m/a/changed", "m/a/same"].map(release).to_vec(),
            jobs: vec![
                apply("m/a/new"),
                apply("m/a/changed"),
                Job::Uninstall {
                    key: key("m/a/gone"),
                    owner: release("m/a/gone").owner,
                    identity: None,
                },
            ],
            problems: vec![Problem::Conflict {
                key: key("m/b/held"),
                holder: "Controller default/other".into(),
            }],
            ..Default::default()
        };
        let applied = HashMap::from([
            applied("m/a/changed", 3),
            applied("m/a/same", 2),
            applied("m/a/gone", 5),
        ]);
        let got: Vec<(String, Action, Option<i64>)> = entries(&plan, &applied)
            .into_iter()
            .map(|e| (e.name(), e.action, e.revision))
            .collect();
        assert_eq!(
            got,
            [
                ("m/a/changed".into(), Action::Upgrade, Some(3)),
                ("m/a/gone".into(), Action::Uninstall, Some(5)),
                ("m/a/new".into(), Action::Install, None),
                ("m/a/same".into(), Action::Unchanged, Some(2)),
                ("m/b/held".into(), Action::Refused, None),
            ]
        );
    }

    #[test]
    fn held_back_and_unreadable_releases_say_why() {
        let plan = Plan {
            desired: vec![release("m/a/web"), release("n/a/web")],
            suspended: vec![key("m/a/web"), key("m/a/old")],
            waiting: vec![key("n/a/web")],
            ..Default::default()
        };
        let got = entries(&plan, &HashMap::from([applied("m/a/old", 1)]));
        let actions: Vec<(String, Action)> = got.iter().map(|e| (e.name(), e.action)).collect();
        assert_eq!(
            actions,
            [
                ("m/a/old".into(), Action::Unchanged),
                ("m/a/web".into(), Action::Unchanged),
                ("n/a/web".into(), Action::Unknown),
            ]
        );
        assert!(
            got[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("uninstall is held back")
        );
        assert!(got[1].reason.as_deref().unwrap().contains("suspended"));
        assert_eq!(exit_code(&got), 2);
    }

    #[test]
    fn the_exit_code_follows_kubectl_diff() {
        let entry = |action| Entry::of(&key("m/a/web"), action, None);
        assert_eq!(exit_code(&[]), 0);
        assert_eq!(exit_code(&[entry(Action::Unchanged)]), 0);
        for changing in [
            Action::Install,
            Action::Upgrade,
            Action::Uninstall,
            Action::Refused,
        ] {
            assert_eq!(exit_code(&[entry(Action::Unchanged), entry(changing)]), 1);
        }
        assert_eq!(
            exit_code(&[entry(Action::Install), entry(Action::Unknown)]),
            2
        );
    }

    const MANIFEST: &str = "---\n# Source: web/templates/secret.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: web\ndata:\n  password: aHVudGVyMg==\nstringData:\n  token: s3cr3t\n---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  motd: hello\n";

    #[test]
    fn secret_values_are_masked_and_everything_else_is_kept_as_it_is() {
        let out = mask_secrets(MANIFEST, b"salt");
        assert!(
            !out.contains("aHVudGVyMg==") && !out.contains("s3cr3t"),
            "{out}"
        );
        assert!(out.contains("password: '*** ("), "{out}");
        assert!(out.contains("# Source: web/templates/secret.yaml\n"));
        assert!(out.ends_with("---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  motd: hello\n"), "{out}");
        assert_eq!(out, mask_secrets(MANIFEST, b"salt"), "masking is stable");
    }

    #[test]
    fn a_changed_secret_value_still_shows_as_a_change_without_showing_the_value() {
        let changed = MANIFEST.replace("s3cr3t", "0th3r");
        let diff = unified(
            &mask_secrets(MANIFEST, b"k"),
            &mask_secrets(&changed, b"k"),
            "a",
            "b",
        );
        let lines: Vec<&str> = diff
            .lines()
            .filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---"))
            .collect();
        assert_eq!(lines.len(), 2, "{diff}");
        assert!(
            lines[0].starts_with("-  token: '*** (") && lines[1].starts_with("+  token: '*** (")
        );
        assert!(!diff.contains("s3cr3t") && !diff.contains("0th3r"));
    }

    #[test]
    fn a_document_that_does_not_parse_is_hidden_if_it_may_hold_a_secret() {
        let out = mask_secrets("kind: Secret\ndata: [unclosed\n", b"k");
        assert!(!out.contains("unclosed") && out.contains("hidden"), "{out}");
    }

    #[test]
    fn the_text_output_has_a_header_per_release_and_its_diff() {
        let mut upgrade = Entry::of(&key("member-1/team-a/web"), Action::Upgrade, Some(3));
        upgrade.diff = Some(unified("replicas: 1\n", "replicas: 2\n", "old", "new"));
        let mut refused = Entry::of(&key("member-2/team-a/web"), Action::Refused, None);
        refused.reason = Some("release member-2/team-a/web is forbidden".into());
        let text = render_text(&[upgrade, refused]);
        assert_eq!(
            text,
            "member-1/team-a/web: upgrade (revision 3 -> 4)\n--- old\n+++ new\n@@ -1 +1 @@\n-replicas: 1\n+replicas: 2\nmember-2/team-a/web: refused: release member-2/team-a/web is forbidden\n"
        );
    }

    #[test]
    fn the_json_output_is_an_array_of_stable_fields() {
        let mut install = Entry::of(&key("member-1/team-a/web"), Action::Install, None);
        install.diff = Some("+x\n".into());
        let unchanged = Entry::of(&key("hub/foo/foo"), Action::Unchanged, Some(1));
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&[install, unchanged])).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"cluster": "member-1", "namespace": "team-a", "release": "web", "action": "install", "diff": "+x\n"},
                {"cluster": "hub", "namespace": "foo", "release": "foo", "action": "unchanged"}
            ])
        );
    }

    #[test]
    fn a_file_of_controllers_takes_the_given_namespace_when_it_names_none() {
        let text = "apiVersion: multitenancy.dev/v1alpha1\nkind: Controller\nmetadata: {name: a}\nspec: {tenancies: []}\n---\napiVersion: multitenancy.dev/v1alpha1\nkind: Controller\nmetadata: {name: b, namespace: team}\nspec: {suspend: true}\n";
        let got = parse_file(text, "default").unwrap();
        assert_eq!(got[0].metadata.namespace.as_deref(), Some("default"));
        assert_eq!(got[1].metadata.namespace.as_deref(), Some("team"));
        assert!(got[1].spec.suspend);
        let err = parse_file("kind: ConfigMap\n", "default").unwrap_err();
        assert!(err.to_string().contains("not a Controller"), "{err}");
    }
}
