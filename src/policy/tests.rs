//! Tests of admission: what the tenancy policies allow, and as whom.

use super::*;
use std::collections::BTreeMap;

use crate::api::key::{ClusterNamespace, ReleaseKey};
use crate::api::policy::PolicyClusterSelector;

fn key(cluster: &str, namespace: &str) -> ReleaseKey {
    ReleaseKey {
        scope: ClusterNamespace::new(cluster.parse().unwrap(), namespace).unwrap(),
        release: "web".into(),
    }
}

fn home(name: &str) -> Chart {
    Chart {
        chart_name: name.into(),
        ..Chart::default()
    }
}

fn repo(url: &str) -> Chart {
    Chart {
        chart_name: "web".into(),
        repo: Some(url.into()),
        ..Chart::default()
    }
}

fn team_a() -> NamedPolicy {
    NamedPolicy {
        name: "team-a".into(),
        spec: TenancyPolicySpec {
            allow_adoption: false,
            helm: None,
            values_from: Default::default(),
            alert_secrets: Default::default(),
            alert_internal_addresses: Default::default(),
            sources: Default::default(),
            hub_namespaces: vec!["team-a".into()],
            clusters: vec!["member-1".into()],
            cluster_selector: Some(PolicyClusterSelector {
                match_labels: BTreeMap::from([("env".into(), "dev".into())]),
            }),
            namespaces: vec!["team-a".into(), "team-a-*".into()],
            chart_sources: vec![
                "chart-home".into(),
                "https://charts.example.com/".into(),
                "oci://registry.example.com/team-a/".into(),
            ],
            impersonate: Some(Impersonation {
                user: "team-a-deployer".into(),
                groups: vec!["team-a".into()],
                namespace_role: None,
            }),
            trusted: false,
        },
    }
}

fn enforce(policies: Vec<NamedPolicy>) -> Admission {
    Admission {
        mode: Mode::Enforce,
        policies,
        operator_namespace: "tenancy-hub".into(),
    }
}

fn dev() -> BTreeMap<String, String> {
    BTreeMap::from([("env".into(), "dev".into())])
}

fn refused(v: Verdict) -> String {
    match v {
        Verdict::Refused(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_allowed_release_goes_as_the_policys_identity() {
    let a = enforce(vec![team_a()]);
    let v = a.admit("team-a", &key("member-1", "team-a-web"), None, &home("web"));
    assert_eq!(
        v,
        Verdict::Allowed {
            identity: team_a().spec.impersonate,
            warning: None
        }
    );
}

#[test]
fn a_cluster_is_allowed_by_name_or_by_its_labels_but_the_hub_only_by_name() {
    let a = enforce(vec![team_a()]);
    let by_label = a.admit(
        "team-a",
        &key("member-2", "team-a"),
        Some(&dev()),
        &home("web"),
    );
    assert!(matches!(by_label, Verdict::Allowed { .. }));
    let why = refused(a.admit("team-a", &key("member-2", "team-a"), None, &home("web")));
    assert!(why.contains("cluster member-2 is not allowed"), "{why}");
    assert!(why.contains("TenancyPolicy team-a"), "{why}");
    let mut all = team_a();
    all.spec.cluster_selector = Some(PolicyClusterSelector::default());
    let why = refused(enforce(vec![all]).admit(
        "team-a",
        &key("hub", "team-a"),
        Some(&BTreeMap::new()),
        &home("web"),
    ));
    assert!(
        why.contains("hub cluster is allowed only when named"),
        "{why}"
    );
}

#[test]
fn protected_namespaces_are_matched_only_by_their_exact_name() {
    let mut any = team_a();
    any.spec.namespaces = vec!["*".into(), "kube-*".into()];
    let a = enforce(vec![any.clone()]);
    for ns in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "tenancy-hub",
    ] {
        let why = refused(a.admit("team-a", &key("member-1", ns), None, &home("web")));
        assert!(why.contains("is protected"), "{ns}: {why}");
    }
    assert!(matches!(
        a.admit(
            "team-a",
            &key("member-1", "kube-flannel"),
            None,
            &home("web")
        ),
        Verdict::Allowed { .. }
    ));
    any.spec.namespaces = vec!["kube-system".into()];
    assert!(matches!(
        enforce(vec![any]).admit(
            "team-a",
            &key("member-1", "kube-system"),
            None,
            &home("web")
        ),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn another_teams_namespace_is_refused_naming_the_rule_and_the_policy() {
    let why = refused(enforce(vec![team_a()]).admit(
        "team-a",
        &key("member-1", "team-b"),
        None,
        &home("web"),
    ));
    assert_eq!(
        why,
        "not allowed by the policies governing hub namespace team-a (TenancyPolicy team-a: namespace team-b is not allowed)"
    );
}

#[test]
fn a_hub_namespace_no_policy_governs_is_refused_with_what_to_do() {
    let why = refused(enforce(vec![team_a()]).admit(
        "team-x",
        &key("member-1", "team-a"),
        None,
        &home("web"),
    ));
    assert!(
        why.starts_with("no TenancyPolicy governs hub namespace team-x"),
        "{why}"
    );
}

#[test]
fn what_any_governing_policy_allows_is_allowed_as_that_policys_identity() {
    let mut b = team_a();
    b.name = "team-a-extra".into();
    b.spec.namespaces = vec!["shared".into()];
    b.spec.impersonate = None;
    b.spec.trusted = true;
    let a = enforce(vec![team_a(), b]);
    assert_eq!(
        a.admit("team-a", &key("member-1", "shared"), None, &home("web")),
        Verdict::Allowed {
            identity: None,
            warning: None
        }
    );
    let why = refused(a.admit("team-a", &key("member-1", "other"), None, &home("web")));
    assert!(
        why.contains("TenancyPolicy team-a:") && why.contains("TenancyPolicy team-a-extra:"),
        "{why}"
    );
}

#[test]
fn chart_sources_match_whole_path_segments() {
    let a = enforce(vec![team_a()]);
    let k = key("member-1", "team-a");
    for ok in [
        repo("https://charts.example.com"),
        repo("https://charts.example.com/stable/"),
        home("web"),
        Chart {
            chart_name: "oci://registry.example.com/team-a/web".into(),
            ..Chart::default()
        },
    ] {
        assert!(
            matches!(a.admit("team-a", &k, None, &ok), Verdict::Allowed { .. }),
            "{ok:?}"
        );
    }
    for bad in [
        repo("https://charts.example.com.evil.io/"),
        repo("https://other.example.com/"),
        Chart {
            chart_name: "oci://registry.example.com/team-b/web".into(),
            ..Chart::default()
        },
        Chart {
            chart_name: "oci://registry.example.com/team-a-x/web".into(),
            ..Chart::default()
        },
    ] {
        let why = refused(a.admit("team-a", &k, None, &bad));
        assert!(why.contains("is not in chartSources"), "{why}");
    }
}

#[test]
fn chart_names_are_plain_names_in_every_mode() {
    let a = Admission::permissive();
    for name in [
        "/etc/charts/web",
        "../web",
        "sub/web",
        "..",
        ".hidden",
        "-x",
    ] {
        let why = a.check_source("any", &home(name)).unwrap_err();
        assert!(why.contains("plain chart name"), "{name}: {why}");
        let mut r = repo("https://charts.example.com/");
        r.chart_name = name.into();
        assert!(a.check_source("any", &r).is_err(), "repo chart {name}");
    }
    assert!(a.check_source("any", &home("web-1.2")).is_ok());
}

#[test]
fn repositories_are_https_without_credentials_and_http_only_when_listed() {
    let a = Admission::permissive();
    assert!(
        a.check_source("team-a", &repo("https://charts.example.com"))
            .is_ok()
    );
    for bad in [
        "file:///etc",
        "ftp://x/",
        "charts.example.com",
        "https://user:secret@charts.example.com/",
    ] {
        let why = a.check_source("team-a", &repo(bad)).unwrap_err();
        assert!(!why.contains("secret"), "the credentials leak: {why}");
    }
    let plain = "http://charts.example.com:8080";
    let why = a.check_source("team-a", &repo(plain)).unwrap_err();
    assert!(why.contains("plain http"), "{why}");
    let mut listed = team_a();
    listed.spec.chart_sources = vec!["HTTP://Charts.Example.com:8080/".into()];
    let a = Admission {
        policies: vec![listed],
        ..Admission::permissive()
    };
    assert!(a.check_source("team-a", &repo(plain)).is_ok());
    assert!(a.check_source("team-b", &repo(plain)).is_err());
}

#[test]
fn permissive_mode_delivers_what_enforce_would_refuse_and_says_so() {
    let a = Admission {
        policies: vec![team_a()],
        ..Admission::permissive()
    };
    match a.admit(
        "team-x",
        &key("member-1", "kube-system"),
        None,
        &home("web"),
    ) {
        Verdict::Allowed {
            identity: None,
            warning: Some(w),
        } => assert!(w.contains("would be refused"), "{w}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        a.admit("team-x", &key("member-1", "x"), None, &home("../web")),
        Verdict::Refused(_)
    ));
}

#[test]
fn removals_act_only_as_a_policy_that_allows_the_release_now() {
    let a = enforce(vec![team_a()]);
    assert_eq!(
        a.identity_for_removal("team-a", &key("member-1", "team-a"), None),
        Ok(team_a().spec.impersonate)
    );
    // A tightened policy that no longer allows the cluster lends no identity: nothing runs.
    let why = a
        .identity_for_removal("team-a", &key("member-9", "team-a"), None)
        .unwrap_err();
    assert!(
        why.contains("cluster member-9 is not allowed") && why.contains("left in place"),
        "{why}"
    );
    let why = a
        .identity_for_removal("team-x", &key("member-1", "team-a"), None)
        .unwrap_err();
    assert!(why.contains("none governs it"), "{why}");
    assert_eq!(
        Admission::permissive().identity_for_removal("x", &key("member-1", "x"), None),
        Ok(None)
    );
}

#[test]
fn impersonating_policies_win_over_trusted_ones_whatever_their_names() {
    let mut trusted = team_a();
    trusted.name = "a-first-by-name".into();
    trusted.spec.impersonate = None;
    trusted.spec.trusted = true;
    let a = enforce(vec![trusted.clone(), team_a()]);
    let k = key("member-1", "team-a");
    assert_eq!(
        a.admit("team-a", &k, None, &home("web")),
        Verdict::Allowed {
            identity: team_a().spec.impersonate,
            warning: None
        }
    );
    assert_eq!(
        a.identity_for_removal("team-a", &k, None),
        Ok(team_a().spec.impersonate)
    );
    let said = a.disagreements();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("hub namespace team-a")
            && said[0].contains("a-first-by-name (trusted")
            && said[0].contains("team-a (as user team-a-deployer)"),
        "{said:?}"
    );
}

#[test]
fn a_policy_naming_no_identity_allows_nothing() {
    let mut none = team_a();
    none.spec.impersonate = None;
    let a = enforce(vec![none]);
    let why = refused(a.admit("team-a", &key("member-1", "team-a"), None, &home("web")));
    assert!(why.contains("names no identity"), "{why}");
    let mut both = team_a();
    both.spec.trusted = true;
    let why = refused(enforce(vec![both]).admit(
        "team-a",
        &key("member-1", "team-a"),
        None,
        &home("web"),
    ));
    assert!(why.contains("sets both impersonate and trusted"), "{why}");
}

/// A policy of hub namespace team-e listing one plain-http prefix on loopback, as the lab's
/// repositories are.
fn team_e() -> NamedPolicy {
    let mut p = team_a();
    p.name = "team-e".into();
    p.spec.hub_namespaces = vec!["team-e".into()];
    p.spec.chart_sources = vec!["http://127.0.0.1:8080/team-e/".into()];
    p
}

#[test]
fn a_repository_that_climbs_out_of_its_prefix_is_refused_however_it_is_written() {
    for a in [
        enforce(vec![team_e()]),
        Admission {
            policies: vec![team_e()],
            ..Admission::permissive()
        },
    ] {
        let k = key("member-1", "team-a");
        for climb in [
            "http://127.0.0.1:8080/team-e/../team-x",
            "http://127.0.0.1:8080/team-e/%2e%2e/team-x",
            "http://127.0.0.1:8080/team-e/.%2E/team-x",
            "http://127.0.0.1:8080/team-e/..%2fteam-x",
            "http://127.0.0.1:8080/team-e\\..\\team-x",
            "http://127.0.0.1:8080/team-e/?x=1",
            "http://127.0.0.1:8080/team-e/#x",
        ] {
            let why = refused(a.admit("team-e", &k, None, &repo(climb)));
            assert!(why.starts_with("repo "), "{climb}: {why}");
            assert_eq!(a.fetch_scope("team-e", &repo(climb)), None, "{climb}");
        }
        for fine in [
            "http://127.0.0.1:8080/team-e",
            "HTTP://127.0.0.1:8080/team-e/stable/",
            "http://127.0.0.1:8080/team-e/sub/../stable",
            "http://2130706433:8080/team-e/",
        ] {
            assert!(
                matches!(
                    a.admit("team-e", &k, None, &repo(fine)),
                    Verdict::Allowed { .. }
                ),
                "{fine}"
            );
        }
    }
}

#[test]
fn loopback_link_local_and_metadata_sources_are_refused_unless_a_governing_policy_lists_them() {
    let mut listed = team_a();
    listed.spec.chart_sources = vec![
        "https://127.0.0.1:8443/".into(),
        "oci://127.0.0.1:5000/charts/".into(),
    ];
    let a = Admission {
        policies: vec![listed],
        ..Admission::permissive()
    };
    for (inside, url) in [
        (false, "https://127.0.0.1/"),
        (false, "https://2130706433/"),
        (true, "https://0x7f.0.0.1:8443/"),
        (false, "https://[::1]/"),
        (false, "https://[::ffff:127.0.0.1]/"),
        (false, "https://169.254.169.254/latest/"),
        (false, "https://[fe80::1]/"),
        (false, "https://0.0.0.0/"),
        (false, "https://localhost/"),
        (false, "https://metadata.google.internal/"),
        (true, "https://127.0.0.1:8443/charts"),
        (true, "https://2130706433:8443/charts"),
    ] {
        let chart = repo(url);
        assert_eq!(a.check_source("team-a", &chart).is_ok(), inside, "{url}");
        let why = a.check_source("team-b", &chart).unwrap_err();
        assert!(why.contains("chartSources"), "{url}: {why}");
    }
    let oci = |reference: &str| Chart {
        chart_name: reference.into(),
        ..Chart::default()
    };
    assert!(
        a.check_source("team-a", &oci("oci://127.0.0.1:5000/charts/web"))
            .is_ok()
    );
    for bad in [
        "oci://127.0.0.1:5000/other/web",
        "oci://localhost:5000/charts/web",
        "oci://169.254.169.254/charts/web",
    ] {
        assert!(a.check_source("team-a", &oci(bad)).is_err(), "{bad}");
    }
}

#[test]
fn the_hub_fetches_only_sources_a_governing_policy_lists() {
    let a = enforce(vec![team_a()]);
    let may = |a: &Admission, ns: &str, url: &str| a.fetch_scope(ns, &repo(url)).is_some();
    assert!(may(&a, "team-a", "https://charts.example.com/"));
    assert!(!may(&a, "team-a", "https://evil.example.com/"));
    assert!(!may(&a, "team-x", "https://charts.example.com/"));
    assert!(may(
        &Admission::permissive(),
        "x",
        "https://evil.example.com/"
    ));
    assert!(!may(&Admission::permissive(), "x", "file:///etc"));
    assert_eq!(
        a.fetch_scope("team-a", &home("web")),
        Some(Scope::ChartHome)
    );
}

#[test]
fn fetches_stay_under_the_narrowest_prefix_that_holds_the_source_or_the_source_itself() {
    let mut wide = team_a();
    wide.name = "wide".into();
    wide.spec.chart_sources = vec!["https://charts.example.com/".into()];
    let mut narrow = team_a();
    narrow.name = "narrow".into();
    narrow.spec.hub_namespaces = vec!["team-e".into()];
    narrow.spec.chart_sources = vec!["https://Charts.Example.com:443/team-e".into()];
    let a = enforce(vec![narrow, wide]);
    let scope = |ns: &str, url: &str| match a.fetch_scope(ns, &repo(url)) {
        Some(Scope::Under(prefix, ..)) => prefix.to_string(),
        other => panic!("{url}: {other:?}"),
    };
    assert_eq!(
        scope("team-a", "https://charts.example.com/team-e/stable"),
        "https://charts.example.com/team-e",
        "whichever hub namespace asks"
    );
    assert_eq!(
        scope("team-e", "https://charts.example.com/team-e/stable"),
        "https://charts.example.com/team-e"
    );
    assert_eq!(
        scope("team-a", "https://charts.example.com/other"),
        "https://charts.example.com/"
    );
    let permissive = Admission::permissive();
    assert_eq!(
        permissive.fetch_scope("x", &repo("https://CDN.example.net/a/../b")),
        Some(Scope::Under(
            SourceUrl::parse("https://cdn.example.net/b").unwrap(),
            crate::policy::access::Credentials::None,
            Default::default()
        ))
    );
}

#[test]
fn skipping_hooks_is_allowed_unless_a_policy_forbids_it_and_then_the_rule_is_named() {
    use crate::api::crd::{Install, Upgrade};
    use crate::api::policy::HelmRule;
    let release = key("member-1", "team-a-web");
    let skipping_install = Chart {
        install: Some(Install {
            disable_hooks: true,
            ..Install::default()
        }),
        ..home("web")
    };
    let skipping_upgrade = Chart {
        upgrade: Some(Upgrade {
            disable_hooks: true,
            ..Upgrade::default()
        }),
        ..home("web")
    };
    let allowing = enforce(vec![team_a()]);
    assert!(matches!(
        allowing.admit("team-a", &release, None, &skipping_install),
        Verdict::Allowed { .. }
    ));
    let mut strict = team_a();
    strict.spec.helm = Some(HelmRule {
        allow_disable_hooks: false,
        ..HelmRule::default()
    });
    let forbidding = enforce(vec![strict]);
    for (chart, setting) in [
        (&skipping_install, "install.disableHooks"),
        (&skipping_upgrade, "upgrade.disableHooks"),
    ] {
        let why = refused(forbidding.admit("team-a", &release, None, chart));
        assert!(why.contains("TenancyPolicy team-a"), "{why}");
        assert!(
            why.contains(&format!(
                "{setting} is set, and helm.allowDisableHooks is false"
            )),
            "{why}"
        );
    }
    assert!(matches!(
        forbidding.admit("team-a", &release, None, &home("web")),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn a_policy_saying_nothing_of_helm_allows_skipping_hooks() {
    let rule: crate::api::policy::HelmRule = serde_json::from_str("{}").unwrap();
    assert!(rule.allow_disable_hooks);
}

/// A chart of the chart home whose install and upgrade use these CRD policies.
fn with_crds(
    install: Option<crate::api::crd::CrdPolicy>,
    upgrade: Option<crate::api::crd::CrdPolicy>,
) -> Chart {
    use crate::api::crd::{Install, Upgrade};
    Chart {
        install: Some(Install {
            crds: install,
            ..Install::default()
        }),
        upgrade: Some(Upgrade {
            crds: upgrade,
            ..Upgrade::default()
        }),
        ..home("web")
    }
}

/// A chart entry with one JSON6902 patch aimed at `kind`, or a strategic merge patch naming it.
fn patching(kind: &str, strategic: bool) -> Chart {
    use crate::api::crd::{Kustomize, Patch, PatchTarget, PostRenderer};
    let patch = if strategic {
        Patch {
            patch: format!("apiVersion: v1\nkind: {kind}\nmetadata:\n  name: x\n"),
            target: None,
        }
    } else {
        Patch {
            patch: r#"[{"op": "add", "path": "/metadata/labels/a", "value": "b"}]"#.into(),
            target: Some(PatchTarget {
                kind: Some(kind.into()),
                ..PatchTarget::default()
            }),
        }
    };
    Chart {
        post_renderers: vec![PostRenderer {
            kustomize: Some(Kustomize {
                patches: vec![patch],
                images: Vec::new(),
            }),
        }],
        ..home("web")
    }
}

#[test]
fn a_tenant_may_create_missing_crds_but_not_replace_them_unless_its_policy_lists_it() {
    use crate::api::crd::CrdPolicy::{Create, CreateReplace, Skip};
    let release = key("member-1", "team-a-web");
    let default = enforce(vec![team_a()]);
    for (install, upgrade) in [
        (None, None),
        (Some(Skip), Some(Create)),
        (Some(Create), None),
    ] {
        assert!(
            matches!(
                default.admit("team-a", &release, None, &with_crds(install, upgrade)),
                Verdict::Allowed { .. }
            ),
            "{install:?} {upgrade:?}"
        );
    }
    for (chart, setting) in [
        (
            with_crds(None, Some(CreateReplace)),
            "upgrade.crds is CreateReplace",
        ),
        (
            with_crds(Some(CreateReplace), None),
            "install.crds is CreateReplace",
        ),
    ] {
        let why = refused(default.admit("team-a", &release, None, &chart));
        assert!(why.contains("TenancyPolicy team-a"), "{why}");
        assert!(why.contains(setting), "{why}");
        assert!(why.contains("helm.crdPolicies [Skip, Create]"), "{why}");
    }
    let mut replacing = team_a();
    replacing.spec.helm = Some(
        serde_json::from_str(r#"{"crdPolicies": ["Skip", "Create", "CreateReplace"]}"#).unwrap(),
    );
    let allowing = enforce(vec![replacing]);
    assert!(matches!(
        allowing.admit(
            "team-a",
            &release,
            None,
            &with_crds(None, Some(CreateReplace))
        ),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn a_policy_listing_only_skip_refuses_the_installs_default_of_create() {
    let release = key("member-1", "team-a-web");
    let mut skip_only = team_a();
    skip_only.spec.helm = Some(serde_json::from_str(r#"{"crdPolicies": ["Skip"]}"#).unwrap());
    let policies = enforce(vec![skip_only]);
    let why = refused(policies.admit("team-a", &release, None, &home("web")));
    assert!(why.contains("install.crds is Create"), "{why}");
    let skipping = with_crds(Some(crate::api::crd::CrdPolicy::Skip), None);
    assert!(matches!(
        policies.admit("team-a", &release, None, &skipping),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn a_patch_naming_an_rbac_webhook_or_crd_kind_is_forbidden_by_default() {
    let release = key("member-1", "team-a");
    let admission = enforce(vec![team_a()]);
    for kind in [
        "ClusterRole",
        "RoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
    ] {
        for strategic in [false, true] {
            let why =
                refused(admission.admit("team-a", &release, None, &patching(kind, strategic)));
            assert!(
                why.contains(&format!("a post-render patch names kind {kind}"))
                    && why.contains("helm.allowPostRenderSensitiveKinds is false"),
                "{why}"
            );
        }
    }
}

#[test]
fn an_override_patching_a_cluster_role_is_forbidden_too() {
    let mut chart = home("web");
    chart.overrides = vec![crate::api::crd::ChartOverride {
        post_renderers: patching("ClusterRole", false).post_renderers,
        ..Default::default()
    }];
    let why =
        refused(enforce(vec![team_a()]).admit("team-a", &key("member-1", "team-a"), None, &chart));
    assert!(why.contains("names kind ClusterRole"), "{why}");
}

#[test]
fn a_patch_to_a_deployment_is_allowed_and_its_executor_refuses_sensitive_changes() {
    let release = key("member-1", "team-a");
    let admission = enforce(vec![team_a()]);
    let chart = patching("Deployment", false);
    assert!(matches!(
        admission.admit("team-a", &release, None, &chart),
        Verdict::Allowed { .. }
    ));
    // What the patch does is judged by the executor, which gets no allowance.
    assert!(!admission.post_render_sensitive_allowed("team-a", &release, None, &chart));
}

#[test]
fn a_policy_allowing_sensitive_kinds_lets_the_patch_and_its_result_through() {
    let release = key("member-1", "team-a");
    let mut open = team_a();
    open.spec.helm = Some(crate::api::policy::HelmRule {
        allow_post_render_sensitive_kinds: true,
        ..crate::api::policy::HelmRule::default()
    });
    let admission = enforce(vec![open]);
    let chart = patching("ClusterRole", false);
    assert!(matches!(
        admission.admit("team-a", &release, None, &chart),
        Verdict::Allowed { .. }
    ));
    assert!(admission.post_render_sensitive_allowed("team-a", &release, None, &chart));
}

#[test]
fn a_policy_forbidding_post_renderers_refuses_patches_and_common_metadata() {
    let release = key("member-1", "team-a");
    let mut strict = team_a();
    strict.spec.helm = Some(crate::api::policy::HelmRule {
        allow_post_renderers: false,
        ..crate::api::policy::HelmRule::default()
    });
    let admission = enforce(vec![strict]);
    let labelled = Chart {
        common_metadata: Some(Default::default()),
        ..home("web")
    };
    for chart in [patching("Deployment", false), labelled] {
        let why = refused(admission.admit("team-a", &release, None, &chart));
        assert!(why.contains("helm.allowPostRenderers is false"), "{why}");
    }
    assert!(matches!(
        admission.admit("team-a", &release, None, &home("web")),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn a_policy_saying_nothing_of_helm_allows_post_renderers_but_not_sensitive_kinds() {
    let rule: crate::api::policy::HelmRule = serde_json::from_str("{}").unwrap();
    assert!(rule.allow_post_renderers);
    assert!(!rule.allow_post_render_sensitive_kinds);
}
