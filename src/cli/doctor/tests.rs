use std::{collections::BTreeMap, path::Path};

use kube::CustomResourceExt as _;

use super::judge::{self, Access, Finding, Report, Verdict};
use super::render;
use crate::{
    api::crd::Controller, cli::args::ExecutorKind, cli::table::Output, helm::protocol::Hello,
};

fn has(accesses: &[Access], text: &str) -> Option<bool> {
    accesses
        .iter()
        .find(|a| a.to_string() == text)
        .map(|a| a.required)
}

#[test]
fn a_crd_equal_to_the_generated_one_but_for_server_defaults_is_current() {
    let generated = Controller::crd();
    let mut live = generated.clone();
    live.spec.conversion = Some(Default::default());
    live.spec.names.list_kind = Some("ControllerList".into());
    let finding = judge::crd(&generated, Ok(Some(&live)));
    assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
}

#[test]
fn a_crd_that_differs_fails_naming_where_with_the_apply_command() {
    let generated = Controller::crd();
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
    let generated = Controller::crd();
    let mut live = generated.clone();
    live.spec.names.short_names = Some(vec!["ctl".into(), "old".into()]);
    assert_eq!(
        judge::spec_difference(&generated, &live).as_deref(),
        Some("names.shortNames")
    );
}

#[test]
fn a_missing_crd_fails_and_an_unreadable_one_warns() {
    let generated = Controller::crd();
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
    let rights = judge::hub_rights("ops", &[Some("my-lease".into())], false);
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
    assert_eq!(has(&rights, "impersonate users"), Some(false));
    let impersonating = judge::hub_rights("ops", &[], true);
    assert_eq!(has(&impersonating, "impersonate users"), Some(true));
    assert!(
        !impersonating
            .iter()
            .any(|a| a.resource == "leases" && a.namespace.is_some() && a.verb != "create"),
        "no Lease is read without leader election"
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
