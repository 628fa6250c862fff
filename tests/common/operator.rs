//! The operator under test: a `tenancy-hub run` process with its log and HTTP endpoints.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{fixtures::unique, lab::Lab};

/// A running `tenancy-hub run`, stopped with SIGTERM when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct Operator {
    child: std::process::Child,
    /// Where its log goes.
    pub log: PathBuf,
    /// Where its HTTP endpoints listen.
    pub http: std::net::SocketAddr,
    /// Its own chart cache, unless the test named one.
    _chart_cache: Option<tempfile::TempDir>,
}

#[allow(dead_code)] // used by some test crates only
impl Operator {
    /// Starts the operator on the lab, reconciling only the Controllers in hub namespace `namespace`.
    pub fn start(lab: &Lab, namespace: &str) -> Self {
        Self::start_with(lab, namespace, &[])
    }

    /// Like [`Operator::start`], with extra arguments for `run`.
    pub fn start_with(lab: &Lab, namespace: &str, extra: &[&str]) -> Self {
        Self::start_with_env(lab, namespace, extra, &[])
    }

    /// Like [`Operator::start_with`], with extra environment variables.
    pub fn start_with_env(
        lab: &Lab,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let log = lab
            .dir
            .join(format!("{}.log", unique(&format!("operator-{namespace}"))));
        let http = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        // Each operator gets its own chart cache, so what one test fetched is not another's hit.
        let chart_cache = (!extra.contains(&"--chart-cache-dir")).then(|| {
            tempfile::Builder::new()
                .prefix("tenancy-hub-chart-cache-")
                .tempdir()
                .unwrap()
        });
        let child = std::process::Command::new(binary())
            .args(["run", "--context", "hub"])
            // A test of several hub namespaces selects its Controllers by label instead.
            .args(if extra.contains(&"--selector") {
                vec![]
            } else {
                vec!["--namespace", namespace]
            })
            .args(if extra.contains(&"--kubeconfig") {
                vec![]
            } else {
                vec![
                    "--kubeconfig".into(),
                    lab.kubeconfig_path().into_os_string(),
                ]
            })
            .args(if extra.contains(&"--clusters") {
                vec![]
            } else {
                vec!["--clusters".into(), lab.clusters_path().into_os_string()]
            })
            .args(if extra.contains(&"--chart-home") {
                vec![]
            } else {
                vec![
                    "--chart-home".into(),
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("config/charts")
                        .into_os_string(),
                ]
            })
            .arg("--helm")
            .arg(lab.bin_dir().join("helm"))
            // The long-lived executor, as deployed; tests of the CLI executor pass `--executor cli`.
            .args(if extra.contains(&"--executor") {
                vec![]
            } else {
                vec![
                    "--executor".into(),
                    "sdk".into(),
                    "--helm-executor".into(),
                    lab.executor().into_os_string(),
                ]
            })
            // The lab's signature verifier, as the image ships it beside helm.
            .args(if extra.contains(&"--verifier") {
                vec![]
            } else {
                vec!["--verifier".into(), lab.verifier().into_os_string()]
            })
            // Tests of other concerns run as before policies existed; tests of the tenant
            // boundary pass `--tenancy-policy enforce`.
            .args(if extra.contains(&"--tenancy-policy") {
                &[][..]
            } else {
                &["--tenancy-policy", "permissive"][..]
            })
            .args(chart_cache.iter().flat_map(|d| {
                [
                    std::ffi::OsString::from("--chart-cache-dir"),
                    d.path().into(),
                ]
            }))
            .args(extra)
            .arg("--http-addr")
            .arg(http.to_string())
            .env("RUST_LOG", "info,tenancy_hub=debug")
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("the operator starts");
        let mut operator = Self {
            child,
            log,
            http,
            _chart_cache: chart_cache,
        };
        operator.wait_ready();
        operator
    }

    /// What it has logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Stops it with SIGTERM and waits for it to exit, within 60 seconds.
    pub fn stop(mut self) {
        terminate(&mut self.child, "the operator", &self.log);
    }

    /// Waits until /readyz answers 200, within 60 seconds. A refused or reset connection while
    /// it starts is tried again; an operator that exits fails at once, naming its log.
    fn wait_ready(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the operator exited ({status}) before it was ready; see {}",
                    self.log.display()
                );
            }
            if matches!(try_http_get(self.http, "/readyz", None), Ok((200, _))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the operator was not ready within 60s; see {}",
            self.log.display()
        );
    }

    /// GETs a path from the operator's HTTP endpoints without a token: (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.http, path, None)
    }

    /// GETs a path with `Authorization: Bearer <token>`, as the status API wants: (status code, body).
    pub fn get_as(&self, path: &str, token: &str) -> (u16, String) {
        http_get(self.http, path, Some(token))
    }

    /// A metric of the operator: the sum of every series of that name, or one series when `name` carries its labels (`name{label="value"}`).
    pub fn metric(&self, name: &str) -> f64 {
        let (values, body) = self.series(name);
        assert!(!values.is_empty(), "no metric {name} in:\n{body}");
        values.iter().sum()
    }

    /// Like [`Operator::metric`], 0 when the operator shows no series of it (a counter never
    /// counted).
    pub fn metric_or_zero(&self, name: &str) -> f64 {
        self.series(name).0.iter().sum()
    }

    /// The values of every series of metric `name` the operator shows, and the whole page.
    fn series(&self, name: &str) -> (Vec<f64>, String) {
        let (_, body) = self.get("/metrics");
        let values = body
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(name)?;
                let value = match rest.strip_prefix(' ') {
                    Some(v) => v,
                    None if !name.contains('{') && rest.starts_with('{') => {
                        rest.rsplit_once("} ")?.1
                    }
                    None => return None,
                };
                value.parse().ok()
            })
            .collect();
        (values, body)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        stop_on_drop(&mut self.child, "the operator", &self.log);
    }
}

/// The tenancy-hub binary under test; a benchmark may compare another build
/// (TENANCY_HUB_OPERATOR=path).
#[allow(dead_code)] // used by some test crates only
pub fn binary() -> std::ffi::OsString {
    std::env::var_os("TENANCY_HUB_OPERATOR")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tenancy-hub").into())
}

/// Stops `child` (`what`, logging to `log`) with SIGTERM to its pid and waits for it to exit;
/// kills it and panics if it has not within 60 seconds.
#[allow(dead_code)] // used by some test crates only
pub fn terminate(child: &mut std::process::Child, what: &str, log: &Path) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!(
        "{what} did not stop within 60s of SIGTERM; see {}",
        log.display()
    );
}

/// Stops `child` as its owner is dropped: [`terminate`], or SIGKILL when the test is already
/// panicking (a second panic would abort it).
#[allow(dead_code)] // used by some test crates only
pub fn stop_on_drop(child: &mut std::process::Child, what: &str, log: &Path) {
    if std::thread::panicking() {
        let _ = child.kill();
        let _ = child.wait();
    } else {
        terminate(child, what, log);
    }
}

/// GETs `path` from an HTTP server at `addr`, with a bearer token if given: (status code, body).
#[allow(dead_code)] // used by some test crates only
pub fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    try_http_get(addr, path, token)
        .unwrap_or_else(|e| panic!("GET {path} from the HTTP server at {addr} failed: {e}"))
}

/// Like [`http_get`], the connection's error instead of a panic.
#[allow(dead_code)] // used by some test crates only
pub fn try_http_get(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// The RSS and peak RSS (KiB) and CPU seconds so far of process `pid`, from /proc.
#[allow(dead_code)] // used by some test crates only
pub fn usage(pid: u32) -> (u64, u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (kib("VmRSS:"), kib("VmHWM:"), cpu_seconds(pid, 11))
}

/// CPU seconds of process `pid` from /proc's stat: user and system time from field `first`
/// after the command (11: the process's own, 13: its reaped children's).
#[allow(dead_code)] // used by some test crates only
pub fn cpu_seconds(pid: u32, first: usize) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    (fields[first].parse::<f64>().unwrap() + fields[first + 1].parse::<f64>().unwrap()) / 100.0
}
