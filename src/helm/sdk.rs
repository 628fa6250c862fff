//! The long-lived Helm executor: `tenancy-hub-helm` (Helm's Go SDK in one process, source in
//! `helm-sdk/`), driven over its stdin and stdout with one JSON line per request and per answer.
//!
//! One `helm` process per release pays a Go runtime, a kubeconfig, discovery and fresh clients
//! every time; the executor keeps clients, discovery and REST mappings per cluster and identity
//! and pays only the render and the API calls (BENCHMARKS.md, "The helm call"). Everything the
//! CLI path does around the call stays here and in [`HelmCli`]: the namespace made ready, a
//! pending revision cleared, impersonation, values reset, labels, history, rollback on failure,
//! drift repair, the uninstall checked against the records left, failures read by
//! [`helm::classify`]. A job whose chart is neither a chart directory nor a cached archive runs
//! through the CLI: an OCI chart, which helm pulls; a repository chart the cache does not hold
//! waits for it there (helm never fetches a repository chart itself).
//!
//! Fencing: a job's future dropped before its answer (leadership lost, the shutdown grace run
//! out) kills the executor, with every Helm action in it, as dropping a `helm` child kills it;
//! the next job starts a new one. The executor also dies with the operator (parent-death signal).

use std::{
    collections::HashMap,
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, Command},
    sync::oneshot,
};

use crate::{
    api::{key::ReleaseKey, policy::Impersonation},
    clusters::registry::Member,
    helm::cli::{self as helm, HelmCli, HelmOptions},
    plan::{
        ChartSource, Job, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        Release, SPEC_HASH_LABEL,
    },
    queue::{Executor, FailureKind, Outcome},
};

/// The executor's file name, looked for beside `helm` and on `PATH` when not given.
pub const BINARY: &str = "tenancy-hub-helm";

/// How long past helm's own timeout an answer is waited for before the executor is taken as hung
/// and restarted (it stops an action itself 30 s past the timeout).
const ANSWER_GRACE: Duration = Duration::from_secs(60);

/// The cluster of a request, and as whom.
#[derive(Debug, Serialize, PartialEq)]
pub struct ClusterRef {
    /// Kubeconfig file (empty with `context`: the in-cluster configuration).
    pub kubeconfig: String,
    /// Context in it.
    pub context: String,
    /// Changes with the file's content, so the executor builds new clients for new credentials.
    pub digest: String,
    /// Impersonated user; empty: the context's own credentials.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// Impersonated groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The registered cluster name, bound into every record's seal.
    pub name: String,
}

/// One request line.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Matches the answer.
    pub id: u64,
    /// `upgrade` (install when missing), `uninstall` or `rollback`.
    pub op: &'static str,
    /// Where.
    pub cluster: ClusterRef,
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
    /// A chart directory or archive on disk.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chart: String,
    /// The spec's values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<serde_json::Value>,
    /// `--set` expressions, escaped as for the CLI, applied over the values in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
    /// Labels of the release records.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<&'static str, String>,
    /// Revisions kept.
    pub history_max: u32,
    /// Helm's timeout.
    pub timeout_seconds: u64,
    /// Roll back (or uninstall a first install) when the release does not become ready.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rollback_on_failure: bool,
    /// Server-side apply forcing conflicts.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force_conflicts: bool,
    /// The revision's description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The revision a rollback goes to.
    #[serde(skip_serializing_if = "is_zero")]
    pub revision: i64,
    /// The operator's sealing key (hex on the pipe; `Debug` shows nothing of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seal: Option<crate::helm::seal::SealKey>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One answer line.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The request's id.
    pub id: u64,
    /// Helm's error, as its CLI prints it after `Error: `; None on success.
    #[serde(default)]
    pub error: Option<String>,
    /// The revision written.
    #[serde(default)]
    pub revision: i64,
    /// The chart version deployed.
    #[serde(default)]
    pub chart_version: String,
}

/// The request of an install or upgrade of `release` from `chart`, as `helm::upgrade_args` asks
/// the CLI for it; with `repair`, a drift repair forcing the conflicts.
pub fn upgrade_request(
    id: u64,
    release: &Release,
    cluster: ClusterRef,
    chart: String,
    repair: Option<&str>,
    options: &HelmOptions,
) -> Request {
    let labels = [
        (MANAGED_BY_LABEL, MANAGED_BY.to_owned()),
        (OWNER_NAMESPACE_LABEL, release.owner.namespace.clone()),
        (OWNER_NAME_LABEL, release.owner.name.clone()),
        (SPEC_HASH_LABEL, release.spec_hash.clone()),
    ]
    .into_iter()
    .collect();
    Request {
        id,
        op: "upgrade",
        cluster,
        namespace: release.key.scope.namespace.clone(),
        release: release.key.release.clone(),
        chart,
        values: release.values.clone(),
        set: release
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={}", helm::escape_set_value(v)))
            .collect(),
        labels,
        history_max: options.history_max,
        timeout_seconds: options.timeout.as_secs(),
        rollback_on_failure: release.rollback_on_failure,
        force_conflicts: repair.is_some(),
        description: repair.map(helm::repair_description).unwrap_or_default(),
        revision: 0,
        seal: options.seal.clone(),
    }
}

/// The request of an uninstall or (with `to`) a rollback of `key`, as the CLI path asks for them.
pub fn release_request(
    id: u64,
    key: &ReleaseKey,
    cluster: ClusterRef,
    to: Option<i64>,
    options: &HelmOptions,
) -> Request {
    Request {
        id,
        op: if to.is_some() {
            "rollback"
        } else {
            "uninstall"
        },
        cluster,
        namespace: key.scope.namespace.clone(),
        release: key.release.clone(),
        chart: String::new(),
        values: None,
        set: Vec::new(),
        labels: Default::default(),
        history_max: options.history_max,
        timeout_seconds: options.timeout.as_secs(),
        rollback_on_failure: false,
        force_conflicts: to.is_some(),
        description: if to.is_some() {
            helm::ROLLBACK_DESCRIPTION.to_owned()
        } else {
            String::new()
        },
        revision: to.unwrap_or(0),
        seal: options.seal.clone(),
    }
}

/// A failed answer read as the CLI's stderr would be: trimmed, and classified alike.
pub fn failure(error: &str) -> Outcome {
    let stderr = format!("Error: {error}");
    Outcome::failed(
        crate::queue::failure::trim_error(&stderr),
        crate::queue::failure::classify(&stderr),
    )
}

/// A running executor process.
struct Process {
    pid: u32,
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    dead: AtomicBool,
    child: Mutex<Option<Child>>,
    /// When a request was last sent or answered.
    active: Mutex<tokio::time::Instant>,
}

impl Process {
    fn start(options: &HelmOptions, binary: &PathBuf) -> std::io::Result<Arc<Self>> {
        let mut command = Command::new(binary);
        if let Some(dir) = &options.cache_dir {
            command.env("KUBECACHEDIR", dir.join("kube"));
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        helm::die_with_parent(&mut command);
        let mut child = command.spawn()?;
        let pid = child.id().unwrap_or_default();
        let (stdin, stdout, stderr) = (
            child.stdin.take().expect("piped"),
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        let process = Arc::new(Self {
            pid,
            stdin: tokio::sync::Mutex::new(stdin),
            waiting: Mutex::default(),
            dead: AtomicBool::new(false),
            child: Mutex::new(Some(child)),
            active: Mutex::new(tokio::time::Instant::now()),
        });
        tracing::info!(pid, executor = %binary.display(), "started the helm executor");
        let reader = process.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => match serde_json::from_str::<Answer>(&line) {
                        Ok(answer) => {
                            reader.touch();
                            if let Some(to) = reader.waiting().remove(&answer.id) {
                                let _ = to.send(answer);
                            }
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "the helm executor answered garbage");
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "reading the helm executor's answers");
                        break;
                    }
                }
            }
            reader.kill("its output ended");
        });
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(target: "tenancy_hub::helm", pid, "{line}");
            }
        });
        Ok(process)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn touch(&self) {
        *self
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tokio::time::Instant::now();
    }

    /// How long no request has been waiting, or None while one is.
    fn idle_for(&self) -> Option<Duration> {
        let active = *self
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.waiting().is_empty().then(|| active.elapsed())
    }

    /// Kills the process (and every action in it); waiting requests fail.
    fn kill(&self, why: &str) {
        if self.end() {
            tracing::warn!(pid = self.pid, "stopped the helm executor: {why}");
        }
    }

    /// Ends the process; false when it had ended already.
    fn end(&self) -> bool {
        if self.dead.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Some(mut child) = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = child.start_kill();
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
        self.waiting().clear();
        true
    }
}

/// Kills the executor when a request's future is dropped before its answer: the action must not
/// go on after the job was abandoned (see the module's fencing note).
struct InFlight {
    process: Arc<Process>,
    id: u64,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.process.waiting().remove(&self.id);
            self.process
                .kill("a running job was abandoned (leadership lost or shutdown)");
        }
    }
}

/// The pipe to the executor process, started on the first request and again after it died.
struct Pipe {
    options: HelmOptions,
    binary: PathBuf,
    process: Arc<tokio::sync::Mutex<Option<Arc<Process>>>>,
    ids: AtomicU64,
}

impl Pipe {
    fn new(options: HelmOptions, binary: PathBuf) -> Self {
        Self {
            options,
            binary,
            process: Arc::default(),
            ids: AtomicU64::new(1),
        }
    }

    /// The running process, started when there is none, with `id` registered as waiting for
    /// `to`; under the lock that retiring an idle process takes, so none is retired with a request.
    async fn register(&self, id: u64, to: oneshot::Sender<Answer>) -> Result<Arc<Process>, String> {
        let mut slot = self.process.lock().await;
        let process = match slot.as_ref() {
            Some(process) if !process.dead.load(Ordering::SeqCst) => process.clone(),
            _ => {
                let process = Process::start(&self.options, &self.binary).map_err(|e| {
                    format!(
                        "cannot run the helm executor {}: {e}; install it or pass --executor cli",
                        self.binary.display()
                    )
                })?;
                self.retire_when_idle(&process);
                *slot = Some(process.clone());
                process
            }
        };
        process.touch();
        process.waiting().insert(id, to);
        Ok(process)
    }

    /// Ends `process` once no request has waited on it for `executor_idle`: an idle operator
    /// holds no Helm memory (the next job starts the executor again, in about 0.1 s).
    fn retire_when_idle(&self, process: &Arc<Process>) {
        let idle = self.options.executor_idle;
        if idle.is_zero() {
            return;
        }
        let (slot, process) = (Arc::downgrade(&self.process), Arc::downgrade(process));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep((idle / 4).max(Duration::from_millis(50))).await;
                let (Some(slot), Some(process)) = (slot.upgrade(), process.upgrade()) else {
                    return;
                };
                let mut slot = slot.lock().await;
                if process.dead.load(Ordering::SeqCst) {
                    return;
                }
                if process.idle_for().is_some_and(|d| d >= idle) {
                    if process.end() {
                        tracing::info!(pid = process.pid, "stopped the idle helm executor");
                    }
                    *slot = None;
                    return;
                }
            }
        });
    }

    /// Sends a request and waits for its answer.
    async fn call(&self, mut request: Request) -> Result<Answer, String> {
        request.id = self.ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let process = self.register(request.id, tx).await?;
        let mut in_flight = InFlight {
            process: process.clone(),
            id: request.id,
            answered: false,
        };
        let mut line = serde_json::to_vec(&request).expect("a request serializes");
        line.push(b'\n');
        let written = {
            let mut stdin = process.stdin.lock().await;
            match stdin.write_all(&line).await {
                Ok(()) => stdin.flush().await,
                Err(e) => Err(e),
            }
        };
        if let Err(e) = written {
            in_flight.answered = true;
            process.kill("its input closed");
            return Err(format!("the helm executor stopped taking requests: {e}"));
        }
        let limit = self.options.timeout + ANSWER_GRACE;
        let answer = tokio::time::timeout(limit, rx).await;
        in_flight.answered = true;
        match answer {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err("the helm executor stopped before answering".to_owned()),
            Err(_) => {
                process.kill("an answer is overdue");
                Err(format!(
                    "helm did not finish within {}s and was stopped",
                    limit.as_secs()
                ))
            }
        }
    }
}

/// The executor the operator runs jobs with: the long-lived executor when `HelmOptions::sdk`
/// names one, with [`HelmCli`] for charts that are not on disk; else one helm process per job.
pub struct HelmExecutor {
    cli: HelmCli,
    options: HelmOptions,
    pipe: Option<Pipe>,
}

impl HelmExecutor {
    /// The executor `options` ask for; the long-lived one starts on the first job (and again
    /// after it died).
    pub fn new(cli: HelmCli, options: &HelmOptions) -> Self {
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
    ) -> Outcome {
        // Held until helm is done, so the cache keeps the archive meanwhile.
        let archive = self.cli.checkout(&release);
        let (pipe, chart) = match (&self.pipe, &archive, &release.source) {
            (Some(pipe), Some(archive), _) => (pipe, archive.path().to_path_buf()),
            (Some(pipe), None, ChartSource::Directory(path)) => (pipe, path.clone()),
            _ => return self.cli.apply(release, stale_pending, repair).await,
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
            &self.options,
        );
        let outcome = match pipe.call(request).await {
            Ok(Answer { error: Some(e), .. }) => failure(&e),
            Ok(answer) => Outcome::Applied {
                revision: answer.revision,
                chart_version: answer.chart_version,
            },
            Err(message) => Outcome::failed(message, FailureKind::Transient),
        };
        self.cli
            .finish_apply(&prepared, &release.key, outcome)
            .await
    }

    async fn uninstall(&self, key: ReleaseKey, identity: Option<Impersonation>) -> Outcome {
        let Some(pipe) = &self.pipe else {
            return self.cli.uninstall(key, identity).await;
        };
        let Some(member) = self.cli.member(&key) else {
            return helm::unregistered(&key);
        };
        let cluster = self.cluster(&member, identity.as_ref());
        let failed = match pipe
            .call(release_request(0, &key, cluster, None, &self.options))
            .await
        {
            Ok(Answer { error: None, .. }) => None,
            Ok(Answer { error: Some(e), .. }) => Some(failure(&e)),
            Err(message) => Some(Outcome::failed(message, FailureKind::Transient)),
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
    ) -> Outcome {
        let Some(pipe) = &self.pipe else {
            return self.cli.rollback(key, from, identity, owner).await;
        };
        let Some(member) = self.cli.member(&key) else {
            return helm::unregistered(&key);
        };
        let cluster = self.cluster(&member, identity.as_ref());
        match pipe
            .call(release_request(
                0,
                &key,
                cluster,
                Some(from - 1),
                &self.options,
            ))
            .await
        {
            // A rollback writes the revision after the newest one.
            Ok(Answer { error: None, .. }) => Outcome::Applied {
                revision: from + 1,
                chart_version: String::new(),
            },
            Ok(Answer { error: Some(e), .. }) => failure(&e),
            Err(message) => Outcome::failed(message, FailureKind::Transient),
        }
    }
}

impl Executor for HelmExecutor {
    async fn execute(&self, job: Job) -> Outcome {
        if let Some(outcome) = self.cli.unreachable(job.key()) {
            return outcome;
        }
        match job {
            Job::Apply {
                release,
                stale_pending,
                repair,
            } => self.apply(*release, stale_pending, repair).await,
            Job::Uninstall { key, identity, .. } => self.uninstall(key, identity).await,
            Job::Rollback {
                key,
                from,
                identity,
                owner,
            } => self.rollback(key, from, identity, &owner).await,
        }
    }
}

/// Finds the executor: `given` when set, else [`BINARY`] beside `helm`, else on `PATH`.
pub fn locate(given: Option<&std::path::Path>, helm: &std::path::Path) -> Option<PathBuf> {
    if let Some(given) = given {
        return Some(given.to_path_buf());
    }
    let beside = helm
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(BINARY));
    beside.filter(|p| p.is_file()).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(BINARY))
                .find(|p| p.is_file())
        })
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn release() -> Release {
        let mut release =
            helm::tests::release(ChartSource::Directory("/charts/deployment-example".into()));
        release.settings.push(("note".into(), "a,b{c}\\d".into()));
        release.values = Some(serde_json::json!({"image": {"tag": "v2"}}));
        release.rollback_on_failure = true;
        release
    }

    fn cluster() -> ClusterRef {
        ClusterRef {
            kubeconfig: "/run/kubeconfig-member-1".into(),
            context: "member-1".into(),
            digest: "ab12".into(),
            user: "tenant-a".into(),
            groups: vec!["tenants".into()],
            name: "member-1".into(),
        }
    }

    #[test]
    fn an_upgrade_asks_for_what_the_cli_upgrade_does_with_values_on_the_pipe() {
        let options = HelmOptions::default();
        let request = upgrade_request(
            7,
            &release(),
            cluster(),
            "/charts/deployment-example".into(),
            None,
            &options,
        );
        let line = serde_json::to_value(&request).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "id": 7,
                "op": "upgrade",
                "cluster": {
                    "kubeconfig": "/run/kubeconfig-member-1",
                    "context": "member-1",
                    "digest": "ab12",
                    "user": "tenant-a",
                    "groups": ["tenants"],
                    "name": "member-1",
                },
                "namespace": "team",
                "release": "web",
                "chart": "/charts/deployment-example",
                "values": {"image": {"tag": "v2"}},
                // Escaped exactly as the CLI's --set arguments are.
                "set": ["replicaCount=2", "note=a\\,b\\{c\\}\\\\d"],
                "labels": {
                    "multitenancy.dev/managed-by": "tenancy-hub",
                    "multitenancy.dev/controller-name": "example",
                    "multitenancy.dev/controller-namespace": "default",
                    "multitenancy.dev/spec-hash": "0123456789abcdef",
                },
                "historyMax": 5,
                "timeoutSeconds": 300,
                "rollbackOnFailure": true,
            })
        );
        // The CLI gets the same labels.
        let cli = helm::upgrade_args(
            &release(),
            helm::Target {
                kubeconfig: std::path::Path::new("/k"),
                context: "member-1",
                identity: None,
            },
            None,
            None,
            &options,
        );
        let labels = cli
            .iter()
            .find_map(|a| a.to_str()?.strip_prefix("--labels="))
            .unwrap();
        for pair in labels.split(',') {
            let (k, v) = pair.split_once('=').unwrap();
            assert_eq!(line["labels"][k], v, "label {k}");
        }
    }

    #[test]
    fn a_repair_forces_conflicts_with_the_clis_description() {
        let request = upgrade_request(
            1,
            &release(),
            cluster(),
            "/c".into(),
            Some("Deployment/web /spec/replicas"),
            &HelmOptions::default(),
        );
        assert!(request.force_conflicts);
        assert_eq!(
            request.description,
            "drift repair: Deployment/web /spec/replicas"
        );
        let long = upgrade_request(
            1,
            &release(),
            cluster(),
            "/c".into(),
            Some(&"é".repeat(500)),
            &HelmOptions::default(),
        );
        assert_eq!(long.description, helm::repair_description(&"é".repeat(500)));
        assert!(long.description.len() <= 200);
    }

    #[test]
    fn rollbacks_go_one_revision_back_forcing_conflicts_and_uninstalls_ask_for_nothing_else() {
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        let options = HelmOptions::default();
        let rollback = release_request(3, &key, cluster(), Some(4), &options);
        assert_eq!(
            (rollback.op, rollback.revision, rollback.force_conflicts),
            ("rollback", 4, true)
        );
        assert_eq!(rollback.description, helm::ROLLBACK_DESCRIPTION);
        let uninstall =
            serde_json::to_value(release_request(4, &key, cluster(), None, &options)).unwrap();
        assert_eq!(uninstall["op"], "uninstall");
        for absent in [
            "revision",
            "forceConflicts",
            "description",
            "chart",
            "values",
            "set",
        ] {
            assert!(uninstall.get(absent).is_none(), "{absent} in {uninstall}");
        }
    }

    #[test]
    fn failures_read_as_the_clis_stderr_would() {
        for (error, kind) in [
            (
                "UPGRADE FAILED: Get \"https://127.0.0.1:1/version\": dial tcp 127.0.0.1:1: connect: connection refused",
                FailureKind::Transient,
            ),
            (
                "execution error at (deployment-example/templates/deployment.yaml:1:3): connection refused",
                FailureKind::Permanent,
            ),
            (
                "UPGRADE FAILED: Deployment.apps \"web\" is invalid: spec.replicas: Invalid value",
                FailureKind::Permanent,
            ),
            ("Unauthorized", FailureKind::Unavailable),
        ] {
            let stderr = format!("Error: {error}\n");
            assert_eq!(
                failure(error),
                Outcome::failed(crate::queue::failure::trim_error(&stderr), kind),
                "{error}"
            );
        }
    }

    #[test]
    fn the_executor_is_found_beside_helm_before_path_and_a_given_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let helm_path = dir.path().join("helm");
        assert_eq!(
            locate(Some(std::path::Path::new("/opt/x")), &helm_path),
            Some("/opt/x".into())
        );
        std::fs::write(dir.path().join(BINARY), "").unwrap();
        assert_eq!(locate(None, &helm_path), Some(dir.path().join(BINARY)));
    }

    /// A scripted executor: answers each request after `delay_ms` (from its `timeoutSeconds`
    /// field, so requests pick their own delay), echoing the id and the revision asked for.
    fn scripted(dir: &std::path::Path, body: &str) -> PathBuf {
        let path = dir.join("fake-executor");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "#!/usr/bin/env python3\n{body}").unwrap();
        drop(file);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    const ANSWERS_IN_ANY_ORDER: &str = r#"
import json, os, sys, threading, time
lock = threading.Lock()
def answer(req):
    time.sleep(req["revision"] / 1000)
    with lock:
        print(json.dumps({"id": req["id"], "revision": req["revision"], "chartVersion": "0.1.0"}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "crash":
        os._exit(3)
    threading.Thread(target=answer, args=(req,)).start()
"#;

    /// A pipe to the scripted executor answering in any order.
    fn fake(dir: &std::path::Path) -> Pipe {
        Pipe::new(HelmOptions::default(), scripted(dir, ANSWERS_IN_ANY_ORDER))
    }

    fn request(revision: i64) -> Request {
        let mut r = release_request(
            0,
            &"member-1/team/web".parse().unwrap(),
            cluster(),
            Some(revision),
            &HelmOptions::default(),
        );
        r.revision = revision;
        r
    }

    fn alive(pid: u32) -> bool {
        // A process that exited but is not reaped yet (state Z) counts as dead.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split(' ').nth(2).is_none_or(|state| state != "Z"))
    }

    async fn wait_dead(pid: u32) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "executor {pid} still runs"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn concurrent_requests_are_matched_to_their_answers_whatever_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = fake(dir.path());
        // The slow one is sent first and answered last.
        let (slow, fast) = tokio::join!(pipe.call(request(400)), pipe.call(request(10)));
        assert_eq!(slow.unwrap().revision, 400);
        assert_eq!(fast.unwrap().revision, 10);
    }

    #[tokio::test]
    async fn an_abandoned_request_kills_the_executor_and_the_next_starts_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = fake(dir.path());
        assert!(pipe.call(request(1)).await.is_ok());
        let first = pipe.process.lock().await.as_ref().unwrap().pid;
        // Leadership lost: the running job's future is dropped before the answer.
        let abandoned = tokio::time::timeout(Duration::from_millis(200), pipe.call(request(5_000)));
        assert!(abandoned.await.is_err(), "answered before it was abandoned");
        wait_dead(first).await;
        let answer = pipe.call(request(2)).await.unwrap();
        assert_eq!(answer.revision, 2);
        let second = pipe.process.lock().await.as_ref().unwrap().pid;
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn an_executor_that_dies_fails_its_waiting_requests_and_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = fake(dir.path());
        let mut crash = request(0);
        crash.op = "crash";
        let (waiting, crashed) = tokio::join!(pipe.call(request(3_000)), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            pipe.call(crash).await
        });
        assert_eq!(
            waiting.unwrap_err(),
            "the helm executor stopped before answering"
        );
        assert!(crashed.is_err());
        assert_eq!(pipe.call(request(1)).await.unwrap().revision, 1);
    }

    #[tokio::test]
    async fn an_idle_executor_exits_and_the_next_job_starts_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let options = HelmOptions {
            executor_idle: Duration::from_millis(300),
            ..HelmOptions::default()
        };
        let pipe = Pipe::new(options, scripted(dir.path(), ANSWERS_IN_ANY_ORDER));
        // Busy past the idle time: a waiting request keeps it.
        assert_eq!(pipe.call(request(600)).await.unwrap().revision, 600);
        let first = pipe.process.lock().await.as_ref().unwrap().pid;
        wait_dead(first).await;
        assert!(
            pipe.process.lock().await.is_none(),
            "the slot still holds it"
        );
        assert_eq!(pipe.call(request(1)).await.unwrap().revision, 1);
        let second = pipe.process.lock().await.as_ref().unwrap().pid;
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn a_missing_executor_says_how_to_go_on() {
        let pipe = Pipe::new(
            HelmOptions::default(),
            "/nonexistent/tenancy-hub-helm".into(),
        );
        let error = pipe.call(request(1)).await.unwrap_err();
        assert!(error.contains("/nonexistent/tenancy-hub-helm"), "{error}");
        assert!(error.contains("--executor cli"), "{error}");
    }
}
