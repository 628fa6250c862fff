//! The helm argument builder: flags for upgrade, template, uninstall and rollback, values escaped so commas and backslashes are literal, and helm's JSON answer read back (pure).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    api::key::ReleaseKey,
    api::policy::Impersonation,
    plan::{
        ChartSource, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        Release, SPEC_HASH_LABEL,
    },
};

/// How Helm is called.
#[derive(Clone, Debug)]
pub(crate) struct HelmOptions {
    /// The `helm` binary.
    pub(crate) binary: PathBuf,
    /// `--timeout` of each call; the process is killed 30 s after it.
    pub(crate) timeout: Duration,
    /// `--history-max`: revisions kept per release.
    pub(crate) history_max: u32,
    /// Where helm keeps its discovery and HTTP caches (`KUBECACHEDIR`, `HELM_CACHE_HOME`) across
    /// calls; helm's own default (under `$HOME`) when None.
    pub(crate) cache_dir: Option<PathBuf>,
    /// The long-lived executor on Helm's Go SDK (`tenancy-hub-helm`, see `helm::sdk`) that
    /// runs the jobs; None: one `helm` process per job.
    pub(crate) sdk: Option<PathBuf>,
    /// How long the long-lived executor may sit without work before it exits (zero: never).
    pub(crate) executor_idle: Duration,
    /// The operator's sealing key: release records are sealed with it and acted on only when
    /// they verify (see `helm::seal`). None only where nothing is written (previews, tests).
    pub(crate) seal: Option<crate::helm::seal::SealKey>,
}

impl Default for HelmOptions {
    fn default() -> Self {
        Self {
            binary: "helm".into(),
            timeout: Duration::from_secs(300),
            history_max: 5,
            cache_dir: None,
            sdk: None,
            executor_idle: Duration::from_secs(30),
            seal: None,
        }
    }
}

/// The cluster a call goes to, and as whom.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    /// Kubeconfig file.
    pub(crate) kubeconfig: &'a Path,
    /// Context in it.
    pub(crate) context: &'a str,
    /// The user and groups helm impersonates there; the context's own credentials when None.
    pub(crate) identity: Option<&'a Impersonation>,
}

/// Escapes a `--set` value so Helm takes it literally: `\`, `,`, `{` and `}` lose their meaning.
pub(crate) fn escape_set_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '{' | '}') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn flag(name: &str, value: impl AsRef<std::ffi::OsStr>) -> OsString {
    let mut s = OsString::from(format!("--{name}="));
    s.push(value);
    s
}

fn common(args: &mut Vec<OsString>, key: &ReleaseKey, target: Target<'_>, options: &HelmOptions) {
    args.push(flag("namespace", &key.scope.namespace));
    // An empty kubeconfig is the hub's in-cluster configuration, which helm finds by itself.
    if !target.kubeconfig.as_os_str().is_empty() {
        args.push(flag("kubeconfig", target.kubeconfig));
        args.push(flag("kube-context", target.context));
    }
    if let Some(who) = target.identity {
        args.push(flag("kube-as-user", &who.user));
        for group in &who.groups {
            args.push(flag("kube-as-group", group));
        }
    }
    args.push(flag("timeout", format!("{}s", options.timeout.as_secs())));
}

/// Arguments of `helm upgrade --install` for a release. Every user-given value travels inside one
/// `--flag=value` argument, and positional arguments follow `--`, so nothing can pose as a flag.
pub(crate) fn upgrade_args(
    release: &Release,
    target: Target<'_>,
    values_file: Option<&Path>,
    archive: Option<&Path>,
    options: &HelmOptions,
) -> Vec<OsString> {
    // --reset-values: the deployed values are exactly the spec's. Without it, helm reuses the last
    // release's values whenever an upgrade passes none, so a removed setting would stay in force.
    //
    // No --create-namespace: the operator creates the target namespace itself before the call
    // (see `prepare_namespace`), so an impersonated identity need not be able to, and helm builds
    // that Namespace with validation, which costs the OpenAPI parse below.
    //
    // --disable-openapi-validation: helm's client-side check downloads and parses the API server's
    // OpenAPI documents in every process, only to learn that the server validates fields itself
    // (it does since Kubernetes 1.27, and helm asks it to, strictly, on every apply); that parse
    // was about half of the CPU of a call. A manifest with a field the schema lacks is still
    // refused, by the API server, with the same message.
    let mut args: Vec<OsString> = vec![
        "upgrade".into(),
        "--install".into(),
        "--reset-values".into(),
        "--disable-openapi-validation".into(),
    ];
    // Rolling back implies waiting for readiness, up to the --timeout that `common` passes.
    if release.rollback_on_failure {
        args.push("--rollback-on-failure".into());
    }
    common(&mut args, &release.key, target, options);
    args.push(flag("history-max", options.history_max.to_string()));
    args.push(flag("output", "json"));
    args.push(flag(
        "labels",
        format!(
            "{MANAGED_BY_LABEL}={MANAGED_BY},{OWNER_NAMESPACE_LABEL}={},{OWNER_NAME_LABEL}={},{SPEC_HASH_LABEL}={}",
            release.owner.namespace, release.owner.name, release.spec_hash
        ),
    ));
    chart_args(&mut args, release, values_file, archive);
    args
}

/// What the chart is and what it is given: the cached archive (`archive`; helm reads the chart's
/// name and version from it) or version and repository, then values file, `--set` pairs, then
/// `-- RELEASE CHART`. Shared by every call that renders the chart, so a preview renders
/// exactly what an upgrade would.
fn chart_args(
    args: &mut Vec<OsString>,
    release: &Release,
    values_file: Option<&Path>,
    archive: Option<&Path>,
) {
    let chart: OsString = match (archive, &release.source) {
        (Some(archive), _) => archive.into(),
        (None, source) => {
            if let Some(version) = &release.version {
                args.push(flag("version", version));
            }
            match source {
                ChartSource::Directory(path) => path.into(),
                ChartSource::Repository { url, chart } => {
                    args.push(flag("repo", url));
                    chart.into()
                }
                ChartSource::Oci(reference) => reference.into(),
            }
        }
    };
    if let Some(file) = values_file {
        args.push(flag("values", file));
    }
    for (key, value) in &release.settings {
        args.push(flag("set", format!("{key}={}", escape_set_value(value))));
    }
    args.push("--".into());
    args.push(release.key.release.clone().into());
    args.push(chart);
}

/// The cluster a chart is rendered for, offline: its version and API versions, and whether the
/// release is already there.
#[derive(Clone, Debug, Default)]
pub(crate) struct RenderFor {
    /// Kubernetes version (`--kube-version`), for example `v1.36.3`.
    pub(crate) kube_version: Option<String>,
    /// API group versions served (`--api-versions`), for example `apps/v1`.
    pub(crate) api_versions: Vec<String>,
    /// The release is installed already (`--is-upgrade`).
    pub(crate) is_upgrade: bool,
}

/// Arguments of `helm template` rendering a release offline exactly as `upgrade_args` would
/// install it (same chart, version, values and settings), without hooks and tests, which Helm
/// keeps out of a release's manifest too.
pub(crate) fn template_args(
    release: &Release,
    values_file: Option<&Path>,
    archive: Option<&Path>,
    render: &RenderFor,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "template".into(),
        "--no-hooks".into(),
        "--skip-tests".into(),
        flag("namespace", &release.key.scope.namespace),
    ];
    if render.is_upgrade {
        args.push("--is-upgrade".into());
    }
    if let Some(version) = &render.kube_version {
        args.push(flag("kube-version", version));
    }
    for api in &render.api_versions {
        args.push(flag("api-versions", api));
    }
    chart_args(&mut args, release, values_file, archive);
    args
}

/// Longest Helm `--description` a drift repair gives its revision.
const REPAIR_DESCRIPTION_MAX: usize = 200;

/// `helm upgrade` arguments turned into a drift repair: the revision's description says what
/// drifted, and the apply is server-side and forced, because whatever changed the fields by hand
/// (`kubectl scale`, another controller) now owns them and a plain apply would stop at the conflict
/// (helm refuses `--force-conflicts` with client-side apply, hence `--server-side=true`).
pub(crate) fn with_repair(mut args: Vec<OsString>, summary: &str) -> Vec<OsString> {
    let description = repair_description(summary);
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let flags = [
        flag("description", description),
        "--server-side=true".into(),
        "--force-conflicts".into(),
    ];
    args.splice(at..at, flags);
    args
}

/// The description of a drift repair's revision: what drifted, cut to helm's limit.
pub(crate) fn repair_description(summary: &str) -> String {
    let mut description = format!("drift repair: {summary}");
    if description.len() > REPAIR_DESCRIPTION_MAX {
        let mut cut = REPAIR_DESCRIPTION_MAX - '…'.len_utf8();
        while !description.is_char_boundary(cut) {
            cut -= 1;
        }
        description.truncate(cut);
        description.push('…');
    }
    description
}

/// The description of the revision a rollback of a halted rollout writes.
pub(crate) const ROLLBACK_DESCRIPTION: &str = "rolled back by tenancy-hub: the rollout halted";

/// Arguments of `helm uninstall` for a release.
pub(crate) fn uninstall_args(
    key: &ReleaseKey,
    target: Target<'_>,
    options: &HelmOptions,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["uninstall".into()];
    common(&mut args, key, target, options);
    // Removing a release deletes what it installed and runs nothing its record asks for.
    args.push("--no-hooks".into());
    args.push("--".into());
    args.push(key.release.clone().into());
    args
}

/// Arguments of `helm rollback` of a release to revision `to`, server-side like every upgrade.
/// It does not wait for readiness: the status reports how the rolled-back release fares.
pub(crate) fn rollback_args(
    key: &ReleaseKey,
    to: i64,
    target: Target<'_>,
    options: &HelmOptions,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["rollback".into()];
    common(&mut args, key, target, options);
    args.push(flag("history-max", options.history_max.to_string()));
    args.push("--server-side=true".into());
    args.push("--force-conflicts".into());
    args.push(flag("description", ROLLBACK_DESCRIPTION));
    args.push("--".into());
    args.push(key.release.clone().into());
    args.push(to.to_string().into());
    args
}

/// Revision and chart version from `helm upgrade --output json`.
pub(crate) fn parse_release_json(stdout: &str) -> Option<(i64, String)> {
    #[derive(serde::Deserialize)]
    struct Chart {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        version: String,
    }
    #[derive(serde::Deserialize)]
    struct Printed {
        version: i64,
        chart: Chart,
    }
    // Charts pulled from OCI registries make helm print "Pulled: …" lines before the JSON.
    let start = stdout.find("\n{").map_or(0, |i| i + 1);
    let printed: Printed = serde_json::from_str(&stdout[start..]).ok()?;
    Some((printed.version, printed.chart.metadata.version))
}
