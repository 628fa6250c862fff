//! `tenancy-hub diff`: what applying a Controller file would do, from the operator's own planner, changing nothing.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt, api::ListParams};

use crate::{
    api::crd::{HUB_CLUSTER, RolloutStatus, TenancyController},
    api::key::{ClusterName, ReleaseKey},
    api::policy::TenancyPolicy,
    charts::{
        cache::{self, ChartCache},
        catalog::ChartCatalog,
    },
    cli::args::{ClusterArgs, PolicyMode},
    clusters::registry::ClusterRegistry,
    controller::hub_values::HubValues,
    controller::observed::{Live, Seen},
    controller::pipeline::{Planning, decide, plan_spec},
    helm::args::{HelmOptions, RenderFor},
    helm::seal::SealKey,
    member::{Links, pull::wire::Signer},
    observe::drift::RepairVerdict,
    plan::{self, Applied, Job, Release, created_secs, owner_id},
    policy::{Admission, NamedPolicy},
    preview::{self, Renderer},
};

mod report;

use report::{Action, DiffOutput, Entry, entries, exit_code, render_json, render_text};

/// Options of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// File of one or more Controller resources (YAML, documents separated by `---`); `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub(crate) file: PathBuf,
    /// Show only the releases of this cluster.
    #[arg(long)]
    pub(crate) cluster: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = DiffOutput::Text)]
    pub(crate) output: DiffOutput,
    /// Hub namespace of resources that name none; default: the kubeconfig context's namespace, or "default".
    #[arg(short, long)]
    pub(crate) namespace: Option<String>,
    /// Where the clusters are.
    #[command(flatten)]
    pub(crate) clusters: ClusterArgs,
    /// Directory of local charts, looked up by chartName, as the operator's `--chart-home`.
    #[arg(long, env = "CHART_HOME", default_value = "charts")]
    pub(crate) chart_home: PathBuf,
    /// How TenancyPolicy resources apply, as the operator's `--tenancy-policy`.
    #[arg(long, value_enum, default_value_t = PolicyMode::Enforce, env = "TENANCY_HUB_TENANCY_POLICY")]
    pub(crate) tenancy_policy: PolicyMode,
    /// The operator's namespace, which no policy pattern matches.
    #[arg(long, env = "POD_NAMESPACE", default_value = "tenancy-hub")]
    pub(crate) operator_namespace: String,
    /// The helm binary.
    #[arg(long, env = "TENANCY_HUB_HELM", default_value = "helm")]
    pub(crate) helm: PathBuf,
    /// Timeout of each helm call, in seconds.
    #[arg(long, default_value_t = 120)]
    pub(crate) helm_timeout: u64,
    /// The Helm executor (tenancy-hub-helm), whose post-renderer patches the manifests of charts
    /// with `postRenderers` or `commonMetadata`, as an install does. Default: tenancy-hub-helm
    /// beside --helm, else on PATH.
    #[arg(long, env = "TENANCY_HUB_HELM_EXECUTOR")]
    pub(crate) helm_executor: Option<std::path::PathBuf>,
    /// The chart signature verifier, for the sources whose policy asks signatures (as `run
    /// --verifier`). Default: tenancy-hub-verify beside --helm, else on PATH.
    #[arg(long, env = "TENANCY_HUB_VERIFIER")]
    pub(crate) verifier: Option<PathBuf>,
    /// The Git fetcher, for Git charts (as `run --git-fetcher`). Default: tenancy-hub-git
    /// beside --helm, else on PATH.
    #[arg(long, env = "TENANCY_HUB_GIT_FETCHER")]
    pub(crate) git_fetcher: Option<PathBuf>,
}

/// The Controllers of a file; those naming no namespace go to `namespace`.
pub(crate) fn parse_file(text: &str, namespace: &str) -> anyhow::Result<Vec<TenancyController>> {
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
        let mut c: TenancyController = serde_yaml::from_value(value)
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

/// Runs `tenancy-hub diff`: reads the hub and the clusters, plans, renders and prints; writes nothing.
pub(crate) async fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let text = read_file(&args.file)?;
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
    let files = parse_file(&text, &namespace)?;
    if let Some(only) = &args.cluster {
        anyhow::ensure!(
            only.parse::<ClusterName>()
                .is_ok_and(|c| registry.get(&c).is_some()),
            "cluster {only:?} is not registered"
        );
    }
    let clusters = registry.labels();
    let variables = registry.variables();
    let signer = signer(&registry, &hub, &args.operator_namespace).await;
    let links = Links::looking(registry, signer);
    let charts = Charts::open(&args, &hub)?;
    let mut state = HubState::load(&args, &links, clusters, hub, &files).await?;
    charts.renderer.cache.admit_git_dependencies({
        let admission = state.admission.clone();
        Arc::new(move |tenant: &str, chart: &crate::api::crd::Chart| {
            crate::charts::cache::git::dependencies::scope_under(&admission, tenant, chart)
        })
    });
    state.variables = variables;
    let (mut all, releases) = plan_files(&files, &state, &charts, &args).await;
    if let Some(only) = &args.cluster {
        all.retain(|e| &e.cluster == only);
    }
    compare(&mut all, &releases, &links, &charts).await?;
    print!(
        "{}",
        match args.output {
            DiffOutput::Text => render_text(&all),
            DiffOutput::Json => render_json(&all),
        }
    );
    Ok(ExitCode::from(exit_code(&all)))
}

/// The operator's signer, when pull members are joined and this identity may read the
/// operator's sealing key (a hub admin may): reading a pull member's deployed manifest is a
/// signed ask to its agent. Anyone else previews pull members without that manifest.
async fn signer(
    registry: &ClusterRegistry,
    hub: &kube::Client,
    operator_namespace: &str,
) -> Option<Signer> {
    if !registry
        .names()
        .iter()
        .any(|n| registry.joined(n).is_some())
    {
        return None;
    }
    let api = Api::<Secret>::namespaced(hub.clone(), operator_namespace);
    match SealKey::read(api, operator_namespace).await {
        Ok(Some(key)) => Some(Signer::new(&key)),
        Ok(None) | Err(_) => None,
    }
}

/// The text of the file, or of stdin for `-`.
fn read_file(file: &Path) -> anyhow::Result<String> {
    if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
    }
}

/// What a preview plans against, read as the operator reads it: the tenancy policies, the
/// registered clusters, the releases in them and which resource holds each release key.
struct HubState {
    admission: Admission,
    clusters: BTreeMap<ClusterName, BTreeMap<String, String>>,
    applied: HashMap<ReleaseKey, Applied>,
    synced: BTreeSet<ClusterName>,
    claims: HashMap<ReleaseKey, plan::OwnerId>,
    /// Each cluster's registration variables.
    variables: BTreeMap<ClusterName, BTreeMap<String, serde_json::Value>>,
    /// The hub objects `valuesFrom` reads, read as planning names them.
    values: HubValues,
    /// The rollout each Controller's status on the hub says, by Controller.
    rollouts: BTreeMap<plan::OwnerId, RolloutStatus>,
    /// Now.
    now: Timestamp,
}

impl HubState {
    /// Reads the hub's Controllers and TenancyPolicies and every cluster's releases; `files`
    /// replace the Controllers of the same namespace and name, keeping their age.
    async fn load(
        args: &DiffArgs,
        links: &Links,
        clusters: BTreeMap<ClusterName, BTreeMap<String, String>>,
        hub: kube::Client,
        files: &[TenancyController],
    ) -> anyhow::Result<Self> {
        eprintln!("Reading Controllers and TenancyPolicies from the hub…");
        let on_hub = Api::<TenancyController>::all(hub.clone())
            .list(&ListParams::default())
            .await
            .context("listing Controllers on the hub")?
            .items;
        let admission = Admission {
            mode: args.tenancy_policy.mode(),
            policies: policies(hub.clone()).await?,
            operator_namespace: args.operator_namespace.clone(),
        };
        let now = Timestamp::now();
        let rollouts = on_hub
            .iter()
            .filter_map(|c| Some((owner_id(c), c.status.as_ref()?.rollout.clone()?)))
            .collect();
        let created: BTreeMap<plan::OwnerId, i64> = on_hub
            .iter()
            .map(|c| (owner_id(c), created_secs(c)))
            .collect();
        let file_owners: BTreeSet<plan::OwnerId> = files.iter().map(owner_id).collect();
        let (applied, synced) = read_releases(links).await;
        let claimants = on_hub
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| !file_owners.contains(&owner_id(c)))
            .chain(files.iter())
            .map(|c| {
                let owner = owner_id(c);
                let age = created.get(&owner).copied().unwrap_or(now.as_second());
                plan::claimant(owner, age, &c.spec, &clusters, &args.chart_home, &admission)
            })
            .collect::<Vec<_>>();
        let claims = plan::claims(claimants, &applied);
        Ok(Self {
            admission,
            clusters,
            applied,
            synced,
            claims,
            variables: BTreeMap::new(),
            values: HubValues::new(hub, Default::default()),
            rollouts,
            now,
        })
    }
}

/// The hub's TenancyPolicies, sorted by name.
async fn policies(hub: kube::Client) -> anyhow::Result<Vec<NamedPolicy>> {
    let mut policies: Vec<NamedPolicy> = Api::<TenancyPolicy>::all(hub)
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
    Ok(policies)
}

/// What a preview renders charts with: helm, and a chart cache of its own, gone when it ends,
/// so it renders from the archives an upgrade would install, fetched and verified the same way.
struct Charts {
    renderer: Renderer,
    catalog: ChartCatalog,
    /// The cache's directory; dropped last.
    _scratch: tempfile::TempDir,
}

impl Charts {
    /// Helm as `args` ask, and an empty chart cache in a directory of its own, reading the
    /// sources' Secrets from `hub` as the operator does.
    fn open(args: &DiffArgs, hub: &kube::Client) -> anyhow::Result<Self> {
        let helm = HelmOptions {
            binary: args.helm.clone(),
            timeout: Duration::from_secs(args.helm_timeout),
            sdk: crate::helm::sdk::locate(args.helm_executor.as_deref(), &args.helm),
            ..HelmOptions::default()
        };
        let scratch = tempfile::Builder::new()
            .prefix("tenancy-hub-diff-")
            .tempdir()?;
        let secrets = crate::charts::credentials::SourceSecrets {
            reader: Arc::new(crate::charts::credentials::HubSecrets(hub.clone())),
            operator_namespace: args.operator_namespace.clone(),
        };
        let cache = Arc::new(
            ChartCache::open(
                scratch.path(),
                cache::DEFAULT_SIZE,
                args.helm.clone(),
                Arc::new(crate::metrics::Metrics::new()),
            )?
            .with_git_fetcher(crate::charts::common::locate_tool(
                args.git_fetcher.as_deref(),
                &args.helm,
                crate::charts::cache::git::FETCHER,
            ))
            .with_secrets(secrets),
        );
        // Signatures are checked as the operator checks them: what it would refuse, diff shows
        // refused.
        let verifier = crate::charts::verify::VerifierBinary::new(
            crate::charts::verify::locate(args.verifier.as_deref(), &args.helm),
            Duration::from_secs(60),
        );
        let sources = crate::charts::signed::Sources::with_verifier(cache.clone(), verifier);
        let catalog = ChartCatalog::with_resolver(Box::new(sources), Duration::from_secs(300));
        Ok(Self {
            renderer: Renderer { helm, cache },
            catalog,
            _scratch: scratch,
        })
    }
}

/// Decides every Controller of the file as the operator would (the same planner and gates):
/// what would happen to each release, and the releases that would be applied, by key.
async fn plan_files(
    files: &[TenancyController],
    state: &HubState,
    charts: &Charts,
    args: &DiffArgs,
) -> (Vec<Entry>, HashMap<ReleaseKey, Release>) {
    let mut all = Vec::new();
    let mut releases = HashMap::new();
    // A preview plans what a spec asks for; drift repairs belong to the running operator.
    let drifted = HashMap::new();
    let planning = Planning {
        charts: &charts.catalog,
        chart_home: &args.chart_home,
        values: &state.values,
        variables: &state.variables,
        drifted: &drifted,
        now: state.now,
        pending_timeout: charts.renderer.helm.timeout + Duration::from_secs(60),
    };
    for c in files {
        let owner = owner_id(c);
        eprintln!("Planning Controller {owner}…");
        let seen = Seen {
            owner: &owner,
            clusters: &state.clusters,
            applied: &state.applied,
            synced: &state.synced,
            claims: &state.claims,
            admission: &state.admission,
            orphans: &[],
        };
        let planned = plan_spec(c, &seen, &planning).await;
        let decision = decide(
            c,
            &seen,
            planned,
            &state.live(&owner),
            &planning,
            &|_, _| (RepairVerdict::Allowed, false),
        );
        for job in decision.plan.jobs.iter().chain(&decision.held) {
            if let Job::Apply { release, .. } = job {
                releases.insert(release.key.clone(), (**release).clone());
            }
        }
        all.extend(entries(&decision.plan, &decision.held, &state.applied));
    }
    (all, releases)
}

impl HubState {
    /// What a preview knows of the fleet as it runs: no job queued or running and no outcome (the
    /// running operator's own), nothing of what runs per namespace (so nothing counts as Ready, as
    /// at the first reconcile of a change), clusters whose releases could not be read taken for
    /// unreachable, and each Controller's rollout as the hub's status says.
    fn live(&self, owner: &plan::OwnerId) -> Live {
        Live {
            unreachable: self
                .clusters
                .keys()
                .filter(|c| !self.synced.contains(*c))
                .cloned()
                .collect(),
            rollout: self.rollouts.get(owner).cloned(),
            ..Live::default()
        }
    }
}

/// Gives each entry that would install, upgrade or uninstall its diff (see [`preview::compare`]):
/// the manifest deployed now against the one its chart renders, Secrets' values masked.
async fn compare(
    all: &mut [Entry],
    releases: &HashMap<ReleaseKey, Release>,
    links: &Links,
    charts: &Charts,
) -> anyhow::Result<()> {
    let salt = preview::salt();
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
        let Some(member) = links.get(&key.scope.cluster) else {
            continue;
        };
        eprintln!("Comparing {key}…");
        let release = releases.get(&key);
        if release.is_some() && !cluster_info.contains_key(&entry.cluster) {
            let info = member.capabilities().await;
            cluster_info.insert(entry.cluster.clone(), info);
        }
        let asked = preview::Asked {
            key: &key,
            release,
            action: entry.action,
            revision: entry.revision,
        };
        let render = cluster_info
            .get(&entry.cluster)
            .cloned()
            .unwrap_or_default();
        match preview::compare(&charts.renderer, member.as_ref(), asked, &render, &salt).await {
            Ok(diff) => set_diff(entry, diff),
            Err(unmade) => {
                entry.reason = Some(unmade.to_string());
                entry.failed = true;
            }
        }
    }
    Ok(())
}

/// Gives `entry` its `diff`; an upgrade that changes no manifest says so.
fn set_diff(entry: &mut Entry, diff: Option<String>) {
    entry.diff = diff;
    if entry.diff.is_none() && entry.action == Action::Upgrade {
        entry.reason = Some("a new revision with the same manifest".into());
    }
}

/// Every cluster's releases; clusters whose releases cannot be read are left out of `synced`.
async fn read_releases(links: &Links) -> (HashMap<ReleaseKey, Applied>, BTreeSet<ClusterName>) {
    let mut applied = HashMap::new();
    let mut synced = BTreeSet::new();
    for member in links.all() {
        let name = member.cluster();
        eprintln!("Reading the releases of cluster {name}…");
        match member.list_releases().await {
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
mod tests;
