//! Helm: the pure argument builder and the CLI executor (one helm process per job), run by `helm::sdk::HelmExecutor`.

use std::{
    collections::HashMap,
    ffi::OsString,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{DeleteParams, ListParams},
};
use tokio::process::Command;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    charts::cache::ChartCache,
    clusters::health::HealthBoard,
    clusters::registry::{Digest, Member, SharedRegistry},
    helm::namespace::Namespaces,
    plan::{
        ChartSource, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        Release, SPEC_HASH_LABEL,
    },
    policy::source::redact,
    queue::{FailureKind, Outcome},
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

/// Renders a release's manifest with `helm template` (see `template_args`), from the cached
/// `archive` when there is one; its values go through a private temporary file. On failure,
/// helm's trimmed message.
pub(crate) async fn template(
    options: &HelmOptions,
    release: &Release,
    archive: Option<&Path>,
    render: &RenderFor,
) -> Result<String, String> {
    if let Some(why) = uncached(release, archive) {
        return Err(why);
    }
    let values = release
        .values
        .as_ref()
        .map(|v| values_file_in(&std::env::temp_dir(), v))
        .transpose()
        .map_err(|e| format!("writing the values file: {e}"))?;
    let args = template_args(release, values.as_ref().map(|f| f.path()), archive, render);
    run_helm(options, args)
        .await
        .map_err(|(message, _)| message)
}

/// Why a release cannot be rendered or installed without its cached archive, or None: a
/// repository chart runs only from the archive the chart cache fetched under its source's
/// rules (prefix, redirects, addresses, digest), never from a `--repo` fetch of helm's own,
/// which would follow whatever the repository answers then. The cache fetches a missing one
/// again at the next look at the charts (`--chart-interval`).
pub(crate) fn uncached(release: &Release, archive: Option<&Path>) -> Option<String> {
    let ChartSource::Repository { url, chart } = &release.source else {
        return None;
    };
    archive.is_none().then(|| {
        format!(
            "chart {chart} {} from {} is not in the chart cache (not fetched yet, or removed to keep --chart-cache-size); it is fetched again within --chart-interval, as helm never fetches a repository chart itself",
            release.version.as_deref().unwrap_or("(newest version)"),
            redact(url)
        )
    })
}

/// A private (0600) values file in `dir`, removed when dropped.
fn values_file_in(
    dir: &Path,
    values: &serde_json::Value,
) -> std::io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix("tenancy-hub-values-")
        .suffix(".yaml")
        .tempfile_in(dir)?;
    file.write_all(serde_json::to_string(values)?.as_bytes())?;
    file.flush()?;
    Ok(file)
}

/// Runs helm without a shell, bounded by the timeout; on failure, its trimmed message and what
/// kind of failure it is.
async fn run_helm(
    options: &HelmOptions,
    args: Vec<OsString>,
) -> Result<String, (String, FailureKind)> {
    let mut command = Command::new(&options.binary);
    child_environment(&mut command, options);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    die_with_parent(&mut command);
    let child = command.spawn().map_err(|e| {
        let message = format!(
            "cannot run {}: {e}; install helm or pass --helm",
            options.binary.display()
        );
        (message, FailureKind::Transient)
    })?;
    let limit = options.timeout + Duration::from_secs(30);
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => Err((
            format!(
                "helm did not finish within {}s and was stopped",
                limit.as_secs()
            ),
            FailureKind::Transient,
        )),
        Ok(Err(e)) => Err((format!("helm failed to run: {e}"), FailureKind::Transient)),
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(Ok(out)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err((trim_error(&stderr), classify(&stderr)))
        }
    }
}

/// The environment of a helm child beyond the operator's own:
/// - `GOMAXPROCS=1` unless the operator's environment sets it: each worker runs one helm, so a
///   helm's parallel garbage collection only competes with the others for the same cores;
/// - with a cache directory, helm's discovery and HTTP caches there, kept across calls, so a call
///   reads the API groups of its cluster from disk instead of asking the server again.
fn child_environment(command: &mut Command, options: &HelmOptions) {
    if std::env::var_os("GOMAXPROCS").is_none() {
        command.env("GOMAXPROCS", "1");
    }
    if let Some(dir) = &options.cache_dir {
        command
            .env("KUBECACHEDIR", dir.join("kube"))
            .env("HELM_CACHE_HOME", dir.join("helm"));
    }
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

pub(crate) use crate::queue::failure::{classify, trim_error};

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

/// Runs jobs with the `helm` binary, one member cluster per call.
pub(crate) struct HelmCli {
    options: HelmOptions,
    registry: SharedRegistry,
    health: Arc<HealthBoard>,
    charts: Arc<ChartCache>,
    scratch: Arc<tempfile::TempDir>,
    /// One-context kubeconfig files written for helm, by cluster: (the source's digest, the file).
    narrowed: Arc<std::sync::Mutex<HashMap<ClusterName, (Digest, PathBuf)>>>,
    /// Target namespaces made ready, identities bound and unbound.
    namespaces: Namespaces,
}

/// A member made ready for an install or upgrade: its client, and why the identity's
/// `namespaceRole` was not bound in the target namespace, when it was not.
pub(crate) struct Prepared {
    /// The member.
    pub(crate) member: Arc<Member>,
    /// The identity has a `namespaceRole`, so the release may be marked in its namespace.
    role: bool,
    unbound: Option<String>,
}

impl HelmCli {
    /// An executor for the clusters in `registry`, installing remote charts from the archives
    /// in `charts`; values files go to a private temporary directory.
    pub(crate) fn new(
        options: HelmOptions,
        registry: SharedRegistry,
        health: Arc<HealthBoard>,
        charts: Arc<ChartCache>,
    ) -> std::io::Result<Self> {
        let scratch = tempfile::Builder::new().prefix("tenancy-hub-").tempdir()?;
        Ok(Self {
            options,
            registry,
            health,
            charts,
            scratch: Arc::new(scratch),
            narrowed: Arc::default(),
            namespaces: Namespaces::new(),
        })
    }

    /// The kubeconfig helm is given for a member: a file of its context alone, written once per
    /// content of the registered kubeconfig, since helm parses the whole file in every call (a
    /// registration file of a thousand contexts costs each call about 0.45 CPU s and 26 MiB,
    /// see BENCHMARKS.md). The registered file itself when it cannot be narrowed.
    pub(crate) fn kubeconfig_for(&self, member: &Member) -> PathBuf {
        let Some(digest) = member.kubeconfig_digest else {
            return member.kubeconfig.clone(); // the in-cluster hub: no file
        };
        let mut narrowed = self
            .narrowed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((known, file)) = narrowed.get(&member.entry.name)
            && *known == digest
        {
            return file.clone();
        }
        let file = self
            .scratch
            .path()
            .join(format!("kubeconfig-{}", member.entry.name));
        match narrow_kubeconfig(&member.kubeconfig, &member.entry.context, &file) {
            Ok(()) => {
                narrowed.insert(member.entry.name.clone(), (digest, file.clone()));
                file
            }
            Err(e) => {
                tracing::debug!(cluster = %member.entry.name, error = %e, "helm gets the whole kubeconfig");
                member.kubeconfig.clone()
            }
        }
    }

    /// Runs helm; on failure, its trimmed message and what kind of failure it is.
    async fn run(&self, args: Vec<OsString>) -> Result<String, (String, FailureKind)> {
        run_helm(&self.options, args).await
    }

    fn values_file(&self, values: &serde_json::Value) -> std::io::Result<tempfile::NamedTempFile> {
        values_file_in(self.scratch.path(), values)
    }

    /// The member a release goes to, made ready for an install or upgrade by any executor: a
    /// revision left pending past its timeout cleared, the target namespace created (and the
    /// impersonated identity bound in it, where `helm::namespace` allows). Err: the job's
    /// outcome without a helm call.
    pub(crate) async fn prepare(
        &self,
        release: &Release,
        stale_pending: Option<i64>,
    ) -> Result<Prepared, Outcome> {
        let Some(member) = self.member(&release.key) else {
            return Err(unregistered(&release.key));
        };
        if let Some(revision) = stale_pending {
            let secrets: Api<Secret> =
                Api::namespaced(member.client.clone(), &release.key.scope.namespace);
            let name = format!("sh.helm.release.v1.{}.v{revision}", release.key.release);
            match secrets.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    let message = format!("clearing revision {revision} left pending: {e}");
                    return Err(Outcome::failed(message, FailureKind::Transient));
                }
            }
            tracing::warn!(
                revision,
                "cleared a release revision left pending past its timeout"
            );
        }
        let unbound = self
            .namespaces
            .prepare(&member.client, &release.key, release.identity.as_ref())
            .await
            .map_err(|e| Outcome::failed(e, FailureKind::Transient))?;
        let role = release
            .identity
            .as_ref()
            .is_some_and(|w| w.namespace_role.is_some());
        Ok(Prepared {
            member,
            role,
            unbound,
        })
    }

    /// The outcome of an install or upgrade, finished by any executor: a failure tells why the
    /// identity was not bound, if it was not; a release that failed leaving no record is
    /// forgotten in its namespace (see `helm::namespace`).
    pub(crate) async fn finish_apply(
        &self,
        prepared: &Prepared,
        key: &ReleaseKey,
        outcome: Outcome,
    ) -> Outcome {
        let Outcome::Failed { message, kind } = outcome else {
            return outcome;
        };
        if prepared.role
            && let Ok(0) = records_left(prepared.member.client.clone(), key).await
            && let Err(e) = self
                .namespaces
                .release_gone(&prepared.member.client, key)
                .await
        {
            tracing::warn!(release = %key, error = %e, "forgetting a release that left no record failed");
        }
        match &prepared.unbound {
            Some(why) => Outcome::failed(format!("{message}; {why}"), kind),
            None => Outcome::failed(message, kind),
        }
    }

    /// The outcome of an uninstall, finished by any executor: once the release is gone, its
    /// identity's RoleBinding goes with the identity's last release in the namespace. Should
    /// that fail, the uninstall is tried again, and finds the release gone.
    pub(crate) async fn finish_uninstall(
        &self,
        member: &Member,
        key: &ReleaseKey,
        outcome: Outcome,
    ) -> Outcome {
        if outcome != Outcome::Uninstalled {
            return outcome;
        }
        match self.namespaces.release_gone(&member.client, key).await {
            Ok(()) => Outcome::Uninstalled,
            Err(e) => Outcome::failed(
                format!("release {key} is uninstalled, but {e}"),
                FailureKind::Transient,
            ),
        }
    }

    /// Before a helm process acts on a release: its records must all be sealed by the operator
    /// (`helm::seal`), or nothing runs.
    async fn check_records(&self, member: &Member, key: &ReleaseKey) -> Result<(), Outcome> {
        let Some(seal) = &self.options.seal else {
            return Ok(());
        };
        crate::helm::seal::check_release(seal, member.client.clone(), key)
            .await
            .map_err(|e| Outcome::failed(e, FailureKind::Permanent))
    }

    /// After a helm process wrote `revision`: seals it, so the operator acts on it later.
    async fn seal_written(
        &self,
        member: &Member,
        key: &ReleaseKey,
        owner: &crate::plan::OwnerId,
        revision: i64,
    ) {
        let Some(seal) = &self.options.seal else {
            return;
        };
        if let Err(e) =
            crate::helm::seal::seal_revision(seal, member.client.clone(), key, owner, revision)
                .await
        {
            tracing::warn!(release = %key, revision, error = %e, "a revision helm wrote could not be sealed; it is held as foreign until the release is applied again");
        }
    }

    /// The registered member a release key names.
    pub(crate) fn member(&self, key: &ReleaseKey) -> Option<Arc<Member>> {
        self.registry.load().get(&key.scope.cluster).cloned()
    }

    /// The archive of a chart in the cache, held (not evicted) while the checkout lives.
    pub(crate) fn checkout(&self, release: &Release) -> Option<crate::charts::cache::Checkout> {
        self.charts
            .checkout(&release.source, release.version.as_deref())
    }

    pub(crate) async fn apply(
        &self,
        release: Release,
        stale_pending: Option<i64>,
        repair: Option<String>,
    ) -> Outcome {
        // Held until helm is done, so the cache keeps the archive meanwhile.
        let archive = self.checkout(&release);
        if let Some(why) = uncached(&release, archive.as_ref().map(|a| a.path())) {
            return Outcome::failed(why, FailureKind::Unavailable);
        }
        let prepared = match self.prepare(&release, stale_pending).await {
            Ok(prepared) => prepared,
            Err(outcome) => return outcome,
        };
        let member = &prepared.member;
        let values = match release
            .values
            .as_ref()
            .map(|v| self.values_file(v))
            .transpose()
        {
            Ok(v) => v,
            Err(e) => {
                let message = format!("writing the values file: {e}");
                return Outcome::failed(message, FailureKind::Transient);
            }
        };
        let kubeconfig = self.kubeconfig_for(member);
        let target = Target {
            kubeconfig: &kubeconfig,
            context: &member.entry.context,
            identity: release.identity.as_ref(),
        };
        let mut args = upgrade_args(
            &release,
            target,
            values.as_ref().map(|f| f.path()),
            archive.as_ref().map(|a| a.path()),
            &self.options,
        );
        if let Some(summary) = &repair {
            args = with_repair(args, summary);
        }
        if let Err(refused) = self.check_records(member, &release.key).await {
            return refused;
        }
        let outcome = match self.run(args).await {
            Ok(stdout) => match parse_release_json(&stdout) {
                Some((revision, chart_version)) => {
                    self.seal_written(member, &release.key, &release.owner, revision)
                        .await;
                    Outcome::Applied {
                        revision,
                        chart_version,
                    }
                }
                None => {
                    // Never run a successful helm again: the release records tell the revision.
                    tracing::warn!(
                        "helm succeeded but its output did not parse; taking the release as applied"
                    );
                    Outcome::Applied {
                        revision: 0,
                        chart_version: String::new(),
                    }
                }
            },
            Err((message, kind)) => Outcome::failed(message, kind),
        };
        self.finish_apply(&prepared, &release.key, outcome).await
    }

    pub(crate) async fn rollback(
        &self,
        key: ReleaseKey,
        from: i64,
        identity: Option<Impersonation>,
        owner: &crate::plan::OwnerId,
    ) -> Outcome {
        let Some(member) = self.registry.load().get(&key.scope.cluster).cloned() else {
            return unregistered(&key);
        };
        let kubeconfig = self.kubeconfig_for(&member);
        let target = Target {
            kubeconfig: &kubeconfig,
            context: &member.entry.context,
            identity: identity.as_ref(),
        };
        let args = rollback_args(&key, from - 1, target, &self.options);
        if let Err(refused) = self.check_records(&member, &key).await {
            return refused;
        }
        match self.run(args).await {
            // A rollback writes the revision after the newest one.
            Ok(_) => {
                self.seal_written(&member, &key, owner, from + 1).await;
                Outcome::Applied {
                    revision: from + 1,
                    chart_version: String::new(),
                }
            }
            Err((message, kind)) => Outcome::failed(message, kind),
        }
    }

    pub(crate) async fn uninstall(
        &self,
        key: ReleaseKey,
        identity: Option<Impersonation>,
    ) -> Outcome {
        let Some(member) = self.registry.load().get(&key.scope.cluster).cloned() else {
            return unregistered(&key);
        };
        let kubeconfig = self.kubeconfig_for(&member);
        let target = Target {
            kubeconfig: &kubeconfig,
            context: &member.entry.context,
            identity: identity.as_ref(),
        };
        if let Err(refused) = self.check_records(&member, &key).await {
            return refused;
        }
        let outcome = match self.run(uninstall_args(&key, target, &self.options)).await {
            Ok(_) => Outcome::Uninstalled,
            // Helm's words do not say whether the release is gone (its "not found" may be a
            // context's or a plugin's); the release records left in the namespace do.
            Err((message, kind)) => {
                let left = records_left(member.client.clone(), &key).await;
                uninstall_outcome(left, message, kind)
            }
        };
        self.finish_uninstall(&member, &key, outcome).await
    }
}

/// Writes to `out` (private, replaced whole) the kubeconfig at `source` reduced to `context`, its
/// cluster and its user, with file paths made absolute; nothing else of the source is kept.
fn narrow_kubeconfig(source: &Path, context: &str, out: &Path) -> Result<(), String> {
    use kube::config::Kubeconfig;
    let whole = Kubeconfig::read_from(source).map_err(|e| e.to_string())?;
    let named = whole
        .contexts
        .iter()
        .find(|c| c.name == context)
        .ok_or_else(|| format!("no context {context}"))?;
    let (cluster, user) = named
        .context
        .as_ref()
        .map(|c| (c.cluster.clone(), c.user.clone().unwrap_or_default()))
        .ok_or_else(|| format!("context {context} is empty"))?;
    let one = Kubeconfig {
        clusters: whole
            .clusters
            .iter()
            .filter(|c| c.name == cluster)
            .cloned()
            .collect(),
        auth_infos: whole
            .auth_infos
            .iter()
            .filter(|u| u.name == user)
            .cloned()
            .collect(),
        contexts: vec![named.clone()],
        current_context: Some(context.to_owned()),
        ..whole.clone()
    };
    let yaml = serde_yaml::to_string(&one).map_err(|e| e.to_string())?;
    let dir = out.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubeconfig-")
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    tmp.write_all(yaml.as_bytes()).map_err(|e| e.to_string())?;
    tmp.persist(out).map_err(|e| e.to_string())?;
    Ok(())
}

/// How many of a release's records (helm's Secrets, `owner=helm,name=RELEASE`) its namespace holds.
pub(crate) async fn records_left(client: kube::Client, key: &ReleaseKey) -> kube::Result<usize> {
    let secrets: Api<Secret> = Api::namespaced(client, &key.scope.namespace);
    let selector = format!("owner=helm,name={}", key.release);
    let list = secrets
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    Ok(list.items.len())
}

/// What a failed `helm uninstall` came to, given the release records left: none means the release
/// is gone, whatever helm said; otherwise helm's failure stands. When they could not be listed,
/// the failure is retried (it waits, when the cluster refuses the credentials).
pub(crate) fn uninstall_outcome(
    records_left: kube::Result<usize>,
    message: String,
    kind: FailureKind,
) -> Outcome {
    match records_left {
        Ok(0) => Outcome::Uninstalled,
        Ok(_) => Outcome::failed(message, kind),
        Err(e) => {
            let kind = match kind {
                FailureKind::Unavailable => FailureKind::Unavailable,
                _ => FailureKind::Transient,
            };
            let message =
                format!("{message} (listing its release records to check failed too: {e})");
            Outcome::failed(message, kind)
        }
    }
}

/// Makes helm die with the operator, even on SIGKILL, so a crashed operator leaves no helm running
/// that a restarted one could race on the same release.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent(command: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches only the child between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_command: &mut Command) {}

pub(crate) fn unregistered(key: &ReleaseKey) -> Outcome {
    Outcome::failed(
        format!(
            "cluster {} is not registered (any more); register it in the clusters file",
            key.scope.cluster
        ),
        FailureKind::Transient,
    )
}

impl HelmCli {
    /// The outcome of a job for a cluster known to be down, without a helm call: the job waits
    /// out its backoff instead.
    pub(crate) fn unreachable(&self, key: &ReleaseKey) -> Option<Outcome> {
        let cluster = &key.scope.cluster;
        self.health.unreachable(cluster).map(|error| {
            Outcome::failed(
                format!("cluster {cluster} is unreachable ({error}); waiting for it to return"),
                FailureKind::Unavailable,
            )
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
