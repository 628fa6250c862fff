//! Hostile tenants against the lab: forged release records, removals no policy allows, keys let go by their holder, probes of Secrets no rule allows, values nested too deep (refused by the API server, and Invalid alone when stored past it).

mod common;

use common::{
    fixtures::{DEADLINE, chart, entry, message, tenancy, unique, wait_until},
    forge::{assert_forgeries_ran_nothing, forge_two, namespace_admin},
    hub::{Hub, allow_all},
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, api::PostParams};
use tenancy_hub::api::{
    crd::{ChartOverride, ControllerSpec, TenancyController, ValuesKind, ValuesReference},
    policy::ValuesRule,
};

const MEMBER: &str = "member-1";

/// One release of `chart` named `release` in `namespace` of the member.
fn one_release(namespace: &str, chart_name: &str, release: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            &[MEMBER],
            vec![chart(chart_name, release, &[])],
        )],
        ..Default::default()
    }
}

fn platform(victim: &str, attacker: &str, replicas: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![
            tenancy(
                victim,
                &[MEMBER],
                vec![chart(
                    "deployment-example",
                    "web",
                    &[("replicaCount", replicas)],
                )],
            ),
            tenancy(
                attacker,
                &[MEMBER],
                vec![chart("deployment-example", "agent", &[])],
            ),
        ],
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn forged_release_records_are_never_acted_on() {
    let hub = Hub::with_args("forged", &["--tenancy-policy", "enforce"]).await;
    // The platform team is trusted: Helm acts with the operator's credentials for it.
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[]))
        .await;
    let (victim, attacker, mallory) = (unique("victim"), unique("attacker"), unique("mallory"));
    // The platform delivers an application, and an agent into the attacker's namespace.
    hub.apply("platform", platform(&victim, &attacker, "1"))
        .await;
    hub.releases_become(MEMBER, &victim, &[("web", 1)]).await;
    let member = hub.lab.client(MEMBER).await;
    let jewel: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "crown-jewel"}})).unwrap();
    Api::<ConfigMap>::namespaced(member.clone(), &victim)
        .create(&PostParams::default(), &jewel)
        .await
        .unwrap();
    let agent_v1 = wait_until("the agent's first record", DEADLINE, || async {
        Api::<Secret>::namespaced(member.clone(), &attacker)
            .get_opt("sh.helm.release.v1.agent.v1")
            .await
            .ok()
            .flatten()
    })
    .await;
    namespace_admin(&member, &attacker, &mallory).await;

    // Mallory, admin of her own namespace only, forges records there as herself.
    let as_mallory = hub.lab.client_as(MEMBER, &mallory).await;
    let secrets = forge_two(
        &as_mallory,
        &attacker,
        &victim,
        &mallory,
        &hub.namespace,
        &agent_v1,
    )
    .await;

    wait_until(
        "the operator to report both forged records",
        DEADLINE,
        || async {
            let log = hub.log();
            let forged = |release: &str| {
                log.lines().any(|l| {
                    l.contains("not sealed by this operator") && l.contains(&format!("/{release}"))
                })
            };
            (forged("ghost") && forged("agent")).then_some(())
        },
    )
    .await;
    // The platform keeps delivering where it may: a change reaches its own namespace...
    hub.apply("platform", platform(&victim, &attacker, "2"))
        .await;
    hub.releases_become(MEMBER, &victim, &[("web", 2)]).await;
    // ...while the agent, whose newest record it did not write, is reported and left alone.
    let status = hub
        .status_until("platform", "the agent reported in conflict", |s| {
            message(s, MEMBER, "agent").is_some_and(|m| m.phase == "Conflict")
        })
        .await;
    let agent = message(&status, MEMBER, "agent").unwrap();
    assert!(
        agent.error_message.contains("not managed by tenancy-hub"),
        "{agent:?}"
    );
    assert!(entry(&status, MEMBER, &victim).is_some());
    // Deleting the platform removes what it installed and runs nothing a forged record asks for.
    hub.delete_and_wait_gone("platform").await;
    hub.releases_become(MEMBER, &victim, &[]).await;

    let elsewhere = Api::<Secret>::namespaced(as_mallory.clone(), "kube-system");
    assert!(
        elsewhere.list(&Default::default()).await.is_err(),
        "{mallory} may read Secrets outside her namespace"
    );
    assert_forgeries_ran_nothing(&member, &secrets, &victim, &mallory).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_key_let_go_by_its_holder_goes_to_the_waiting_controller_at_once() {
    let hub = Hub::new("let-go").await;
    let ns = unique("shared");
    // The older Controller holds the key, though nothing of it can be installed.
    hub.apply("holder", one_release(&ns, "no-such-chart", "shared"))
        .await;
    hub.status_until("holder", "the holder's chart reported missing", |s| {
        message(s, MEMBER, "shared").is_some_and(|m| m.phase == "Invalid")
    })
    .await;
    hub.apply("waiting", one_release(&ns, "deployment-example", "shared"))
        .await;
    hub.status_until("waiting", "the newer Controller in conflict", |s| {
        message(s, MEMBER, "shared").is_some_and(|m| m.phase == "Conflict")
    })
    .await;
    hub.delete_and_wait_gone("holder").await;
    // Planned again when the key is let go, not on some later resync.
    let prompt = std::time::Duration::from_secs(30);
    wait_until("the waiting Controller's release", prompt, || async {
        (hub.lab.releases(MEMBER, &ns).get("shared").map(|r| r.0) == Some(1)).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_no_policy_allows_removing_is_left_in_place() {
    let hub = Hub::with_args("no-removal", &["--tenancy-policy", "enforce"]).await;
    let (kept, other) = (unique("kept"), unique("other"));
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.namespaces = vec![kept.clone(), other.clone()];
    hub.policy(&hub.namespace, policy.clone()).await;
    let both = ControllerSpec {
        tenancies: vec![
            tenancy(
                &kept,
                &[MEMBER],
                vec![chart("deployment-example", "web", &[])],
            ),
            tenancy(
                &other,
                &[MEMBER],
                vec![chart("deployment-example", "web", &[])],
            ),
        ],
        ..Default::default()
    };
    hub.apply("app", both.clone()).await;
    hub.releases_become(MEMBER, &kept, &[("web", 1)]).await;
    hub.releases_become(MEMBER, &other, &[("web", 1)]).await;
    // The admin stops allowing `kept`; the tenant then drops it from its spec.
    policy.namespaces = vec![other.clone()];
    hub.policy(&hub.namespace, policy.clone()).await;
    let mut dropped = both.clone();
    dropped.tenancies.remove(0);
    hub.apply("app", dropped).await;
    let status = hub
        .status_until("app", "the removal reported forbidden", |s| {
            entry(s, MEMBER, &kept).is_some_and(|t| {
                t.chart_messages
                    .iter()
                    .any(|m| m.phase == "Forbidden" && m.error_message.contains("left in place"))
            })
        })
        .await;
    assert!(entry(&status, MEMBER, &kept).is_some());
    assert_eq!(
        hub.lab.releases(MEMBER, &kept).get("web").map(|r| r.0),
        Some(1),
        "a release no policy allows acting on is not removed with the operator's rights"
    );
    // Allowed again, the removal goes ahead, as the policy's identity.
    policy.namespaces = vec![kept.clone(), other.clone()];
    hub.policy(&hub.namespace, policy).await;
    hub.releases_become(MEMBER, &kept, &[]).await;
    hub.releases_become(MEMBER, &other, &[("web", 1)]).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_controller_cannot_squat_a_key_its_policy_refuses() {
    // Two teams, each with a hub namespace and a policy of its own, on one operator.
    let id = unique("squat");
    let (hub, team_b) = Hub::two_teams(&id, "hostile.tenancy-hub.test/run", &[]).await;
    let (team_a, ns_a) = (hub.namespace.clone(), format!("{id}-apps"));
    let mut a = allow_all(&team_a, &[]);
    a.namespaces = vec![ns_a.clone()];
    hub.policy(&team_a, a).await;
    let mut b = allow_all(&team_b, &[]);
    b.namespaces = vec![format!("{id}-other")];
    hub.policy(&team_b, b).await;
    let apply = |namespace: String, name: &'static str| {
        let mut c = TenancyController::new(name, one_release(&ns_a, "deployment-example", "web"));
        c.metadata.labels = Some([("hostile.tenancy-hub.test/run".to_owned(), id.clone())].into());
        (namespace, c)
    };
    // Team B names team A's release first: refused, and holding nothing.
    let (ns, squatter) = apply(team_b.clone(), "squatter");
    hub.apply_in(&ns, &squatter).await;
    let b_api = Api::<TenancyController>::namespaced(hub.client.clone(), &team_b);
    wait_until("the squatter refused", DEADLINE, || async {
        let s = b_api.get("squatter").await.ok()?.status?;
        (message(&s, MEMBER, "web")?.phase == "Forbidden").then_some(())
    })
    .await;
    // Team A, later, gets its release: no Conflict with a claim that was never admitted.
    let (ns, owner) = apply(team_a.clone(), "owner");
    hub.apply_in(&ns, &owner).await;
    hub.releases_become(MEMBER, &ns_a, &[("web", 1)]).await;
    let status = hub
        .status_until("owner", "the owner deployed", |s| {
            message(s, MEMBER, "web").is_some_and(|m| m.phase == "Deployed")
        })
        .await;
    assert!(entry(&status, MEMBER, &ns_a).is_some());
}

/// One release named `release` of the example chart in `namespace` of the member, its values
/// read from the Secret `secret` of the hub namespace.
fn reading(namespace: &str, release: &str, secret: &str) -> ControllerSpec {
    let mut spec = one_release(namespace, "deployment-example", release);
    spec.tenancies[0].charts[0].values_from = vec![ValuesReference {
        kind: ValuesKind::Secret,
        name: secret.into(),
        ..Default::default()
    }];
    spec
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_secret_no_rule_allows_is_refused_alike_absent_present_or_large_and_never_read() {
    let hub = Hub::with_args("values-probe", &["--tenancy-policy", "enforce"]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![
        ValuesRule {
            kind: Some(ValuesKind::Secret),
            names: vec!["allowed".into()],
            ..Default::default()
        },
        ValuesRule {
            kind: Some(ValuesKind::Secret),
            match_labels: [("tenancy-hub.test/values".to_owned(), "yes".to_owned())].into(),
            ..Default::default()
        },
    ];
    hub.policy(&hub.namespace, policy).await;
    // Two Secrets of the namespace no rule allows: a small one and one of 900 KB.
    let secrets = Api::<Secret>::namespaced(hub.client.clone(), &hub.namespace);
    for (name, size) in [("present", 16), ("large", 900_000)] {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.string_data =
            Some([("values.yaml".to_owned(), format!("a: {}", "x".repeat(size)))].into());
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    // The tenant names each, one that does not exist, and an allowed one (absent too).
    let tenant = unique("tenant");
    hub.tenant_may_write_controllers(&tenant).await;
    let ns = unique("probe");
    let probes = ["absent", "present", "large", "allowed"];
    futures::future::join_all(
        probes.map(|name| hub.apply_as(&tenant, name, reading(&ns, name, name))),
    )
    .await;
    let mut said = Vec::new();
    for name in probes {
        let status = hub
            .status_until(name, "the read to be judged", |s| {
                message(s, MEMBER, name).is_some_and(|m| m.phase == "Invalid")
            })
            .await;
        let error = message(&status, MEMBER, name)
            .unwrap()
            .error_message
            .clone();
        said.push(error.replace(name, "NAME"));
    }
    assert!(said[0].contains("may not be read"), "{}", said[0]);
    assert_eq!(said[0], said[1], "absent and present are told apart");
    assert_eq!(said[0], said[2], "absent and large are told apart");
    assert!(said[3].contains("does not exist"), "{}", said[3]);
    // The operator read the content of the allowed name alone (of none of the others).
    let op = hub.operator.as_ref().unwrap();
    assert_eq!(
        op.metric(r#"tenancy_hub_values_reads_total{kind="Secret"}"#),
        1.0
    );
    assert!(
        hub.lab.releases(MEMBER, &ns).is_empty(),
        "nothing was installed"
    );
}

/// Values nesting `depth` levels of objects (and arrays, every other level), around one string.
fn nested(depth: usize) -> serde_json::Value {
    let mut values = serde_json::json!("leaf");
    for level in 1..=depth {
        values = if level % 2 == 0 && level < depth {
            serde_json::json!([values])
        } else {
            serde_json::json!({ "a": values })
        };
    }
    values
}

/// What the API server answered a write with: the refusal's message, or that it took it.
fn refusal<T>(answer: kube::Result<T>) -> String {
    match answer {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "refused as invalid: {e:?}");
            e.message
        }
        Err(e) => panic!("not an answer of the API server: {e}"),
        Ok(_) => panic!("the API server took it"),
    }
}

/// Asserts that `said` names the Controller, the path, the depth and the limit, and what to do.
fn says_too_deep(said: &str, controller: &str, path: &str) {
    for expected in [
        controller,
        path,
        "nest more than 64 levels of objects and arrays",
        "at least 65",
        "the limit is 64",
        "flatten them",
    ] {
        assert!(said.contains(expected), "{expected:?} in {said}");
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn values_nested_past_the_limit_are_refused_by_the_api_server_and_others_deliver() {
    let hub = Hub::with_args("deep-refused", &["--tenancy-policy", "enforce"]).await;
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[]))
        .await;
    let tenant = unique("tenant");
    hub.tenant_may_write_controllers(&tenant).await;
    let as_tenant = Api::<TenancyController>::namespaced(
        hub.lab.client_as("hub", &tenant).await,
        &hub.namespace,
    );
    let (deep_ns, edge_ns, fine_ns) = (unique("deep"), unique("edge"), unique("fine"));
    wait_until("the tenant may create Controllers", DEADLINE, || async {
        as_tenant
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &TenancyController::new(
                    "probe",
                    one_release(&deep_ns, "deployment-example", "web"),
                ),
            )
            .await
            .ok()
    })
    .await;
    let ns = &hub.namespace;

    // One level past the limit, and far past the JSON parser's own (128): refused, with the path.
    for depth in [65, 200] {
        let mut deep =
            TenancyController::new("deep", one_release(&deep_ns, "deployment-example", "web"));
        deep.spec.tenancies[0].charts[0].values = Some(nested(depth));
        let said = refusal(as_tenant.create(&PostParams::default(), &deep).await);
        says_too_deep(
            &said,
            &format!("Controller {ns}/deep"),
            "spec.tenancies[0].charts[0].values",
        );
    }
    let mut overridden =
        TenancyController::new("deep", one_release(&deep_ns, "deployment-example", "web"));
    overridden.spec.tenancies[0].charts[0].overrides = vec![ChartOverride {
        values: Some(nested(65)),
        ..ChartOverride::default()
    }];
    let said = refusal(as_tenant.create(&PostParams::default(), &overridden).await);
    says_too_deep(
        &said,
        &format!("Controller {ns}/deep"),
        "spec.tenancies[0].charts[0].overrides[0].values",
    );
    assert!(
        hub.api().get_opt("deep").await.unwrap().is_none(),
        "nothing was stored"
    );

    // At the limit: stored and delivered.
    let mut edge =
        TenancyController::new("edge", one_release(&edge_ns, "deployment-example", "web"));
    edge.spec.tenancies[0].charts[0].values = Some(nested(64));
    as_tenant
        .create(&PostParams::default(), &edge)
        .await
        .expect("values 64 levels deep are taken");
    hub.releases_become(MEMBER, &edge_ns, &[("web", 1)]).await;

    // An update past the limit is refused, and the stored spec keeps delivering.
    let mut stored = as_tenant.get("edge").await.unwrap();
    let generation = stored.metadata.generation;
    stored.spec.tenancies[0].charts[0].values = Some(nested(65));
    let said = refusal(
        as_tenant
            .replace("edge", &PostParams::default(), &stored)
            .await,
    );
    says_too_deep(
        &said,
        &format!("Controller {ns}/edge"),
        "spec.tenancies[0].charts[0].values",
    );
    assert_eq!(
        as_tenant.get("edge").await.unwrap().metadata.generation,
        generation
    );

    // Another Controller still delivers, and so does the one at the limit.
    hub.apply("fine", one_release(&fine_ns, "deployment-example", "web"))
        .await;
    hub.releases_become(MEMBER, &fine_ns, &[("web", 1)]).await;
    hub.status_until("edge", "the Controller at the limit to be Ready", |s| {
        message(s, MEMBER, "web").is_some_and(|m| m.phase == "Deployed")
    })
    .await;
    assert!(hub.lab.releases(MEMBER, &deep_ns).is_empty());
    assert_eq!(hub.lab.releases(MEMBER, &edge_ns).len(), 1);
    hub.delete_and_wait_gone("edge").await;
    hub.delete_and_wait_gone("fine").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_too_deep_controller_stored_past_admission_is_invalid_on_its_own_and_others_deliver() {
    let hub = Hub::with_args("deep-stored", &["--tenancy-policy", "enforce"]).await;
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[]))
        .await;
    let (deep_ns, fine_ns) = (unique("deep"), unique("fine"));
    // Deeper than the JSON parser's own limit (128), written to etcd as a Controller stored before
    // the admission policy existed would be: the operator's decoder is the backstop.
    let mut deep =
        TenancyController::new("deep", one_release(&deep_ns, "deployment-example", "web"));
    deep.metadata.namespace = Some(hub.namespace.clone());
    deep.metadata.uid = Some(unique("uid"));
    deep.metadata.generation = Some(1);
    let mut object = serde_json::to_value(&deep).unwrap();
    object["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z".into();
    object["spec"]["tenancies"][0]["charts"][0]["values"] = serde_json::json!("VALUES");
    let object = object.to_string().replace(
        r#""VALUES""#,
        &format!("{}\"leaf\"{}", "{\"a\":".repeat(200), "}".repeat(200)),
    );
    hub.lab
        .store_past_admission(
            "hub",
            &format!("multitenancy.dev/controllers/{}/deep", hub.namespace),
            &object,
        )
        .await;
    hub.apply("fine", one_release(&fine_ns, "deployment-example", "web"))
        .await;
    hub.releases_become(MEMBER, &fine_ns, &[("web", 1)]).await;
    // The operator's own writes to it (its finalizer) leave the spec alone: the policy lets them by.
    let status = hub
        .status_until("deep", "the deep values to be refused", |s| {
            message(s, MEMBER, "web").is_some_and(|m| m.phase == "Invalid")
        })
        .await;
    let said = &message(&status, MEMBER, "web").unwrap().error_message;
    assert!(said.contains("nest deeper than 64 levels"), "{said}");
    assert!(hub.lab.releases(MEMBER, &deep_ns).is_empty());
    // The API server answers a delete with the object, deeper than serde_json decodes: the answer
    // is taken as text, and the Controller is gone once a read finds nothing.
    let delete = kube::core::Request::new(<TenancyController as kube::Resource>::url_path(
        &(),
        Some(&hub.namespace),
    ))
    .delete("deep", &kube::api::DeleteParams::default())
    .unwrap();
    hub.client.request_text(delete).await.unwrap();
    let controllers = Api::<TenancyController>::namespaced(hub.client.clone(), &hub.namespace);
    wait_until("the deep Controller to be deleted", DEADLINE, || async {
        controllers
            .get_opt("deep")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    hub.delete_and_wait_gone("fine").await;
}
