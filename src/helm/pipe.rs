//! The long-lived executor's process and its pipe: starting it, checking its hello, sending requests and waiting for their answers.

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

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
    sync::oneshot,
};

use crate::{
    helm::args::HelmOptions,
    helm::process as helm,
    helm::protocol::{Answer, Hello, PROTOCOL_VERSION, Request},
};

/// How long past helm's own timeout an answer is waited for before the executor is taken as hung
/// and restarted (it stops an action itself 30 s past the timeout).
pub(crate) const ANSWER_GRACE: Duration = Duration::from_secs(60);

/// How long a starting executor may take to say [`Hello`] (it says it at once; a Go program
/// starts in about 0.1 s) before it is taken as speaking no protocol at all.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What to do about an executor that speaks another protocol, or none.
pub(crate) const REBUILD: &str = "rebuild the executor from this operator's source with kind/executor.sh \
    (the image from deploy/Dockerfile builds both from one source)";

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
/// A running executor process.
pub(crate) struct Process {
    pub(crate) pid: u32,
    /// What it said on starting.
    pub(crate) hello: Hello,
    pub(crate) stdin: tokio::sync::Mutex<ChildStdin>,
    pub(crate) waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    pub(crate) dead: AtomicBool,
    pub(crate) child: Mutex<Option<Child>>,
    /// When a request was last sent or answered.
    pub(crate) active: Mutex<tokio::time::Instant>,
}

impl Process {
    /// Starts the executor at `binary` and checks its hello; on any failure it is killed.
    pub(crate) async fn start(
        options: &HelmOptions,
        binary: &Path,
    ) -> Result<Arc<Self>, ExecutorError> {
        let mut command = Command::new(binary);
        if let Some(dir) = &options.cache_dir {
            command.env("KUBECACHEDIR", dir.join("kube"));
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = helm::spawn_dying_with_operator(command)
            .await
            .map_err(|source| ExecutorError::Spawn {
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
            reader.exited().await;
        });
        Ok(process)
    }

    pub(crate) fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn touch(&self) {
        *self
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tokio::time::Instant::now();
    }

    /// How long no request has been waiting, or None while one is.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        let active = *self
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.waiting().is_empty().then(|| active.elapsed())
    }

    /// Kills the process (and every action in it); waiting requests fail.
    pub(crate) fn kill(&self, why: &str) {
        if self.end() {
            tracing::warn!(pid = self.pid, "stopped the helm executor: {why}");
        }
    }

    /// Once its output ended: waiting requests fail, and the log says how it ended (an exit
    /// code, or the signal that killed it), reaped within a moment or else killed.
    async fn exited(&self) {
        if self.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        self.waiting().clear();
        let child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(mut child) = child else { return };
        let how = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(e)) => format!("its exit status cannot be read: {e}"),
            Err(_) => {
                let _ = child.start_kill();
                "it closed its output but did not exit, and was killed".to_owned()
            }
        };
        tracing::warn!(
            pid = self.pid,
            "the helm executor's output ended ({how}); the next job starts it again"
        );
    }

    /// Ends the process; false when it had ended already.
    pub(crate) fn end(&self) -> bool {
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
pub(crate) async fn read_hello(
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
pub(crate) struct InFlight {
    pub(crate) process: Arc<Process>,
    pub(crate) id: u64,
    pub(crate) answered: bool,
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
pub(crate) struct Pipe {
    pub(crate) options: HelmOptions,
    pub(crate) binary: PathBuf,
    pub(crate) process: Arc<tokio::sync::Mutex<Option<Arc<Process>>>>,
    pub(crate) ids: AtomicU64,
}

impl Pipe {
    pub(crate) fn new(options: HelmOptions, binary: PathBuf) -> Self {
        Self {
            options,
            binary,
            process: Arc::default(),
            ids: AtomicU64::new(1),
        }
    }

    /// The running process, started when there is none, with `id` registered as waiting for
    /// `to`; under the lock that retiring an idle process takes, so none is retired with a request.
    pub(crate) async fn register(
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
    pub(crate) fn retire_when_idle(&self, process: &Arc<Process>) {
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
    pub(crate) async fn call(&self, mut request: Request) -> Result<Answer, ExecutorError> {
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
        let limit = std::time::Duration::from_secs(request.timeout_seconds) + ANSWER_GRACE;
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
