//! Pull members against the lab: a member the hub holds no credentials for joins with a bootstrap token, its agent carries out a tenant's Controller and reports into the same status, its hub identity reads only its own work, and a removed member's agent gets nothing.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    agent::{Agent, deployed_revision, hub_cli, join, join_with},
    fixtures::{DEADLINE, chart, message, ready, tenancy, unique, wait_until, web},
    hub::{Hub, allow_all},
    repo::{ChartRepo, OciRegistry, example_chart},
};
use tenancy_hub::api::{
    crd::ControllerSpec,
    member_cluster::pull_namespace,
    policy::{Impersonation, TenancyPolicySpec},
};

/// One pull test at a time: each has its own operator, and a member is enrolled by one.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_member_joins_and_its_agent_delivers_into_the_same_status() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let agent = join(&hub.lab, &name, "pull-1", dir.path());
    let namespace = unique("pulled");
    hub.apply("web", web(&namespace, &[&name], "2")).await;
    let status = hub
        .status_until(
            "web",
            "the pull member's release deployed and its pods reported",
            |s| {
                s.updated_tenancies.iter().any(|t| {
                    t.cluster == name
                        && t.namespace == namespace
                        && t.chart_messages
                            .iter()
                            .any(|m| m.revision == Some(1) && m.error_message.is_empty())
                        && t.pod_status.len() == 2
                        && t.replication_controller_status
                            .iter()
                            .any(|w| w.ready == "2/2")
                })
            },
        )
        .await;
    let cluster = status
        .clusters
        .iter()
        .find(|c| c.name == name)
        .expect("the pull member in status");
    assert!(cluster.reachable, "{cluster:?}");
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &namespace, "web"),
        Some(1)
    );

    // A change upgrades it there once; an unchanged spec makes no new revision.
    hub.apply("web", web(&namespace, &[&name], "3")).await;
    wait_until("revision 2 in the pull member", DEADLINE, || async {
        (deployed_revision(&hub.lab, "pull-1", &namespace, "web") == Some(2)).then_some(())
    })
    .await;
    hub.status_until("web", "3 pods reported from the pull member", |s| {
        s.updated_tenancies
            .iter()
            .any(|t| t.cluster == name && t.pod_status.len() == 3)
    })
    .await;

    // diff previews the next change in the pull member against the manifest its agent holds,
    // read with an ask signed by the hub admin (who may read the operator's key); nothing moves.
    let out = hub.diff(
        &hub.lab.clusters_path(),
        "web",
        &web(&namespace, &[&name], "5"),
        &["--tenancy-policy", "permissive"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let entries: Vec<serde_json::Value> = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("diff printed no JSON ({e}): {stdout}\n{stderr}"));
    let pulled = entries
        .iter()
        .find(|e| e["cluster"] == name.as_str() && e["release"] == "web")
        .unwrap_or_else(|| panic!("no entry of the pull member: {entries:?}"));
    assert_eq!(pulled["action"], "upgrade", "{pulled}");
    let shown = pulled["diff"].as_str().unwrap_or_default();
    assert!(
        shown.contains("\n-  replicas: 3\n") && shown.contains("\n+  replicas: 5\n"),
        "{pulled}"
    );
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &namespace, "web"),
        Some(2)
    );

    // The agent stops: the hub shows the member unreachable within 20 s of its Lease running out.
    agent.stop();
    let stopped = tokio::time::Instant::now();
    hub.status_until("web", "the pull member shown unreachable", |s| {
        s.clusters.iter().any(|c| c.name == name && !c.reachable)
    })
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(15 + 20),
        "took {:?}",
        stopped.elapsed()
    );
    // Changed twice while it is away: only the newest plan runs when it is back.
    hub.apply("web", web(&namespace, &[&name], "4")).await;
    hub.apply("web", web(&namespace, &[&name], "1")).await;
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &namespace, "web"),
        Some(2)
    );
    let _agent = Agent::start(&hub.lab, "pull-1", dir.path());
    hub.status_until("web", "the pull member back with the newest plan", |s| {
        s.clusters.iter().any(|c| c.name == name && c.reachable)
            && s.updated_tenancies
                .iter()
                .any(|t| t.cluster == name && t.pod_status.len() == 1)
    })
    .await;
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &namespace, "web"),
        Some(3)
    );
    hub.delete_and_wait_gone("web").await;
    wait_until(
        "the release uninstalled in the pull member",
        DEADLINE,
        || async {
            deployed_revision(&hub.lab, "pull-1", &namespace, "web")
                .is_none()
                .then_some(())
        },
    )
    .await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn an_agents_hub_identity_reads_only_its_own_work_and_dies_with_its_member() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull-rbac").await;
    let dir = tempfile::tempdir().unwrap();
    let (mine, other) = (unique("edge-a"), unique("edge-b"));
    let _agent = join(&hub.lab, &mine, "pull-2", dir.path());
    hub_cli(
        &hub.lab,
        &["cluster", "add", "--pull", &other, "-o", "yaml"],
    );
    let agent = format!(
        "system:serviceaccount:{}:agent",
        pull_namespace(&mine.parse().unwrap())
    );
    let lab = &hub.lab;
    assert!(lab.can_i(
        &agent,
        "get",
        "secrets",
        Some(&pull_namespace(&mine.parse().unwrap()))
    ));
    assert!(lab.can_i(
        &agent,
        "update",
        "leases.coordination.k8s.io",
        Some(&pull_namespace(&mine.parse().unwrap()))
    ));
    assert!(!lab.can_i(
        &agent,
        "get",
        "secrets",
        Some(&pull_namespace(&other.parse().unwrap()))
    ));
    assert!(!lab.can_i(&agent, "list", "secrets", Some(&hub.namespace)));
    assert!(!lab.can_i(&agent, "list", "secrets", None));
    assert!(!lab.can_i(
        &agent,
        "get",
        "controllers.multitenancy.dev",
        Some(&hub.namespace)
    ));
    assert!(!lab.can_i(&agent, "list", "memberclusters.multitenancy.dev", None));

    // Its token works while it is a member, and gets nothing once the member is removed.
    let token = wait_until("the agent's hub token in its member", DEADLINE, || async {
        let out = lab
            .try_pull_kubectl(
                "pull-2",
                &[
                    "get",
                    "secret",
                    "-n",
                    "tenancy-hub-agent",
                    "hub-credentials",
                    "-o",
                    "jsonpath={.data.token}",
                ],
            )
            .ok()?;
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD
            .decode(out.trim())
            .ok()?;
        (!token.is_empty()).then(|| String::from_utf8(token).unwrap())
    })
    .await;
    let as_agent = |token: &str| {
        std::process::Command::new(lab.bin_dir().join("kubectl"))
            .args(["--server", &lab.hub_server()])
            .arg("--certificate-authority")
            .arg(lab.hub_ca_file())
            .args([
                "--token",
                token,
                "-n",
                &pull_namespace(&mine.parse().unwrap()),
                "get",
                "secrets",
                "-o",
                "name",
            ])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let before = as_agent(&token);
    assert!(
        before.status.success(),
        "{}",
        String::from_utf8_lossy(&before.stderr)
    );
    hub_cli(lab, &["cluster", "remove", &mine]);
    hub_cli(lab, &["cluster", "remove", &other]);
    wait_until("the removed member's token refused", DEADLINE, || async {
        let after = as_agent(&token);
        let said = String::from_utf8_lossy(&after.stderr).to_lowercase();
        (!after.status.success() && said.contains("unauthorized")).then_some(())
    })
    .await;
}

// The proxy's tasks must run while the test waits for the agent synchronously.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn an_agent_cut_off_from_the_hub_keeps_what_runs_repairs_drift_and_catches_up() {
    use tenancy_hub::api::crd::{DriftDetection, DriftMode};
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull-outage").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge-c");
    // The agent reaches the hub through a proxy that can be cut.
    let mut proxy = common::proxy::Proxy::to(&hub.lab, "hub").await;
    let manifests = hub_cli(&hub.lab, &["cluster", "add", "--pull", &name, "-o", "yaml"]);
    let file = dir.path().join("join.yaml");
    std::fs::write(&file, manifests).unwrap();
    hub.lab
        .try_pull_kubectl("pull-2", &["apply", "-f", file.to_str().unwrap()])
        .unwrap();
    let server = format!(
        "{{\"stringData\":{{\"server\":\"https://{}\"}}}}",
        proxy.addr
    );
    hub.lab
        .try_pull_kubectl(
            "pull-2",
            &[
                "patch",
                "secret",
                "-n",
                "tenancy-hub-agent",
                "hub-credentials",
                "--type",
                "merge",
                "-p",
                &server,
            ],
        )
        .unwrap();
    let _agent = Agent::start(&hub.lab, "pull-2", dir.path());
    let namespace = unique("cut");
    let mut spec = web(&namespace, &[&name], "1");
    spec.tenancies[0].charts[0].drift_detection = Some(DriftDetection {
        mode: DriftMode::Enabled,
        ..Default::default()
    });
    hub.apply("web", spec).await;
    hub.status_until("web", "delivered to the pull member", |s| {
        s.updated_tenancies
            .iter()
            .any(|t| t.cluster == name && t.pod_status.len() == 1)
    })
    .await;

    proxy.stop();
    hub.status_until(
        "web",
        "the cut-off member shown unreachable with when it was last seen",
        |s| {
            s.clusters
                .iter()
                .any(|c| c.name == name && !c.reachable && c.last_seen.is_some())
        },
    )
    .await;
    // Drift while cut off is repaired in the member, from the work the hub signed before.
    hub.lab
        .try_pull_kubectl(
            "pull-2",
            &[
                "delete",
                "deployment",
                "-n",
                &namespace,
                "--all",
                "--wait=false",
            ],
        )
        .unwrap();
    wait_until(
        "the deleted Deployment repaired by the agent alone",
        DEADLINE,
        || async {
            let found = hub
                .lab
                .try_pull_kubectl(
                    "pull-2",
                    &["get", "deployments", "-n", &namespace, "-o", "name"],
                )
                .ok()?;
            (!found.trim().is_empty()
                && deployed_revision(&hub.lab, "pull-2", &namespace, "web") == Some(2))
            .then_some(())
        },
    )
    .await;

    // Back: the hub sees the member again and what happened meanwhile.
    proxy.start().await;
    hub.status_until(
        "web",
        "the member reachable again with the repair's revision",
        |s| {
            s.clusters.iter().any(|c| c.name == name && c.reachable)
                && s.updated_tenancies.iter().any(|t| {
                    t.cluster == name && t.chart_messages.iter().any(|m| m.revision == Some(2))
                })
        },
    )
    .await;
    hub.delete_and_wait_gone("web").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_rollout_moves_across_push_and_pull_members_in_its_waves() {
    use std::collections::BTreeMap;
    use tenancy_hub::api::crd::{ClusterSelector, Rollout, Wave};
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull-mixed").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge-m");
    // `cluster add --pull` labels it kind=edge; the push member-1 has none of that label.
    let _agent = join(&hub.lab, &name, "pull-1", dir.path());
    let namespace = unique("mixed");
    let rollout = Rollout {
        max_unavailable: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
        progress_deadline: Some("2m".into()),
        waves: vec![Wave {
            cluster_selector: ClusterSelector {
                match_labels: BTreeMap::from([("kind".into(), "edge".into())]),
            },
        }],
        ..Rollout::default()
    };
    let spec = |replicas: &str| {
        let mut spec = web(&namespace, &["member-1", &name], replicas);
        spec.rollout = Some(rollout.clone());
        spec
    };
    let done = |generation: i64| {
        move |s: &tenancy_hub::api::crd::ControllerStatus| {
            s.rollout
                .as_ref()
                .is_some_and(|r| r.generation == generation && r.phase == "Complete")
        }
    };
    hub.apply("web", spec("1")).await;
    hub.status_until("web", "the first rollout complete", done(1))
        .await;
    hub.apply("web", spec("2")).await;
    let status = hub
        .status_until("web", "the change rolled out to both", done(2))
        .await;
    let order: Vec<&str> = status
        .rollout
        .as_ref()
        .unwrap()
        .clusters
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        order,
        [name.as_str(), "member-1"],
        "the pull member's wave first"
    );
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &namespace, "web"),
        Some(2)
    );
    hub.releases_become("member-1", &namespace, &[("web", 2)])
        .await;
    hub.delete_and_wait_gone("web").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn an_agent_killed_mid_helm_loses_no_install_or_uninstall() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::with_args("pull-crash", &["--pending-timeout", "5"]).await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let agent = join(&hub.lab, &name, "pull-1", dir.path());
    let ns = unique("crash");
    let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    let spec = |n: usize| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &[&name],
            names[..n]
                .iter()
                .map(|r| chart("deployment-example", r, &[]))
                .collect(),
        )],
        ..Default::default()
    };
    let released = |expected: &[(&str, i64)]| {
        let expected: BTreeMap<String, i64> =
            expected.iter().map(|(r, v)| (r.to_string(), *v)).collect();
        let ns = ns.clone();
        let lab = &hub.lab;
        async move {
            wait_until("the pull member's releases", DEADLINE, || async {
                let now: BTreeMap<String, i64> = lab
                    .pull_releases("pull-1", &ns)
                    .into_iter()
                    .filter(|(_, (_, status))| status == "deployed")
                    .map(|(r, (v, _))| (r, v))
                    .collect();
                (now == expected).then_some(())
            })
            .await
        }
    };

    // Killed while it installs eight releases: every one ends deployed once, none twice.
    hub.apply("crash", spec(8)).await;
    wait_until("some releases to be installed", DEADLINE, || async {
        (!hub.lab.pull_releases("pull-1", &ns).is_empty()).then_some(())
    })
    .await;
    agent.kill();
    let agent = Agent::start(&hub.lab, "pull-1", dir.path());
    let all: Vec<(&str, i64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
    released(&all).await;
    hub.status_until("crash", "every release deployed once", ready)
        .await;

    // Killed while it uninstalls six: those go, the two kept stay as they are.
    hub.apply("crash", spec(2)).await;
    wait_until("an uninstall to begin", DEADLINE, || async {
        (hub.lab.pull_releases("pull-1", &ns).len() < 8).then_some(())
    })
    .await;
    agent.kill();
    let agent = Agent::start(&hub.lab, "pull-1", dir.path());
    released(&[("r0", 1), ("r1", 1)]).await;
    hub.delete_and_wait_gone("crash").await;
    released(&[]).await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
    agent.stop();
}

/// The agent's hub token as its member keeps it, in the Secret its join wrote.
async fn member_token(member: &kube::Client) -> Option<String> {
    let secret = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        member.clone(),
        common::agent::AGENT_NAMESPACE,
    )
    .get_opt("hub-credentials")
    .await
    .ok()??;
    let data = secret.data?;
    if data.contains_key("bootstrapToken") {
        return None;
    }
    String::from_utf8(data.get("token")?.0.clone()).ok()
}

/// The Secret a token is bound to, from its claims.
fn bound_to(token: &str) -> Option<String> {
    use base64::Engine as _;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.split('.').nth(1)?.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&claims).ok()?;
    Some(
        claims["kubernetes.io"]["secret"]["name"]
            .as_str()?
            .to_owned(),
    )
}

/// Whether the hub takes `token`, by a TokenReview of the hub's admin.
async fn hub_takes(hub: &kube::Client, token: &str) -> bool {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = kube::Api::<TokenReview>::all(hub.clone())
        .create(&Default::default(), &review)
        .await
        .unwrap();
    answer.status.and_then(|s| s.authenticated).unwrap_or(false)
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn an_agents_hub_token_rotates_without_a_restart_and_the_replaced_one_is_refused() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull-token").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    // Renewed every 20 s instead of every half hour: the same renewal, sooner.
    let agent = join_with(
        &hub.lab,
        &name,
        "pull-1",
        dir.path(),
        &["--token-renew-seconds", "20"],
    );
    let member = hub.lab.pull_client("pull-1").await;
    // Right after the join, the exchanged token is replaced by one bound to a Secret of the
    // agent's hub namespace.
    let first = wait_until("the agent's first bound token", DEADLINE, || async {
        member_token(&member)
            .await
            .filter(|t| bound_to(t).is_some())
    })
    .await;
    assert!(hub_takes(&hub.client, &first).await);
    let second = wait_until("the token renewed", DEADLINE, || async {
        member_token(&member).await.filter(|t| *t != first)
    })
    .await;
    assert_ne!(bound_to(&first), bound_to(&second));
    // 90 s after its renewal, the replaced token is refused by the hub.
    wait_until(
        "the replaced token refused",
        Duration::from_secs(180),
        || async { (!hub_takes(&hub.client, &first).await).then_some(()) },
    )
    .await;

    // The same agent process, never restarted, keeps working with the tokens that followed:
    // it delivers and reports a Controller applied after the first token died.
    let namespace = unique("token");
    hub.apply("web", web(&namespace, &[&name], "2")).await;
    hub.status_until("web", "the release delivered after the rotation", |s| {
        s.clusters.iter().any(|c| c.name == name && c.reachable)
            && s.updated_tenancies.iter().any(|t| {
                t.cluster == name
                    && t.chart_messages
                        .iter()
                        .any(|m| m.revision == Some(1) && m.error_message.is_empty())
                    && t.pod_status.len() == 2
            })
    })
    .await;
    let log = agent.logged();
    assert!(
        log.contains("a replaced hub token is retired") && !log.contains("Unauthorized"),
        "{log}"
    );
    hub.delete_and_wait_gone("web").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
    agent.stop();
}

/// The answers to work calls kept in the member's hub namespace, as `release name → call id`.
async fn answers(hub: &kube::Client, member: &str) -> BTreeMap<String, String> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(hub.clone(), &pull_namespace(&member.parse().unwrap()));
    let params = kube::api::ListParams::default().labels("multitenancy.dev/pull-report=answer");
    let Ok(list) = secrets.list(&params).await else {
        return BTreeMap::new();
    };
    list.items
        .iter()
        .filter_map(|s| {
            let bytes = &s.data.as_ref()?.get("report")?.0;
            let answer: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            let key = answer["key"].as_str()?.rsplit('/').next()?.to_owned();
            Some((key, answer["id"].as_str()?.to_owned()))
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn an_agent_whose_answer_was_lost_with_a_restart_makes_no_second_revision() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::new("pull-lost").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let agent = join(&hub.lab, &name, "pull-1", dir.path());
    let namespace = unique("lost");
    hub.apply("web", web(&namespace, &[&name], "1")).await;
    hub.status_until("web", "the release Ready in the pull member", ready)
        .await;
    let first = wait_until("the agent's answer on the hub", DEADLINE, || async {
        answers(&hub.client, &name).await.remove("web")
    })
    .await;

    // The agent stops, and its answer is gone from the hub, as when it restarted while the hub
    // could not take what it had to say: back, it finds the work unanswered.
    agent.stop();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(hub.client.clone(), &pull_namespace(&name.parse().unwrap()));
    secrets
        .delete_collection(
            &kube::api::DeleteParams::default(),
            &kube::api::ListParams::default().labels("multitenancy.dev/pull-report=answer"),
        )
        .await
        .unwrap();
    assert!(answers(&hub.client, &name).await.is_empty());
    let agent = Agent::start(&hub.lab, "pull-1", dir.path());

    // It answers the same call again from the member's records, and Helm makes no revision 2.
    let again = wait_until("the agent's answer again", DEADLINE, || async {
        answers(&hub.client, &name).await.remove("web")
    })
    .await;
    assert_eq!(again, first, "the answer is to the same call");
    assert!(
        agent.logged().contains("not run again"),
        "{}",
        agent.logged()
    );
    assert_eq!(
        hub.lab.pull_releases("pull-1", &namespace).get("web"),
        Some(&(1, "deployed".to_owned()))
    );
    hub.status_until("web", "still Ready at revision 1", |s| {
        ready(s)
            && s.updated_tenancies.iter().any(|t| {
                t.cluster == name && t.chart_messages.iter().any(|m| m.revision == Some(1))
            })
    })
    .await;
    hub.delete_and_wait_gone("web").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
    agent.stop();
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn repository_and_oci_charts_reach_a_pull_member_through_the_hub_as_digest_named_chunks() {
    let _serial = SERIAL.lock().await;
    let lab = common::lab::Lab::get();
    let registry = OciRegistry::serve(&lab);
    registry.push(&lab, &example_chart(), "0.1.0").await;
    let repo = ChartRepo::serve(&lab, &["0.2.0"]);
    repo.wait_ready().await;
    // The hub fetches and verifies; helm on the hub trusts the registry through the lab's CA.
    let hub = Hub::with_env(
        "pull-sources",
        &[],
        &[("SSL_CERT_FILE", registry.ca.as_str())],
    )
    .await;
    hub.policy(
        &hub.namespace,
        allow_all(&hub.namespace, &[&repo.url, &registry.prefix()]),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let agent = join(&hub.lab, &name, "pull-2", dir.path());
    let namespace = unique("sources");
    let mut from_repo = chart("deployment-example", "from-repo", &[]);
    from_repo.repo = Some(repo.url.clone());
    from_repo.version = Some("0.2.0".into());
    let mut from_oci = chart(&registry.reference("deployment-example"), "from-oci", &[]);
    from_oci.version = Some("0.1.0".into());
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&namespace, &[&name], vec![from_repo, from_oci])],
        ..Default::default()
    };
    hub.apply("sources", spec).await;
    let status = hub
        .status_until("sources", "both charts deployed in the pull member", ready)
        .await;
    for (release, version) in [("from-repo", "0.2.0"), ("from-oci", "0.1.0")] {
        let m = message(&status, &name, release).unwrap_or_else(|| panic!("{status:?}"));
        assert_eq!(m.chart_version, version, "{m:?}");
    }
    let releases = hub.lab.pull_releases("pull-2", &namespace);
    assert_eq!(releases.get("from-repo"), Some(&(1, "deployed".to_owned())));
    assert_eq!(releases.get("from-oci"), Some(&(1, "deployed".to_owned())));

    // What the agent put together came from chunks the hub published in the member's hub
    // namespace, named for the archive's sha256: one archive per chart, each under 1 MiB.
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(hub.client.clone(), &pull_namespace(&name.parse().unwrap()));
    let chunks: Vec<(String, usize)> = secrets
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| {
            let name = s.metadata.name.clone()?;
            let size = s.data.as_ref()?.values().map(|v| v.0.len()).sum();
            name.starts_with("chart-").then_some((name, size))
        })
        .collect();
    let digests: std::collections::BTreeSet<&str> = chunks
        .iter()
        .filter_map(|(n, _)| n.strip_prefix("chart-")?.rsplit_once('-').map(|(d, _)| d))
        .collect();
    assert!(digests.len() >= 2, "one archive per chart: {chunks:?}");
    assert!(
        digests
            .iter()
            .all(|d| d.len() == 40 && d.bytes().all(|b| b.is_ascii_hexdigit())),
        "{chunks:?}"
    );
    assert!(
        chunks.iter().all(|(_, size)| *size < 1024 * 1024),
        "{chunks:?}"
    );
    hub.delete_and_wait_gone("sources").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
    agent.stop();
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_member_runs_helm_as_the_policys_identity_and_its_scopes_are_in_the_status_api() {
    let _serial = SERIAL.lock().await;
    let hub = Hub::with_args("pull-imp", &["--tenancy-policy", "enforce"]).await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let agent = join(&hub.lab, &name, "pull-1", dir.path());
    let open = unique("open");
    let narrowed = unique("narrowed");
    let deployer = unique("deployer");
    let rule = |namespace: &str, impersonate: Option<Impersonation>| TenancyPolicySpec {
        hub_namespaces: vec![hub.namespace.clone()],
        clusters: vec![name.clone()],
        namespaces: vec![namespace.to_owned()],
        chart_sources: vec!["chart-home".into()],
        trusted: impersonate.is_none(),
        impersonate,
        ..Default::default()
    };
    hub.policy(&open, rule(&open, None)).await;
    // Helm acts in the member as a user who may only view the namespace.
    let who = Impersonation {
        user: deployer.clone(),
        groups: Vec::new(),
        namespace_role: Some("view".into()),
    };
    hub.policy(&narrowed, rule(&narrowed, Some(who))).await;
    hub.apply("open", web(&open, &[&name], "1")).await;
    hub.apply("narrowed", web(&narrowed, &[&name], "1")).await;
    hub.status_until("open", "the open release Ready in the pull member", ready)
        .await;
    let status = hub
        .status_until(
            "narrowed",
            "the impersonated install refused by the member",
            |s| message(s, &name, "web").is_some_and(|m| m.phase == "Failed"),
        )
        .await;
    let refused = message(&status, &name, "web").unwrap();
    assert!(
        refused.error_message.contains("forbidden") && refused.error_message.contains(&deployer),
        "{}",
        refused.error_message
    );
    assert_eq!(hub.lab.pull_releases("pull-1", &narrowed).get("web"), None);

    // The status API serves the pull member's scope as it serves a push member's.
    let token = hub.reader_token().await;
    let (code, body) = hub.operator.as_ref().unwrap().get_as(
        &format!("/api/v1/clusters/{name}/namespaces/{open}"),
        &token,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("web"), "{body}");

    for controller in ["open", "narrowed"] {
        hub.delete_and_wait_gone(controller).await;
    }
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
    agent.stop();
}
