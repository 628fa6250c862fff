//! Tests of health judgement: CEL expressions on fixtures of common kinds, kstatus defaults, bounds.

use serde_json::json;

use super::*;

fn expr(api_version: &str, kind: &str, current: &str) -> HealthCheckExpr {
    HealthCheckExpr {
        api_version: api_version.into(),
        kind: kind.into(),
        current: current.into(),
        in_progress: None,
        failed: None,
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

fn sealed_secret(conditions: Vec<Value>) -> Value {
    json!({
        "apiVersion": "bitnami.com/v1alpha1",
        "kind": "SealedSecret",
        "metadata": {"name": "db", "namespace": "team", "generation": 1,
                     "managedFields": [{"manager": "helm"}]},
        "spec": {"encryptedData": {"password": "AgB..."}},
        "status": {"observedGeneration": 1, "conditions": conditions},
    })
}

/// The SealedSecret entry the end-to-end test uses too: current when `Synced` is true, failed
/// when it is false.
fn sealed_secret_rules() -> Rules {
    let mut e = expr(
        "bitnami.com/v1alpha1",
        "SealedSecret",
        "status.conditions.filter(c, c.type == 'Synced').all(c, c.status == 'True')",
    );
    e.failed =
        Some("status.conditions.exists(c, c.type == 'Synced' && c.status == 'False')".into());
    e.in_progress = Some("!has(status.conditions) || size(status.conditions) == 0".into());
    Rules::compile(&[e]).unwrap()
}

#[test]
fn a_sealed_secret_that_cannot_be_unsealed_is_failed_and_says_why() {
    let rules = sealed_secret_rules();
    let failed = sealed_secret(vec![condition(
        "Synced",
        "False",
        "ErrUnsealFailed",
        "no key could decrypt secret (password)",
    )]);
    let v = rules.judge(&failed).unwrap();
    assert_eq!(v.health, Health::Failed);
    assert_eq!(
        v.reason,
        "failed holds; Synced=False ErrUnsealFailed no key could decrypt secret (password)"
    );
    let synced = sealed_secret(vec![condition("Synced", "True", "", "")]);
    assert_eq!(
        rules.judge(&synced).unwrap(),
        Verdict::new(Health::Current, "")
    );
    let fresh = sealed_secret(vec![]);
    assert_eq!(rules.judge(&fresh).unwrap().health, Health::InProgress);
}

#[test]
fn an_expression_on_a_field_not_set_yet_is_in_progress_not_failed() {
    let rules = sealed_secret_rules();
    let no_status = json!({"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
                           "metadata": {"name": "db"}});
    let v = rules.judge(&no_status).unwrap();
    assert_eq!(v.health, Health::InProgress, "{v:?}");
}

#[test]
fn optional_field_access_as_flux_users_write_it_works() {
    let rules = Rules::compile(&[expr(
        "cert-manager.io/v1",
        "Certificate",
        "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')",
    )])
    .unwrap();
    let ready = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "web-tls", "generation": 2},
        "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}});
    assert_eq!(rules.judge(&ready).unwrap().health, Health::Current);
    let pending = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "web-tls"}, "status": {}});
    let v = rules.judge(&pending).unwrap();
    assert_eq!(v.health, Health::InProgress);
    assert_eq!(v.reason, "current does not hold yet");
}

#[test]
fn a_cloudnative_pg_cluster_is_judged_by_its_phase() {
    let mut e = expr(
        "postgresql.cnpg.io/v1",
        "Cluster",
        "status.phase == 'Cluster in healthy state'",
    );
    e.failed = Some("status.phase.startsWith('Failed')".into());
    let rules = Rules::compile(&[e]).unwrap();
    let cluster = |phase: &str| {
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg"}, "status": {"phase": phase}})
    };
    assert_eq!(
        rules
            .judge(&cluster("Cluster in healthy state"))
            .unwrap()
            .health,
        Health::Current
    );
    assert_eq!(
        rules.judge(&cluster("Setting up primary")).unwrap().health,
        Health::InProgress
    );
    assert_eq!(
        rules
            .judge(&cluster("Failed to create pod"))
            .unwrap()
            .health,
        Health::Failed
    );
}

#[test]
fn an_object_whose_controller_has_not_seen_its_newest_spec_is_in_progress_whatever_the_expressions_say()
 {
    let rules = sealed_secret_rules();
    let mut stale = sealed_secret(vec![condition("Synced", "True", "", "")]);
    stale["metadata"]["generation"] = json!(3);
    let v = rules.judge(&stale).unwrap();
    assert_eq!(v.health, Health::InProgress);
    assert!(
        v.reason
            .contains("observedGeneration 1 is behind metadata.generation 3")
    );
}

#[test]
fn kstatus_judges_any_object_with_conditions_without_an_expression() {
    let rules = Rules::compile(&[]).unwrap();
    let release = |conditions: Vec<Value>| {
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "app", "generation": 4},
               "status": {"observedGeneration": 4, "conditions": conditions}})
    };
    let ready = release(vec![condition("Ready", "True", "Succeeded", "")]);
    assert_eq!(rules.judge(&ready).unwrap().health, Health::Current);
    let not_ready = release(vec![condition("Ready", "False", "Progressing", "waiting")]);
    let v = rules.judge(&not_ready).unwrap();
    assert_eq!(
        (v.health, v.reason.as_str()),
        (Health::InProgress, "Ready=False Progressing waiting")
    );
    let reconciling = release(vec![
        condition("Ready", "True", "", ""),
        condition("Reconciling", "True", "Progressing", ""),
    ]);
    assert_eq!(
        rules.judge(&reconciling).unwrap().health,
        Health::InProgress
    );
    let stalled = release(vec![
        condition("Ready", "False", "", ""),
        condition("Stalled", "True", "InstallFailed", "chart not found"),
    ]);
    let v = rules.judge(&stalled).unwrap();
    assert_eq!(
        (v.health, v.reason.as_str()),
        (Health::Failed, "Stalled=True InstallFailed chart not found")
    );
    let only_other = release(vec![condition("Synced", "False", "", "")]);
    assert_eq!(rules.judge(&only_other).unwrap().health, Health::Current);
}

#[test]
fn objects_without_conditions_and_watched_workloads_are_not_judged_here() {
    let rules = Rules::compile(&[]).unwrap();
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert_eq!(rules.judge(&config), None);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "status": {"conditions": [{"type": "Available", "status": "False"}]}});
    assert_eq!(rules.judge(&deployment), None);
}

#[test]
fn an_expression_may_judge_a_watched_kind_too() {
    let rules = Rules::compile(&[expr(
        "apps/v1",
        "Deployment",
        "status.availableReplicas >= 2",
    )])
    .unwrap();
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                     "status": {"availableReplicas": 1}});
    assert_eq!(rules.judge(&web).unwrap().health, Health::InProgress);
    assert!(rules.names("apps/v1", "Deployment"));
    assert!(!rules.names("apps/v1", "StatefulSet"));
}

#[test]
fn expressions_that_do_not_compile_nest_too_deep_or_repeat_a_kind_are_refused_by_name() {
    let bad = Rules::compile(&[expr("example.com/v1", "Widget", "status.ready ==")]).unwrap_err();
    let text = bad.to_string();
    assert!(
        text.starts_with("healthCheckExprs[0] (example.com/v1 Widget) current: does not compile"),
        "{text}"
    );
    let deep = "status.a.all(x, status.b.all(y, status.c.all(z, z == y)))";
    let refused = Rules::compile(&[expr("example.com/v1", "Widget", deep)]).unwrap_err();
    assert!(
        refused.to_string().contains("nests 3 comprehensions"),
        "{refused}"
    );
    let twice = [expr("a/v1", "W", "true"), expr("a/v1", "W", "false")];
    assert_eq!(
        Rules::compile(&twice).unwrap_err(),
        Error::Duplicate {
            index: 1,
            api_version: "a/v1".into(),
            kind: "W".into()
        }
    );
    let mut long = expr("a/v1", "W", "true");
    long.failed = Some(format!("{}true", "true && ".repeat(200)));
    let refused = Rules::compile(&[long]).unwrap_err();
    assert!(
        refused.to_string().contains("failed: has 1604 characters"),
        "{refused}"
    );
}

#[test]
fn a_non_boolean_result_is_in_progress_and_says_so() {
    let rules = Rules::compile(&[expr("a/v1", "W", "status.phase")]).unwrap();
    let w = json!({"apiVersion": "a/v1", "kind": "W", "metadata": {"name": "w"},
                   "status": {"phase": "Ready"}});
    let v = rules.judge(&w).unwrap();
    assert_eq!(v.health, Health::InProgress);
    assert!(v.reason.contains("not a boolean"), "{v:?}");
}

#[test]
fn a_huge_object_is_trimmed_before_an_expression_sees_it() {
    let items: Vec<Value> = (0..10_000).map(|i| json!({"n": i})).collect();
    let object = json!({"metadata": {"name": "x", "managedFields": items.clone()},
                        "status": {"items": items, "text": "é".repeat(10_000)}});
    let seen = trimmed(&object, 0);
    assert!(seen["metadata"].get("managedFields").is_none());
    assert_eq!(
        seen["status"]["items"].as_array().unwrap().len(),
        MAX_LIST_ITEMS
    );
    assert!(seen["status"]["text"].as_str().unwrap().len() <= MAX_STRING_BYTES);
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!({ "d": deep });
    }
    assert!(serde_json::to_string(&trimmed(&deep, 0)).unwrap().len() < 200);
}

#[test]
fn a_report_lists_the_worst_first_and_a_hostile_one_is_cut_to_size() {
    let mut judged = Judged::default();
    let id = |name: &str| ObjectId {
        api_version: "a/v1".into(),
        kind: "W".into(),
        namespace: Some("team".into()),
        name: name.into(),
    };
    for i in 0..15 {
        judged.add(
            id(&format!("w{i:02}")),
            Verdict::new(Health::InProgress, "wait"),
        );
    }
    judged.add(id("ok"), Verdict::new(Health::Current, ""));
    judged.add(id("zz"), Verdict::new(Health::Failed, "broken"));
    let judged = judged.finish();
    assert_eq!((judged.judged, judged.more), (17, 6));
    assert_eq!(judged.objects[0].id.name, "zz");
    assert_eq!(judged.worst(), Health::Failed);
    let mut hostile = judged.clone();
    hostile.objects[0].verdict.reason = "x".repeat(1 << 20);
    hostile.objects[0].id.name = "n".repeat(1 << 20);
    hostile.objects.extend((0..100).map(|i| ObjectHealth {
        id: id(&format!("h{i}")),
        verdict: Verdict::new(Health::InProgress, ""),
    }));
    let bounded = hostile.bounded();
    assert_eq!(bounded.objects.len(), MAX_LISTED);
    assert!(
        bounded
            .objects
            .iter()
            .all(|o| o.verdict.reason.len() <= MAX_REASON)
    );
    assert!(bounded.objects.iter().all(|o| o.id.name.len() <= 253));
}

#[test]
fn compiled_rules_are_kept_per_set_of_expressions() {
    let compiled = Compiled::default();
    let exprs = [expr("a/v1", "W", "true")];
    let a = compiled.rules(&exprs).unwrap();
    let b = compiled.rules(&exprs).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert!(compiled.rules(&[expr("a/v1", "W", "(")]).is_err());
}

/// Not a test of speed (nothing is asserted): prints what judging a release's objects costs,
/// for the figures in the docs.
#[test]
fn judging_many_objects_costs_little() {
    let started = std::time::Instant::now();
    let rules = sealed_secret_rules();
    let compiled = started.elapsed();
    let objects: Vec<Value> = (0..100)
        .map(|i| {
            let mut s = sealed_secret(vec![condition(
                "Synced",
                if i % 2 == 0 { "True" } else { "False" },
                "",
                "",
            )]);
            s["metadata"]["name"] = json!(format!("s{i}"));
            s
        })
        .collect();
    let started = std::time::Instant::now();
    let mut judged = Judged::default();
    for o in &objects {
        let id = drift_id(o);
        if let Some(v) = rules.judge(o) {
            judged.add(id, v);
        }
    }
    let judged = judged.finish();
    println!(
        "compiling 3 expressions: {compiled:?}; judging 100 objects by CEL: {:?} ({} not current)",
        started.elapsed(),
        judged.objects.len() + judged.more
    );
    assert_eq!(judged.judged, 100);
}

fn drift_id(o: &Value) -> ObjectId {
    ObjectId::of(o).unwrap()
}
