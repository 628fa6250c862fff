//! Unit tests of the manifest diff: Secrets masked, values from Secrets masked, the names of its sides, and why it cannot be made.

use super::*;
use crate::{
    member::fake::{self, FakeLink},
    plan::Job,
};

fn key(k: &str) -> ReleaseKey {
    k.parse().unwrap()
}

/// Release `k` as planned, its values taking `token` from a Secret.
fn from_secret(k: &str, token: &str) -> Release {
    let Job::Apply { release, .. } = fake::apply(k, "h") else {
        unreachable!("an apply job")
    };
    let mut release = *release;
    release.values = Some(serde_json::json!({"token": token, "owner": "member-1"}));
    release.masked = Masked::new(vec![token.into()]);
    release
}

const MANIFEST: &str = "---\n# Source: web/templates/secret.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: web\ndata:\n  password: aHVudGVyMg==\nstringData:\n  token: s3cr3t\n---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  motd: hello\n";

#[test]
fn secret_values_are_masked_and_everything_else_is_kept_as_it_is() {
    let out = mask_secrets(MANIFEST, b"salt");
    assert!(
        !out.contains("aHVudGVyMg==") && !out.contains("s3cr3t"),
        "{out}"
    );
    assert!(out.contains("password: '*** ("), "{out}");
    assert!(out.contains("# Source: web/templates/secret.yaml\n"));
    assert!(out.ends_with("---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  motd: hello\n"), "{out}");
    assert_eq!(out, mask_secrets(MANIFEST, b"salt"), "masking is stable");
}

#[test]
fn a_changed_secret_value_still_shows_as_a_change_without_showing_the_value() {
    let changed = MANIFEST.replace("s3cr3t", "0th3r");
    let diff = unified(
        &mask_secrets(MANIFEST, b"k"),
        &mask_secrets(&changed, b"k"),
        "a",
        "b",
    );
    let lines: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---"))
        .collect();
    assert_eq!(lines.len(), 2, "{diff}");
    assert!(lines[0].starts_with("-  token: '*** (") && lines[1].starts_with("+  token: '*** ("));
    assert!(!diff.contains("s3cr3t") && !diff.contains("0th3r"));
}

#[test]
fn a_document_that_does_not_parse_is_hidden_if_it_may_hold_a_secret() {
    let out = mask_secrets("kind: Secret\ndata: [unclosed\n", b"k");
    assert!(!out.contains("unclosed") && out.contains("hidden"), "{out}");
}

#[test]
fn a_secrets_earlier_content_in_the_deployed_values_is_masked_too_and_open_values_are_not() {
    let mut r = from_secret("member-1/team/web", "new-s3cr3t");
    let deployed = Deployed {
        manifest: "token: old-s3cr3t\nowner: member-1\n".into(),
        values: serde_json::json!({"token": "old-s3cr3t", "owner": "member-1"}),
    };
    let masks = masks_of(&r, &deployed);
    assert_eq!(
        masks.redact(&deployed.manifest),
        "token: ******\nowner: member-1\n"
    );
    assert_eq!(masks.redact("token: new-s3cr3t"), "token: ******");
    // A release reading no Secret masks nothing.
    r.masked = Default::default();
    assert_eq!(masks_of(&r, &deployed).redact("old-s3cr3t"), "old-s3cr3t");
}

#[test]
fn a_diff_names_the_revisions_it_compares_and_is_none_when_nothing_changes() {
    let k = key("member-1/team-a/web");
    let asked = |action, revision| Asked {
        key: &k,
        release: None,
        action,
        revision,
    };
    let none = Masked::default();
    assert_eq!(
        diff_of(
            asked(Action::Upgrade, Some(3)),
            &none,
            "replicas: 1\n",
            "replicas: 2\n",
            b"k"
        )
        .as_deref(),
        Some(
            "--- member-1/team-a/web (revision 3)\n+++ member-1/team-a/web (revision 4)\n@@ -1 +1 @@\n-replicas: 1\n+replicas: 2\n"
        )
    );
    assert_eq!(
        diff_of(
            asked(Action::Upgrade, Some(3)),
            &none,
            "a: 1\n",
            "a: 1\n",
            b"k"
        ),
        None
    );
    let install = diff_of(asked(Action::Install, None), &none, "", "a: 1\n", b"k").unwrap();
    assert!(
        install.starts_with("--- /dev/null\n+++ member-1/team-a/web (revision 1)\n"),
        "{install}"
    );
    let uninstall = diff_of(asked(Action::Uninstall, Some(5)), &none, "a: 1\n", "", b"k").unwrap();
    assert!(
        uninstall.starts_with("--- member-1/team-a/web (revision 5)\n+++ /dev/null\n"),
        "{uninstall}"
    );
}

/// A chart rendering a Secret with a known value, and a values entry from a hub Secret that the
/// chart writes into a ConfigMap: neither value is in the diff, on either side.
#[test]
fn a_diff_holds_neither_a_rendered_secrets_value_nor_a_value_taken_from_a_secret() {
    let k = key("member-1/team-a/web");
    let release = from_secret("member-1/team-a/web", "from-hub-s3cr3t-2");
    let manifest = |replicas: u8, token: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web\nstringData:\n  password: known-literal-pw\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  token: {token}\n  replicas: \"{replicas}\"\n"
        )
    };
    let deployed = Deployed {
        manifest: manifest(1, "from-hub-s3cr3t-1"),
        values: serde_json::json!({"token": "from-hub-s3cr3t-1", "owner": "member-1"}),
    };
    let asked = Asked {
        key: &k,
        release: Some(&release),
        action: Action::Upgrade,
        revision: Some(1),
    };
    let masks = masks_of(&release, &deployed);
    let diff = diff_of(
        asked,
        &masks,
        &deployed.manifest,
        &manifest(2, "from-hub-s3cr3t-2"),
        b"k",
    )
    .unwrap();
    assert!(diff.contains("+  replicas: \"2\""), "{diff}");
    for secret in ["known-literal-pw", "from-hub-s3cr3t-1", "from-hub-s3cr3t-2"] {
        assert!(!diff.contains(secret), "{secret} shown:\n{diff}");
    }
}

#[tokio::test]
async fn an_uninstall_masks_every_value_its_revision_was_given_and_an_unreadable_record_says_so() {
    let renderer = Renderer {
        helm: HelmOptions::default(),
        cache: Arc::new(
            ChartCache::open(
                tempfile::tempdir().unwrap().path(),
                1 << 20,
                "helm".into(),
                Arc::new(crate::metrics::Metrics::new()),
            )
            .unwrap(),
        ),
    };
    let link = FakeLink::new("member-1");
    link.set_manifest(
        "member-1/team-a/web",
        4,
        Deployed {
            manifest: "kind: ConfigMap\ndata:\n  token: was-from-a-secret\n".into(),
            values: serde_json::json!({"token": "was-from-a-secret"}),
        },
    );
    let k = key("member-1/team-a/web");
    let asked = Asked {
        key: &k,
        release: None,
        action: Action::Uninstall,
        revision: Some(4),
    };
    let diff = compare(&renderer, link.as_ref(), asked, &RenderFor::default(), b"k")
        .await
        .unwrap()
        .unwrap();
    assert!(diff.contains("-  token: ******"), "{diff}");
    assert!(!diff.contains("was-from-a-secret"), "{diff}");
    link.fail_manifest(|cluster| crate::member::error::LinkError::NotReported { cluster });
    let unmade = compare(&renderer, link.as_ref(), asked, &RenderFor::default(), b"k")
        .await
        .unwrap_err();
    assert!(
        unmade
            .to_string()
            .starts_with("its deployed manifest cannot be read"),
        "{unmade}"
    );
}
