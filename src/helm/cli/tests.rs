//! Tests of the Helm CLI: the argument builder and the executor against a fake helm.

use super::*;
use crate::helm::kubeconfig::narrow_kubeconfig;
use crate::helm::process::uncached;
use crate::plan::ChartSource;
use crate::plan::OwnerId;
use crate::queue::failure::{classify, trim_error};
use std::path::Path;

/// A release of the example chart from `source`, with one setting.
pub(crate) fn release(source: ChartSource) -> Release {
    Release {
        health: Vec::new(),
        adoption: Default::default(),
        commit: None,
        masked: Default::default(),
        post_render: None,
        credentials: Default::default(),
        verified: None,
        key: "member-1/team/web".parse().unwrap(),
        owner: OwnerId {
            namespace: "default".into(),
            name: "example".into(),
        },
        chart_name: "deployment-example".into(),
        source,
        version: None,
        chart_digest: None,
        settings: vec![("replicaCount".into(), "2".into())],
        values: None,
        rollback_on_failure: false,
        spec_hash: "0123456789abcdef".into(),
        identity: None,
        drift: Default::default(),
        helm: Default::default(),
    }
}

/// How an uninstall goes with no settings: the operator's defaults.
fn removing() -> crate::helm::settings::Removing {
    crate::helm::settings::uninstall(&Default::default(), &HelmOptions::default())
}

#[test]
fn a_repair_describes_its_drift_and_forces_a_server_side_apply_before_the_positionals() {
    let plain = upgrade_args(
        &release(ChartSource::Directory("/charts/deployment-example".into())),
        target(),
        None,
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    );
    let args = strings(with_repair(plain.clone(), "Deployment/web /spec/replicas"));
    assert_eq!(args.len(), plain.len() + 3);
    let dashes = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(
        &args[dashes - 3..dashes],
        [
            "--description=drift repair: Deployment/web /spec/replicas",
            "--server-side=true",
            "--force-conflicts"
        ]
    );
    assert_eq!(&args[dashes + 1..], ["web", "/charts/deployment-example"]);
    let long = strings(with_repair(plain, &"é".repeat(500)));
    let description = long
        .iter()
        .find(|a| a.starts_with("--description="))
        .unwrap();
    assert!(description.len() <= "--description=".len() + 200);
    assert!(description.ends_with('…'));
}

fn target() -> Target<'static> {
    Target {
        kubeconfig: Path::new("/lab/kubeconfig"),
        context: "member-1",
        identity: None,
    }
}

fn strings(args: Vec<OsString>) -> Vec<String> {
    args.into_iter().map(|a| a.into_string().unwrap()).collect()
}

/// `upgrade_args` of a release for the default target, options, no values file and no archive.
fn plain_upgrade(r: &Release) -> Vec<String> {
    strings(upgrade_args(
        r,
        target(),
        None,
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ))
}

/// Chart `web` 1.2.3 from a Helm repository.
fn repository_release() -> Release {
    let mut r = release(ChartSource::Repository {
        url: "https://charts.example/x".into(),
        chart: "web".into(),
    });
    r.version = Some("1.2.3".into());
    r
}

#[test]
fn a_template_renders_the_chart_with_exactly_the_upgrades_chart_arguments() {
    let mut r = repository_release();
    r.settings.push(("motd".into(), "a,b".into()));
    let file = Path::new("/tmp/v.yaml");
    let render = RenderFor {
        kube_version: Some("v1.36.3".into()),
        api_versions: vec!["apps/v1".into(), "batch/v1".into()],
        is_upgrade: true,
    };
    let template = strings(template_args(&r, Some(file), None, &render));
    assert_eq!(
        template[..8],
        [
            "template",
            "--no-hooks",
            "--skip-tests",
            "--namespace=team",
            "--is-upgrade",
            "--kube-version=v1.36.3",
            "--api-versions=apps/v1",
            "--api-versions=batch/v1",
        ]
    );
    let upgrade = strings(upgrade_args(
        &r,
        target(),
        Some(file),
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    let tail = |args: &[String]| {
        let at = args.iter().position(|a| a == "--version=1.2.3").unwrap();
        args[at..].to_vec()
    };
    assert_eq!(tail(&template), tail(&upgrade));
    assert_eq!(
        template[template.len() - 3..],
        ["--", "web", "web"],
        "positional arguments follow --"
    );
    assert!(
        !template
            .iter()
            .any(|a| a.starts_with("--kube") && !a.starts_with("--kube-version"))
    );
}

#[test]
fn a_cached_archive_replaces_version_and_repository_in_upgrades_and_renders_alike() {
    let r = repository_release();
    let archive = Path::new("/cache/ab12.tgz");
    let upgrade = strings(upgrade_args(
        &r,
        target(),
        None,
        Some(archive),
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    assert!(
        !upgrade
            .iter()
            .any(|a| a.starts_with("--version") || a.starts_with("--repo")),
        "{upgrade:?}"
    );
    assert_eq!(
        upgrade[upgrade.len() - 4..],
        ["--set=replicaCount=2", "--", "web", "/cache/ab12.tgz"]
    );
    let render = strings(template_args(
        &r,
        None,
        Some(archive),
        &RenderFor::default(),
    ));
    assert_eq!(render[render.len() - 4..], upgrade[upgrade.len() - 4..]);
    let fallback = plain_upgrade(&r);
    assert!(fallback.contains(&"--repo=https://charts.example/x".to_string()));
    assert!(fallback.contains(&"--version=1.2.3".to_string()));
}

#[test]
fn a_repository_chart_runs_only_from_the_chart_cache() {
    let r = repository_release();
    let why = uncached(&r, None).expect("refused without its archive");
    assert!(
        why.starts_with("chart web 1.2.3 from https://charts.example/x is not in the chart cache"),
        "{why}"
    );
    assert_eq!(uncached(&r, Some(Path::new("/cache/ab12.tgz"))), None);
    let home = release(ChartSource::Directory("/charts/web".into()));
    assert_eq!(uncached(&home, None), None);
    assert_eq!(
        uncached(&release(ChartSource::Oci("oci://r/web".into())), None),
        None
    );
}

#[test]
fn a_first_render_is_an_install_and_names_no_cluster_version_when_unknown() {
    let r = release(ChartSource::Directory("/charts/deployment-example".into()));
    let args = strings(template_args(&r, None, None, &RenderFor::default()));
    assert!(!args.contains(&"--is-upgrade".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--kube-version")));
    assert_eq!(
        args[args.len() - 4..],
        [
            "--set=replicaCount=2",
            "--",
            "web",
            "/charts/deployment-example"
        ]
    );
}

#[test]
fn upgrade_names_the_cluster_namespace_owner_and_release() {
    let args = strings(upgrade_args(
        &release(ChartSource::Directory("/charts/deployment-example".into())),
        target(),
        None,
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    assert_eq!(
        args,
        [
            "upgrade",
            "--install",
            "--reset-values",
            "--disable-openapi-validation",
            "--namespace=team",
            "--kubeconfig=/lab/kubeconfig",
            "--kube-context=member-1",
            "--timeout=300s",
            "--history-max=5",
            "--output=json",
            "--labels=multitenancy.dev/managed-by=tenancy-hub,multitenancy.dev/controller-namespace=default,multitenancy.dev/controller-name=example,multitenancy.dev/spec-hash=0123456789abcdef",
            "--set=replicaCount=2",
            "--",
            "web",
            "/charts/deployment-example",
        ]
    );
}

#[test]
fn repository_charts_pin_their_version_and_values_come_from_a_file() {
    let mut r = release(ChartSource::Repository {
        url: "http://127.0.0.1:8080/charts".into(),
        chart: "podinfo".into(),
    });
    r.version = Some("1.2.3".into());
    let args = strings(upgrade_args(
        &r,
        target(),
        Some(Path::new("/tmp/v.yaml")),
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    assert!(args.contains(&"--repo=http://127.0.0.1:8080/charts".to_string()));
    assert!(args.contains(&"--version=1.2.3".to_string()));
    assert!(args.contains(&"--values=/tmp/v.yaml".to_string()));
    assert_eq!(args.last().unwrap(), "podinfo");
}

#[test]
fn oci_references_are_the_chart_argument() {
    let args = strings(upgrade_args(
        &release(ChartSource::Oci("oci://127.0.0.1:5000/charts/web".into())),
        target(),
        None,
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    assert_eq!(args.last().unwrap(), "oci://127.0.0.1:5000/charts/web");
    assert!(!args.iter().any(|a| a.starts_with("--repo")));
}

#[test]
fn set_values_keep_commas_backslashes_braces_and_equals_literal() {
    assert_eq!(escape_set_value("a,b"), "a\\,b");
    assert_eq!(escape_set_value("c:\\dir"), "c:\\\\dir");
    assert_eq!(escape_set_value("{x,y}"), "\\{x\\,y\\}");
    assert_eq!(escape_set_value("k=v=w"), "k=v=w");
    assert_eq!(
        escape_set_value("--dry-run; rm -rf / $(x) `y` 'q' \"z\"\nü"),
        "--dry-run; rm -rf / $(x) `y` 'q' \"z\"\nü"
    );
}

#[test]
fn flag_looking_values_and_names_stay_inside_their_argument() {
    let mut r = release(ChartSource::Directory("/charts/--evil".into()));
    r.settings = vec![("a".into(), "--kube-context=other".into())];
    let args = plain_upgrade(&r);
    assert!(args.contains(&"--set=a=--kube-context=other".to_string()));
    let dashdash = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(&args[dashdash + 1..], ["web", "/charts/--evil"]);
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--kube-context"))
            .count(),
        1
    );
}

#[test]
fn uninstall_targets_one_release_in_one_cluster_and_runs_none_of_its_hooks() {
    let key: ReleaseKey = "member-2/team/db".parse().unwrap();
    let args = strings(uninstall_args(&key, target(), &removing()));
    assert_eq!(
        args,
        [
            "uninstall",
            "--namespace=team",
            "--kubeconfig=/lab/kubeconfig",
            "--kube-context=member-1",
            "--timeout=300s",
            "--no-hooks",
            "--",
            "db"
        ]
    );
}

#[test]
fn an_impersonated_call_acts_as_the_user_and_groups_and_every_call_leaves_the_namespace_to_the_operator()
 {
    let who = Impersonation {
        user: "team-a-deployer".into(),
        groups: vec!["team-a".into(), "--all".into()],
        namespace_role: None,
    };
    let as_team = Target {
        identity: Some(&who),
        ..target()
    };
    let r = release(ChartSource::Directory("/charts/web".into()));
    let args = strings(upgrade_args(
        &r,
        as_team,
        None,
        None,
        &HelmOptions::default(),
        Phase::Upgrade,
    ));
    assert!(args.contains(&"--kube-as-user=team-a-deployer".to_string()));
    assert!(args.contains(&"--kube-as-group=team-a".to_string()));
    assert!(args.contains(&"--kube-as-group=--all".to_string()));
    assert!(!args.contains(&"--create-namespace".to_string()));
    let plain = plain_upgrade(&r);
    assert!(!plain.contains(&"--create-namespace".to_string()));
    assert!(!plain.iter().any(|a| a.starts_with("--kube-as")));
    let key: ReleaseKey = "member-2/team/db".parse().unwrap();
    let args = strings(uninstall_args(&key, as_team, &removing()));
    assert!(args.contains(&"--kube-as-user=team-a-deployer".to_string()));
}

#[test]
fn helm_gets_a_private_kubeconfig_of_the_clusters_context_alone_with_absolute_paths() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("fleet.kubeconfig");
    let entry = |i: usize| {
        format!(
            "- name: c{i}\n  cluster: {{server: 'https://10.0.0.{i}:6443', certificate-authority: pki/ca{i}.crt}}\n"
        )
    };
    let user = |i: usize| format!("- name: u{i}\n  user: {{token: secret-{i}}}\n");
    let context =
        |i: usize| format!("- name: member-{i}\n  context: {{cluster: c{i}, user: u{i}}}\n");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: member-0\nclusters:\n{}users:\n{}contexts:\n{}",
        (0..3).map(entry).collect::<String>(),
        (0..3).map(user).collect::<String>(),
        (0..3).map(context).collect::<String>()
    );
    std::fs::write(&source, yaml).unwrap();
    let out = dir.path().join("out").join("kubeconfig-member-1");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    narrow_kubeconfig(&source, "member-1", &out).unwrap();

    let one = kube::config::Kubeconfig::read_from(&out).unwrap();
    assert_eq!(one.current_context.as_deref(), Some("member-1"));
    let names = |v: Vec<String>| v.join(",");
    assert_eq!(
        names(one.contexts.iter().map(|c| c.name.clone()).collect()),
        "member-1"
    );
    assert_eq!(
        names(one.clusters.iter().map(|c| c.name.clone()).collect()),
        "c1"
    );
    assert_eq!(
        names(one.auth_infos.iter().map(|u| u.name.clone()).collect()),
        "u1"
    );
    let cluster = one.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some(dir.path().join("pki/ca1.crt").to_str().unwrap()),
        "a path relative to the source is made absolute"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("secret-1") && !text.contains("secret-0") && !text.contains("secret-2"));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the operator reads it");
    assert!(narrow_kubeconfig(&source, "member-9", &out).is_err());
}

#[test]
fn values_are_reset_to_the_specs_and_rollback_is_asked_for_per_chart() {
    let mut r = release(ChartSource::Directory("/charts/deployment-example".into()));
    let args = plain_upgrade(&r);
    assert!(args.contains(&"--reset-values".to_string()));
    assert!(!args.iter().any(|a| a.contains("reuse-values")));
    assert!(!args.contains(&"--rollback-on-failure".to_string()));
    r.rollback_on_failure = true;
    let args = plain_upgrade(&r);
    assert!(args.contains(&"--rollback-on-failure".to_string()));
    assert!(
        args.contains(&"--timeout=300s".to_string()),
        "rollback waits up to the timeout"
    );
}

#[test]
fn errors_are_trimmed_to_their_last_lines() {
    let stderr = "WARNING: kube config is group-readable\n\nError: UPGRADE FAILED: template: x/templates/a.yaml:3:4: bad\n";
    assert_eq!(
        trim_error(stderr),
        "UPGRADE FAILED: template: x/templates/a.yaml:3:4: bad"
    );
    assert!(trim_error(&"x".repeat(2000)).chars().count() <= 513);
}

// Helm 4.3.1's stderr, captured from the lab (`helm upgrade --install` in a scratch namespace).
const TEMPLATE_PARSE: &str =
    "Error: UPGRADE FAILED: parse error at (parse/templates/a.yaml:3): missing value for if\n";
const TEMPLATE_EXECUTE: &str = "Error: UPGRADE FAILED: exec/templates/a.yaml:4:20\n  executing \"exec/templates/a.yaml\" at <.Values.a.b.c>:\n    nil pointer evaluating interface {}.b\n";
const TEMPLATE_INCLUDE: &str = "Error: UPGRADE FAILED: undef/templates/a.yaml:1:3\n  executing \"undef/templates/a.yaml\" at <include \"nope\" .>:\n    error calling include:\ntemplate: no template \"nope\" associated with template \"gotpl\"\n";
const FAIL_SAYING_TRANSIENT: &str = "Error: execution error at (failc/templates/a.yaml:1:3): connection refused; the server is currently unable to handle the request\n";
const REQUIRED_SAYING_TIMEOUT: &str = "Error: UPGRADE FAILED: execution error at (req/templates/a.yaml:1:3): a value is required: i/o timeout\n";
const SCHEMA: &str = "Error: UPGRADE FAILED: values don't meet the specifications of the schema(s) in the following chart(s):\nschema:\n- at '/logLevel': value must be one of 'panic', 'debug', 'info', 'warning', 'error', 'fatal'\n\n";
const YAML: &str = "Error: UPGRADE FAILED: YAML parse error on yaml/templates/a.yaml: error converting YAML to JSON: yaml: line 3: did not find expected ',' or '}'\n";
const NOT_BUILDABLE: &str = "Error: unable to build kubernetes objects from release manifest: error validating \"\": error validating data: apiVersion not set\n";
const NO_KIND_INSTALL: &str = "Error: unable to build kubernetes objects from release manifest: resource mapping not found for name: \"x\" namespace: \"\" from \"\": no matches for kind \"Widget\" in version \"example.com/v1\"\nensure CRDs are installed first\n";
const NO_KIND_UPGRADE: &str = "Error: UPGRADE FAILED: resource mapping not found for name: \"x\" namespace: \"\" from \"\": no matches for kind \"Widget\" in version \"example.com/v1\"\nensure CRDs are installed first\n";
const UNKNOWN_FIELD: &str = "level=WARN msg=\"upgrade failed\" name=sch2 error=\"server-side apply failed for object b-scratch-3790/x /v1, Kind=ConfigMap: failed to create typed patch object (b-scratch-3790/x; /v1, Kind=ConfigMap): .bogus: field not declared in schema\"\nError: UPGRADE FAILED: server-side apply failed for object b-scratch-3790/x /v1, Kind=ConfigMap: failed to create typed patch object (b-scratch-3790/x; /v1, Kind=ConfigMap): .bogus: field not declared in schema\n";
const INVALID: &str = "Error: server-side apply failed for object b-scratch-3790/inv apps/v1, Kind=StatefulSet: StatefulSet.apps \"inv\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0\n";
const IMMUTABLE: &str = "level=WARN msg=\"upgrade failed\" name=imm error=\"server-side apply failed for object b-scratch-3790/imm apps/v1, Kind=Deployment: Deployment.apps \\\"imm\\\" is invalid: spec.selector: Invalid value: {\\\"matchLabels\\\":{\\\"app\\\":\\\"b\\\"}}: field is immutable\"\nError: UPGRADE FAILED: server-side apply failed for object b-scratch-3790/imm apps/v1, Kind=Deployment: Deployment.apps \"imm\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"b\"}}: field is immutable\n";
const IMMUTABLE_ROLLED_BACK: &str = "level=WARN msg=\"upgrade failed\" name=imm error=\"server-side apply failed for object b-scratch-3790/imm apps/v1, Kind=Deployment: Deployment.apps \\\"imm\\\" is invalid: spec.selector: Invalid value: {\\\"matchLabels\\\":{\\\"app\\\":\\\"b\\\"}}: field is immutable\"\nError: UPGRADE FAILED: release imm failed, and has been rolled back due to rollback-on-failure being set: server-side apply failed for object b-scratch-3790/imm apps/v1, Kind=Deployment: Deployment.apps \"imm\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"b\"}}: field is immutable\n";
const FORBIDDEN: &str = "Error: query: failed to query with labels: secrets is forbidden: User \"nobody\" cannot list resource \"secrets\" in API group \"\" in the namespace \"b-scratch-3790\"\n";
const FORBIDDEN_UNINSTALL: &str = "Error: uninstall: Release not loaded: imm: query: failed to query with labels: secrets is forbidden: User \"nobody\" cannot list resource \"secrets\" in API group \"\" in the namespace \"b-scratch-3790\"\n";
const NOT_FOUND_UNINSTALL: &str =
    "Error: uninstall: Release not loaded: nothere: release: not found\n";
const NO_CONTEXT: &str =
    "Error: kubernetes cluster unreachable: context \"member-9\" does not exist\n";
const REFUSED: &str = "Error: kubernetes cluster unreachable: Get \"https://127.0.0.1:1/version\": dial tcp 127.0.0.1:1: connect: connection refused\n";
const UNAUTHORIZED_TOKEN: &str = "Error: kubernetes cluster unreachable: the server has asked for the client to provide credentials\n";
// Known texts of transient failures (the lab's members are not stopped to produce them).
const TRANSIENT_TEXTS: [&str; 10] = [
    "Error: UPGRADE FAILED: Get \"https://10.0.0.1:6443/apis/apps/v1/namespaces/team/deployments/web\": dial tcp 10.0.0.1:6443: i/o timeout\n",
    "Error: kubernetes cluster unreachable: Get \"https://10.0.0.1:6443/version\": net/http: TLS handshake timeout\n",
    "Error: UPGRADE FAILED: Patch \"https://10.0.0.1:6443/apis/apps/v1/namespaces/team/deployments/web\": read tcp 10.0.0.2:51234->10.0.0.1:6443: read: connection reset by peer\n",
    "Error: UPGRADE FAILED: release web failed, and has been rolled back due to rollback-on-failure being set: resource Deployment/team/web not ready. status: InProgress, message: Updated: 1/2\ncontext deadline exceeded\n",
    "Error: UPGRADE FAILED: the server is currently unable to handle the request (get deployments.apps web)\n",
    "Error: UPGRADE FAILED: the server has received too many requests and has asked us to try again later (patch deployments.apps web)\n",
    "Error: UPGRADE FAILED: 429 Too Many Requests\n",
    "Error: UPGRADE FAILED: etcdserver: request timed out\n",
    "Error: UPGRADE FAILED: cannot patch \"web\" with kind Deployment: Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again\n",
    "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress\n",
];

#[test]
fn render_failures_are_permanent_whatever_text_they_embed() {
    for stderr in [
        TEMPLATE_PARSE,
        TEMPLATE_EXECUTE,
        TEMPLATE_INCLUDE,
        FAIL_SAYING_TRANSIENT,
        REQUIRED_SAYING_TIMEOUT,
        SCHEMA,
        YAML,
        NOT_BUILDABLE,
        NO_KIND_INSTALL,
        NO_KIND_UPGRADE,
    ] {
        assert_eq!(classify(stderr), FailureKind::Permanent, "{stderr}");
    }
}

#[test]
fn rejections_a_retry_cannot_fix_are_permanent_rolled_back_or_not() {
    for stderr in [
        INVALID,
        IMMUTABLE,
        IMMUTABLE_ROLLED_BACK,
        FORBIDDEN,
        FORBIDDEN_UNINSTALL,
        UNKNOWN_FIELD,
    ] {
        assert_eq!(classify(stderr), FailureKind::Permanent, "{stderr}");
    }
}

#[test]
fn an_invalid_value_quoting_a_transient_signal_is_still_permanent() {
    let stderr = "Error: UPGRADE FAILED: cannot patch \"web\" with kind ConfigMap: ConfigMap \"web\" is invalid: data[x]: Invalid value: \"connection refused\": a valid config key must consist of alphanumeric characters\n";
    assert_eq!(classify(stderr), FailureKind::Permanent);
}

#[test]
fn only_recognised_transient_signals_are_retried() {
    assert_eq!(classify(REFUSED), FailureKind::Transient);
    for stderr in TRANSIENT_TEXTS {
        assert_eq!(classify(stderr), FailureKind::Transient, "{stderr}");
    }
    for stderr in [
        NO_CONTEXT,
        NOT_FOUND_UNINSTALL,
        "Error: something new\n",
        "",
    ] {
        assert_eq!(classify(stderr), FailureKind::Permanent, "{stderr}");
    }
}

#[test]
fn refused_credentials_wait_like_an_unreachable_cluster() {
    assert_eq!(classify(UNAUTHORIZED_TOKEN), FailureKind::Unavailable);
}

#[test]
fn the_message_starts_at_helms_error_line_without_its_log_lines() {
    assert_eq!(
        trim_error(IMMUTABLE),
        "UPGRADE FAILED: server-side apply failed for object b-scratch-3790/imm apps/v1, Kind=Deployment: Deployment.apps \"imm\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"b\"}}: field is immutable"
    );
    assert_eq!(
        trim_error(SCHEMA),
        "UPGRADE FAILED: values don't meet the specifications of the schema(s) in the following chart(s): schema: - at '/logLevel': value must be one of 'panic', 'debug', 'info', 'warning', 'error', 'fatal'"
    );
}

#[test]
fn an_uninstall_that_left_no_records_succeeded_whatever_helm_said() {
    let fail = || ("uninstall failed".to_string(), FailureKind::Permanent);
    let (m, k) = fail();
    assert_eq!(uninstall_outcome(Ok(0), m, k), Outcome::Uninstalled);
    let (m, k) = fail();
    assert_eq!(
        uninstall_outcome(Ok(2), m, k),
        Outcome::failed("uninstall failed", FailureKind::Permanent)
    );
}

#[test]
fn an_uninstall_whose_records_cannot_be_listed_is_retried() {
    let error = || {
        kube::Error::Api(
            kube::core::Status::failure("down", "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        )
    };
    let Outcome::Failed { message, kind } = uninstall_outcome(
        Err(error()),
        "uninstall failed".into(),
        FailureKind::Permanent,
    ) else {
        panic!("a failure");
    };
    assert_eq!(kind, FailureKind::Transient);
    assert!(
        message.starts_with("uninstall failed (listing"),
        "{message}"
    );
    assert!(matches!(
        uninstall_outcome(Err(error()), "x".into(), FailureKind::Unavailable),
        Outcome::Failed {
            kind: FailureKind::Unavailable,
            ..
        }
    ));
}

#[tokio::test]
async fn release_records_are_counted_by_helms_labels_as_metadata_only() {
    let service = tower::service_fn(|request: http::Request<kube::client::Body>| {
        let uri = request.uri().to_string();
        let accept = request
            .headers()
            .get(http::header::ACCEPT)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        assert_eq!(
            uri,
            "/api/v1/namespaces/team/secrets?&labelSelector=owner%3Dhelm%2Cname%3Ddb"
        );
        assert!(accept.contains("as=PartialObjectMetadataList"), "{accept}");
        let body = serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "1"},
            "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                       "metadata": {"name": "sh.helm.release.v1.db.v1", "namespace": "team"}}],
        });
        async move {
            http::Response::builder()
                .status(200)
                .body(kube::client::Body::from(body.to_string().into_bytes()))
        }
    });
    let client = kube::Client::new(service, "default");
    let key: ReleaseKey = "member-2/team/db".parse().unwrap();
    assert_eq!(records_left(client, &key).await.unwrap(), 1);
}

#[test]
fn the_printed_release_gives_revision_and_chart_version() {
    let out = r#"{"name":"web","version":3,"chart":{"metadata":{"name":"x","version":"0.1.0"}},"info":{"status":"deployed"}}"#;
    assert_eq!(parse_release_json(out), Some((3, "0.1.0".into())));
    assert_eq!(parse_release_json("not json"), None);
    let oci = format!("Pulled: 127.0.0.1:5000/charts/web:0.3.0\nDigest: sha256:ab\n{out}");
    assert_eq!(parse_release_json(&oci), Some((3, "0.1.0".into())));
}

#[test]
fn the_in_cluster_hub_is_left_to_helms_own_in_cluster_configuration() {
    let in_cluster = Target {
        kubeconfig: Path::new(""),
        context: "in-cluster",
        identity: None,
    };
    let args = strings(uninstall_args(
        &"hub/foo/foo".parse().unwrap(),
        in_cluster,
        &removing(),
    ));
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--kubeconfig") || a.starts_with("--kube-context")),
        "{args:?}"
    );
}

#[test]
fn a_release_sent_to_a_member_carries_no_word_of_its_credentials() {
    let release = Release {
        credentials: crate::policy::access::Credentials::Tenant {
            namespace: "team-a".into(),
            secret: "own-pull".into(),
            policy: "team-a".into(),
            prefix: "oci://registry.example.com/team-a".into(),
            labels: Vec::new(),
        },
        ..release(ChartSource::Oci(
            "oci://registry.example.com/team-a/web".into(),
        ))
    };
    let sent = serde_json::to_string(&release).unwrap();
    assert!(
        !sent.contains("own-pull") && !sent.contains("credentials"),
        "{sent}"
    );
    let back: Release = serde_json::from_str(&sent).unwrap();
    assert_eq!(back.credentials, Default::default());
}

/// The example release with a chart entry's Helm settings for every action.
fn with_settings() -> Release {
    let mut r = release(ChartSource::Directory("/charts/web".into()));
    r.helm = crate::helm::settings::example();
    r
}

/// The arguments of `helm upgrade --install` of `r` in `phase`, for the default target and
/// options.
fn in_phase(r: &Release, phase: Phase) -> Vec<OsString> {
    upgrade_args(r, target(), None, None, &HelmOptions::default(), phase)
}

/// The flags of `args` before `--`, without those every upgrade has.
fn asked(args: Vec<OsString>) -> Vec<String> {
    let args = strings(args);
    let dashes = args.iter().position(|a| a == "--").unwrap();
    let plain = plain_upgrade(&release(ChartSource::Directory("/charts/web".into())));
    args[..dashes]
        .iter()
        .filter(|a| !plain.contains(a))
        .cloned()
        .collect()
}

#[test]
fn without_settings_an_upgrade_has_the_operators_timeout_and_history_and_nothing_else() {
    let args = plain_upgrade(&release(ChartSource::Directory("/charts/web".into())));
    assert!(args.contains(&"--timeout=300s".to_string()));
    assert!(args.contains(&"--history-max=5".to_string()));
    for flag in [
        "--wait",
        "--no-hooks",
        "--skip-crds",
        "--force",
        "--cleanup-on-fail",
    ] {
        assert!(
            !args.iter().any(|a| a.starts_with(flag)),
            "{flag}: {args:?}"
        );
    }
    assert!(!phase_matters(
        &release(ChartSource::Directory("/charts/web".into())),
        &HelmOptions::default()
    ));
}

#[test]
fn an_install_gets_the_entrys_install_settings() {
    let r = with_settings();
    let args = in_phase(&r, Phase::Install);
    assert_eq!(
        asked(args),
        [
            "--wait=watcher",
            "--wait-for-jobs",
            "--skip-crds",
            "--timeout=20s",
            "--history-max=12"
        ]
    );
    assert!(phase_matters(&r, &HelmOptions::default()));
}

#[test]
fn an_upgrade_gets_the_entrys_upgrade_settings_and_replaces_client_side() {
    let r = with_settings();
    let args = in_phase(&r, Phase::Upgrade);
    assert_eq!(
        asked(args.clone()),
        [
            "--no-hooks",
            "--skip-crds",
            "--force-replace",
            "--server-side=false",
            "--cleanup-on-fail",
            "--timeout=3600s",
            "--history-max=12"
        ]
    );
    let repair = strings(with_repair(args, "Deployment/web /spec/replicas"));
    assert!(repair.contains(&"--force-conflicts".to_string()));
    assert!(repair.contains(&"--server-side=true".to_string()));
    assert!(
        !repair
            .iter()
            .any(|a| a == "--force-replace" || a == "--server-side=false"),
        "a repair never replaces: {repair:?}"
    );
}

#[test]
fn an_uninstall_runs_hooks_keeps_history_and_waits_only_when_asked() {
    let key: ReleaseKey = "member-2/team/db".parse().unwrap();
    let settings = crate::helm::settings::example().uninstall;
    let asked = crate::helm::settings::uninstall(&settings, &HelmOptions::default());
    let args = strings(uninstall_args(&key, target(), &asked));
    assert_eq!(
        &args[4..],
        [
            "--timeout=90s",
            "--keep-history",
            "--wait=watcher",
            "--",
            "db"
        ]
    );
}

#[test]
fn create_replace_is_refused_by_the_helm_binary_naming_the_release_and_the_action() {
    use crate::api::crd::{CrdPolicy, Install, Upgrade};
    let options = HelmOptions::default();
    let mut r = release(ChartSource::Directory("/charts/web".into()));
    assert_eq!(replaces_crds(&r, &options), None, "the defaults run");
    r.helm.upgrade = Upgrade {
        crds: Some(CrdPolicy::Create),
        ..Upgrade::default()
    };
    assert_eq!(
        replaces_crds(&r, &options),
        None,
        "Create is refused later, on an upgrade only"
    );
    for action in ["install", "upgrade"] {
        let mut asking = r.clone();
        if action == "install" {
            asking.helm.install = Install {
                crds: Some(CrdPolicy::CreateReplace),
                ..Install::default()
            };
        } else {
            asking.helm.upgrade.crds = Some(CrdPolicy::CreateReplace);
        }
        let Some(Outcome::Failed { message, kind }) = replaces_crds(&asking, &options) else {
            panic!("{action}: CreateReplace ran");
        };
        assert_eq!(kind, FailureKind::Permanent);
        assert!(
            message.contains(&format!("release {}", asking.key)),
            "{message}"
        );
        assert!(
            message.contains(&format!(
                "{action}.crds: CreateReplace is refused by the helm binary"
            )),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_release_with_a_post_render_is_refused_by_the_helm_binary_and_nothing_runs() {
    let cache = tempfile::tempdir().unwrap();
    let charts = crate::charts::cache::ChartCache::open(
        cache.path(),
        crate::charts::cache::DEFAULT_SIZE,
        std::path::PathBuf::from("helm"),
        Default::default(),
    )
    .unwrap();
    // No cluster is registered: anything past the refusal would fail otherwise.
    let cli = HelmCli::new(
        HelmOptions {
            binary: "/nonexistent/helm".into(),
            ..HelmOptions::default()
        },
        Default::default(),
        Default::default(),
        Arc::new(charts),
    )
    .unwrap();
    let patched = Release {
        post_render: Some(crate::plan::post_render::tests::example()),
        ..release(ChartSource::Directory("/charts/deployment-example".into()))
    };
    let Outcome::Failed { message, kind } =
        cli.apply(patched, None, None, Default::default()).await
    else {
        panic!("a refusal");
    };
    assert_eq!(kind, FailureKind::Permanent);
    assert!(
        message.starts_with("release member-1/team/web: postRenderers and commonMetadata are refused by the helm binary executor"),
        "{message}"
    );
}

#[test]
fn the_helm_binary_refuses_an_uninstall_strategy_naming_the_release_and_what_to_do() {
    let mut r = release(ChartSource::Directory("/charts/web".into()));
    assert!(uninstall_strategy(&r).is_none(), "no remediation");
    r.helm.upgrade.remediation = Some(crate::api::crd::UpgradeRemediation {
        retries: Some(2),
        strategy: Some(RemediationStrategy::Rollback),
        ..Default::default()
    });
    assert!(uninstall_strategy(&r).is_none(), "a rollback is helm's own");
    r.helm.upgrade.remediation.as_mut().unwrap().strategy = Some(RemediationStrategy::Uninstall);
    let Some(Outcome::Failed { message, kind }) = uninstall_strategy(&r) else {
        panic!("an uninstall strategy on the helm binary path is refused")
    };
    assert_eq!(kind, FailureKind::Permanent);
    assert!(message.contains(&r.key.to_string()), "{message}");
    assert!(message.contains("--executor sdk") && message.contains("strategy: rollback"));
}
