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
//! The protocol: the executor's first line is its [`Hello`], with its [`PROTOCOL_VERSION`] and the
//! version of Helm's Go SDK it is built with; the operator checks it, within [`HELLO_TIMEOUT`],
//! before it sends any work, and refuses an executor that speaks another version or none, saying
//! to rebuild it. Then each [`Request`] gets one [`Answer`]. `helm-sdk/testdata/protocol` holds an
//! example of every message, which the tests here and the executor's `go test` both check.
//!
//! Fencing: a job's future dropped before its answer (leadership lost, the shutdown grace run
//! out) kills the executor, with every Helm action in it, as dropping a `helm` child kills it;
//! the next job starts a new one. The executor also dies with the operator (parent-death signal).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
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
pub(crate) const BINARY: &str = "tenancy-hub-helm";

/// How long past helm's own timeout an answer is waited for before the executor is taken as hung
/// and restarted (it stops an action itself 30 s past the timeout).
const ANSWER_GRACE: Duration = Duration::from_secs(60);

/// The version of the messages on the executor's pipe: [`Hello`], [`Request`] and [`Answer`].
/// Bump it when a message changes, with the executor's `protocolVersion` (`helm-sdk/main.go`) and
/// the shared fixtures in `helm-sdk/testdata/protocol`, which the tests of both sides check.
pub(crate) const PROTOCOL_VERSION: u32 = 1;

/// How long a starting executor may take to say [`Hello`] (it says it at once; a Go program
/// starts in about 0.1 s) before it is taken as speaking no protocol at all.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What to do about an executor that speaks another protocol, or none.
const REBUILD: &str = "rebuild the executor from this operator's source with lab/executor.sh \
    (the image from deploy/Dockerfile builds both from one source)";

/// The executor's first line, written before it reads any request. Fields the operator does not
/// know are ignored, so an executor of any version can say which protocol it speaks.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Its [`PROTOCOL_VERSION`].
    pub(crate) protocol: u32,
    /// The version of Helm's Go SDK it is built with (`v4.3.1`).
    pub(crate) helm: String,
}

/// Why the long-lived executor did not answer a request.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The binary could not be started.
    #[error("cannot run the helm executor {}: {source}; install it or pass --executor cli", .path.display())]
    Spawn {
        /// The executor's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It did not begin with a [`Hello`]: an executor older than protocol versions, or not one.
    #[error(
        "the helm executor {} did not say which protocol it speaks ({why}); this operator speaks \
         protocol {}: {}", .path.display(), PROTOCOL_VERSION, REBUILD
    )]
    NoHello {
        /// The executor's path.
        path: PathBuf,
        /// What it did instead.
        why: String,
    },
    /// It speaks another protocol version.
    #[error(
        "the helm executor {} speaks protocol {executor} (Helm {helm}), this operator protocol \
         {operator}: {}", .path.display(), REBUILD
    )]
    Mismatch {
        /// The executor's path.
        path: PathBuf,
        /// The version it speaks.
        executor: u32,
        /// The version the operator speaks, [`PROTOCOL_VERSION`].
        operator: u32,
        /// The Helm it is built with.
        helm: String,
    },
    /// Writing the request failed.
    #[error("the helm executor stopped taking requests: {0}")]
    InputClosed(#[source] std::io::Error),
    /// It ended, or was stopped, before the answer.
    #[error("the helm executor stopped before answering")]
    Stopped,
    /// No answer came within helm's timeout and the grace after it; the executor was stopped.
    #[error("helm did not finish within {}s and was stopped", .0.as_secs())]
    Overdue(Duration),
}

/// The cluster of a request, and as whom.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct ClusterRef {
    /// Kubeconfig file (empty with `context`: the in-cluster configuration).
    pub(crate) kubeconfig: String,
    /// Context in it.
    pub(crate) context: String,
    /// Changes with the file's content, so the executor builds new clients for new credentials.
    pub(crate) digest: String,
    /// Impersonated user; empty: the context's own credentials.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) user: String,
    /// Impersonated groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<String>,
    /// The registered cluster name, bound into every record's seal.
    pub(crate) name: String,
}

/// One request line.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    /// Matches the answer.
    pub(crate) id: u64,
    /// `upgrade` (install when missing), `uninstall` or `rollback`.
    pub(crate) op: &'static str,
    /// Where.
    pub(crate) cluster: ClusterRef,
    /// The release's namespace.
    pub(crate) namespace: String,
    /// The release's name.
    pub(crate) release: String,
    /// A chart directory or archive on disk.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) chart: String,
    /// The spec's values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) values: Option<serde_json::Value>,
    /// `--set` expressions, escaped as for the CLI, applied over the values in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) set: Vec<String>,
    /// Labels of the release records.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) labels: std::collections::BTreeMap<&'static str, String>,
    /// Revisions kept.
    pub(crate) history_max: u32,
    /// Helm's timeout.
    pub(crate) timeout_seconds: u64,
    /// Roll back (or uninstall a first install) when the release does not become ready.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) rollback_on_failure: bool,
    /// Server-side apply forcing conflicts.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) force_conflicts: bool,
    /// The revision's description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) description: String,
    /// The revision a rollback goes to.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) revision: i64,
    /// The operator's sealing key (hex on the pipe; `Debug` shows nothing of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seal: Option<crate::helm::seal::SealKey>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One answer line. A field the operator does not know makes it garbage (the executor is then
/// stopped): it would be a message of another protocol version.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Answer {
    /// The request's id.
    pub(crate) id: u64,
    /// Helm's error, as its CLI prints it after `Error: `; None on success.
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// The revision written.
    #[serde(default)]
    pub(crate) revision: i64,
    /// The chart version deployed.
    #[serde(default)]
    pub(crate) chart_version: String,
}

/// The request of an install or upgrade of `release` from `chart`, as `helm::upgrade_args` asks
/// the CLI for it; with `repair`, a drift repair forcing the conflicts.
pub(crate) fn upgrade_request(
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
pub(crate) fn release_request(
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
pub(crate) fn failure(error: &str) -> Outcome {
    let stderr = format!("Error: {error}");
    Outcome::failed(
        crate::queue::failure::trim_error(&stderr),
        crate::queue::failure::classify(&stderr),
    )
}

/// A running executor process.
struct Process {
    pid: u32,
    /// What it said on starting.
    hello: Hello,
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    dead: AtomicBool,
    child: Mutex<Option<Child>>,
    /// When a request was last sent or answered.
    active: Mutex<tokio::time::Instant>,
}

impl Process {
    /// Starts the executor at `binary` and checks its hello; on any failure it is killed.
    async fn start(options: &HelmOptions, binary: &Path) -> Result<Arc<Self>, ExecutorError> {
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
        let mut child = command.spawn().map_err(|source| ExecutorError::Spawn {
            path: binary.to_path_buf(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        let (stdin, stdout, stderr) = (
            child.stdin.take().expect("piped"),
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(target: "tenancy_hub::helm", pid, "{line}");
            }
        });
        let mut lines = BufReader::new(stdout).lines();
        // On an error the child is dropped, which kills it.
        let hello = read_hello(&mut lines, binary).await?;
        let process = Arc::new(Self {
            pid,
            hello,
            stdin: tokio::sync::Mutex::new(stdin),
            waiting: Mutex::default(),
            dead: AtomicBool::new(false),
            child: Mutex::new(Some(child)),
            active: Mutex::new(tokio::time::Instant::now()),
        });
        tracing::info!(
            pid,
            executor = %binary.display(),
            protocol = process.hello.protocol,
            helm = %process.hello.helm,
            "started the helm executor"
        );
        let reader = process.clone();
        tokio::spawn(async move {
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

/// Reads the executor's first line, within [`HELLO_TIMEOUT`], as a [`Hello`] of this operator's
/// [`PROTOCOL_VERSION`].
async fn read_hello(
    lines: &mut Lines<BufReader<ChildStdout>>,
    binary: &Path,
) -> Result<Hello, ExecutorError> {
    let no_hello = |why: String| ExecutorError::NoHello {
        path: binary.to_path_buf(),
        why,
    };
    let line = match tokio::time::timeout(HELLO_TIMEOUT, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => return Err(no_hello("it ended without a word".to_owned())),
        Ok(Err(e)) => return Err(no_hello(format!("its output could not be read: {e}"))),
        Err(_) => {
            let waited = HELLO_TIMEOUT.as_secs();
            return Err(no_hello(format!("nothing within {waited}s")));
        }
    };
    let hello: Hello = serde_json::from_str(&line).map_err(|_| {
        let start: String = line.chars().take(100).collect();
        no_hello(format!("it began with {start:?}"))
    })?;
    if hello.protocol != PROTOCOL_VERSION {
        return Err(ExecutorError::Mismatch {
            path: binary.to_path_buf(),
            executor: hello.protocol,
            operator: PROTOCOL_VERSION,
            helm: hello.helm,
        });
    }
    Ok(hello)
}

/// The hello of the executor at `binary`: started, its protocol checked, stopped. What the
/// operator's version report names besides its own.
pub(crate) async fn probe(binary: &Path) -> Result<Hello, ExecutorError> {
    let process = Process::start(&HelmOptions::default(), binary).await?;
    process.end();
    Ok(process.hello.clone())
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
    async fn register(
        &self,
        id: u64,
        to: oneshot::Sender<Answer>,
    ) -> Result<Arc<Process>, ExecutorError> {
        let mut slot = self.process.lock().await;
        let process = match slot.as_ref() {
            Some(process) if !process.dead.load(Ordering::SeqCst) => process.clone(),
            _ => {
                let process = Process::start(&self.options, &self.binary).await?;
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
    async fn call(&self, mut request: Request) -> Result<Answer, ExecutorError> {
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
            return Err(ExecutorError::InputClosed(e));
        }
        let limit = self.options.timeout + ANSWER_GRACE;
        let answer = tokio::time::timeout(limit, rx).await;
        in_flight.answered = true;
        match answer {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(ExecutorError::Stopped),
            Err(_) => {
                process.kill("an answer is overdue");
                Err(ExecutorError::Overdue(limit))
            }
        }
    }
}

/// The executor the operator runs jobs with: the long-lived executor when `HelmOptions::sdk`
/// names one, with [`HelmCli`] for charts that are not on disk; else one helm process per job.
pub(crate) struct HelmExecutor {
    cli: HelmCli,
    options: HelmOptions,
    pipe: Option<Pipe>,
}

impl HelmExecutor {
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
            Err(e) => Outcome::failed(e.to_string(), FailureKind::Transient),
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
            Err(e) => Outcome::failed(e.to_string(), FailureKind::Transient),
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
pub(crate) fn locate(given: Option<&std::path::Path>, helm: &std::path::Path) -> Option<PathBuf> {
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

    /// The protocol's shared fixtures, which the executor's `go test` checks too
    /// (`helm-sdk/protocol_test.go`): what the operator writes, and what the executor answers.
    const FIXTURES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/helm/helm-sdk/testdata/protocol"
    );

    fn fixture(name: &str) -> serde_json::Value {
        let path = Path::new(FIXTURES).join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    /// Options with a test key, the seal vectors' (`helm-sdk/testdata/seal-vectors.json`).
    fn options() -> HelmOptions {
        let key: Vec<u8> = (0..32).collect();
        HelmOptions {
            seal: crate::helm::seal::SealKey::from_bytes(&key),
            ..HelmOptions::default()
        }
    }

    fn release() -> Release {
        let mut release =
            helm::tests::release(ChartSource::Directory("/charts/deployment-example".into()));
        release.settings.push(("note".into(), "a,b{c}\\d".into()));
        release.values =
            Some(serde_json::json!({"image": {"tag": "v2"}, "podAnnotations": {"replicas": "3"}}));
        release.rollback_on_failure = true;
        release
    }

    /// A member, as an impersonated identity.
    fn cluster() -> ClusterRef {
        ClusterRef {
            kubeconfig: "/tmp/tenancy-hub-scratch/kubeconfig-member-1".into(),
            context: "member-1".into(),
            digest: "5b1f0c3e9a7d2486f0e1c9b3a5d7e2f4061c8b9a3d5e7f1029384756abcdef01".into(),
            user: "system:serviceaccount:team-a:deployer".into(),
            groups: vec!["team-a-deployers".into()],
            name: "member-1".into(),
        }
    }

    /// Every kind of request the operator sends, by the name of its fixture.
    fn requests() -> Vec<(&'static str, Request)> {
        let options = options();
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        // The hub itself, in-cluster, with the operator's own credentials.
        let hub = ClusterRef {
            kubeconfig: String::new(),
            context: String::new(),
            digest: String::new(),
            user: String::new(),
            groups: Vec::new(),
            name: "hub".into(),
        };
        let as_operator = ClusterRef {
            user: String::new(),
            groups: Vec::new(),
            ..cluster()
        };
        let plain =
            helm::tests::release(ChartSource::Directory("/charts/deployment-example".into()));
        let archive = "/var/cache/tenancy-hub/charts/deployment-example-0.1.0.tgz";
        let repair = Some("Deployment/web /spec/replicas");
        vec![
            (
                "request-upgrade",
                upgrade_request(7, &release(), cluster(), archive.into(), None, &options),
            ),
            (
                "request-repair",
                upgrade_request(
                    8,
                    &plain,
                    hub,
                    "/charts/deployment-example".into(),
                    repair,
                    &options,
                ),
            ),
            (
                "request-uninstall",
                release_request(9, &key, cluster(), None, &options),
            ),
            (
                "request-rollback",
                release_request(10, &key, as_operator, Some(4), &options),
            ),
        ]
    }

    /// Every kind of answer the executor gives, by the name of its fixture, with the kind of
    /// failure the operator reads in it.
    fn answers() -> Vec<(&'static str, Answer, Option<FailureKind>)> {
        let answer = |id, error: Option<&str>| Answer {
            id,
            error: error.map(str::to_owned),
            revision: 0,
            chart_version: String::new(),
        };
        let applied = Answer {
            revision: 3,
            chart_version: "0.1.0".into(),
            ..answer(7, None)
        };
        let render = "UPGRADE FAILED: execution error at \
            (deployment-example/templates/deployment.yaml:21:20): image.tag is required";
        let unreachable = "UPGRADE FAILED: Get \"https://127.0.0.1:36443/api/v1/namespaces/team/\
            secrets?labelSelector=name%3Dweb%2Cowner%3Dhelm\": dial tcp 127.0.0.1:36443: \
            connect: connection refused";
        let unauthorized =
            "uninstall: Release not loaded: web: query: failed to query with labels: Unauthorized";
        let unsealed =
            "the request carries no sealing key or cluster name: the operator must send both";
        let failed = |name, id, error, kind| (name, answer(id, Some(error)), Some(kind));
        let unknown = "unknown operation \"status\"";
        use FailureKind::{Permanent, Transient, Unavailable};
        vec![
            ("response-applied", applied, None),
            // An uninstall or a rollback done.
            ("response-done", answer(9, None), None),
            failed("response-failed-render", 7, render, Permanent),
            failed("response-failed-unreachable", 8, unreachable, Transient),
            failed("response-failed-unauthorized", 9, unauthorized, Unavailable),
            failed("response-refused-unsealed", 11, unsealed, Permanent),
            failed("response-refused-unknown-op", 12, unknown, Permanent),
        ]
    }

    #[test]
    fn every_request_is_written_as_its_shared_fixture() {
        for (name, request) in requests() {
            assert_eq!(
                serde_json::to_value(&request).unwrap(),
                fixture(name),
                "{name}: the operator's request differs from the fixture the executor checks"
            );
        }
    }

    #[test]
    fn every_answer_fixture_reads_as_the_answer_and_failure_it_stands_for() {
        for (name, want, kind) in answers() {
            let answer: Answer =
                serde_json::from_value(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(answer, want, "{name}");
            let outcome = answer.error.as_deref().map(failure);
            assert_eq!(
                outcome.map(|o| match o {
                    Outcome::Failed { kind, .. } => kind,
                    other => panic!("{name}: {other:?}"),
                }),
                kind,
                "{name}"
            );
        }
    }

    #[test]
    fn the_hello_fixture_speaks_this_protocol_and_names_a_helm_4() {
        let hello: Hello = serde_json::from_value(fixture("hello")).unwrap();
        assert_eq!(hello.protocol, PROTOCOL_VERSION, "bump both sides together");
        assert!(hello.helm.starts_with("v4."), "{hello:?}");
    }

    #[test]
    fn the_fixture_folder_holds_exactly_the_messages_both_sides_check() {
        let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
            .unwrap()
            .map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".json").unwrap_or(&name).to_owned()
            })
            .collect();
        on_disk.sort();
        let mut checked: Vec<String> = requests().into_iter().map(|(n, _)| n.into()).collect();
        checked.extend(answers().into_iter().map(|(n, ..)| n.into()));
        checked.push("hello".into());
        checked.sort();
        assert_eq!(on_disk, checked);
    }

    #[test]
    fn an_answer_with_a_field_the_operator_does_not_know_is_refused() {
        let mut answer = fixture("response-applied");
        answer["warnings"] = serde_json::json!(["deprecated"]);
        let error = serde_json::from_value::<Answer>(answer).unwrap_err();
        assert!(error.to_string().contains("warnings"), "{error}");
    }

    #[test]
    fn the_upgrade_labels_its_records_as_the_cli_does() {
        let line = fixture("request-upgrade");
        let cli = helm::upgrade_args(
            &release(),
            helm::Target {
                kubeconfig: std::path::Path::new("/k"),
                context: "member-1",
                identity: None,
            },
            None,
            None,
            &options(),
        );
        let labels = cli
            .iter()
            .find_map(|a| a.to_str()?.strip_prefix("--labels="))
            .unwrap();
        let pairs: Vec<_> = labels.split(',').collect();
        assert_eq!(pairs.len(), line["labels"].as_object().unwrap().len());
        for pair in pairs {
            let (k, v) = pair.split_once('=').unwrap();
            assert_eq!(line["labels"][k], v, "label {k}");
        }
    }

    #[test]
    fn a_long_repair_description_is_cut_as_the_clis() {
        let long = upgrade_request(
            1,
            &release(),
            cluster(),
            "/c".into(),
            Some(&"é".repeat(500)),
            &HelmOptions::default(),
        );
        assert!(long.force_conflicts);
        assert_eq!(long.description, helm::repair_description(&"é".repeat(500)));
        assert!(long.description.len() <= 200);
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

    /// A scripted executor: a Python program that notes its pid in `dir/pid`, writes `hello` as
    /// its first line (when given), then runs `body`.
    fn scripted(dir: &std::path::Path, hello: Option<&str>, body: &str) -> PathBuf {
        let path = dir.join("fake-executor");
        let mut file = std::fs::File::create(&path).unwrap();
        let pid_file = dir.join("pid");
        writeln!(file, "#!/usr/bin/env python3\nimport os").unwrap();
        writeln!(file, "open({pid_file:?}, 'w').write(str(os.getpid()))").unwrap();
        if let Some(hello) = hello {
            // A Rust string's debug form is a Python string literal too.
            writeln!(file, "print({hello:?}, flush=True)").unwrap();
        }
        writeln!(file, "{body}").unwrap();
        drop(file);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Answers each request after as many milliseconds as the revision it asks for (so requests
    /// pick their own delay), echoing the id and the revision; `crash` exits at once.
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

    /// The pid the scripted executor in `dir` noted last.
    fn scripted_pid(dir: &std::path::Path) -> u32 {
        std::fs::read_to_string(dir.join("pid"))
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Reads requests and never answers.
    const SILENT: &str = "import sys\nsys.stdin.read()";

    /// The shared hello fixture, on one line.
    fn hello_line() -> String {
        fixture("hello").to_string()
    }

    /// A pipe to the scripted executor saying the shared hello and answering in any order.
    fn fake(dir: &std::path::Path) -> Pipe {
        let executor = scripted(dir, Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
        Pipe::new(HelmOptions::default(), executor)
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
        assert!(
            matches!(waiting, Err(ExecutorError::Stopped)),
            "{waiting:?}"
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
        let executor = scripted(dir.path(), Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
        let pipe = Pipe::new(options, executor);
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
        assert_says(&error, &["/nonexistent/tenancy-hub-helm", "--executor cli"]);
    }

    /// Fails unless the error's text holds every one of `parts`.
    fn assert_says(error: &ExecutorError, parts: &[&str]) {
        let text = error.to_string();
        for part in parts {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
    }

    #[tokio::test]
    async fn an_executor_of_another_protocol_is_stopped_with_an_error_naming_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        // A newer executor: its hello has a field this operator does not know, too.
        let hello = r#"{"protocol": 99, "helm": "v4.9.0", "features": ["later"]}"#;
        let executor = scripted(dir.path(), Some(hello), SILENT);
        let pipe = Pipe::new(HelmOptions::default(), executor.clone());
        let error = pipe.call(request(1)).await.unwrap_err();
        assert!(
            matches!(
                error,
                ExecutorError::Mismatch {
                    executor: 99,
                    operator: PROTOCOL_VERSION,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_says(
            &error,
            &[
                executor.to_str().unwrap(),
                "speaks protocol 99 (Helm v4.9.0)",
                &format!("this operator protocol {PROTOCOL_VERSION}"),
                "lab/executor.sh",
            ],
        );
        assert!(pipe.process.lock().await.is_none(), "it was kept");
        wait_dead(scripted_pid(dir.path())).await;
        let probed = probe(&executor).await.unwrap_err();
        assert!(
            matches!(probed, ExecutorError::Mismatch { .. }),
            "{probed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_executor_that_says_no_hello_is_refused_after_the_hello_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let executor = scripted(dir.path(), None, SILENT);
        let pipe = Pipe::new(HelmOptions::default(), executor.clone());
        let error = pipe.call(request(1)).await.unwrap_err();
        assert!(matches!(error, ExecutorError::NoHello { .. }), "{error:?}");
        assert_says(
            &error,
            &[
                executor.to_str().unwrap(),
                "nothing within 10s",
                &format!("this operator speaks protocol {PROTOCOL_VERSION}"),
                "lab/executor.sh",
            ],
        );
    }

    #[tokio::test]
    async fn an_executor_that_begins_with_anything_else_is_refused_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let executor = scripted(dir.path(), Some("tenancy-hub-helm ready"), SILENT);
        let error = probe(&executor).await.unwrap_err();
        assert_says(&error, &[r#"it began with "tenancy-hub-helm ready""#]);
    }

    #[tokio::test]
    async fn a_probe_tells_the_executors_helm_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().unwrap();
        let executor = scripted(dir.path(), Some(&hello_line()), ANSWERS_IN_ANY_ORDER);
        let hello = probe(&executor).await.unwrap();
        assert_eq!(hello, serde_json::from_value(fixture("hello")).unwrap());
        wait_dead(scripted_pid(dir.path())).await;
    }
}
