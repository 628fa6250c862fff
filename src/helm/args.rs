//! The helm argument builder: flags for upgrade, template, uninstall and rollback, values escaped so commas and backslashes are literal, and helm's JSON answer read back (pure).

use std::{ffi::OsString, path::Path, time::Duration};

pub(crate) use crate::helm::settings::HelmOptions;

use crate::{
    api::key::ReleaseKey,
    api::policy::Impersonation,
    helm::settings::{self, Applying, Removing},
    plan::{
        ChartSource, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        Release, SPEC_HASH_LABEL,
    },
};

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

fn common(args: &mut Vec<OsString>, key: &ReleaseKey, target: Target<'_>, timeout: Duration) {
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
    args.push(flag("timeout", format!("{}s", timeout.as_secs())));
}

/// Which of its actions `helm upgrade --install` does for a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The release is not there: a first install.
    Install,
    /// The release is there: an upgrade.
    Upgrade,
}

/// The settings `helm upgrade --install` is given for a release in `phase`.
pub(crate) fn applying(release: &Release, phase: Phase, options: &HelmOptions) -> Applying {
    match phase {
        Phase::Install => settings::install(&release.helm, options),
        Phase::Upgrade => settings::upgrade(&release.helm, options),
    }
}

/// True when the arguments of `helm upgrade --install` for a release hang on whether it is
/// installed already: its install and upgrade settings differ in a flag both actions read, or
/// its upgrade asks for what only an upgrade does.
pub(crate) fn phase_matters(release: &Release, options: &HelmOptions) -> bool {
    let (i, u) = (
        settings::install(&release.helm, options),
        settings::upgrade(&release.helm, options),
    );
    (i.timeout, i.wait, i.wait_for_jobs, i.disable_hooks)
        != (u.timeout, u.wait, u.wait_for_jobs, u.disable_hooks)
        || u.create_crds
        || u.force
        || u.cleanup_on_fail
}

/// Arguments of `helm upgrade --install` for a release, with the chart entry's settings for
/// `phase` (see [`phase_matters`]; the install's CRD policy either way, helm reading it only
/// when it installs). An upgrade's `crds: Create` is not here: the helm binary cannot do it, and
/// the CLI executor refuses it. Every user-given value travels inside one `--flag=value`
/// argument, and positional arguments follow `--`, so nothing can pose as a flag.
pub(crate) fn upgrade_args(
    release: &Release,
    target: Target<'_>,
    values_file: Option<&Path>,
    archive: Option<&Path>,
    options: &HelmOptions,
    phase: Phase,
) -> Vec<OsString> {
    let asked = applying(release, phase, options);
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
    if asked.wait {
        args.push(flag("wait", "watcher"));
    }
    if asked.wait_for_jobs {
        args.push("--wait-for-jobs".into());
    }
    if asked.disable_hooks {
        args.push("--no-hooks".into());
    }
    if !settings::install(&release.helm, options).create_crds {
        args.push("--skip-crds".into());
    }
    if asked.force {
        // Helm replaces objects only with a client-side apply.
        args.push("--force-replace".into());
        args.push("--server-side=false".into());
    }
    if asked.cleanup_on_fail {
        args.push("--cleanup-on-fail".into());
    }
    common(&mut args, &release.key, target, asked.timeout);
    let history_max = settings::history_max(&release.helm, options);
    args.push(flag("history-max", history_max.to_string()));
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
                // Never reached: a Git chart runs only from the archive the hub packed (see
                // `helm::process::uncached`).
                ChartSource::Git { chart, .. } => chart.into(),
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
/// (helm refuses `--force-conflicts` with client-side apply, hence `--server-side=true`, and with
/// `--force-replace`, which a repair drops).
pub(crate) fn with_repair(mut args: Vec<OsString>, summary: &str) -> Vec<OsString> {
    args.retain(|a| a != "--force-replace" && a != "--server-side=false");
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

/// Arguments of `helm uninstall` for a release, as `asked`.
pub(crate) fn uninstall_args(
    key: &ReleaseKey,
    target: Target<'_>,
    asked: &Removing,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["uninstall".into()];
    common(&mut args, key, target, asked.timeout);
    // By default, removing a release deletes what it installed and runs nothing its record asks for.
    if asked.disable_hooks {
        args.push("--no-hooks".into());
    }
    if asked.keep_history {
        args.push("--keep-history".into());
    }
    if asked.wait {
        args.push(flag("wait", "watcher"));
    }
    args.push("--".into());
    args.push(key.release.clone().into());
    args
}

/// Arguments of `helm rollback` of a release to revision `to`, server-side like every upgrade,
/// with a `--timeout` and a `--history-max` (`limits`: the chart entry's upgrade timeout and
/// `maxHistory`, or the operator's). It does not wait for readiness: the status reports how the
/// rolled-back release fares.
pub(crate) fn rollback_args(
    key: &ReleaseKey,
    to: i64,
    target: Target<'_>,
    limits: (std::time::Duration, u32),
) -> Vec<OsString> {
    let (timeout, history_max) = limits;
    let mut args: Vec<OsString> = vec!["rollback".into()];
    common(&mut args, key, target, timeout);
    args.push(flag("history-max", history_max.to_string()));
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
