//! Shared helpers of the end-to-end tests: finding the lab, clients per context, deadline waits.
#![allow(dead_code)] // each test crate uses its own subset of these helpers

use std::{
    future::Future,
    path::{Path, PathBuf},
    time::Duration,
};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

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
