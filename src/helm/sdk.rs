//! The long-lived Helm executor: `tenancy-hub-helm` (Helm's Go SDK in one process, source in
//! `helm-sdk/`), driven over its stdin and stdout with one JSON line per request and per answer.
//!
//! One `helm` process per release pays a Go runtime, a kubeconfig, discovery and fresh clients
//! every time; the executor keeps clients, discovery and REST mappings per cluster and identity
//! and pays only the render and the API calls (BENCHMARKS.md, "The helm call"). Everything the
//! CLI path does around the call stays here and in [`HelmCli`]: the namespace made ready, a
//! pending revision cleared, impersonation, values reset, labels, history, rollback on failure,
//! drift repair, the uninstall checked against the records left, failures read by
//! [`crate::queue::failure::classify`]. A job whose chart is neither a chart directory nor a cached archive runs
//! through the CLI: an OCI chart, which helm pulls; a repository chart the cache does not hold
//! waits for it there (helm never fetches a repository chart itself).
//!
//! The protocol: the executor's first line is its [`Hello`](crate::helm::protocol::Hello), with its [`PROTOCOL_VERSION`](crate::helm::protocol::PROTOCOL_VERSION) and the
//! version of Helm's Go SDK it is built with; the operator checks it, within [`HELLO_TIMEOUT`](crate::helm::pipe::HELLO_TIMEOUT),
//! before it sends any work, and refuses an executor that speaks another version or none, saying
//! to rebuild it. Then each [`Request`](crate::helm::protocol::Request) gets one [`Answer`](crate::helm::protocol::Answer). `helm-sdk/testdata/protocol` holds an
//! example of every message, which the tests here and the executor's `go test` both check.
//!
//! Fencing: a job's future dropped before its answer (leadership lost, the shutdown grace run
//! out) kills the executor, with every Helm action in it, as dropping a `helm` child kills it;
//! the next job starts a new one. The executor also dies with the operator (parent-death signal).

use std::path::PathBuf;

use crate::{
    api::{crd::Uninstall, key::ReleaseKey, policy::Impersonation},
    clusters::registry::Member,
    helm::args::HelmOptions,
    helm::cli::HelmCli,
    helm::outcome as helm,
    helm::pipe::{ExecutorError, Pipe},
    helm::protocol::{
        Answer, ClusterRef, Request, rollback_request, uninstall_request, upgrade_request,
    },
    plan::{ChartSource, Job, Release, remediation::Remediate},
    queue::{Executor, FailureKind, Outcome},
};

/// The executor's file name, looked for beside `helm` and on `PATH` when not given.
pub(crate) const BINARY: &str = "tenancy-hub-helm";

/// A failed answer read as the CLI's stderr would be: trimmed, and classified alike.
pub(crate) fn failure(error: &str) -> Outcome {
    let stderr = format!("Error: {error}");
    Outcome::failed(
        crate::queue::failure::trim_error(&stderr),
        crate::queue::failure::classify(&stderr),
    )
}

/// The executor the operator runs jobs with: the long-lived executor when `HelmOptions::sdk`
/// names one, with [`HelmCli`] for charts that are not on disk; else one helm process per job.
pub(crate) struct HelmExecutor {
    cli: HelmCli,
    options: HelmOptions,
    pipe: Option<Pipe>,
}

impl HelmExecutor {
    /// The cached archive of a release's remote chart, held while the checkout lives; None for
    /// chart-home charts and charts the cache does not hold.
    pub(crate) fn checkout(&self, release: &Release) -> Option<crate::charts::store::Checkout> {
        self.cli.checkout(release)
    }

    /// The executor `options` ask for; the long-lived one starts on the first job (and again
    /// after it died).
    pub(crate) fn new(cli: HelmCli, options: &HelmOptions) -> Self {
        Self {
            cli,
            pipe: options
                .sdk
                .clone()
                .map(|binary| Pipe::new(options.clone(), binary)),
            options: options.clone(),
        }
    }

    fn cluster(&self, member: &Member, identity: Option<&Impersonation>) -> ClusterRef {
        let kubeconfig = self.cli.kubeconfig_for(member);
        let in_cluster = kubeconfig.as_os_str().is_empty();
        ClusterRef {
            kubeconfig: kubeconfig.to_string_lossy().into_owned(),
            context: if in_cluster {
                String::new()
            } else {
                member.entry.context.clone()
            },
            digest: member
                .kubeconfig_digest
                .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
                .unwrap_or_default(),
            user: identity.map(|w| w.user.clone()).unwrap_or_default(),
            groups: identity.map(|w| w.groups.clone()).unwrap_or_default(),
            name: member.entry.name.to_string(),
        }
    }

    async fn apply(
        &self,
        release: Release,
        stale_pending: Option<i64>,
        repair: Option<String>,
        adopt: bool,
        remediate: Remediate,
    ) -> Outcome {
        // Held until helm is done, so the cache keeps the archive meanwhile.
        let archive = self.cli.checkout(&release);
        let (pipe, chart) = match (&self.pipe, &archive, &release.source) {
            (Some(pipe), Some(archive), _) => (pipe, archive.path().to_path_buf()),
            (Some(pipe), None, ChartSource::Directory(path)) => (pipe, path.clone()),
            _ if adopt => return adoption_needs_the_executor(&release.key),
            _ => {
                return self
                    .cli
                    .apply(release, stale_pending, repair, remediate)
                    .await;
            }
        };
        let prepared = match self.cli.prepare(&release, stale_pending).await {
            Ok(prepared) => prepared,
            Err(outcome) => return outcome,
        };
        let cluster = self.cluster(&prepared.member, release.identity.as_ref());
        let request = upgrade_request(
            0,
            &release,
            cluster,
            chart.to_string_lossy().into_owned(),
            repair.as_deref(),
            remediate,
            &self.options,
        );
        let request = Request { adopt, ..request };
        let outcome = match pipe.call(request).await {
            Ok(answer) => applied(answer, adopt),
            Err(e @ (ExecutorError::Stopped | ExecutorError::Overdue(_))) => {
                // The executor is gone with the install or upgrade in flight: a revision it left
                // pending is cleared now, so the job tried again does not wait out helm's timeout.
                match helm::clear_orphaned_pending(prepared.member.client.clone(), &release.key)
                    .await
                {
                    Ok(Some(revision)) => tracing::warn!(
                        revision,
                        "cleared the revision a stopped helm executor left pending"
                    ),
                    Ok(None) => {}
                    Err(error) => tracing::warn!(
                        %error,
                        "could not look for a revision the stopped helm executor left pending; helm's timeout clears it"
                    ),
                }
                Outcome::failed(e.to_string(), FailureKind::Transient)
            }
            Err(e) => Outcome::failed(e.to_string(), FailureKind::Transient),
        };
        self.cli
            .finish_apply(&prepared, &release.key, outcome)
            .await
    }

    async fn uninstall(
        &self,
        key: ReleaseKey,
        identity: Option<Impersonation>,
        settings: Uninstall,
    ) -> Outcome {
        let Some(pipe) = &self.pipe else {
            return self.cli.uninstall(key, identity, &settings).await;
        };
        let Some(member) = self.cli.member(&key) else {
            return helm::unregistered(&key);
        };
        let cluster = self.cluster(&member, identity.as_ref());
        let failed = match pipe
            .call(uninstall_request(
                0,
                &key,
                cluster,
                &crate::helm::settings::uninstall(&settings, &self.options),
                &self.options,
            ))
            .await
        {
            Ok(Answer { error: None, .. }) => None,
            Ok(Answer { error: Some(e), .. }) => Some(failure(&e)),
            Err(e) => Some(Outcome::failed(e.to_string(), FailureKind::Transient)),
        };
        let outcome = match failed {
            None => Outcome::Uninstalled,
            // As with the CLI: the release records left say whether the release is gone.
            Some(Outcome::Failed { message, kind }) => {
                let left = helm::records_left(member.client.clone(), &key).await;
                helm::uninstall_outcome(left, message, kind)
            }
            Some(other) => other,
        };
        self.cli.finish_uninstall(&member, &key, outcome).await
    }

    async fn rollback(
        &self,
        key: ReleaseKey,
        from: i64,
        identity: Option<Impersonation>,
        owner: &crate::plan::OwnerId,
        helm: &crate::plan::HelmSettings,
    ) -> Outcome {
        let Some(pipe) = &self.pipe else {
            return self.cli.rollback(key, from, identity, owner, helm).await;
        };
        let Some(member) = self.cli.member(&key) else {
            return helm::unregistered(&key);
        };
        let cluster = self.cluster(&member, identity.as_ref());
        match pipe
            .call(rollback_request(
                0,
                &key,
                cluster,
                from - 1,
                helm,
                &self.options,
            ))
            .await
        {
            // A rollback writes the revision after the newest one.
            Ok(Answer { error: None, .. }) => Outcome::Applied {
                adopted_from: None,
                revision: from + 1,
                chart_version: String::new(),
                tests: Vec::new(),
                crds: None,
            },
            Ok(Answer { error: Some(e), .. }) => failure(&e),
            Err(e) => Outcome::failed(e.to_string(), FailureKind::Transient),
        }
    }
}

impl Executor for HelmExecutor {
    async fn execute(&self, job: Job) -> Outcome {
        if let Some(outcome) = self.cli.unreachable(job.key()) {
            return outcome;
        }
        let remediate = job.remediate();
        match job {
            Job::Apply {
                release,
                stale_pending,
                repair,
                adopt,
                ..
            } => {
                self.apply(*release, stale_pending, repair, adopt, remediate)
                    .await
            }
            Job::Uninstall {
                key,
                identity,
                settings,
                ..
            } => self.uninstall(key, identity, settings).await,
            Job::Rollback {
                key,
                from,
                identity,
                owner,
                helm,
            } => self.rollback(key, from, identity, &owner, &helm).await,
        }
    }
}

/// What the answer to an install or upgrade (an adoption when `adopt`) came to.
pub(crate) fn applied(answer: Answer, adopt: bool) -> Outcome {
    match answer {
        // Deployed, then its tests failed: the chart's verdict on this revision, which the
        // executor has marked failed (or rolled back); a retry would only write another.
        Answer {
            error: Some(e),
            revision: 1..,
            ..
        } => Outcome::failed(e, FailureKind::Permanent),
        Answer { error: Some(e), .. } => failure(&e),
        answer => Outcome::Applied {
            revision: answer.revision,
            chart_version: answer.chart_version,
            tests: answer.tests,
            crds: answer.crds,
            adopted_from: adopt.then(|| previous_labels(&answer.adopted)),
        },
    }
}

/// The outcome of an adoption that cannot run: the `helm` binary reads release records itself,
/// so it cannot be let read exactly one checked record a tenant may have written.
fn adoption_needs_the_executor(key: &ReleaseKey) -> Outcome {
    Outcome::failed(
        format!(
            "adopting release {key} needs the tenancy-hub-helm executor and a chart on disk (a chart-home or cached repository chart): the helm binary path (an OCI chart, or no executor configured) does not take over releases; install the executor or use such a chart"
        ),
        FailureKind::Permanent,
    )
}

/// The labels an adopted release's previous record carried, in words (`none` when it had none).
fn previous_labels(labels: &std::collections::BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".to_owned();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Finds the executor: `given` when set, else [`BINARY`] beside `helm`, else on `PATH`.
pub(crate) fn locate(given: Option<&std::path::Path>, helm: &std::path::Path) -> Option<PathBuf> {
    crate::charts::common::locate_tool(given, helm, BINARY)
}

#[cfg(test)]
mod tests;
