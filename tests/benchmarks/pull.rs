//! The `pull` scenario: what a pull member costs the hub against a push member. For each count k
//! of the lab's pull members, an operator with no registration file, k members joined with their
//! agents and one Controller with one small release on each: the operator's RSS, CPU and hub
//! requests (counted by the hub API server for the operator's own identity), the hub API server's
//! own CPU, the agents' cost in their members, and the operator's open connections by cluster.
//! Then the time from a spec change to the release deployed in a pull member and in a push
//! member, side by side under one operator.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{Value, json};

use super::{
    Args, LONG, bench_identity, bench_operator,
    common::{
        agent::{Agent, hub_cli, join, join_with},
        fixtures::{ready, unique, wait_until, web},
        hub::Hub,
        lab::Lab,
    },
    counts_within, cpu_over, fitted, hub_requests, percentile,
    procs::{connections, tree_cpu, tree_rss},
    progress, usage,
};

/// Growth in pull members, then the spec-change latency of a pull and a push member.
pub(crate) async fn pull(a: &Args) -> Value {
    let lab = Lab::get();
    let pulls = lab.pull_members();
    let counts = counts_within(&a.clusters, pulls.len(), "pull members", "--pull-members");
    let kubeconfig = bench_identity(&lab);
    let admin = lab.client("hub").await;
    let dir = tempfile::tempdir().unwrap();
    // No push member: the operator opens no connection but to the hub.
    let none = dir.path().join("clusters.yaml");
    std::fs::write(&none, "clusters: []\n").unwrap();
    let mut points = Vec::new();
    for &k in &counts {
        let hub = Hub::without_operator(Lab::get(), unique("bench-pl")).await;
        progress(&format!("pull: {k} pull members, one release on each"));
        let operator = bench_operator(&lab, &hub, &kubeconfig, &none);
        let pid = operator.pid();
        let names: Vec<String> = (1..=k).map(|i| unique(&format!("edge{i}"))).collect();
        let agents: Vec<Agent> = names
            .iter()
            .zip(&pulls)
            .map(|(name, member)| {
                // The agent's own default Lease, not the tests' short one: its renewals are part
                // of a pull member's steady cost.
                join_with(&lab, name, member, dir.path(), &["--lease-seconds", "60"])
            })
            .collect();
        progress(&format!("pull: {k} members joined"));
        let apiserver = lab.pid("hub-kube-apiserver");
        let requests0 = hub_requests(&admin).await;
        let (_, _, cpu0) = usage(pid);
        let (_, _, api0) = usage(apiserver);
        let agents0 = agents_cpu(&agents);
        let started = Instant::now();
        let ns = unique("pl");
        let targets: Vec<&str> = names.iter().map(String::as_str).collect();
        hub.apply("pl", web(&ns, &targets, "1")).await;
        let want = format!("{k}/{k}");
        wait_until("every release deployed and ready", LONG, || async {
            let s = hub.api().get("pl").await.ok()?.status?;
            (s.summary.as_ref()?.releases == want && ready(&s)).then_some(())
        })
        .await;
        let converge_seconds = started.elapsed().as_secs_f64();
        let (_, _, cpu1) = usage(pid);
        let (_, _, api1) = usage(apiserver);
        let agents1 = agents_cpu(&agents);
        let requests1 = hub_requests(&admin).await;
        let quiet = Duration::from_secs(a.quiet_seconds);
        let (quiet_cpu, quiet_api) = {
            let (_, _, api_before) = usage(apiserver);
            let agents_before = agents_cpu(&agents);
            let operator_cpu = cpu_over(pid, quiet).await;
            let (_, _, api_after) = usage(apiserver);
            (
                (operator_cpu, agents_cpu(&agents) - agents_before),
                (api_after - api_before) / quiet.as_secs_f64(),
            )
        };
        let requests2 = hub_requests(&admin).await;
        let (rss, peak, _) = usage(pid);
        let connections = connections(pid, &lab);
        let agent_rss: f64 = agents.iter().map(|g| tree_rss(g.pid())).sum::<f64>() / k as f64;
        let point = json!({
            "clusters": k,
            "converge_seconds": converge_seconds,
            "converge_cpu_seconds": cpu1 - cpu0,
            "hub_apiserver_cpu_seconds_to_converge": api1 - api0,
            "agents_cpu_seconds_to_converge": agents1 - agents0,
            "quiet_cpu_cores": quiet_cpu.0,
            "quiet_hub_apiserver_cores": quiet_api,
            "quiet_agents_cores": quiet_cpu.1 / quiet.as_secs_f64(),
            "rss_mib": rss as f64 / 1024.0,
            "peak_rss_mib": peak as f64 / 1024.0,
            "agent_rss_mib_each": agent_rss,
            "watch_streams": operator.metric("tenancy_hub_watch_streams"),
            "hub_connections": connections.get("hub").copied().unwrap_or(0),
            "member_connections": connections.iter().filter(|(c, _)| *c != "hub").map(|(_, n)| n).sum::<usize>(),
            "hub_requests_to_converge": requests1 - requests0,
            "hub_requests_per_minute_quiet": (requests2 - requests1) * 60.0 / quiet.as_secs_f64(),
        });
        progress(&format!("pull: {k}: {point}"));
        points.push(point);
        hub.delete_and_wait_gone("pl").await;
        for name in &names {
            hub_cli(&lab, &["cluster", "remove", name]);
        }
        for agent in agents {
            agent.stop();
        }
        operator.stop();
    }
    let mut out = fitted(
        points,
        "clusters",
        &[
            "rss_mib",
            "converge_cpu_seconds",
            "hub_apiserver_cpu_seconds_to_converge",
            "quiet_cpu_cores",
            "quiet_hub_apiserver_cores",
            "watch_streams",
            "hub_connections",
            "member_connections",
            "hub_requests_to_converge",
            "hub_requests_per_minute_quiet",
        ],
        1000.0,
    );
    out["latency"] = latency(a, &lab, &kubeconfig, dir.path()).await;
    out
}

/// The time from `kubectl apply` of a changed Controller to the new revision deployed in the
/// member (its release record, read there every 20 ms), `a.samples` changes each for a pull
/// member and for the lab's first push member, alternating, under one operator.
async fn latency(a: &Args, lab: &Lab, kubeconfig: &Path, dir: &Path) -> Value {
    let push = lab
        .contexts()
        .into_iter()
        .find(|c| c != "hub")
        .expect("the lab has a push member");
    let pull = lab.pull_members().into_iter().next().unwrap();
    let registered = dir.join("push.yaml");
    std::fs::write(
        &registered,
        format!(
            "clusters:\n  - {{name: {push}, context: {push}, kubeconfig: {}}}\n",
            lab.kubeconfig_path().display()
        ),
    )
    .unwrap();
    let hub = Hub::without_operator(Lab::get(), unique("bench-pll")).await;
    let operator = bench_operator(lab, &hub, kubeconfig, &registered);
    let edge = unique("edge-lat");
    let agent = join(lab, &edge, &pull, dir);
    let ns = unique("pll");
    let members = [
        ("pull", edge.clone(), lab.pull_client(&pull).await),
        ("push", push.clone(), lab.client(&push).await),
    ];
    for (which, cluster, member) in &members {
        hub.apply(which, web(&ns, &[cluster], "1")).await;
        deployed(member, &ns, 1).await;
    }
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for i in 0..a.samples.max(1) {
        let replicas = if i % 2 == 0 { "2" } else { "1" };
        for (which, cluster, member) in &members {
            let started = Instant::now();
            hub.apply(which, web(&ns, &[cluster], replicas)).await;
            deployed(member, &ns, i as i64 + 2).await;
            samples
                .entry(which)
                .or_default()
                .push(started.elapsed().as_secs_f64());
        }
    }
    for (which, ..) in &members {
        hub.delete_and_wait_gone(which).await;
    }
    hub_cli(lab, &["cluster", "remove", &edge]);
    agent.stop();
    operator.stop();
    let summary: serde_json::Map<String, Value> = samples
        .into_iter()
        .map(|(which, mut s)| {
            s.sort_by(|x, y| x.total_cmp(y));
            let figures = json!({
                "changes": s.len(),
                "p50_seconds": percentile(&s, 0.5),
                "p90_seconds": percentile(&s, 0.9),
                "max_seconds": s[s.len() - 1],
            });
            progress(&format!(
                "pull: spec change to deployed, {which}: {figures}"
            ));
            (which.to_owned(), figures)
        })
        .collect();
    Value::Object(summary)
}

/// Waits until revision `revision` of release `web` in `namespace` is deployed, read in the
/// member every 20 ms.
async fn deployed(member: &kube::Client, namespace: &str, revision: i64) {
    let secrets: Api<Secret> = Api::namespaced(member.clone(), namespace);
    let name = format!("sh.helm.release.v1.web.v{revision}");
    let deadline = Instant::now() + LONG;
    loop {
        let record = secrets.get_opt(&name).await.ok().flatten();
        let status = record
            .as_ref()
            .and_then(|s| s.metadata.labels.as_ref()?.get("status"));
        if status.is_some_and(|s| s == "deployed") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name} deployed in {namespace}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn agents_cpu(agents: &[Agent]) -> f64 {
    agents.iter().map(|g| tree_cpu(g.pid())).sum()
}
