//! Tests of the Git source rules and of the admission of Git charts: hostile paths, URL tricks and refs first.

use super::*;
use crate::api::crd::{Chart, GitRef, GitSource};
use crate::api::key::{ClusterNamespace, ReleaseKey};
use crate::api::policy::{Impersonation, SourceAccess, TenancyPolicySpec};
use crate::policy::{
    Admission, Mode, NamedPolicy, Scope, Verdict, access::Credentials, source::SourceUrl,
};

fn access(paths: &[&str], branches: &[&str], tags: &[&str]) -> GitAccess {
    GitAccess {
        paths: paths.iter().map(|s| s.to_string()).collect(),
        branches: branches.iter().map(|s| s.to_string()).collect(),
        tags: tags.iter().map(|s| s.to_string()).collect(),
        ..GitAccess::default()
    }
}

fn branch(name: &str) -> GitRef {
    GitRef {
        branch: Some(name.into()),
        ..GitRef::default()
    }
}

fn git_chart(url: &str, path: &str, reference: GitRef) -> Chart {
    Chart {
        chart_name: "web".into(),
        git: Some(GitSource {
            url: url.into(),
            reference,
            path: path.into(),
            interval: None,
        }),
        ..Chart::default()
    }
}

fn policy(sources: Vec<SourceAccess>) -> Admission {
    Admission {
        mode: Mode::Enforce,
        policies: vec![NamedPolicy::new(
            "team-a",
            TenancyPolicySpec {
                hub_namespaces: vec!["team-a".into()],
                clusters: vec!["member-1".into()],
                namespaces: vec!["team-a".into()],
                chart_sources: vec!["https://git.example.com/".into()],
                sources,
                impersonate: Some(Impersonation {
                    user: "team-a-deployer".into(),
                    groups: vec![],
                    namespace_role: None,
                }),
                ..TenancyPolicySpec::default()
            },
        )],
        operator_namespace: "tenancy-hub".into(),
    }
}

fn team_a_git() -> Admission {
    policy(vec![SourceAccess {
        url: "https://git.example.com/team-a/".into(),
        secret_ref: Some(crate::api::crd::SecretReference {
            name: "git-team-a".into(),
        }),
        git: Some(access(&["charts"], &["main", "release-*"], &["v*"])),
        ..SourceAccess::default()
    }])
}

fn key() -> ReleaseKey {
    ReleaseKey {
        scope: ClusterNamespace::new("member-1".parse().unwrap(), "team-a").unwrap(),
        release: "web".into(),
    }
}

fn verdict(admission: &Admission, chart: &Chart) -> Result<(), String> {
    match admission.admit("team-a", &key(), None, chart) {
        Verdict::Allowed { .. } => Ok(()),
        Verdict::Refused(why) => Err(why),
    }
}

#[test]
fn paths_that_climb_out_are_refused_however_they_are_written() {
    for hostile in [
        "..",
        "../other",
        "charts/../../etc",
        "charts/%2e%2e/secrets",
        "charts/%2E%2e",
        "charts/.%2e/x",
        "/etc/passwd",
        "charts\\..\\x",
        "charts/\u{0}x",
    ] {
        assert!(clean_path(hostile).is_err(), "{hostile:?} was accepted");
    }
    assert_eq!(clean_path("./charts//web/").unwrap(), "charts/web");
    assert_eq!(clean_path("charts/..x/web").unwrap(), "charts/..x/web");
}

#[test]
fn path_prefixes_hold_whole_segments_only() {
    assert!(path_holds("charts", "charts"));
    assert!(path_holds("charts", "charts/web"));
    assert!(!path_holds("charts", "charts-evil/web"));
    assert!(!path_holds("charts/web", "charts"));
    assert!(path_holds("", "anything/at/all"));
    let a = access(&["charts/"], &[], &[]);
    assert!(path_allowed(&a, "charts/web"));
    assert!(!path_allowed(&a, "chartsx/web"));
    assert!(path_allowed(&access(&[], &[], &[]), "values/x.yaml"));
    // A prefix that itself climbs out holds nothing.
    assert!(!path_allowed(&access(&["../"], &[], &[]), "x"));
}

#[test]
fn refs_are_allowed_by_their_patterns_and_commits_only_when_asked() {
    let a = access(&[], &["main", "release-*"], &["v*"]);
    assert!(ref_allowed(&a, &RefKind::Branch("main".into())).is_ok());
    assert!(ref_allowed(&a, &RefKind::Branch("release-2".into())).is_ok());
    let why = ref_allowed(&a, &RefKind::Branch("mainx".into())).unwrap_err();
    assert!(
        why.contains("branch mainx") && why.contains("main, release-*"),
        "{why}"
    );
    assert!(ref_allowed(&a, &RefKind::Tag("v1.0.0".into())).is_ok());
    assert!(ref_allowed(&a, &RefKind::Tag("1.0.0".into())).is_err());
    // A range picks among the tags the entry allows (see `Trust::tags`): any pattern will do.
    assert!(ref_allowed(&a, &RefKind::Semver(">=1".into())).is_ok());
    let why = ref_allowed(&access(&[], &["*"], &[]), &RefKind::Semver(">=1".into())).unwrap_err();
    assert!(
        why.contains("semver >=1") && why.contains("no tag"),
        "{why}"
    );
    let commit = RefKind::Commit("0".repeat(40));
    assert!(
        ref_allowed(&a, &commit)
            .unwrap_err()
            .contains("allowCommits")
    );
    let mut b = a.clone();
    b.allow_commits = true;
    assert!(ref_allowed(&b, &commit).is_ok());
    assert!(tag_allowed(&a, "v2").is_ok() && tag_allowed(&a, "latest").is_err());
}

#[test]
fn git_urls_are_compared_in_normal_form_with_the_trailing_git_dropped() {
    let name = |text: &str| SourceUrl::git(text).map(|(n, _)| n.to_string());
    let same = "https://git.example.com/team-a/charts";
    for text in [
        "https://git.example.com/team-a/charts.git",
        "HTTPS://GIT.EXAMPLE.COM/team-a/charts",
        "https://git.example.com:443/team-a/charts.git",
        "https://git.example.com./team-a/charts/",
        "https://git.example.com/team-a/x/../charts.git",
        "https://git.example.com/team-a/x/%2e%2e/charts",
    ] {
        assert_eq!(name(text).unwrap(), same, "{text}");
    }
    let (_, fetch) = SourceUrl::git("https://git.example.com:443/team-a/charts.git").unwrap();
    assert_eq!(fetch, "https://git.example.com/team-a/charts.git");
    assert_eq!(
        name("ssh://git@Git.Example.com:22/team-a/charts.git").unwrap(),
        "ssh://git@git.example.com/team-a/charts"
    );
    assert_eq!(
        name("ssh://git@git.example.com:2222/team-a/charts").unwrap(),
        "ssh://git@git.example.com:2222/team-a/charts"
    );
    assert_eq!(
        name("ssh://git@git.example.com:443/team-a/charts").unwrap(),
        "ssh://git@git.example.com:443/team-a/charts"
    );
    // Credentials, queries, encoded separators and other schemes are refused.
    for hostile in [
        "https://user:pw@git.example.com/team-a/charts",
        "https://token@git.example.com/team-a/charts",
        "ssh://git:pw@git.example.com/team-a/charts",
        "ssh://g%69t@git.example.com/team-a/charts",
        "https://git.example.com/team-a/charts?x=1",
        "ssh://git@git.example.com/team-a/charts#main",
        "https://git.example.com/team-a%2F..%2Fteam-b/charts",
        "git://git.example.com/team-a/charts",
        "file:///srv/git/charts",
        "git@git.example.com:team-a/charts.git",
    ] {
        assert!(SourceUrl::git(hostile).is_err(), "{hostile} was accepted");
    }
    // `charts.git-evil` is another repository, not `charts`.
    let prefix = SourceUrl::git("https://git.example.com/team-a/charts.git")
        .unwrap()
        .0;
    assert!(
        !prefix.holds(
            &SourceUrl::git("https://git.example.com/team-a/charts.git-evil")
                .unwrap()
                .0
        )
    );
}

#[test]
fn a_git_chart_outside_every_git_prefix_is_forbidden_naming_the_rule() {
    let admission = team_a_git();
    for (url, needle) in [
        (
            "https://git.example.com/team-b/charts.git",
            "under no Git sources entry",
        ),
        (
            "https://git.example.com/team-a-evil/charts",
            "under no Git sources entry",
        ),
        (
            "https://git.example.com.evil.io/team-a/charts",
            "under no Git sources entry",
        ),
        (
            "https://git.example.com/team-a/../team-b/charts",
            "under no Git sources entry",
        ),
        (
            "https://git.example.com/team-a/%2e%2e/team-b/charts",
            "under no Git sources entry",
        ),
        (
            "ssh://git@git.example.com/team-a/charts",
            "under no Git sources entry",
        ),
    ] {
        let why = verdict(&admission, &git_chart(url, "charts/web", branch("main"))).unwrap_err();
        assert!(
            why.contains(needle) && why.contains("TenancyPolicy team-a"),
            "{url}: {why}"
        );
        assert_eq!(
            admission.fetch_scope("team-a", &git_chart(url, "charts/web", branch("main"))),
            None,
            "{url} would be fetched"
        );
    }
    // An HTTP chartSources prefix holding the host allows no Git chart.
    let why = verdict(
        &admission,
        &git_chart(
            "https://git.example.com/team-c/charts",
            "charts/web",
            branch("main"),
        ),
    )
    .unwrap_err();
    assert!(why.contains("under no Git sources entry"), "{why}");
}

#[test]
fn a_git_chart_at_a_path_or_ref_the_entry_does_not_allow_is_forbidden() {
    let admission = team_a_git();
    let url = "https://git.example.com/team-a/charts.git";
    let why = verdict(&admission, &git_chart(url, "secrets/web", branch("main"))).unwrap_err();
    assert!(why.contains("path \"secrets/web\""), "{why}");
    let why = verdict(&admission, &git_chart(url, "charts/web", branch("dev"))).unwrap_err();
    assert!(why.contains("branch dev"), "{why}");
    let commit = GitRef {
        commit: Some("a".repeat(40)),
        ..GitRef::default()
    };
    assert!(
        verdict(&admission, &git_chart(url, "charts/web", commit))
            .unwrap_err()
            .contains("allowCommits")
    );
    let why = verdict(
        &admission,
        &git_chart(url, "charts/../../x", branch("main")),
    )
    .unwrap_err();
    assert!(why.contains("'..' segment"), "{why}");
    let two = GitRef {
        branch: Some("main".into()),
        tag: Some("v1".into()),
        ..GitRef::default()
    };
    assert!(
        verdict(&admission, &git_chart(url, "charts/web", two))
            .unwrap_err()
            .contains("exactly one")
    );
    let mut named = git_chart(url, "charts/web", branch("main"));
    named.chart_name = "../web".into();
    assert!(
        verdict(&admission, &named)
            .unwrap_err()
            .contains("plain chart name")
    );
}

#[test]
fn an_allowed_git_chart_is_fetched_from_its_repository_with_the_entrys_credentials() {
    let admission = team_a_git();
    let chart = git_chart(
        "https://GIT.example.com/team-a/charts.git",
        "charts/web",
        branch("release-1"),
    );
    verdict(&admission, &chart).unwrap();
    let Some(Scope::Under(scope, credentials, trust)) = admission.fetch_scope("team-a", &chart)
    else {
        panic!("no scope");
    };
    assert_eq!(scope.as_str(), "https://git.example.com/team-a/charts");
    assert!(trust.is_empty());
    assert_eq!(
        credentials,
        Credentials::Platform {
            secret: "git-team-a".into(),
            policy: "team-a".into(),
            prefix: "https://git.example.com/team-a".into(),
        }
    );
}

#[test]
fn a_git_entry_allows_no_helm_repository_and_an_http_entry_no_git_chart() {
    let admission = policy(vec![SourceAccess {
        url: "https://charts.example.com/team-a/".into(),
        git: Some(access(&[], &["*"], &["*"])),
        ..SourceAccess::default()
    }]);
    let repo = Chart {
        chart_name: "web".into(),
        repo: Some("https://charts.example.com/team-a/stable".into()),
        ..Chart::default()
    };
    assert!(
        verdict(&admission, &repo)
            .unwrap_err()
            .contains("not in chartSources")
    );
    let http = policy(vec![SourceAccess {
        url: "https://charts.example.com/team-a/".into(),
        ..SourceAccess::default()
    }]);
    let git = git_chart(
        "https://charts.example.com/team-a/charts",
        "web",
        branch("main"),
    );
    assert!(
        verdict(&http, &git)
            .unwrap_err()
            .contains("under no Git sources entry")
    );
}

#[test]
fn a_loopback_git_host_is_refused_in_every_mode_unless_a_git_entry_lists_it() {
    let mut admission = team_a_git();
    admission.mode = Mode::Permissive;
    let chart = git_chart(
        "ssh://git@127.0.0.1:2222/team-a/charts",
        "charts/web",
        branch("main"),
    );
    let why = match admission.admit("team-a", &key(), None, &chart) {
        Verdict::Refused(why) => why,
        other => panic!("{other:?}"),
    };
    assert!(why.contains("loopback"), "{why}");
    let listed = policy(vec![SourceAccess {
        url: "ssh://git@127.0.0.1:2222/team-a".into(),
        git: Some(access(&[], &["main"], &[])),
        ..SourceAccess::default()
    }]);
    verdict(&listed, &chart).unwrap();
}

#[test]
fn plain_http_git_is_refused_unless_the_git_entry_holding_it_says_insecure() {
    let chart = git_chart(
        "http://git.example.com/team-a/charts",
        "charts/web",
        branch("main"),
    );
    let entry = |url: &str, insecure: bool| SourceAccess {
        url: url.into(),
        git: Some(GitAccess {
            insecure,
            ..access(&[], &["main"], &[])
        }),
        ..SourceAccess::default()
    };
    let open = policy(vec![entry("https://git.example.com/team-a/", false)]);
    let why = verdict(&open, &chart).unwrap_err();
    assert!(why.contains("plain http"), "{why}");
    // Listing the http prefix is not enough: the entry must say insecure, in every mode.
    let mut listed = policy(vec![entry("http://git.example.com/team-a/", false)]);
    for mode in [Mode::Enforce, Mode::Permissive] {
        listed.mode = mode;
        let why = verdict(&listed, &chart).unwrap_err();
        assert!(
            why.contains("\"http://git.example.com/team-a/charts\"")
                && why.contains("plain http")
                && why.contains("insecure: true")
                && why.contains("team-a"),
            "{why}"
        );
        assert_eq!(listed.fetch_scope("team-a", &chart), None);
    }
    let insecure = policy(vec![entry("http://git.example.com/team-a/", true)]);
    verdict(&insecure, &chart).unwrap();
    assert!(insecure.fetch_scope("team-a", &chart).is_some());
}

#[test]
fn credentials_go_over_plain_http_only_from_an_entry_that_says_insecure() {
    let chart = git_chart(
        "http://git.example.com/team-a/charts",
        "charts/web",
        branch("main"),
    );
    let entry = |url: &str, insecure: bool, secret: Option<&str>| SourceAccess {
        url: url.into(),
        secret_ref: secret.map(|name| crate::api::crd::SecretReference { name: name.into() }),
        git: Some(GitAccess {
            insecure,
            ..access(&[], &["main"], &[])
        }),
        ..SourceAccess::default()
    };
    // The longest prefix gives the credentials; it does not say insecure, so they stay home.
    let mixed = policy(vec![
        entry("http://git.example.com/team-a/", true, None),
        entry(
            "http://git.example.com/team-a/charts",
            false,
            Some("git-pass"),
        ),
    ]);
    let why = verdict(&mixed, &chart).unwrap_err();
    assert!(
        why.contains("git-pass") && why.contains("plain http") && why.contains("insecure: true"),
        "{why}"
    );
    assert_eq!(mixed.fetch_scope("team-a", &chart), None);
    let lab = policy(vec![entry(
        "http://git.example.com/team-a/",
        true,
        Some("git-pass"),
    )]);
    verdict(&lab, &chart).unwrap();
    assert!(matches!(
        lab.credentials("team-a", &chart),
        Ok(Credentials::Platform { .. })
    ));
    // Over https the flag changes nothing.
    let https = git_chart(
        "https://git.example.com/team-a/charts",
        "charts/web",
        branch("main"),
    );
    let secure = policy(vec![entry(
        "https://git.example.com/team-a/",
        false,
        Some("git-pass"),
    )]);
    verdict(&secure, &https).unwrap();
}

#[test]
fn a_semver_range_is_resolved_among_the_tags_the_entries_holding_its_path_allow() {
    let mut admission = policy(vec![
        SourceAccess {
            url: "https://git.example.com/team-a/".into(),
            git: Some(access(&["charts"], &["main"], &["v1.2*", "v1.1.0"])),
            ..SourceAccess::default()
        },
        SourceAccess {
            url: "https://git.example.com/team-a/charts".into(),
            git: Some(access(&["charts/web"], &[], &["stable-*", "v1.2*"])),
            ..SourceAccess::default()
        },
        // Holds the repository but not the path: its tags count for nothing.
        SourceAccess {
            url: "https://git.example.com/".into(),
            git: Some(access(&["other"], &[], &["*"])),
            ..SourceAccess::default()
        },
    ]);
    let range = GitRef {
        semver: Some(">=1.0.0".into()),
        ..GitRef::default()
    };
    let chart = git_chart(
        "https://git.example.com/team-a/charts.git",
        "charts/web",
        range,
    );
    verdict(&admission, &chart).unwrap();
    let patterns = |admission: &Admission| admission.trust("team-a", &chart).tags;
    assert_eq!(
        patterns(&admission),
        Some(vec![
            "stable-*".to_owned(),
            "v1.1.0".to_owned(),
            "v1.2*".to_owned()
        ])
    );
    let Some(Scope::Under(_, _, trust)) = admission.fetch_scope("team-a", &chart) else {
        panic!("no scope");
    };
    assert_eq!(trust.tags, patterns(&admission));
    // Signatures are what `is_empty` speaks of; tag patterns are no signature rule.
    assert!(trust.is_empty());
    // A branch is not filtered by tags.
    let main = git_chart(
        "https://git.example.com/team-a/charts",
        "charts/web",
        branch("main"),
    );
    assert_eq!(admission.trust("team-a", &main).tags, None);
    // Permissive, with no entry holding the repository, every tag may be picked.
    admission.mode = Mode::Permissive;
    admission.policies[0].spec.sources.clear();
    assert_eq!(patterns(&admission), None);
}
