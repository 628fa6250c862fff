//! A member cluster that can be made unreachable: a TCP proxy to a lab member, registered under a name of its own.

use std::{net::SocketAddr, path::PathBuf};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::lab::Lab;

/// A loopback TCP proxy to one lab member's API server, stopped and started on the same port.
#[allow(dead_code)] // used by some test crates only
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    target: String,
    stop: Option<CancellationToken>,
}

#[allow(dead_code)] // used by some test crates only
impl Proxy {
    /// A proxy to `context`'s API server, listening on a free loopback port.
    pub async fn to(lab: &Lab, context: &str) -> Self {
        let user = lab
            .kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
            .expect("the context exists");
        let server = lab
            .kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == user)
            .and_then(|c| c.cluster.as_ref()?.server.clone())
            .expect("the cluster has a server");
        let target = server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut proxy = Self {
            addr,
            target,
            stop: None,
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let (token, target) = (stop.clone(), self.target.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut inbound, _)) = accepted else {
                    continue;
                };
                let (token, target) = (token.clone(), target.clone());
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        () = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        self.stop = Some(stop);
    }

    /// Drops every connection and refuses new ones, as a dead API server would.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.cancel();
        }
    }

    /// Listens again on the same port.
    pub async fn start(&mut self) {
        // The port is free again once the old listener's task has dropped it.
        let addr = self.addr;
        let listener = super::fixtures::wait_until(
            "the proxy's port to be free again",
            std::time::Duration::from_secs(10),
            || async move { TcpListener::bind(addr).await.ok() },
        )
        .await;
        self.serve(listener);
    }

    /// A kubeconfig and a registration file, in `dir`, that register the member behind this
    /// proxy as cluster `name` (with the member's credentials); returns the registration file.
    pub fn register(&self, lab: &Lab, context: &str, name: &str, dir: &std::path::Path) -> PathBuf {
        let mut config = lab.kubeconfig.clone();
        let entry = config
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.clone())
            .expect("the context exists");
        let mut cluster = config
            .clusters
            .iter()
            .find(|c| c.name == entry.cluster)
            .cloned()
            .expect("the cluster exists");
        cluster.name = name.to_owned();
        if let Some(c) = cluster.cluster.as_mut() {
            c.server = Some(format!("https://{}", self.addr));
        }
        config.clusters.push(cluster);
        let mut context_entry = config
            .contexts
            .iter()
            .find(|c| c.name == context)
            .cloned()
            .unwrap();
        context_entry.name = name.to_owned();
        if let Some(c) = context_entry.context.as_mut() {
            c.cluster = name.to_owned();
        }
        config.contexts.push(context_entry);
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, serde_yaml::to_string(&config).unwrap()).unwrap();
        let registration = dir.join(format!("{name}-clusters.yaml"));
        std::fs::write(
            &registration,
            format!(
                "clusters:\n  - name: {name}\n    context: {name}\n    kubeconfig: {}\n    labels: {{proxied: \"true\"}}\n",
                kubeconfig.display()
            ),
        )
        .unwrap();
        registration
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}
