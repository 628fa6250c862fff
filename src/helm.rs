//! Helm: the pure argument builder and the executor, the only place a process is spawned.

use std::{
    ffi::OsString,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::DeleteParams};
use tokio::process::Command;

use crate::{
    health::HealthBoard,
    key::ReleaseKey,
    plan::{
        ChartSource, Job, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        Release, SPEC_HASH_LABEL,
    },
    queue::{Executor, FailureKind, Outcome},
    registry::SharedRegistry,
};

/// How Helm is called.
#[derive(Clone, Debug)]
pub struct HelmOptions {
    /// The `helm` binary.
    pub binary: PathBuf,
    /// `--timeout` of each call; the process is killed 30 s after it.
    pub timeout: Duration,
    /// `--history-max`: revisions kept per release.
    pub history_max: u32,
}

impl Default for HelmOptions {
    fn default() -> Self {
        Self {
            binary: "helm".into(),
            timeout: Duration::from_secs(300),
            history_max: 5,
        }
    }
}

/// The cluster a call goes to.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Kubeconfig file.
    pub kubeconfig: &'a Path,
    /// Context in it.
    pub context: &'a str,
}

/// Escapes a `--set` value so Helm takes it literally: `\`, `,`, `{` and `}` lose their meaning.
pub fn escape_set_value(value: &str) -> String {
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
    args.push(flag("timeout", format!("{}s", options.timeout.as_secs())));
}

/// Arguments of `helm upgrade --install` for a release. Every user-given value travels inside one
/// `--flag=value` argument, and positional arguments follow `--`, so nothing can pose as a flag.
pub fn upgrade_args(
    release: &Release,
    target: Target<'_>,
    values_file: Option<&Path>,
    options: &HelmOptions,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "upgrade".into(),
        "--install".into(),
        "--create-namespace".into(),
    ];
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
    if let Some(version) = &release.version {
        args.push(flag("version", version));
    }
    let chart: OsString = match &release.source {
        ChartSource::Directory(path) => path.into(),
        ChartSource::Repository { url, chart } => {
            args.push(flag("repo", url));
            chart.into()
        }
        ChartSource::Oci(reference) => reference.into(),
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
    args
}

/// Arguments of `helm uninstall` for a release.
pub fn uninstall_args(
    key: &ReleaseKey,
    target: Target<'_>,
    options: &HelmOptions,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["uninstall".into()];
    common(&mut args, key, target, options);
    args.push("--".into());
    args.push(key.release.clone().into());
    args
}

/// Helm's error text, trimmed to its last lines and at most 512 characters.
pub fn trim_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("WARNING:"))
        .collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" ");
    let tail = tail.strip_prefix("Error: ").unwrap_or(&tail);
    let mut out: String = tail.chars().take(512).collect();
    if tail.chars().count() > 512 {
        out.push('…');
    }
    out
}

/// Whether a Helm failure can succeed on a later try without a spec change.
pub fn is_retryable(stderr: &str) -> bool {
    const PERMANENT: [&str; 8] = [
        "parse error",
        "template: ",
        "executing \"",
        "execution error",
        "failed parsing --set",
        "unable to build kubernetes objects",
        "failed to create typed patch",
        "YAML parse error",
    ];
    !PERMANENT.iter().any(|p| stderr.contains(p))
}

/// Revision and chart version from `helm upgrade --output json`.
pub fn parse_release_json(stdout: &str) -> Option<(i64, String)> {
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
pub struct HelmCli {
    options: HelmOptions,
    registry: SharedRegistry,
    health: Arc<HealthBoard>,
    scratch: Arc<tempfile::TempDir>,
}

impl HelmCli {
    /// An executor for the clusters in `registry`; values files go to a private temporary directory.
    pub fn new(
        options: HelmOptions,
        registry: SharedRegistry,
        health: Arc<HealthBoard>,
    ) -> std::io::Result<Self> {
        let scratch = tempfile::Builder::new().prefix("tenancy-hub-").tempdir()?;
        Ok(Self {
            options,
            registry,
            health,
            scratch: Arc::new(scratch),
        })
    }

    async fn run(&self, args: Vec<OsString>) -> Result<String, String> {
        let mut command = Command::new(&self.options.binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let child = command.spawn().map_err(|e| {
            format!(
                "cannot run {}: {e}; install helm or pass --helm",
                self.options.binary.display()
            )
        })?;
        let limit = self.options.timeout + Duration::from_secs(30);
        match tokio::time::timeout(limit, child.wait_with_output()).await {
            Err(_) => Err(format!(
                "helm did not finish within {}s and was stopped",
                limit.as_secs()
            )),
            Ok(Err(e)) => Err(format!("helm failed to run: {e}")),
            Ok(Ok(out)) if out.status.success() => {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    fn values_file(&self, values: &serde_json::Value) -> std::io::Result<tempfile::NamedTempFile> {
        // NamedTempFile is created 0600, so values stay private to this user.
        let mut file = tempfile::Builder::new()
            .suffix(".yaml")
            .tempfile_in(self.scratch.path())?;
        file.write_all(serde_json::to_string(values)?.as_bytes())?;
        file.flush()?;
        Ok(file)
    }

    async fn apply(&self, release: Release, stale_pending: Option<i64>) -> Outcome {
        let Some(member) = self
            .registry
            .load()
            .get(&release.key.scope.cluster)
            .cloned()
        else {
            return unregistered(&release.key);
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
                    return failed(message, true);
                }
            }
            tracing::warn!(
                revision,
                "cleared a release revision left pending past its timeout"
            );
        }
        let values = match release
            .values
            .as_ref()
            .map(|v| self.values_file(v))
            .transpose()
        {
            Ok(v) => v,
            Err(e) => return failed(format!("writing the values file: {e}"), true),
        };
        let target = Target {
            kubeconfig: &member.kubeconfig,
            context: &member.entry.context,
        };
        let args = upgrade_args(
            &release,
            target,
            values.as_ref().map(|f| f.path()),
            &self.options,
        );
        match self.run(args).await {
            Ok(stdout) => match parse_release_json(&stdout) {
                Some((revision, chart_version)) => Outcome::Applied {
                    revision,
                    chart_version,
                },
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
            Err(stderr) => failed(trim_error(&stderr), is_retryable(&stderr)),
        }
    }

    async fn uninstall(&self, key: ReleaseKey) -> Outcome {
        let Some(member) = self.registry.load().get(&key.scope.cluster).cloned() else {
            return unregistered(&key);
        };
        let target = Target {
            kubeconfig: &member.kubeconfig,
            context: &member.entry.context,
        };
        match self.run(uninstall_args(&key, target, &self.options)).await {
            Ok(_) => Outcome::Uninstalled,
            Err(stderr) if stderr.contains("not found") => Outcome::Uninstalled,
            Err(stderr) => failed(trim_error(&stderr), true),
        }
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

fn failed(message: String, retry: bool) -> Outcome {
    let kind = if retry {
        FailureKind::Transient
    } else {
        FailureKind::Permanent
    };
    Outcome::failed(message, kind)
}

fn unregistered(key: &ReleaseKey) -> Outcome {
    failed(
        format!(
            "cluster {} is not registered (any more); register it in the clusters file",
            key.scope.cluster
        ),
        true,
    )
}

impl Executor for HelmCli {
    async fn execute(&self, job: Job) -> Outcome {
        let cluster = &job.key().scope.cluster;
        if let Some(error) = self.health.unreachable(cluster) {
            // No helm process for a cluster known to be down: the job waits out its backoff instead.
            return Outcome::failed(
                format!("cluster {cluster} is unreachable ({error}); waiting for it to return"),
                FailureKind::Unavailable,
            );
        }
        match job {
            Job::Apply {
                release,
                stale_pending,
            } => self.apply(*release, stale_pending).await,
            Job::Uninstall { key, .. } => self.uninstall(key).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::OwnerId;

    fn release(source: ChartSource) -> Release {
        Release {
            key: "member-1/team/web".parse().unwrap(),
            owner: OwnerId {
                namespace: "default".into(),
                name: "example".into(),
            },
            chart_name: "deployment-example".into(),
            source,
            version: None,
            chart_digest: None,
            settings: vec![("replicaCount".into(), "2".into())],
            values: None,
            rollback_on_failure: false,
            spec_hash: "0123456789abcdef".into(),
        }
    }

    fn target() -> Target<'static> {
        Target {
            kubeconfig: Path::new("/lab/kubeconfig"),
            context: "member-1",
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn upgrade_names_the_cluster_namespace_owner_and_release() {
        let args = strings(upgrade_args(
            &release(ChartSource::Directory("/charts/deployment-example".into())),
            target(),
            None,
            &HelmOptions::default(),
        ));
        assert_eq!(
            args,
            [
                "upgrade",
                "--install",
                "--create-namespace",
                "--namespace=team",
                "--kubeconfig=/lab/kubeconfig",
                "--kube-context=member-1",
                "--timeout=300s",
                "--history-max=5",
                "--output=json",
                "--labels=multitenancy.dev/managed-by=tenancy-hub,multitenancy.dev/controller-namespace=default,multitenancy.dev/controller-name=example,multitenancy.dev/spec-hash=0123456789abcdef",
                "--set=replicaCount=2",
                "--",
                "web",
                "/charts/deployment-example",
            ]
        );
    }

    #[test]
    fn repository_charts_pin_their_version_and_values_come_from_a_file() {
        let mut r = release(ChartSource::Repository {
            url: "http://127.0.0.1:8080/charts".into(),
            chart: "podinfo".into(),
        });
        r.version = Some("1.2.3".into());
        let args = strings(upgrade_args(
            &r,
            target(),
            Some(Path::new("/tmp/v.yaml")),
            &HelmOptions::default(),
        ));
        assert!(args.contains(&"--repo=http://127.0.0.1:8080/charts".to_string()));
        assert!(args.contains(&"--version=1.2.3".to_string()));
        assert!(args.contains(&"--values=/tmp/v.yaml".to_string()));
        assert_eq!(args.last().unwrap(), "podinfo");
    }

    #[test]
    fn oci_references_are_the_chart_argument() {
        let args = strings(upgrade_args(
            &release(ChartSource::Oci("oci://127.0.0.1:5000/charts/web".into())),
            target(),
            None,
            &HelmOptions::default(),
        ));
        assert_eq!(args.last().unwrap(), "oci://127.0.0.1:5000/charts/web");
        assert!(!args.iter().any(|a| a.starts_with("--repo")));
    }

    #[test]
    fn set_values_keep_commas_backslashes_braces_and_equals_literal() {
        assert_eq!(escape_set_value("a,b"), "a\\,b");
        assert_eq!(escape_set_value("c:\\dir"), "c:\\\\dir");
        assert_eq!(escape_set_value("{x,y}"), "\\{x\\,y\\}");
        assert_eq!(escape_set_value("k=v=w"), "k=v=w");
        assert_eq!(
            escape_set_value("--dry-run; rm -rf / $(x) `y` 'q' \"z\"\nü"),
            "--dry-run; rm -rf / $(x) `y` 'q' \"z\"\nü"
        );
    }

    #[test]
    fn flag_looking_values_and_names_stay_inside_their_argument() {
        let mut r = release(ChartSource::Directory("/charts/--evil".into()));
        r.settings = vec![("a".into(), "--kube-context=other".into())];
        let args = strings(upgrade_args(&r, target(), None, &HelmOptions::default()));
        assert!(args.contains(&"--set=a=--kube-context=other".to_string()));
        let dashdash = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&args[dashdash + 1..], ["web", "/charts/--evil"]);
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("--kube-context"))
                .count(),
            1
        );
    }

    #[test]
    fn uninstall_targets_one_release_in_one_cluster() {
        let key: ReleaseKey = "member-2/team/db".parse().unwrap();
        let args = strings(uninstall_args(&key, target(), &HelmOptions::default()));
        assert_eq!(
            args,
            [
                "uninstall",
                "--namespace=team",
                "--kubeconfig=/lab/kubeconfig",
                "--kube-context=member-1",
                "--timeout=300s",
                "--",
                "db"
            ]
        );
    }

    #[test]
    fn errors_are_trimmed_to_their_last_lines() {
        let stderr = "WARNING: kube config is group-readable\n\nError: UPGRADE FAILED: template: x/templates/a.yaml:3:4: bad\n";
        assert_eq!(
            trim_error(stderr),
            "UPGRADE FAILED: template: x/templates/a.yaml:3:4: bad"
        );
        assert!(trim_error(&"x".repeat(2000)).chars().count() <= 513);
    }

    #[test]
    fn render_errors_are_not_retried_and_connection_errors_are() {
        assert!(!is_retryable(
            "Error: INSTALLATION FAILED: template: web/templates/d.yaml:9: executing"
        ));
        assert!(is_retryable(
            "Error: Kubernetes cluster unreachable: dial tcp 127.0.0.1:1: connect: connection refused"
        ));
    }

    #[test]
    fn the_printed_release_gives_revision_and_chart_version() {
        let out = r#"{"name":"web","version":3,"chart":{"metadata":{"name":"x","version":"0.1.0"}},"info":{"status":"deployed"}}"#;
        assert_eq!(parse_release_json(out), Some((3, "0.1.0".into())));
        assert_eq!(parse_release_json("not json"), None);
        let oci = format!("Pulled: 127.0.0.1:5000/charts/web:0.3.0\nDigest: sha256:ab\n{out}");
        assert_eq!(parse_release_json(&oci), Some((3, "0.1.0".into())));
    }

    #[test]
    fn the_in_cluster_hub_is_left_to_helms_own_in_cluster_configuration() {
        let in_cluster = Target {
            kubeconfig: Path::new(""),
            context: "in-cluster",
        };
        let args = strings(uninstall_args(
            &"hub/foo/foo".parse().unwrap(),
            in_cluster,
            &HelmOptions::default(),
        ));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--kubeconfig") || a.starts_with("--kube-context")),
            "{args:?}"
        );
    }
}
