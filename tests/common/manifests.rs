//! The operator's manifests as the deploy and chart tests read them: YAML documents, lookups, the pods' hub kubeconfig on the lab, and the operator run by hand as its Deployment would run it.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde::Deserialize as _;
use serde_yaml::Value;

use super::{
    fixtures::unique,
    lab::Lab,
    operator::{http_get, stop_on_drop, terminate},
};

/// The YAML documents of a stream, empty ones left out.
#[allow(dead_code)] // used by some test crates only
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// One stream of YAML documents.
#[allow(dead_code)] // used by some test crates only
pub fn stream(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A document's kind.
#[allow(dead_code)] // used by some test crates only
pub fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

/// The one document of `kind_` named `name`.
#[allow(dead_code)] // used by some test crates only
pub fn find<'a>(docs: &'a [Value], kind_: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind(d) == kind_ && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind_} {name} among the manifests"))
}

/// The hub kubeconfig the pods mount (`text`, for `https://kubernetes.default.svc` with the
/// projected token), pointed at the lab's hub with a token of ServiceAccount `account` of
/// `namespace`, as the kubelet would project it; written into `dir`.
#[allow(dead_code)] // used by some test crates only
pub fn service_account_kubeconfig(
    lab: &Lab,
    text: &str,
    namespace: &str,
    account: &str,
    dir: &Path,
) -> PathBuf {
    let mut kubeconfig: Value = serde_yaml::from_str(text).unwrap();
    let cluster = &mut kubeconfig["clusters"][0]["cluster"];
    assert_eq!(
        cluster["server"].as_str(),
        Some("https://kubernetes.default.svc")
    );
    let lab_hub = lab
        .kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == "hub")
        .and_then(|c| c.cluster.clone())
        .expect("the lab has a hub cluster");
    cluster["server"] = lab_hub.server.unwrap().into();
    let mapping = cluster.as_mapping_mut().unwrap();
    mapping.remove("certificate-authority");
    mapping.insert(
        "certificate-authority-data".into(),
        lab_hub.certificate_authority_data.unwrap().into(),
    );
    let user = &mut kubeconfig["users"][0]["user"];
    assert_eq!(
        user["tokenFile"].as_str(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    let token = dir.join("token");
    let issued = lab.kubectl(
        "hub",
        &["create", "token", account, "-n", namespace, "--duration=1h"],
    );
    std::fs::write(&token, issued.trim()).unwrap();
    user["tokenFile"] = token.to_str().unwrap().into();
    let path = dir.join("hub-kubeconfig.yaml");
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
    path
}

/// The operator started by hand as its Deployment would run it, stopped with SIGTERM when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct Process {
    /// The process.
    pub child: std::process::Child,
    log: PathBuf,
    /// Where its HTTP endpoints listen.
    pub http: std::net::SocketAddr,
}

#[allow(dead_code)] // used by some test crates only
impl Process {
    /// A free loopback address for its HTTP endpoints.
    pub fn free_address() -> std::net::SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
    }

    /// Runs `tenancy-hub ARGS` with `env` (nothing may fall back to the lab's admin kubeconfig),
    /// its HTTP endpoints on `http`, and waits until it is ready.
    pub fn start(
        lab: &Lab,
        args: &[String],
        env: &[(&str, &str)],
        http: std::net::SocketAddr,
    ) -> Self {
        let log = lab.dir.join(format!("{}.log", unique("operator-deploy")));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "info,tenancy_hub=debug")
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("the operator starts");
        let process = Self { child, log, http };
        process.wait_ready();
        process
    }

    /// Panics with the first thing the hub refused the operator, if it logged any.
    pub fn assert_not_refused(&self) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.to_lowercase().contains("forbidden")) {
            panic!(
                "the hub refused the operator something; see {}:\n{line}",
                self.log.display()
            );
        }
    }

    fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if std::net::TcpStream::connect(self.http).is_ok()
                && http_get(self.http, "/readyz", None).0 == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the operator was not ready within 60s; see {}",
            self.log.display()
        );
    }

    /// Stops it with SIGTERM, as the kubelet would, within 60 seconds.
    pub fn stop(&mut self) {
        terminate(&mut self.child, "the operator", &self.log);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        stop_on_drop(&mut self.child, "the operator", &self.log);
    }
}
