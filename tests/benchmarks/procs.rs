//! What the lab's processes use, read from /proc: a process tree's CPU and RSS, and a process's connections to the lab's API servers.

use std::collections::BTreeMap;

use super::{children_cpu, common::lab::Lab, usage};

/// The live children of a process, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// CPU seconds of a process and its children, live (an agent and its Helm executor) or reaped
/// (an executor stopped when idle), so the sum never goes back.
pub(crate) fn tree_cpu(pid: u32) -> f64 {
    usage(pid).2 + children_cpu(pid) + children(pid).into_iter().map(tree_cpu).sum::<f64>()
}

/// RSS in MiB of a process and its live children.
pub(crate) fn tree_rss(pid: u32) -> f64 {
    usage(pid).0 as f64 / 1024.0 + children(pid).into_iter().map(tree_rss).sum::<f64>()
}

/// The established TCP connections of process `pid` to the lab's API servers, counted by
/// cluster (`hub`, the members' contexts, `pull-K`); from /proc's socket tables.
pub(crate) fn connections(pid: u32, lab: &Lab) -> BTreeMap<String, usize> {
    let mut ports: BTreeMap<u16, String> = BTreeMap::new();
    let mut learn = |kubeconfig: &kube::config::Kubeconfig| {
        for c in &kubeconfig.clusters {
            let port = c
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_ref())
                .and_then(|s| s.rsplit(':').next()?.trim_end_matches('/').parse().ok());
            if let Some(port) = port {
                ports.insert(port, c.name.clone());
            }
        }
    };
    learn(&lab.kubeconfig);
    for name in lab.pull_members() {
        if let Ok(k) = kube::config::Kubeconfig::read_from(lab.pull_kubeconfig(&name)) {
            learn(&k);
        }
    }
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut counts = BTreeMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // remote address, state (01: established), inode
            let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                continue;
            };
            if *state != "01" || !inodes.iter().any(|i| i == inode) {
                continue;
            }
            let port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if let Some(cluster) = port.and_then(|p| ports.get(&p)) {
                *counts.entry(cluster.clone()).or_insert(0) += 1;
            }
        }
    }
    counts
}
