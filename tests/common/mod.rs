//! Shared helpers of the end-to-end tests: finding the lab, clients per context, deadline waits.
#![allow(dead_code)] // each test crate uses its own subset of these helpers

use std::{
    future::Future,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
pub mod proxy;
pub mod repo;

use kube::api::{DeleteParams, PostParams};
use kube::{
    Api, Client, Config, CustomResourceExt,
    api::{Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use tenancy_hub::api::crd::{
    Chart, ChartMessage, Controller, ControllerSpec, ControllerStatus, Setting, Tenancy,
};

/// How long end-to-end tests wait for the operator to converge.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// What to tell someone who runs the end-to-end tests without a lab.
pub const NEEDS_LAB: &str = "needs the lab: run tests/run.sh, or kind/up.sh and then \
    `cargo test -- --ignored` with TENANCY_HUB_LAB_DIR set to the lab's directory";

/// A running lab, as left by kind/up.sh.
pub struct Lab {
    /// The lab's directory.
    pub dir: PathBuf,
    /// Its kubeconfig, with contexts hub and member-1 … member-N.
    pub kubeconfig: Kubeconfig,
}

impl Lab {
    /// Finds the lab in TENANCY_HUB_LAB_DIR (default: `<repo>/.lab`), or panics saying how to start one.
    pub fn get() -> Self {
        let dir = std::env::var_os("TENANCY_HUB_LAB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".lab"));
        let path = dir.join("kubeconfig");
        let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
            panic!(
                "no lab kubeconfig at {}: {e}; this test {NEEDS_LAB}",
                path.display()
            )
        });
        Self { dir, kubeconfig }
    }

    /// Path of the lab's kubeconfig.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Path of the lab's registration file.
    pub fn clusters_path(&self) -> PathBuf {
        self.dir.join("clusters.yaml")
    }

    /// Every context: hub first, then the members.
    pub fn contexts(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.clone())
            .collect();
        names.sort_by_key(|n| (n != "hub", n.clone()));
        names
    }

    /// A client for one context.
    pub async fn client(&self, context: &str) -> Client {
        let options = KubeConfigOptions {
            context: Some(context.to_owned()),
            ..Default::default()
        };
        let config = Config::from_custom_kubeconfig(self.kubeconfig.clone(), &options)
            .await
            .unwrap_or_else(|e| panic!("context {context}: {e}"));
        Client::try_from(config).unwrap()
    }
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A name unique to this test run, for objects a test creates.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

impl Lab {
    /// The directory holding the lab's kubectl and helm.
    pub fn bin_dir(&self) -> PathBuf {
        let env =
            std::fs::read_to_string(self.dir.join("env")).expect("the lab writes an env file");
        let line = env
            .lines()
            .find_map(|l| l.strip_prefix("export PATH=\""))
            .expect("the env file sets PATH");
        PathBuf::from(line.split(':').next().unwrap())
    }

    /// Runs the lab's helm against one context; returns stdout, panicking with stderr on failure.
    pub fn helm(&self, context: &str, args: &[&str]) -> String {
        self.try_helm(context, args)
            .unwrap_or_else(|e| panic!("helm {args:?} on {context} failed: {e}"))
    }

    /// Runs the lab's helm against one context.
    pub fn try_helm(&self, context: &str, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new(self.bin_dir().join("helm"))
            .args(args)
            .arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .args(["--kube-context", context])
            .output()
            .expect("helm runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Helm releases in one namespace of one cluster: name -> (revision, status).
    pub fn releases(
        &self,
        context: &str,
        namespace: &str,
    ) -> std::collections::BTreeMap<String, (i64, String)> {
        let out = self.helm(
            context,
            &[
                "list",
                "-n",
                namespace,
                "--deployed",
                "--failed",
                "--pending",
                "-o",
                "json",
            ],
        );
        let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        list.iter()
            .map(|r| {
                let revision = r["revision"].as_str().unwrap().parse().unwrap();
                (
                    r["name"].as_str().unwrap().to_owned(),
                    (revision, r["status"].as_str().unwrap().to_owned()),
                )
            })
            .collect()
    }

    /// The user-supplied values of a release, as JSON.
    pub fn values(&self, context: &str, namespace: &str, release: &str) -> serde_json::Value {
        serde_json::from_str(&self.helm(
            context,
            &["get", "values", release, "-n", namespace, "-o", "json"],
        ))
        .unwrap()
    }
}

/// A running `tenancy-hub run`, stopped with SIGTERM when dropped.
pub struct Operator {
    child: std::process::Child,
    /// Where its log goes.
    pub log: PathBuf,
    /// Where its HTTP endpoints listen.
    pub http: std::net::SocketAddr,
}

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
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
            .args(["run", "--context", "hub", "--namespace", namespace])
            .arg("--kubeconfig")
            .arg(lab.kubeconfig_path())
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
            .args(extra)
            .arg("--http-addr")
            .arg(http.to_string())
            .env("RUST_LOG", "info,tenancy_hub=debug")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("the operator starts");
        let operator = Self { child, log, http };
        operator.wait_ready();
        operator
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
        self.terminate();
    }

    fn terminate(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "the operator did not stop within 60s of SIGTERM; see {}",
            self.log.display()
        );
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.terminate();
        } else {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Applies the Controller CRD to the hub and waits until it is established.
pub async fn install_crd(hub: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let crd = Controller::crd();
    let name = crd.metadata.name.clone().unwrap();
    crds.patch(
        &name,
        &PatchParams::apply("tenancy-hub-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("the CRD applies to the hub");
    wait_until(
        "the CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(&name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        },
    )
    .await;
}

/// A hub namespace of the test's own, with its own operator reconciling only that namespace.
pub struct Hub {
    /// The lab.
    pub lab: Lab,
    /// A client of the hub.
    pub client: Client,
    /// The test's own hub namespace.
    pub namespace: String,
    /// The operator reconciling that namespace.
    pub operator: Option<Operator>,
}

impl Hub {
    pub async fn new(prefix: &str) -> Self {
        Self::with_args(prefix, &[]).await
    }

    /// Like [`Hub::new`], with extra arguments for the operator's `run`.
    pub async fn with_args(prefix: &str, extra: &[&str]) -> Self {
        Self::with_env(prefix, extra, &[]).await
    }

    /// Like [`Hub::with_args`], with extra environment variables for the operator.
    pub async fn with_env(prefix: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let lab = Lab::get();
        let client = lab.client("hub").await;
        install_crd(&client).await;
        let namespace = unique(prefix);
        create_namespace(&client, &namespace).await;
        let operator = Some(Operator::start_with_env(&lab, &namespace, extra, env));
        Self {
            lab,
            client,
            namespace,
            operator,
        }
    }

    pub fn api(&self) -> Api<Controller> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub async fn apply(&self, name: &str, spec: ControllerSpec) {
        let c = Controller::new(name, spec);
        self.api()
            .patch(
                name,
                &PatchParams::apply("tenancy-hub-tests").force(),
                &Patch::Apply(&c),
            )
            .await
            .expect("the Controller applies");
    }

    /// Waits until the resource's status satisfies `check`, returning it.
    pub async fn status_until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&ControllerStatus) -> bool,
    ) -> ControllerStatus {
        let api = self.api();
        wait_until(what, DEADLINE, || async {
            let c = api.get(name).await.ok()?;
            let status = c.status?;
            check(&status).then_some(status)
        })
        .await
    }

    /// Waits until releases in `namespace` of `context` are exactly `expected` (name -> revision, all deployed).
    pub async fn releases_become(&self, context: &str, namespace: &str, expected: &[(&str, i64)]) {
        let expected: std::collections::BTreeMap<String, (i64, String)> = expected
            .iter()
            .map(|(n, r)| (n.to_string(), (*r, "deployed".to_string())))
            .collect();
        let what = format!("releases {expected:?} in {context}/{namespace}");
        wait_until(&what, DEADLINE, || async {
            (self.lab.releases(context, namespace) == expected).then_some(())
        })
        .await;
    }

    pub async fn delete_and_wait_gone(&self, name: &str) {
        self.api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let api = self.api();
        wait_until(
            "the Controller to be deleted (finalizer removed)",
            DEADLINE,
            || async { api.get_opt(name).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }

    /// Where the operator logs.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.operator.as_ref().unwrap().log).unwrap_or_default()
    }
}

pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(name.to_owned());
    match namespaces.create(&PostParams::default(), &n).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

pub fn tenancy(namespace: &str, clusters: &[&str], charts: Vec<Chart>) -> Tenancy {
    Tenancy {
        namespace: namespace.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        charts,
        ..Default::default()
    }
}

/// A spec of one `deployment-example` release named `web` with `replicas` replicas in `namespace`
/// of `clusters`.
pub fn web(namespace: &str, clusters: &[&str], replicas: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            clusters,
            vec![chart(
                "deployment-example",
                "web",
                &[("replicaCount", replicas)],
            )],
        )],
        ..Default::default()
    }
}

pub fn chart(name: &str, release: &str, settings: &[(&str, &str)]) -> Chart {
    Chart {
        chart_name: name.into(),
        release_name: Some(release.into()),
        settings: settings
            .iter()
            .map(|(k, v)| Setting {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn message<'a>(
    status: &'a ControllerStatus,
    cluster: &str,
    release: &str,
) -> Option<&'a ChartMessage> {
    status
        .updated_tenancies
        .iter()
        .filter(|t| t.cluster == cluster)
        .flat_map(|t| &t.chart_messages)
        .find(|m| m.release_name == release)
}

pub fn ready(status: &ControllerStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

impl Operator {
    /// Waits until /readyz answers 200, within 60 seconds.
    fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if std::net::TcpStream::connect(self.http).is_ok() && self.get("/readyz").0 == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the operator was not ready within 60s; see {}",
            self.log.display()
        );
    }

    /// GETs a path from the operator's HTTP endpoints: (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(self.http).expect("the operator's HTTP endpoints answer");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.http).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let code = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (code, body)
    }

    /// The sum of every series of one of the operator's metrics: `name` alone sums over all
    /// label values, `name{labels}` is that one series.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.get("/metrics");
        let values: Vec<f64> = body
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
        assert!(!values.is_empty(), "no metric {name} in:\n{body}");
        values.iter().sum()
    }
}

/// The entry of one cluster/namespace in a status.
pub fn entry<'a>(
    status: &'a ControllerStatus,
    cluster: &str,
    namespace: &str,
) -> Option<&'a tenancy_hub::api::crd::TenancyStatus> {
    status
        .updated_tenancies
        .iter()
        .find(|t| t.cluster == cluster && t.namespace == namespace)
}

/// Runs a lab control command (kind/ctl.sh) on the test's lab.
pub fn lab_ctl(lab: &Lab, args: &[&str]) {
    let status =
        std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("kind/ctl.sh"))
            .args(args)
            .arg("--dir")
            .arg(&lab.dir)
            .status()
            .expect("kind/ctl.sh runs");
    assert!(status.success(), "kind/ctl.sh {args:?} failed");
}
