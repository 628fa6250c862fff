use std::{collections::BTreeMap, path::Path};

use super::judge::{self, Access, Finding, Report, Verdict};
use super::render;
use k8s_openapi::api::authorization::v1::ResourceRule;

use crate::{
    api::policy::Impersonation, cli::args::ExecutorKind, cli::table::Output, helm::protocol::Hello,
};

fn has(accesses: &[Access], text: &str) -> Option<bool> {
    accesses
        .iter()
        .find(|a| a.to_string() == text)
        .map(|a| a.required)
}

#[test]
fn a_crd_equal_to_the_generated_one_but_for_server_defaults_is_current() {
    let generated = crate::api::crd::controller_crd();
    let mut live = generated.clone();
    live.spec.conversion = Some(Default::default());
    live.spec.names.list_kind = Some("ControllerList".into());
    let finding = judge::crd(&generated, Ok(Some(&live)));
    assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
}

#[test]
fn a_crd_that_differs_fails_naming_where_with_the_apply_command() {
    let generated = crate::api::crd::controller_crd();
    let mut live = generated.clone();
    live.spec.versions[0].served = false;
    let finding = judge::crd(&generated, Ok(Some(&live)));
    assert_eq!(finding.verdict, Verdict::Fail);
    assert!(
        finding.detail.contains("spec.versions[0].served"),
        "{finding:?}"
    );
    assert!(
        finding
            .fix
            .unwrap()
            .contains("tenancy-hub crd | kubectl apply")
    );
}

#[test]
fn a_crd_with_a_property_more_than_the_generated_one_is_stale() {
    let generated = crate::api::crd::controller_crd();
    let mut live = generated.clone();
    live.spec.names.short_names = Some(vec!["ctl".into(), "old".into()]);
    assert_eq!(
        judge::spec_difference(&generated, &live).as_deref(),
        Some("names.shortNames")
    );
}

#[test]
fn a_missing_crd_fails_and_an_unreadable_one_warns() {
    let generated = crate::api::crd::controller_crd();
    let missing = judge::crd(&generated, Ok(None));
    assert_eq!(missing.verdict, Verdict::Fail);
    assert!(missing.detail.contains("not installed"));
    let forbidden = judge::crd(&generated, Err((true, "forbidden".into())));
    assert_eq!(forbidden.verdict, Verdict::Warn);
    let broken = judge::crd(&generated, Err((false, "connection reset".into())));
    assert_eq!(broken.verdict, Verdict::Fail);
    assert!(broken.detail.contains("connection reset"));
}

#[test]
fn the_hub_rights_are_deploy_rbacs_with_the_lease_names_of_the_run() {
    let rights = judge::hub_rights(
        "ops",
        &[Some("my-lease".into())],
        &judge::Identities::default(),
    );
    assert_eq!(
        has(&rights, "list controllers.multitenancy.dev"),
        Some(true)
    );
    assert_eq!(
        has(&rights, "patch controllers/status.multitenancy.dev"),
        Some(true)
    );
    assert_eq!(
        has(&rights, "create tokenreviews.authentication.k8s.io"),
        Some(true)
    );
    assert_eq!(
        has(&rights, "get secrets tenancy-hub-seal in ops"),
        Some(true)
    );
    assert_eq!(
        has(&rights, "update leases.coordination.k8s.io my-lease in ops"),
        Some(true)
    );
    assert_eq!(
        has(&rights, "get leases.coordination.k8s.io tenancy-hub in ops"),
        None
    );
    assert!(
        !rights.iter().any(|a| a.verb == "impersonate"),
        "no policy impersonates: no impersonation is needed"
    );
    let impersonating = judge::hub_rights("ops", &[], &team_a());
    assert_eq!(
        has(&impersonating, "impersonate users team-a-deployer"),
        Some(true)
    );
    assert_eq!(has(&impersonating, "impersonate groups team-a"), Some(true));
    assert_eq!(has(&impersonating, "impersonate users"), None);
    assert!(
        !impersonating
            .iter()
            .any(|a| a.resource == "leases" && a.namespace.is_some() && a.verb != "create"),
        "no Lease is read without leader election"
    );
}

fn team_a() -> judge::Identities {
    judge::Identities::of([&Impersonation {
        user: "team-a-deployer".into(),
        groups: vec!["team-a".into()],
        namespace_role: None,
    }])
}

#[test]
fn a_serviceaccount_user_is_impersonated_as_its_serviceaccount_in_its_namespace() {
    let identities = judge::Identities::of([&Impersonation {
        user: "system:serviceaccount:team-b:deployer".into(),
        groups: vec![],
        namespace_role: None,
    }]);
    let rights = judge::hub_rights("ops", &[], &identities);
    assert_eq!(
        has(&rights, "impersonate serviceaccounts deployer in team-b"),
        Some(true)
    );
    assert!(!rights.iter().any(|a| a.resource == "users"));
}

/// The rules of deploy/rbac.yaml's ClusterRole tenancy-hub as a SelfSubjectRulesReview returns
/// them, with what every authenticated identity may do.
fn shipped_rules() -> Vec<ResourceRule> {
    let rbac = include_str!("../../../deploy/rbac.yaml");
    let mut rules: Vec<ResourceRule> = rbac
        .split("\n---\n")
        .filter_map(|doc| serde_yaml::from_str::<serde_json::Value>(doc).ok())
        .filter(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == "tenancy-hub")
        .flat_map(|doc| serde_json::from_value::<Vec<ResourceRule>>(doc["rules"].clone()).unwrap())
        .collect();
    assert!(rules.len() > 10, "deploy/rbac.yaml's ClusterRole is read");
    rules.push(rule(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "create",
        &[],
    ));
    rules.push(rule(
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "create",
        &[],
    ));
    rules
}

fn rule(group: &str, resource: &str, verb: &str, names: &[&str]) -> ResourceRule {
    ResourceRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: vec![verb.into()],
        resource_names: (!names.is_empty()).then(|| names.iter().map(|&n| n.into()).collect()),
    }
}

#[test]
fn the_shipped_rights_with_the_policies_identities_are_not_wider_than_documented() {
    let finding = super::width::wider_rights(&shipped_rules(), &team_a(), Some(false));
    assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
    assert_eq!(finding.check, "hub-rbac-width");
}

#[test]
fn secrets_read_in_every_namespace_are_wider_and_named_with_the_fix() {
    let mut held = shipped_rules();
    held.push(rule("", "secrets", "get", &[]));
    let finding = super::width::wider_rights(&held, &team_a(), Some(false));
    assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
    assert!(
        finding.detail.contains("get secrets (any name)"),
        "{finding:?}"
    );
    assert!(
        finding.fix.as_deref().unwrap().contains("deploy/rbac.yaml"),
        "{finding:?}"
    );
}

#[test]
fn impersonating_anyone_or_a_name_no_policy_names_is_wider() {
    let mut anyone = shipped_rules();
    anyone.push(rule("", "users", "impersonate", &[]));
    let finding = super::width::wider_rights(&anyone, &team_a(), Some(false));
    assert_eq!(finding.verdict, Verdict::Warn);
    assert!(
        finding.detail.contains("impersonate users (any name)"),
        "{finding:?}"
    );
    assert!(finding.fix.unwrap().contains("resourceNames"));

    let mut masters = shipped_rules();
    masters.push(rule(
        "",
        "groups",
        "impersonate",
        &["team-a", "system:masters"],
    ));
    let finding = super::width::wider_rights(&masters, &team_a(), Some(false));
    assert!(
        finding.detail.contains("impersonate groups system:masters"),
        "{finding:?}"
    );
    assert!(!finding.detail.contains("groups team-a"), "{finding:?}");

    // The shipped example names are wider once no policy names them.
    let finding = super::width::wider_rights(&shipped_rules(), &judge::Identities::default(), None);
    assert_eq!(finding.verdict, Verdict::Warn);
    assert!(
        finding.detail.contains("impersonate users team-a-deployer"),
        "{finding:?}"
    );
}

#[test]
fn a_wildcard_rule_is_wider() {
    let finding = super::width::wider_rights(&[rule("*", "*", "*", &[])], &team_a(), None);
    assert_eq!(finding.verdict, Verdict::Warn);
    assert!(finding.detail.contains("* *.* (any name)"), "{finding:?}");
}

#[test]
fn a_rolebinding_accepted_outside_the_operators_namespaces_is_wider_with_the_admission_policy_as_fix()
 {
    let finding = super::width::wider_rights(&shipped_rules(), &team_a(), Some(true));
    assert_eq!(finding.verdict, Verdict::Warn);
    assert!(
        finding
            .detail
            .contains("create rolebindings in namespace default"),
        "{finding:?}"
    );
    assert!(
        finding
            .fix
            .unwrap()
            .contains("ValidatingAdmissionPolicy tenancy-hub-rolebindings")
    );
}

#[test]
fn a_member_needs_the_watches_and_namespaces_and_wants_the_tenant_rules() {
    let rights = judge::member_rights();
    assert_eq!(has(&rights, "watch secrets"), Some(true));
    assert_eq!(has(&rights, "list daemonsets.apps"), Some(true));
    assert_eq!(has(&rights, "create namespaces"), Some(true));
    assert_eq!(has(&rights, "create secrets"), Some(false));
    assert_eq!(has(&rights, "patch deployments.apps"), Some(false));
    assert!(
        !rights.iter().any(|a| a.group == "multitenancy.dev"),
        "members hold no Controllers"
    );
}

fn access(verb: &str, resource: &str, required: bool) -> Access {
    Access {
        group: String::new(),
        resource: resource.into(),
        subresource: None,
        verb: verb.into(),
        name: None,
        namespace: None,
        required,
    }
}

#[test]
fn missing_required_rights_fail_listing_each_and_missing_wanted_ones_warn() {
    let answers = vec![
        (access("list", "pods", true), Ok(false)),
        (access("create", "namespaces", true), Err("timeout".into())),
        (access("create", "secrets", false), Ok(false)),
        (access("watch", "pods", true), Ok(true)),
    ];
    let failed = judge::rights("member-rbac", "m", &answers, "grant them", "when");
    assert_eq!(failed.verdict, Verdict::Fail);
    assert_eq!(
        failed.detail,
        "missing 2: list pods, create namespaces (not asked: timeout)"
    );
    let warned = judge::rights(
        "member-rbac",
        "m",
        &answers[2..],
        "grant them",
        "needed there",
    );
    assert_eq!(warned.verdict, Verdict::Warn);
    assert_eq!(warned.detail, "lacks create secrets, needed there");
    let passed = judge::rights("member-rbac", "m", &answers[3..], "grant them", "when");
    assert_eq!(passed.verdict, Verdict::Pass);
    assert_eq!(passed.fix, None);
}

#[test]
fn the_executor_passes_when_it_speaks_our_protocol_and_fails_when_sdk_lacks_it() {
    let path = Path::new("/opt/tenancy-hub-helm");
    let hello = Hello {
        protocol: 1,
        helm: "v4.3.1".into(),
    };
    let ok = judge::executor(ExecutorKind::Auto, Some(path), Some(Ok(hello)));
    assert_eq!(ok.verdict, Verdict::Pass);
    assert!(ok.detail.contains("protocol 1"), "{ok:?}");
    let wrong = judge::executor(
        ExecutorKind::Sdk,
        Some(path),
        Some(Err("speaks protocol 0; rebuild it".into())),
    );
    assert_eq!(wrong.verdict, Verdict::Fail);
    assert_eq!(wrong.detail, "speaks protocol 0; rebuild it");
    assert_eq!(
        judge::executor(ExecutorKind::Sdk, None, None).verdict,
        Verdict::Fail
    );
    assert_eq!(
        judge::executor(ExecutorKind::Auto, None, None).verdict,
        Verdict::Warn
    );
    assert_eq!(
        judge::executor(ExecutorKind::Cli, None, None).verdict,
        Verdict::Pass
    );
}

#[test]
fn a_chart_home_fails_unreadable_and_warns_empty() {
    let home = Path::new("/charts");
    let unreadable = judge::chart_home(home, Err("No such file or directory".into()));
    assert_eq!(unreadable.verdict, Verdict::Fail);
    assert!(unreadable.fix.unwrap().contains("--chart-home"));
    assert_eq!(judge::chart_home(home, Ok(0)).verdict, Verdict::Warn);
    assert_eq!(judge::chart_home(home, Ok(2)).verdict, Verdict::Pass);
}

#[test]
fn a_namespace_of_controllers_no_policy_governs_fails_under_enforce_and_warns_under_permissive() {
    let controllers = BTreeMap::from([("team-a".to_owned(), 2), ("team-b".to_owned(), 1)]);
    let policies = BTreeMap::from([("a".to_owned(), vec!["team-a".to_owned()])]);
    let enforce = judge::policies(true, &controllers, &policies);
    assert_eq!(enforce.len(), 2);
    assert_eq!(enforce[0].verdict, Verdict::Pass);
    assert!(enforce[0].detail.contains("governed by a"));
    assert_eq!(enforce[1].verdict, Verdict::Fail);
    assert!(
        enforce[1]
            .fix
            .as_ref()
            .unwrap()
            .contains("hubNamespaces: [team-b]")
    );
    let permissive = judge::policies(false, &controllers, &policies);
    assert_eq!(permissive[1].verdict, Verdict::Warn);
    let none = judge::policies(true, &BTreeMap::new(), &policies);
    assert_eq!(none.len(), 1);
    assert_eq!(none[0].verdict, Verdict::Pass);
}

fn finding(verdict: Verdict) -> Finding {
    match verdict {
        Verdict::Pass => Finding::pass("helm", "helm", "runs".into()),
        other => Finding::not_passed("helm", "helm", other, "gone".into(), "install it".into()),
    }
}

#[test]
fn a_report_fails_on_a_failed_check_only() {
    assert!(
        Report::of(vec![
            finding(Verdict::Pass),
            finding(Verdict::Warn),
            finding(Verdict::Skip)
        ])
        .ok
    );
    assert!(!Report::of(vec![finding(Verdict::Pass), finding(Verdict::Fail)]).ok);
}

#[test]
fn the_table_has_one_line_per_check_with_its_fix() {
    let report = Report::of(vec![finding(Verdict::Pass), finding(Verdict::Fail)]);
    let text = render(&report, Output::Table).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].starts_with("ok ") && lines[1].ends_with("runs"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("FAIL ") && lines[2].ends_with("gone; fix: install it"),
        "{text}"
    );
}

#[test]
fn the_json_report_has_ok_and_checks_of_check_subject_verdict_detail_and_fix() {
    let report = Report::of(vec![finding(Verdict::Pass), finding(Verdict::Fail)]);
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, Output::Json).unwrap()).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(
        json["checks"][0],
        serde_json::json!({"check": "helm", "subject": "helm", "verdict": "pass", "detail": "runs"})
    );
    assert_eq!(json["checks"][1]["verdict"], "fail");
    assert_eq!(json["checks"][1]["fix"], "install it");
}
