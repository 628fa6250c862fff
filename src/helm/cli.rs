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
    plan::{ChartSource, Release},
    policy::source::redact,
    queue::{FailureKind, Outcome},
};

use crate::helm::args::*;
use crate::queue::failure::{classify, trim_error};

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
    pub(crate) fn checkout(&self, release: &Release) -> Option<crate::charts::store::Checkout> {
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
