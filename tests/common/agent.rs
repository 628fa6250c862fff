//! A pull member's agent under test: a `tenancy-hub agent` process holding that member's own kubeconfig, with its log and health endpoint.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, ExitStatus},
    time::{Duration, Instant},
};

use super::{
    fixtures::unique,
    lab::Lab,
    operator::{binary, http_get, stop_on_drop, terminate},
};

/// The namespace of the member the agent finds its Secret `hub-credentials` in, as deploy/agent/.
pub const AGENT_NAMESPACE: &str = "tenancy-hub-agent";
/// The Lease test agents hold, in seconds (the agent's default is 60).
pub const TEST_LEASE_SECONDS: &str = "15";

/// A running `tenancy-hub agent`, stopped with SIGTERM to its pid when dropped (SIGKILL when the
/// test is panicking).
#[allow(dead_code)] // used by some test crates only
pub struct Agent {
    child: Child,
    /// The pull member it acts for.
    pub cluster: String,
    /// Where its log goes.
    pub log: PathBuf,
    /// Where its health endpoint listens.
    pub http: SocketAddr,
}

#[allow(dead_code)] // used by some test crates only
impl Agent {
    /// Starts the agent of the lab's pull member `cluster` (its kubeconfig, namespace
    /// tenancy-hub-agent, the lab's Helm executor), logging and caching charts under `dir`, the
    /// test's temporary directory; returns once /healthz answers 200.
    pub fn start(lab: &Lab, cluster: &str, dir: &Path) -> Self {
        Self::start_with(lab, cluster, dir, &[])
    }

    /// Like [`Agent::start`], with extra arguments for `agent`; a `--namespace`, `--executor`
    /// or `--chart-cache` among them replaces the default.
    pub fn start_with(lab: &Lab, cluster: &str, dir: &Path, extra: &[&str]) -> Self {
        let mut agent = Self::spawn(lab, cluster, dir, extra);
        agent.wait_healthy();
        agent
    }

    /// Starts it without waiting for anything, for tests of an agent that must refuse to run.
    pub fn spawn(lab: &Lab, cluster: &str, dir: &Path, extra: &[&str]) -> Self {
        let name = unique(&format!("agent-{cluster}"));
        let log = dir.join(format!("{name}.log"));
        let http = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let file = std::fs::File::create(&log).unwrap();
        let default = |flag: &str, value: std::ffi::OsString| {
            (!extra.contains(&flag))
                .then(|| [flag.into(), value])
                .into_iter()
                .flatten()
        };
        let child = std::process::Command::new(binary())
            .arg("agent")
            .arg("--kubeconfig")
            .arg(lab.pull_kubeconfig(cluster))
            .args(["--context", cluster])
            .args(default("--namespace", AGENT_NAMESPACE.into()))
            // A short Lease, so tests see a stopped agent shown stale within seconds.
            .args(default("--lease-seconds", TEST_LEASE_SECONDS.into()))
            .args(default("--executor", lab.executor().into()))
            .args(default(
                "--chart-cache",
                dir.join(format!("{name}-charts")).into(),
            ))
            .args(extra)
            .arg("--http-addr")
            .arg(http.to_string())
            // The agent holds its member's credentials only: nothing may fall back to the lab's
            // kubeconfig, whose contexts are the hub side's.
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info,tenancy_hub=debug")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("the agent starts");
        Self {
            child,
            cluster: cluster.to_owned(),
            log,
            http,
        }
    }

    /// What it has logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GETs a path from its HTTP endpoint: (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.http, path, None)
    }

    /// Waits for it to exit on its own within `within`: its exit status, or a panic with its log.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        self.poll(within, "to exit", |agent| agent.child.try_wait().unwrap())
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM and waits for it to exit, within 60 seconds.
    pub fn stop(mut self) {
        terminate(&mut self.child, "the agent", &self.log);
    }

    /// Waits until /healthz answers 200, within 60 seconds; panics with its log if it exits first.
    fn wait_healthy(&mut self) {
        self.poll(Duration::from_secs(60), "to be healthy", |agent| {
            if let Some(status) = agent.child.try_wait().unwrap() {
                agent.fail(&format!("exited ({status}) before it was healthy"));
            }
            let up = std::net::TcpStream::connect(agent.http).is_ok();
            (up && agent.get("/healthz").0 == 200).then_some(())
        })
    }

    /// Asks `check` every 100 ms until it answers, or fails after `within` saying it waited for
    /// the agent `what`.
    fn poll<T>(
        &mut self,
        within: Duration,
        what: &str,
        mut check: impl FnMut(&mut Self) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + within;
        loop {
            if let Some(answer) = check(self) {
                return answer;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("timed out after {within:?} waiting for it {what}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Panics saying what went wrong with the agent, with its log.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "the agent of {}: {what}; its log ({}):\n{}",
            self.cluster,
            self.log.display(),
            self.logged()
        );
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        stop_on_drop(&mut self.child, "the agent", &self.log);
    }
}

/// Runs the tenancy-hub binary against the lab's hub: its stdout, or a panic with its stderr.
#[allow(dead_code)] // used by some test crates only
pub fn hub_cli(lab: &Lab, args: &[&str]) -> String {
    let out = std::process::Command::new(binary())
        .args(args)
        .arg("--kubeconfig")
        .arg(lab.kubeconfig_path())
        .args(["--context", "hub"])
        .output()
        .expect("tenancy-hub runs");
    assert!(
        out.status.success(),
        "tenancy-hub {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Joins the lab's pull member `pull` to the hub as `name`, the way a platform team does:
/// `cluster add --pull` on the hub, `kubectl apply` of what it prints in the member, then the
/// agent in the member.
#[allow(dead_code)] // used by some test crates only
pub fn join(lab: &Lab, name: &str, pull: &str, dir: &Path) -> Agent {
    join_with(lab, name, pull, dir, &[])
}

/// Like [`join`], starting the agent with `extra` arguments.
#[allow(dead_code)] // used by some test crates only
pub fn join_with(lab: &Lab, name: &str, pull: &str, dir: &Path, extra: &[&str]) -> Agent {
    let manifests = hub_cli(
        lab,
        &[
            "cluster",
            "add",
            "--pull",
            name,
            "--label",
            "kind=edge",
            "-o",
            "yaml",
        ],
    );
    let file = dir.join(format!("{name}-join.yaml"));
    std::fs::write(&file, manifests).unwrap();
    lab.try_pull_kubectl(pull, &["apply", "-f", file.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("applying the join manifests in {pull}: {e}"));
    Agent::start_with(lab, pull, dir, extra)
}

/// The deployed revision of `release` in `namespace` of pull member `pull`, read in the member.
#[allow(dead_code)] // used by some test crates only
pub fn deployed_revision(lab: &Lab, pull: &str, namespace: &str, release: &str) -> Option<i64> {
    let selector = format!("owner=helm,name={release},status=deployed");
    let out = lab
        .try_pull_kubectl(
            pull,
            &[
                "get",
                "secrets",
                "-n",
                namespace,
                "-l",
                &selector,
                "-o",
                "jsonpath={.items[*].metadata.labels.version}",
            ],
        )
        .ok()?;
    out.split_whitespace().filter_map(|v| v.parse().ok()).max()
}
