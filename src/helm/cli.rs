//! Helm's CLI executor (one helm process per job, its arguments from `helm::args`), run by `helm::sdk::HelmExecutor`.

use std::{collections::HashMap, ffi::OsString, path::PathBuf, sync::Arc};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::DeleteParams};

use crate::{
    api::crd::RemediationStrategy,
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    charts::cache::ChartCache,
    clusters::health::HealthBoard,
    clusters::registry::{Digest, Member, SharedRegistry},
    helm::kubeconfig::narrow_kubeconfig,
    helm::namespace::Namespaces,
    helm::outcome::{records_left, uninstall_outcome},
    helm::process::{run_helm, uncached, values_file_in},
    plan::{Release, remediation::Remediate},
    queue::{FailureKind, Outcome},
};

use crate::helm::args::*;

pub(crate) use crate::helm::{outcome::unregistered, process::template};

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

/// A member a helm call acts on, reached by `HelmCli::targeted`: the member and the kubeconfig
/// helm is given for it.
struct Targeted {
    /// The member.
    member: Arc<Member>,
    /// The kubeconfig helm is given for it (see `HelmCli::kubeconfig_for`).
    kubeconfig: PathBuf,
}

impl Targeted {
    /// Where helm acts: the member's context, as `identity` (the context's own credentials when
    /// None).
    fn target<'a>(&'a self, identity: &'a Option<Impersonation>) -> Target<'a> {
        Target {
            kubeconfig: &self.kubeconfig,
            context: &self.member.entry.context,
            identity: identity.as_ref(),
        }
    }
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

    /// Runs helm, given `--timeout` `timeout`; on failure, its trimmed message and what kind of
    /// failure it is.
    async fn run(
        &self,
        args: Vec<OsString>,
        timeout: std::time::Duration,
    ) -> Result<String, (String, FailureKind)> {
        run_helm(&self.options, args, timeout).await
    }

    /// Whether applying `release` on `member` installs or upgrades it, looked up in its release
    /// records only when its settings make the two differ (see `phase_matters`); Err: the
    /// outcome of a release this executor cannot apply as asked, or of a failed look-up.
    async fn phase(
        &self,
        member: &Member,
        release: &Release,
        remediate: Remediate,
    ) -> Result<Phase, Outcome> {
        if let Some(refused) = replaces_crds(release, &self.options) {
            return Err(refused);
        }
        // `--rollback-on-failure` is one flag for both actions: whether it is given hangs on
        // the action when a failed install and a failed upgrade are remediated differently.
        let remediation_differs = remediate.install != remediate.upgrade.is_some();
        if !phase_matters(release, &self.options) && !remediation_differs {
            return Ok(Phase::Upgrade);
        }
        let records = records_left(member.client.clone(), &release.key)
            .await
            .map_err(|e| {
                let message = format!(
                    "looking up whether release {} is installed: {e}",
                    release.key
                );
                Outcome::failed(message, FailureKind::Transient)
            })?;
        if records == 0 {
            return Ok(Phase::Install);
        }
        if crate::helm::settings::upgrade(&release.helm, &self.options).create_crds {
            let message = format!(
                "release {}: upgrade.crds: Create is refused by the helm binary executor, which cannot create CRDs on an upgrade; run the operator with the Helm executor (--executor sdk), or set upgrade.crds: Skip",
                release.key
            );
            return Err(Outcome::failed(message, FailureKind::Permanent));
        }
        Ok(Phase::Upgrade)
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
    /// Ok: the newest revision they hold (0 for none, or when nothing is sealed here).
    async fn check_records(&self, member: &Member, key: &ReleaseKey) -> Result<i64, Outcome> {
        let Some(seal) = &self.options.seal else {
            return Ok(0);
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
        self.charts.checkout(
            &release.source,
            &release.credentials,
            release.version.as_deref(),
            release.exact_archive(),
        )
    }

    pub(crate) async fn apply(
        &self,
        mut release: Release,
        stale_pending: Option<i64>,
        repair: Option<String>,
        remediate: Remediate,
    ) -> Outcome {
        if let Some(refused) = uninstall_strategy(&release) {
            return refused;
        }
        if repair.is_none() && crate::helm::settings::test(&release.helm, &self.options).is_some() {
            let message = format!(
                "release {}: test.enable is refused by the helm binary executor, which cannot judge the tests and mark the revision as the Helm executor does; run the operator with the Helm executor (--executor sdk), or remove test",
                release.key
            );
            return Outcome::failed(message, FailureKind::Permanent);
        }
        if release.post_render.is_some() {
            let message = format!(
                "release {}: postRenderers and commonMetadata are refused by the helm binary executor, which cannot run the operator's post-renderer; run the operator with the Helm executor (--executor sdk), or remove them",
                release.key
            );
            return Outcome::failed(message, FailureKind::Permanent);
        }
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
        let phase = match self.phase(member, &release, remediate).await {
            Ok(phase) => phase,
            Err(outcome) => return self.finish_apply(&prepared, &release.key, outcome).await,
        };
        // What this try does on failure, as helm's one switch for it (`upgrade_args` reads it):
        // a failed install uninstalled, a failed upgrade rolled back (an uninstall strategy is
        // refused above).
        release.rollback_on_failure = match phase {
            Phase::Install => remediate.install,
            Phase::Upgrade => remediate.upgrade.is_some(),
        };
        let timeout = applying(&release, phase, &self.options).timeout;
        let mut args = upgrade_args(
            &release,
            target,
            values.as_ref().map(|f| f.path()),
            archive.as_ref().map(|a| a.path()),
            &self.options,
            phase,
        );
        if let Some(summary) = &repair {
            args = with_repair(args, summary);
        }
        let before = match self.check_records(member, &release.key).await {
            Ok(newest) => newest,
            Err(refused) => return refused,
        };
        let outcome = match self.run(args, timeout).await {
            Ok(stdout) => match parse_release_json(&stdout) {
                Some((revision, chart_version)) => {
                    self.seal_written(member, &release.key, &release.owner, revision)
                        .await;
                    Outcome::Applied {
                        adopted_from: None,
                        revision,
                        chart_version,
                        tests: Vec::new(),
                        crds: None,
                    }
                }
                None => {
                    // Never run a successful helm again: the release records tell the revision.
                    tracing::warn!(
                        "helm succeeded but its output did not parse; taking the release as applied"
                    );
                    Outcome::Applied {
                        adopted_from: None,
                        revision: 0,
                        chart_version: String::new(),
                        tests: Vec::new(),
                        crds: None,
                    }
                }
            },
            Err((message, kind)) => {
                // What helm wrote before it failed (a failed revision, a rollback) is sealed
                // too, or the next try would find records of no one's and refuse the release.
                self.seal_failed(member, &release, before).await;
                Outcome::failed(message, kind)
            }
        };
        self.finish_apply(&prepared, &release.key, outcome).await
    }

    /// After a helm process failed on `release`, whose newest revision was `before`: seals the
    /// revisions it wrote.
    async fn seal_failed(&self, member: &Member, release: &Release, before: i64) {
        if self.options.seal.is_none() {
            return;
        }
        match crate::helm::seal::written_after(member.client.clone(), &release.key, before).await {
            Ok(written) => {
                for revision in written {
                    self.seal_written(member, &release.key, &release.owner, revision)
                        .await;
                }
            }
            Err(e) => {
                tracing::warn!(release = %release.key, error = %e, "could not list the revisions a failed helm wrote; they are held as foreign until the release is applied again");
            }
        }
    }

    /// The registered member a release key names, with the kubeconfig helm is given for it, once
    /// the release's records are checked (`check_records`): what a rollback or an uninstall acts
    /// on. Err: the job's outcome without a helm call.
    async fn targeted(&self, key: &ReleaseKey) -> Result<Targeted, Outcome> {
        let Some(member) = self.member(key) else {
            return Err(unregistered(key));
        };
        let kubeconfig = self.kubeconfig_for(&member);
        self.check_records(&member, key).await?;
        Ok(Targeted { member, kubeconfig })
    }

    pub(crate) async fn rollback(
        &self,
        key: ReleaseKey,
        from: i64,
        identity: Option<Impersonation>,
        owner: &crate::plan::OwnerId,
        helm: &crate::plan::HelmSettings,
    ) -> Outcome {
        let targeted = match self.targeted(&key).await {
            Ok(targeted) => targeted,
            Err(outcome) => return outcome,
        };
        let member = &targeted.member;
        let timeout = crate::helm::settings::upgrade(helm, &self.options).timeout;
        let history_max = crate::helm::settings::history_max(helm, &self.options);
        let target = targeted.target(&identity);
        let args = rollback_args(&key, from - 1, target, (timeout, history_max));
        match self.run(args, timeout).await {
            // A rollback writes the revision after the newest one.
            Ok(_) => {
                self.seal_written(member, &key, owner, from + 1).await;
                Outcome::Applied {
                    adopted_from: None,
                    revision: from + 1,
                    chart_version: String::new(),
                    tests: Vec::new(),
                    crds: None,
                }
            }
            Err((message, kind)) => Outcome::failed(message, kind),
        }
    }

    pub(crate) async fn uninstall(
        &self,
        key: ReleaseKey,
        identity: Option<Impersonation>,
        settings: &crate::api::crd::Uninstall,
    ) -> Outcome {
        let targeted = match self.targeted(&key).await {
            Ok(targeted) => targeted,
            Err(outcome) => return outcome,
        };
        let member = &targeted.member;
        let target = targeted.target(&identity);
        let asked = crate::helm::settings::uninstall(settings, &self.options);
        let args = uninstall_args(&key, target, &asked);
        let outcome = match self.run(args, asked.timeout).await {
            Ok(_) => Outcome::Uninstalled,
            // Helm's words do not say whether the release is gone (its "not found" may be a
            // context's or a plugin's); the release records left in the namespace do.
            Err((message, kind)) => {
                let left = records_left(member.client.clone(), &key).await;
                uninstall_outcome(left, message, kind)
            }
        };
        self.finish_uninstall(member, &key, outcome).await
    }
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

/// The refusal of a release asking for `crds: CreateReplace`, which the `helm` binary cannot do
/// (it never replaces a CRD): None when neither its install nor its upgrade asks for it.
fn replaces_crds(release: &Release, options: &HelmOptions) -> Option<Outcome> {
    let asked = [
        (
            "install",
            crate::helm::settings::install(&release.helm, options),
        ),
        (
            "upgrade",
            crate::helm::settings::upgrade(&release.helm, options),
        ),
    ];
    let (action, _) = asked.into_iter().find(|(_, a)| a.replace_crds)?;
    let message = format!(
        "release {}: {action}.crds: CreateReplace is refused by the helm binary executor, which cannot replace CRDs; run the operator with the Helm executor (--executor sdk), or set {action}.crds: Create",
        release.key
    );
    Some(Outcome::failed(message, FailureKind::Permanent))
}

/// The refusal of a release whose failed upgrades are to be uninstalled: the helm binary
/// cannot do that in the call that failed.
fn uninstall_strategy(release: &Release) -> Option<Outcome> {
    let strategy = release.helm.upgrade.remediation.as_ref()?.strategy?;
    (strategy == RemediationStrategy::Uninstall).then(|| {
        let message = format!(
            "release {}: upgrade.remediation.strategy: uninstall is refused by the helm binary executor, which can only roll a failed upgrade back; run the operator with the Helm executor (--executor sdk), or set strategy: rollback",
            release.key
        );
        Outcome::failed(message, FailureKind::Permanent)
    })
}

#[cfg(test)]
pub(crate) mod tests;
