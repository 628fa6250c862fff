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
mod tests;
