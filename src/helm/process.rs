//! Helm processes the operator spawns: without a shell, bounded by the timeout, dying with the
//! operator, with helm's caches in the environment; the private values files they read; and
//! `helm template`, which renders a release from its cached chart archive.

use std::{ffi::OsString, io::Write as _, path::Path, process::Stdio, time::Duration};

use tokio::process::Command;

use crate::{
    helm::args::{HelmOptions, RenderFor, template_args},
    plan::{ChartSource, Release},
    policy::source::redact,
    queue::FailureKind,
    queue::failure::{classify, trim_error},
};

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
    run_helm(options, args, options.timeout)
        .await
        .map_err(|(message, _)| message)
}

/// Why a release cannot be rendered or installed without its cached archive, or None: a
/// repository chart runs only from the archive the chart cache fetched under its source's
/// rules (prefix, redirects, addresses, digest), never from a `--repo` fetch of helm's own,
/// which would follow whatever the repository answers then. The cache fetches a missing one
/// again at the next look at the charts (`--chart-interval`).
pub(crate) fn uncached(release: &Release, archive: Option<&Path>) -> Option<String> {
    if let ChartSource::Git { url, path, .. } = &release.source {
        return archive.is_none().then(|| {
            format!(
                "chart {} from Git {} path {path} is not in the chart cache (not packed yet, or removed to keep --chart-cache-size); it is fetched again within its interval",
                release.chart_name,
                redact(url)
            )
        });
    }
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
pub(crate) fn values_file_in(
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

/// Runs helm without a shell, stopped 30 s past `timeout` (the `--timeout` it was given); on failure, its trimmed message and what
/// kind of failure it is.
pub(crate) async fn run_helm(
    options: &HelmOptions,
    args: Vec<OsString>,
    timeout: Duration,
) -> Result<String, (String, FailureKind)> {
    let mut command = Command::new(&options.binary);
    child_environment(&mut command, options);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = spawn_dying_with_operator(command).await.map_err(|e| {
        let message = format!(
            "cannot run {}: {e}; install helm or pass --helm",
            options.binary.display()
        );
        (message, FailureKind::Transient)
    })?;
    let limit = timeout + Duration::from_secs(30);
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

/// Makes helm die with the operator, even on SIGKILL, so a crashed operator leaves no helm running
/// that a restarted one could race on the same release.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
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
fn die_with_parent(_command: &mut Command) {}

/// A command to fork on the forking thread, and where its child goes.
struct Fork {
    command: Command,
    runtime: tokio::runtime::Handle,
    reply: tokio::sync::oneshot::Sender<std::io::Result<tokio::process::Child>>,
}

/// Spawns `command` so that it dies with the operator (see [`die_with_parent`]), and only then.
///
/// The kernel sends the parent-death signal when the *thread* that forked the child ends, not
/// the process. Tokio ends threads of its blocking pool after 10 s idle, and a worker that ran
/// `block_in_place` joins that pool, so a child forked on a runtime thread could be killed in the
/// middle of its releases by a thread's retirement (the executor was, under 10 installs at once).
/// Every such child is therefore forked by one thread that lives as long as the operator.
pub(crate) async fn spawn_dying_with_operator(
    mut command: Command,
) -> std::io::Result<tokio::process::Child> {
    static FORKER: std::sync::OnceLock<std::sync::mpsc::Sender<Fork>> = std::sync::OnceLock::new();
    die_with_parent(&mut command);
    let forker = FORKER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Fork>();
        std::thread::Builder::new()
            .name("tenancy-hub-fork".into())
            .spawn(move || {
                for mut fork in rx {
                    // The child's pipes and reaping belong to the runtime that asked.
                    let _runtime = fork.runtime.enter();
                    let _ = fork.reply.send(fork.command.spawn());
                }
            })
            .expect("the operator can start a thread");
        tx
    });
    let (reply, child) = tokio::sync::oneshot::channel();
    let fork = Fork {
        command,
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    let gone = || std::io::Error::other("the thread that forks helm processes has ended");
    forker.send(fork).map_err(|_| gone())?;
    child.await.map_err(|_| gone())?
}

#[cfg(test)]
mod tests;
