//! Tests of which credentials a chart is fetched with, and which Secrets a tenant may name for its source.

use std::collections::BTreeMap;

use super::*;
use crate::api::crd::SecretReference;
use crate::api::key::{ClusterNamespace, ReleaseKey};
use crate::api::policy::{PolicyClusterSelector, TenancyPolicySpec, TenantSecretRule};
use crate::policy::{Admission, Mode, NamedPolicy, Scope, Verdict};

fn policy(name: &str, namespaces: &[&str], sources: Vec<SourceAccess>) -> NamedPolicy {
    NamedPolicy::new(
        name,
        TenancyPolicySpec {
            hub_namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            clusters: vec!["member-1".into()],
            cluster_selector: Some(PolicyClusterSelector::default()),
            namespaces: vec!["*".into()],
            trusted: true,
            sources,
            ..Default::default()
        },
    )
}

fn entry(url: &str, secret: Option<&str>) -> SourceAccess {
    SourceAccess {
        git: None,
        url: url.into(),
        secret_ref: secret.map(|name| SecretReference { name: name.into() }),
        tenant_secrets: Vec::new(),
        verify: None,
    }
}

fn admission(mode: Mode, policies: Vec<NamedPolicy>) -> Admission {
    let mut policies = policies;
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    Admission {
        mode,
        policies,
        operator_namespace: "tenancy-hub".into(),
    }
}

fn repo(url: &str) -> Chart {
    Chart {
        chart_name: "web".into(),
        repo: Some(url.into()),
        ..Chart::default()
    }
}

fn oci(reference: &str) -> Chart {
    Chart {
        chart_name: reference.into(),
        ..Chart::default()
    }
}

fn naming(mut chart: Chart, secret: &str) -> Chart {
    chart.source_secret_ref = Some(SecretReference {
        name: secret.into(),
    });
    chart
}

fn key() -> ReleaseKey {
    ReleaseKey {
        scope: ClusterNamespace::new("member-1".parse().unwrap(), "team-a").unwrap(),
        release: "web".into(),
    }
}

fn platform(secret: &str, policy: &str, prefix: &str) -> Credentials {
    Credentials::Platform {
        secret: secret.into(),
        policy: policy.into(),
        prefix: prefix.into(),
    }
}

#[test]
fn the_longest_prefix_holding_the_source_gives_the_credentials_and_ties_go_to_the_first_policy_by_name()
 {
    let a = admission(
        Mode::Enforce,
        vec![
            policy(
                "zeta",
                &["team-a"],
                vec![entry(
                    "oci://registry.example.com/team-a/",
                    Some("team-a-pull"),
                )],
            ),
            policy(
                "wide",
                &["team-a"],
                vec![entry("oci://registry.example.com/", Some("registry-pull"))],
            ),
            policy(
                "alpha",
                &["team-a"],
                vec![entry(
                    "oci://Registry.Example.com:443/team-a",
                    Some("alpha-pull"),
                )],
            ),
            policy(
                "other-team",
                &["team-b"],
                vec![entry(
                    "oci://registry.example.com/team-a/web",
                    Some("b-pull"),
                )],
            ),
        ],
    );
    let of = |reference: &str| a.credentials("team-a", &oci(reference)).unwrap();
    assert_eq!(
        of("oci://registry.example.com/team-a/web"),
        platform("alpha-pull", "alpha", "oci://registry.example.com/team-a"),
        "alpha and zeta tie on the normalised prefix; the other team's longer one does not count"
    );
    assert_eq!(
        of("oci://registry.example.com/shared/web"),
        platform("registry-pull", "wide", "oci://registry.example.com/")
    );
    assert_eq!(
        of("oci://registry.example.com/team-a-x/web"),
        platform("registry-pull", "wide", "oci://registry.example.com/"),
        "a prefix holds whole path segments only"
    );
    assert_eq!(
        of("oci://registry.example.com.evil.io/team-a/web"),
        Credentials::None
    );
    assert_eq!(
        of("oci://registry.example.com/team-a/web").to_string(),
        "platform:alpha-pull"
    );
}

#[test]
fn a_longer_prefix_without_a_secret_means_no_credentials_there() {
    let a = admission(
        Mode::Enforce,
        vec![policy(
            "p",
            &["team-a"],
            vec![
                entry("https://charts.example.com/", Some("all")),
                entry("https://charts.example.com/public", None),
            ],
        )],
    );
    let of = |url: &str| a.credentials("team-a", &repo(url)).unwrap();
    assert_eq!(
        of("https://charts.example.com/public/stable"),
        Credentials::None
    );
    assert_eq!(
        of("https://charts.example.com/private"),
        platform("all", "p", "https://charts.example.com/")
    );
}

#[test]
fn a_hub_namespace_no_policy_governs_gets_no_credentials_and_is_refused_as_before() {
    let a = admission(
        Mode::Enforce,
        vec![policy(
            "team-a",
            &["team-a"],
            vec![entry("https://charts.example.com/", Some("pull"))],
        )],
    );
    let chart = repo("https://charts.example.com/stable");
    assert_eq!(a.credentials("team-x", &chart).unwrap(), Credentials::None);
    assert_eq!(a.fetch_scope("team-x", &chart), None);
    let Verdict::Refused(why) = a.admit("team-x", &key(), None, &chart) else {
        panic!("refused")
    };
    assert!(
        why.starts_with("no TenancyPolicy governs hub namespace team-x"),
        "{why}"
    );
}

#[test]
fn a_sources_entry_allows_its_prefix_as_a_chart_sources_entry_does() {
    let a = admission(
        Mode::Enforce,
        vec![policy(
            "team-a",
            &["team-a"],
            vec![entry("http://127.0.0.1:8080/team-a", Some("pull"))],
        )],
    );
    let chart = repo("http://127.0.0.1:8080/team-a");
    assert!(matches!(
        a.admit("team-a", &key(), None, &chart),
        Verdict::Allowed { .. }
    ));
    assert_eq!(
        a.fetch_scope("team-a", &chart),
        Some(Scope::Under(
            SourceUrl::parse("http://127.0.0.1:8080/team-a").unwrap(),
            platform("pull", "team-a", "http://127.0.0.1:8080/team-a"),
            Trust::default()
        ))
    );
    let elsewhere = repo("http://127.0.0.1:8080/team-b");
    assert!(matches!(
        a.admit("team-a", &key(), None, &elsewhere),
        Verdict::Refused(_)
    ));
}

fn tenant_policy(rules: Vec<TenantSecretRule>) -> NamedPolicy {
    policy(
        "team-a",
        &["team-a"],
        vec![SourceAccess {
            git: None,
            url: "oci://registry.example.com/team-a".into(),
            secret_ref: Some(SecretReference {
                name: "platform-pull".into(),
            }),
            tenant_secrets: rules,
            verify: None,
        }],
    )
}

#[test]
fn a_tenant_secret_a_rule_names_replaces_the_platforms() {
    let a = admission(
        Mode::Enforce,
        vec![tenant_policy(vec![TenantSecretRule {
            names: vec!["own-pull".into()],
            ..Default::default()
        }])],
    );
    let chart = naming(oci("oci://registry.example.com/team-a/web"), "own-pull");
    let credentials = a.credentials("team-a", &chart).unwrap();
    assert_eq!(
        credentials,
        Credentials::Tenant {
            namespace: "team-a".into(),
            secret: "own-pull".into(),
            policy: "team-a".into(),
            prefix: "oci://registry.example.com/team-a".into(),
            labels: Vec::new(),
        }
    );
    assert_eq!(credentials.to_string(), "tenant:team-a/own-pull");
    assert!(matches!(
        a.admit("team-a", &key(), None, &chart),
        Verdict::Allowed { .. }
    ));
}

#[test]
fn a_tenant_secret_only_labels_could_allow_is_admitted_to_be_checked_when_read() {
    let labels = BTreeMap::from([("registry".to_owned(), "team-a".to_owned())]);
    let a = admission(
        Mode::Enforce,
        vec![tenant_policy(vec![TenantSecretRule {
            match_labels: labels.clone(),
            ..Default::default()
        }])],
    );
    let chart = naming(oci("oci://registry.example.com/team-a/web"), "anything");
    let Credentials::Tenant { labels: sets, .. } = a.credentials("team-a", &chart).unwrap() else {
        panic!("a tenant's Secret")
    };
    assert_eq!(sets, vec![labels]);
}

#[test]
fn a_tenant_secret_no_rule_allows_is_forbidden_in_every_mode_with_the_rule_to_add() {
    for mode in [Mode::Enforce, Mode::Permissive] {
        let a = admission(
            mode,
            vec![tenant_policy(vec![TenantSecretRule {
                names: vec!["own-pull".into()],
                ..Default::default()
            }])],
        );
        let chart = naming(
            oci("oci://registry.example.com/team-a/web"),
            "platform-pull",
        );
        let Verdict::Refused(why) = a.admit("team-a", &key(), None, &chart) else {
            panic!("{mode:?}: refused")
        };
        for needle in [
            "chart oci://registry.example.com/team-a/web names sourceSecretRef platform-pull",
            "which no tenantSecrets rule allows for its source oci://registry.example.com/team-a/web",
            "adds {names: [platform-pull]} to the tenantSecrets of a sources entry",
            "TenancyPolicy team-a",
        ] {
            assert!(why.contains(needle), "{mode:?}: {needle:?} not in {why}");
        }
        assert_eq!(
            a.fetch_scope("team-a", &chart),
            None,
            "{mode:?}: nothing fetched"
        );
    }
}

#[test]
fn a_tenant_secret_for_a_source_no_entry_holds_or_for_the_chart_home_is_refused() {
    let a = admission(
        Mode::Enforce,
        vec![tenant_policy(vec![TenantSecretRule::default()])],
    );
    let elsewhere = naming(oci("oci://registry.example.com/team-b/web"), "own-pull");
    let why = a.credentials("team-a", &elsewhere).unwrap_err();
    assert!(
        why.contains("which no tenantSecrets rule allows for its source"),
        "{why}"
    );
    let home = naming(
        Chart {
            chart_name: "web".into(),
            ..Chart::default()
        },
        "own-pull",
    );
    let why = a.credentials("team-a", &home).unwrap_err();
    assert!(
        why.contains("comes from the chart home, which takes no credentials"),
        "{why}"
    );
    let empty_rule = naming(oci("oci://registry.example.com/team-a/web"), "any-name");
    assert!(
        a.credentials("team-a", &empty_rule).is_ok(),
        "a rule with neither names nor labels allows every Secret of the namespace"
    );
}

#[test]
fn identities_read_as_the_cache_keys_them() {
    assert_eq!(Credentials::None.to_string(), "none");
    assert_eq!(
        platform("pull", "p", "oci://r/").to_string(),
        "platform:pull"
    );
    assert_eq!(
        platform("pull", "p", "oci://r/")
            .secret("tenancy-hub")
            .unwrap(),
        "Secret tenancy-hub/pull"
    );
}

fn verifying(url: &str, provider: crate::api::policy::VerifyProvider) -> SourceAccess {
    SourceAccess {
        verify: Some(crate::api::policy::SourceVerify {
            provider,
            secret_ref: SecretReference {
                name: "trust".into(),
            },
            trusted_identities: Vec::new(),
            match_oidc_identity: Vec::new(),
            transparency_log: None,
        }),
        ..entry(url, None)
    }
}

#[test]
fn every_governing_policys_signature_rule_holding_a_source_applies_and_none_relaxes_another() {
    use crate::api::policy::VerifyProvider::{Cosign, Notation};
    let strict = policy(
        "platform",
        &["team-a"],
        vec![verifying("oci://registry.example.com/", Cosign)],
    );
    let narrower = policy(
        "team-a",
        &["team-a"],
        vec![
            // A longer prefix with credentials and no rule: the wider rule still holds.
            entry("oci://registry.example.com/team-a", Some("pull")),
            verifying("oci://registry.example.com/team-a/web", Notation),
        ],
    );
    let a = admission(Mode::Enforce, vec![strict, narrower]);
    let providers = |chart: &Chart| -> Vec<(String, &'static str)> {
        a.trust("team-a", chart)
            .rules
            .iter()
            .map(|r| (r.policy.clone(), r.verify.provider.as_str()))
            .collect()
    };
    assert_eq!(
        providers(&oci("oci://registry.example.com/team-a/web/chart")),
        [
            ("platform".to_owned(), "cosign"),
            ("team-a".to_owned(), "notation")
        ]
    );
    assert_eq!(
        providers(&oci("oci://REGISTRY.example.com:443/team-a/other")),
        [("platform".to_owned(), "cosign")],
        "spelled another way, the same source"
    );
    // Credentials the tenant names change nothing of the rules.
    assert_eq!(
        providers(&naming(
            oci("oci://registry.example.com/team-a/other"),
            "own"
        )),
        [("platform".to_owned(), "cosign")]
    );
    assert!(providers(&oci("oci://elsewhere.example.com/x")).is_empty());
    assert!(providers(&Chart::default()).is_empty(), "the chart home");
    assert!(
        a.trust("team-b", &oci("oci://registry.example.com/x"))
            .is_empty(),
        "a hub namespace no policy governs"
    );
}
