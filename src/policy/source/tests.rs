//! Tests of chart source rules.

use super::*;

fn normal(text: &str) -> String {
    SourceUrl::parse(text).unwrap().0
}

fn prefix(text: &str) -> SourceUrl {
    SourceUrl::parse(text).unwrap()
}

fn holds(prefix_text: &str, url: &str) -> bool {
    prefix(prefix_text).holds(&prefix(url))
}

#[test]
fn dot_segments_are_resolved_before_the_prefix_check_even_when_percent_encoded() {
    for climb in [
        "http://127.0.0.1:8080/team-e/../team-x",
        "http://127.0.0.1:8080/team-e/%2e%2e/team-x",
        "http://127.0.0.1:8080/team-e/%2E%2e/team-x",
        "http://127.0.0.1:8080/team-e/.%2e/team-x",
        "http://127.0.0.1:8080/team-e/./../team-x",
        "http://127.0.0.1:8080/team-e\\..\\team-x",
    ] {
        assert_eq!(normal(climb), "http://127.0.0.1:8080/team-x", "{climb}");
        assert!(!holds("http://127.0.0.1:8080/team-e/", climb), "{climb}");
    }
    assert!(holds(
        "http://127.0.0.1:8080/team-e/",
        "http://127.0.0.1:8080/team-e/sub/../stable"
    ));
}

#[test]
fn an_encoded_slash_or_backslash_is_refused() {
    for bad in [
        "http://h/team-e/..%2fteam-x",
        "http://h/team-e/..%2Fteam-x",
        "http://h/team-e/..%5cteam-x",
    ] {
        assert_eq!(
            SourceUrl::parse(bad),
            Err(Refused::EncodedSeparator),
            "{bad}"
        );
    }
}

#[test]
fn scheme_host_case_default_ports_and_a_trailing_dot_do_not_matter() {
    assert_eq!(
        normal("HTTPS://Charts.EXAMPLE.com:443/Stable/"),
        "https://charts.example.com/Stable"
    );
    assert_eq!(normal("https://h/a//"), "https://h/a");
    assert_eq!(normal("http://h:80"), "http://h/");
    assert_eq!(
        normal("http://h.example.:8080/x"),
        "http://h.example:8080/x"
    );
    assert!(holds(
        "https://charts.example.com/",
        "https://CHARTS.example.com:443/a"
    ));
    assert!(!holds("http://h:8080/", "http://h:8081/"));
    assert!(!holds("http://h/", "https://h/"), "a scheme is a prefix's");
}

#[test]
fn a_prefix_matches_whole_segments_with_or_without_its_trailing_slash() {
    for (p, url, expected) in [
        (
            "https://c.example.com/team-a/",
            "https://c.example.com/team-a",
            true,
        ),
        (
            "https://c.example.com/team-a",
            "https://c.example.com/team-a/web",
            true,
        ),
        (
            "https://c.example.com/team-a/",
            "https://c.example.com/team-a-x/",
            false,
        ),
        (
            "https://c.example.com",
            "https://c.example.com.evil.io/",
            false,
        ),
        ("https://c.example.com/", "https://c.example.com/", true),
        (
            "oci://reg.example.com/team-a/",
            "oci://reg.example.com/team-a/web",
            true,
        ),
        (
            "oci://reg.example.com/team-a/",
            "oci://reg.example.com/team-ab/web",
            false,
        ),
    ] {
        assert_eq!(holds(p, url), expected, "{p} holds {url}");
    }
}

#[test]
fn queries_fragments_and_credentials_are_refused_in_a_repository() {
    assert_eq!(SourceUrl::parse("http://h/x?x=1"), Err(Refused::Query));
    assert_eq!(SourceUrl::parse("http://h/x#top"), Err(Refused::Query));
    for bad in ["https://u:secret@h/", "https://u@h/", "oci://u:p@reg/x"] {
        assert_eq!(SourceUrl::parse(bad), Err(Refused::Credentials), "{bad}");
    }
    for (bad, says) in [
        ("file:///etc", "uses scheme file://, which is not allowed"),
        ("ftp://x/", "uses scheme ftp://, which is not allowed"),
        ("charts.example.com", "is not a URL"),
        ("http://", "is not a URL"),
    ] {
        let refused = SourceUrl::parse(bad).unwrap_err().to_string();
        assert!(refused.contains(says), "{bad}: {refused}");
    }
}

#[test]
fn oci_references_are_normalised_as_their_registrys_url() {
    assert_eq!(
        normal("oci://Reg.Example.COM:443/team-a/web"),
        "oci://reg.example.com/team-a/web"
    );
    assert_eq!(
        normal("oci://reg.example.com:5000/team-a/web@sha256:ab"),
        "oci://reg.example.com:5000/team-a/web@sha256:ab"
    );
    assert_eq!(
        SourceUrl::parse("oci://reg/team-a/%2e%2e/x"),
        Err(Refused::Percent)
    );
    assert!(!holds(
        "oci://reg/team-a/",
        "oci://reg/team-a/../team-b/web"
    ));
    assert_eq!(
        normal("oci://2130706433/charts/web"),
        "oci://127.0.0.1/charts/web"
    );
}

#[test]
fn loopback_link_local_and_metadata_hosts_are_internal_however_written() {
    for url in [
        "http://127.0.0.1:8080/",
        "http://127.1.2.3/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://[::1]/",
        "http://[0:0:0:0:0:0:0:1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://localhost:8080/",
        "http://LOCALHOST./",
        "http://charts.localhost/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://metadata/",
        "oci://127.0.0.1:5000/charts",
        "oci://localhost/charts",
    ] {
        assert!(prefix(url).internal().is_some(), "{url}");
    }
    for url in [
        "https://charts.example.com/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://[2001:db8::1]/",
        "http://128.0.0.1/",
        "oci://registry.example.com/x",
    ] {
        assert_eq!(prefix(url).internal(), None, "{url}");
    }
}

#[test]
fn a_location_is_taken_relative_to_where_it_was_found_and_kept_under_the_scope() {
    let scope = prefix("http://h:8080/team-e/");
    let index = Url::parse("http://h:8080/team-e/stable/index.yaml").unwrap();
    let go = |location: &str| follow(&index, location, &scope);
    assert_eq!(
        go("web-1.0.0.tgz").unwrap().as_str(),
        "http://h:8080/team-e/stable/web-1.0.0.tgz"
    );
    assert_eq!(
        go("../charts/web.tgz").unwrap().as_str(),
        "http://h:8080/team-e/charts/web.tgz"
    );
    assert_eq!(
        go("/team-e/web.tgz?sig=1").unwrap().as_str(),
        "http://h:8080/team-e/web.tgz?sig=1",
        "a query names no other place"
    );
    for (location, says) in [
        (
            "../../team-x/web.tgz",
            "http://h:8080/team-x/web.tgz, outside",
        ),
        (
            "%2e%2e/%2e%2e/team-x/web.tgz",
            "http://h:8080/team-x/web.tgz, outside",
        ),
        (
            "http://h:8080/team-x/web.tgz",
            "http://h:8080/team-x/web.tgz, outside",
        ),
        (
            "http://169.254.169.254/latest",
            "http://169.254.169.254/latest, outside",
        ),
        (
            "//evil.example/team-e/web.tgz",
            "http://evil.example/team-e/web.tgz, outside",
        ),
        (
            "HTTP://H:8080/team-e/..%2f../x",
            "must not carry an encoded",
        ),
        ("file:///etc/passwd", "scheme file://"),
        (
            "http://u:secret@h:8080/team-e/x",
            "must not carry credentials",
        ),
    ] {
        let why = go(location).unwrap_err();
        assert!(why.contains(says), "{location}: {why}");
        assert!(!why.contains("secret"), "{why}");
    }
}

#[test]
fn what_a_repository_says_is_shown_short_and_printable() {
    let long = format!("http://h/{}", "a".repeat(1000));
    let why = follow(
        &Url::parse("http://h/x/index.yaml").unwrap(),
        &long,
        &prefix("http://h/x/"),
    )
    .unwrap_err();
    assert!(why.len() < SHOWN + 100, "{why}");
    assert_eq!(shown("a\nb\u{1b}c"), "a?b?c");
}

#[test]
fn credentials_in_urls_never_reach_a_message() {
    assert_eq!(
        redact(
            "Error: looks like \"https://user:p%40ss@charts.example.com/x\" is not valid; see http://other:1/y"
        ),
        "Error: looks like \"https://charts.example.com/x\" is not valid; see http://other:1/y"
    );
    assert_eq!(redact("oci://u:p@host"), "oci://host");
    assert_eq!(redact("no url here"), "no url here");
}
