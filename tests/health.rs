//! Custom health on the lab: Sealed Secrets' own chart (by `kind/real-chart.sh`) with a SealedSecret judged by a `healthCheckExprs` entry on its `Synced` condition, holding a dependent release and halting a rollout; and kstatus's rules judging a custom resource that no expression names.
//!
//! The lab's pods run on kwok's fake nodes, so the sealed-secrets controller does not really run
//! and never writes a SealedSecret's status. The tests write it themselves, through the status
//! subresource, as that controller would: what is under test is how tenancy-hub reads and judges
//! it, not the controller.

mod common;

use std::collections::BTreeMap;

use common::{
    agent::{hub_cli, join},
    fixtures::{DEADLINE, message, ready, real_chart_home, tenancy, unique},
    hub::Hub,
    lab::Lab,
};
use serde_json::{Value, json};
use tenancy_hub::api::crd::{
    Chart, ClusterSelector, ControllerSpec, ControllerStatus, HealthCheckExpr, Rollout, Wave,
};

/// The chart: Sealed Secrets 2.15.4, its CRD in `crds/`.
const CHART: &str = "sealed-secrets-2.15.4";

/// Release `release` of the chart, without cluster-wide RBAC, bringing a SealedSecret `db` when
/// `sealed` (through the chart's `extraDeploy`).
fn sealed_secrets(release: &str, sealed: bool) -> Chart {
    let extra: Vec<Value> = if sealed {
        vec![json!({
            "apiVersion": "bitnami.com/v1alpha1",
            "kind": "SealedSecret",
            "metadata": {"name": "db"},
            "spec": {"encryptedData": {"password": "AgBy3i4OJSWK+PiTySYZZA=="}},
        })]
    } else {
        Vec::new()
    };
    Chart {
        chart_name: CHART.into(),
        release_name: Some(release.into()),
        values: Some(json!({
            "fullnameOverride": release,
            "rbac": {"create": false},
            "extraDeploy": extra,
        })),
        ..Chart::default()
    }
}

/// The entry Flux users write for SealedSecrets: current once `Synced` is true, failed when it
/// is false.
fn synced_expr() -> HealthCheckExpr {
    HealthCheckExpr {
        api_version: "bitnami.com/v1alpha1".into(),
        kind: "SealedSecret".into(),
        current: "status.conditions.filter(c, c.type == 'Synced').all(c, c.status == 'True')"
            .into(),
        failed: Some(
            "status.conditions.exists(c, c.type == 'Synced' && c.status == 'False')".into(),
        ),
        in_progress: None,
    }
}

/// Writes SealedSecret `db`'s status conditions in `namespace` of `cluster` (a push member by
/// context, or a pull member by name), as its controller would: through the status subresource
/// (or the object itself, for a CRD without one).
fn write_conditions(lab: &Lab, cluster: &str, namespace: &str, conditions: Value) {
    let patch = json!({"status": {"conditions": conditions}}).to_string();
    let args = [
        "patch",
        "sealedsecret",
        "db",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        &patch,
    ];
    let mut with_subresource = args.to_vec();
    with_subresource.push("--subresource=status");
    let kubectl = |args: &[&str]| {
        if cluster.starts_with("pull-") {
            lab.try_pull_kubectl(cluster, args)
        } else {
            lab.try_kubectl(cluster, args)
        }
    };
    if kubectl(&with_subresource).is_err() {
        kubectl(&args).unwrap_or_else(|e| panic!("writing db's status in {cluster}: {e}"));
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The `(status, reason, message)` of condition `type_`.
fn cond(s: &ControllerStatus, type_: &str) -> (String, String, String) {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// The health state and first object's reason of release `release` on `cluster`.
fn health(s: &ControllerStatus, cluster: &str, release: &str) -> Option<(String, String)> {
    let h = message(s, cluster, release)?.health.as_ref()?;
    let reason = h
        .objects
        .first()
        .map(|o| o.reason.clone())
        .unwrap_or_default();
    Some((h.state.clone(), reason))
}

/// A selector on the registration label `index` the lab gives each member.
fn index(n: &str) -> Wave {
    Wave {
        cluster_selector: ClusterSelector {
            match_labels: BTreeMap::from([("index".into(), n.into())]),
        },
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_sealed_secret_that_cannot_be_unsealed_holds_a_dependent_release_and_halts_a_rollout() {
    let lab = Lab::get();
    let home = real_chart_home(&lab, CHART);
    let hub = Hub::with_args(
        "health",
        &[
            "--chart-home",
            home.to_str().unwrap(),
            "--drift-interval",
            "2",
        ],
    )
    .await;
    let (held, waved) = (unique("health-deps"), unique("health-wave"));
    let mut ss = sealed_secrets("ss", true);
    ss.health_check_exprs = vec![synced_expr()];
    let mut app = sealed_secrets("app", false);
    app.depends_on = vec!["ss".into()];
    hub.apply(
        "deps",
        ControllerSpec {
            tenancies: vec![tenancy(&held, &["member-1"], vec![ss.clone(), app])],
            ..Default::default()
        },
    )
    .await;
    hub.apply(
        "wave",
        ControllerSpec {
            tenancies: vec![tenancy(&waved, &["member-2", "member-3"], vec![ss])],
            rollout: Some(Rollout {
                waves: vec![index("2"), index("3")],
                progress_deadline: Some("10m".into()),
                ..Rollout::default()
            }),
            ..Default::default()
        },
    )
    .await;

    // No controller has written the SealedSecret's status: it is in progress, and holds `app`.
    let s = hub
        .status_until("deps", "ss deployed, its SealedSecret in progress", |s| {
            message(s, "member-1", "ss").is_some_and(|m| m.phase == "Deployed")
                && health(s, "member-1", "ss").is_some_and(|(state, _)| state == "InProgress")
        })
        .await;
    let app = message(&s, "member-1", "app").unwrap();
    assert_eq!(app.phase, "Pending", "{app:?}");
    assert!(
        app.error_message.contains("waiting for dependency ss")
            && app
                .error_message
                .contains(&format!("SealedSecret {held}/db is InProgress")),
        "{}",
        app.error_message
    );
    assert_eq!(cond(&s, "Ready").0, "False");
    hub.status_until("wave", "wave 1 deployed on member-2", |s| {
        message(s, "member-2", "ss").is_some_and(|m| m.phase == "Deployed")
    })
    .await;

    // The controller finds it cannot decrypt: failed, the rollout halts at once.
    let unsealable = json!([condition(
        "Synced",
        "False",
        "ErrUnsealFailed",
        "no key could decrypt secret (password)"
    )]);
    write_conditions(&lab, "member-1", &held, unsealable.clone());
    write_conditions(&lab, "member-2", &waved, unsealable);
    let s = hub
        .status_until("deps", "ss's SealedSecret judged failed", |s| {
            health(s, "member-1", "ss").is_some_and(|(state, _)| state == "Failed")
        })
        .await;
    let (_, reason) = health(&s, "member-1", "ss").unwrap();
    assert_eq!(
        reason,
        "failed holds; Synced=False ErrUnsealFailed no key could decrypt secret (password)"
    );
    assert_eq!(message(&s, "member-1", "app").unwrap().phase, "Pending");
    let (degraded, why, words) = cond(&s, "Degraded");
    assert_eq!((degraded.as_str(), why.as_str()), ("True", "ObjectsFailed"));
    assert!(words.contains("SealedSecret db"), "{words}");
    let s = hub
        .status_until("wave", "the rollout halted on member-2", |s| {
            s.rollout.as_ref().is_some_and(|r| r.halted.is_some())
        })
        .await;
    let halt = s.rollout.as_ref().unwrap().halted.clone().unwrap();
    assert_eq!(
        (halt.cluster.as_str(), halt.release.as_str()),
        ("member-2", "ss")
    );
    assert!(
        halt.reason
            .contains(&format!("SealedSecret {waved}/db is Failed")),
        "{halt:?}"
    );
    let on_member_3 = lab
        .try_helm("member-3", &["list", "-a", "-q", "-n", &waved])
        .unwrap_or_default();
    assert!(
        on_member_3.trim().is_empty(),
        "wave 2 untouched: {on_member_3}"
    );

    // Unsealed after all: ss is ready, and `app` goes on.
    write_conditions(
        &lab,
        "member-1",
        &held,
        json!([condition("Synced", "True", "", "")]),
    );
    let s = hub
        .status_until("deps", "app deployed once ss is current", |s| {
            message(s, "member-1", "app").is_some_and(|m| m.phase == "Deployed")
        })
        .await;
    assert!(health(&s, "member-1", "ss").is_none(), "{s:?}");
    hub.status_until("deps", "deps ready", ready).await;
    hub.delete_and_wait_gone_within("wave", DEADLINE * 2).await;
    hub.delete_and_wait_gone_within("deps", DEADLINE * 2).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn kstatus_rules_judge_a_custom_resource_that_no_expression_names() {
    let lab = Lab::get();
    let home = real_chart_home(&lab, CHART);
    let hub = Hub::with_args(
        "kstatus",
        &[
            "--chart-home",
            home.to_str().unwrap(),
            "--drift-interval",
            "2",
        ],
    )
    .await;
    let ns = unique("kstatus");
    hub.apply(
        "plain",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-3"],
                vec![sealed_secrets("ss", true)],
            )],
            ..Default::default()
        },
    )
    .await;
    // Without conditions the SealedSecret is not judged: the release is ready as before.
    hub.status_until("plain", "ready before any condition", ready)
        .await;
    write_conditions(
        &lab,
        "member-3",
        &ns,
        json!([condition(
            "Ready",
            "False",
            "Unsealing",
            "waiting for the key"
        )]),
    );
    let s = hub
        .status_until("plain", "Ready=False judged in progress", |s| {
            health(s, "member-3", "ss").is_some_and(|(state, _)| state == "InProgress")
        })
        .await;
    assert_eq!(
        health(&s, "member-3", "ss").unwrap().1,
        "Ready=False Unsealing waiting for the key"
    );
    let (status, reason, _) = cond(&s, "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ObjectsInProgress")
    );
    write_conditions(
        &lab,
        "member-3",
        &ns,
        json!([
            condition("Ready", "False", "Unsealing", ""),
            condition("Stalled", "True", "NoKey", "no private key")
        ]),
    );
    let s = hub
        .status_until("plain", "Stalled=True judged failed", |s| {
            health(s, "member-3", "ss").is_some_and(|(state, _)| state == "Failed")
        })
        .await;
    assert_eq!(
        health(&s, "member-3", "ss").unwrap().1,
        "Stalled=True NoKey no private key"
    );
    write_conditions(
        &lab,
        "member-3",
        &ns,
        json!([condition("Ready", "True", "Unsealed", "")]),
    );
    hub.status_until("plain", "ready again once Ready=True", |s| {
        ready(s) && health(s, "member-3", "ss").is_none()
    })
    .await;
    hub.delete_and_wait_gone_within("plain", DEADLINE * 2).await;
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_members_agent_judges_the_custom_resource_and_the_hub_reports_it() {
    let lab = Lab::get();
    let home = real_chart_home(&lab, CHART);
    let hub = Hub::with_args(
        "health-pull",
        &[
            "--chart-home",
            home.to_str().unwrap(),
            "--drift-interval",
            "2",
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let _agent = join(&hub.lab, &edge, "pull-1", dir.path());
    let ns = unique("health-pull");
    let mut ss = sealed_secrets("ss", true);
    ss.health_check_exprs = vec![synced_expr()];
    hub.apply(
        "edge",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &[&edge], vec![ss])],
            ..Default::default()
        },
    )
    .await;
    hub.status_until("edge", "ss deployed on the pull member, in progress", |s| {
        message(s, &edge, "ss").is_some_and(|m| m.phase == "Deployed")
            && health(s, &edge, "ss").is_some_and(|(state, _)| state == "InProgress")
    })
    .await;
    write_conditions(
        &lab,
        "pull-1",
        &ns,
        json!([condition("Synced", "False", "ErrUnsealFailed", "no key")]),
    );
    let s = hub
        .status_until("edge", "the agent's verdict: failed", |s| {
            health(s, &edge, "ss").is_some_and(|(state, _)| state == "Failed")
        })
        .await;
    assert_eq!(
        health(&s, &edge, "ss").unwrap().1,
        "failed holds; Synced=False ErrUnsealFailed no key"
    );
    write_conditions(
        &lab,
        "pull-1",
        &ns,
        json!([condition("Synced", "True", "", "")]),
    );
    hub.status_until("edge", "ready once the agent finds it current", ready)
        .await;
    hub.delete_and_wait_gone_within("edge", DEADLINE * 2).await;
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}
