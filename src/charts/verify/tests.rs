//! Tests of the signature verifier's client: requests against the shared fixtures, answers, the process and the verdict cache.

use std::{
    io::Write as _,
    path::Path,
    sync::atomic::{AtomicUsize, Ordering},
};

use super::*;

/// The protocol's shared fixtures, which the verifier's `go test` checks too
/// (`verifier/main_test.go`): what the operator writes, and what the verifier answers.
const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/charts/verifier/testdata/protocol"
);

fn fixture_text(name: &str) -> String {
    let path = Path::new(FIXTURES).join(format!("{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

fn fixture(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture_text(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

const DIGEST: &str = "sha256:0b3fd7bcbba1b2b8e1bbd4e4f3c2d1e0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4";
const DOCKER_CONFIG: &str =
    r#"{"auths":{"registry.example:5000":{"auth":"cGxhdGZvcm06dG9rZW4="}}}"#;

fn oci_chart() -> OciChart {
    OciChart {
        reference: "registry.example:5000/charts/app".into(),
        digest: DIGEST.into(),
        registry: RegistryAccess {
            docker_config: Some(DOCKER_CONFIG.into()),
            ca_bundle: Some(
                "-----BEGIN CERTIFICATE-----\nMIIB…\n-----END CERTIFICATE-----\n".into(),
            ),
        },
    }
}

fn cosign() -> Check {
    Check::Cosign {
        chart: oci_chart(),
        public_keys: vec!["-----BEGIN PUBLIC KEY-----\nMFkw…\n-----END PUBLIC KEY-----\n".into()],
        keyless: None,
    }
}

fn keyless() -> Check {
    Check::Cosign {
        chart: oci_chart(),
        public_keys: Vec::new(),
        keyless: Some(Keyless {
            certificates: vec![
                "-----BEGIN CERTIFICATE-----\nMIIC…\n-----END CERTIFICATE-----\n".into(),
            ],
            rekor_public_key: Some(
                "-----BEGIN PUBLIC KEY-----\nMFkw…\n-----END PUBLIC KEY-----\n".into(),
            ),
            identities: vec![OidcIdentityMatch {
                issuer: r"https://issuer\.lab\.test".into(),
                subject: r"ci@lab\.test".into(),
            }],
            transparency_log: TransparencyLog::Require,
        }),
    }
}

fn notation() -> Check {
    Check::Notation {
        chart: oci_chart(),
        trust_store: "-----BEGIN CERTIFICATE-----\nMIIC…\n-----END CERTIFICATE-----\n".into(),
        trusted_identities: vec!["x509.subject: C=US, ST=WA, O=Lab, CN=charts.lab".into()],
    }
}

fn provenance() -> Check {
    Check::Provenance {
        digest: DIGEST.into(),
        archive: "/var/cache/tenancy-hub/charts/sha256-0b3fd7bcbba1b2b8e1bbd4e4f3c2d1e0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4".into(),
        provenance: Some("/var/cache/tenancy-hub/charts/.partial-1/app-1.0.0.tgz.prov".into()),
        file_name: "app-1.0.0.tgz".into(),
        keyring: b"mdAEkey".to_vec(),
    }
}

#[test]
fn every_request_is_the_shared_fixture_the_verifier_reads() {
    for (name, check) in [
        ("request-cosign", cosign()),
        ("request-cosign-keyless", keyless()),
        ("request-notation", notation()),
        ("request-provenance", provenance()),
    ] {
        let sent: serde_json::Value =
            serde_json::from_slice(&request(&check, Duration::from_secs(60))).unwrap();
        assert_eq!(sent, fixture(name), "{name}");
    }
}

#[test]
fn the_command_carries_no_argument_and_no_secret() {
    let binary = VerifierBinary::new("/opt/tenancy-hub-verify".into(), Duration::from_secs(60));
    let command = binary.command();
    let std = command.as_std();

    assert_eq!(std.get_args().count(), 0, "{std:?}");
    let shown = format!("{std:?}");
    assert!(!shown.contains("cGxhdGZvcm06dG9rZW4="), "{shown}");
    for (name, value) in std.get_envs() {
        let pair = format!("{name:?}={value:?}");
        assert!(!pair.contains("cGxhdGZvcm06dG9rZW4="), "{pair}");
    }
    // The credentials travel on stdin only.
    let stdin = String::from_utf8(request(&cosign(), Duration::from_secs(60))).unwrap();
    assert!(stdin.contains("cGxhdGZvcm06dG9rZW4="));
}

#[test]
fn registry_access_shows_no_credential_when_debugged() {
    let shown = format!("{:?}", cosign());

    assert!(!shown.contains("cGxhdGZvcm06dG9rZW4="), "{shown}");
    assert!(shown.contains("<hidden>"), "{shown}");
}

#[test]
fn a_request_without_prov_leaves_the_field_out_and_never_names_the_digest() {
    let Check::Provenance {
        digest,
        archive,
        file_name,
        keyring,
        ..
    } = provenance()
    else {
        unreachable!()
    };
    let check = Check::Provenance {
        digest,
        archive,
        provenance: None,
        file_name,
        keyring,
    };

    let sent: serde_json::Value =
        serde_json::from_slice(&request(&check, Duration::from_millis(10))).unwrap();

    assert_eq!(sent["timeoutSeconds"], 1, "a deadline of at least a second");
    assert!(sent["provenance"].get("provenance").is_none(), "{sent}");
    assert!(sent["provenance"].get("digest").is_none(), "{sent}");
}

#[test]
fn the_shared_answers_read_as_a_verdict_or_a_typed_error() {
    assert_eq!(
        parse_answer(fixture_text("answer-verified").as_bytes()).unwrap(),
        Verdict::Verified {
            by: "key sha256:5b1c8e1b2a0f3d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
                .into(),
            digest: DIGEST.into(),
        }
    );
    let Verdict::Refused { refusal, reason } =
        parse_answer(fixture_text("answer-refused").as_bytes()).unwrap()
    else {
        panic!("a refusal")
    };
    assert_eq!(refusal, Refusal::Untrusted);
    assert!(reason.contains("none made by a trusted key"), "{reason}");
    let error = parse_answer(fixture_text("answer-error").as_bytes()).unwrap_err();
    assert!(matches!(error, Error::Registry(_)), "{error:?}");
    assert!(error.retryable());
    assert!(error.to_string().contains("refused the credentials (401)"));
}

#[test]
fn every_refusal_code_and_error_kind_is_read() {
    for (code, refusal) in [
        ("unsigned", Refusal::Unsigned),
        ("untrusted", Refusal::Untrusted),
        ("mismatch", Refusal::Mismatch),
        ("invalid", Refusal::Invalid),
    ] {
        let answer =
            format!(r#"{{"protocol":1,"verified":false,"refused":"{code}","reason":"r"}}"#);
        let verdict = parse_answer(answer.as_bytes()).unwrap();
        assert_eq!(
            verdict,
            Verdict::Refused {
                refusal,
                reason: "r".into()
            }
        );
        assert_eq!(refusal.metric_label(), code);
    }
    for (kind, retryable) in [
        ("registry", true),
        ("trust", false),
        ("request", false),
        ("unsupported", false),
    ] {
        let answer = format!(
            r#"{{"protocol":1,"verified":false,"error":{{"kind":"{kind}","message":"m"}}}}"#
        );
        let error = parse_answer(answer.as_bytes()).unwrap_err();
        assert_eq!(error.metric_label(), kind);
        assert_eq!(error.retryable(), retryable, "{kind}");
    }
}

#[test]
fn answers_this_operator_does_not_read_say_to_rebuild_the_verifier() {
    for answer in [
        "not json",
        r#"{"protocol":2,"verified":true,"by":"k","digest":"d"}"#,
        r#"{"protocol":1,"verified":true,"digest":"d"}"#,
        r#"{"protocol":1,"verified":false,"refused":"maybe"}"#,
        r#"{"protocol":1,"verified":false,"error":{"kind":"cosmic","message":"m"}}"#,
    ] {
        let error = parse_answer(answer.as_bytes()).unwrap_err();
        assert!(matches!(error, Error::Answer(_)), "{answer}: {error:?}");
        assert!(error.to_string().contains("kind/verifier.sh"), "{error}");
    }
}

/// A fake verifier: a Python program with `body`, installed as an executable in `dir`.
fn scripted(dir: &Path, body: &str) -> PathBuf {
    let source = dir.join("fake-verifier.py");
    let path = dir.join("fake-verifier");
    let mut file = std::fs::File::create(&source).unwrap();
    writeln!(
        file,
        "#!/usr/bin/env python3\nimport json, sys, time\n{body}"
    )
    .unwrap();
    drop(file);
    // Installed by another process, so no child forked meanwhile holds it open for writing.
    let installed = std::process::Command::new("install")
        .args(["-m", "755"])
        .arg(&source)
        .arg(&path)
        .status()
        .unwrap();
    assert!(installed.success());
    path
}

#[tokio::test]
async fn the_verifier_reads_the_request_on_stdin_and_its_answer_is_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json");
    let body = format!(
        "request = json.load(sys.stdin)\nopen({seen:?}, 'w').write(json.dumps(request))\n\
         print(json.dumps({{'protocol': 1, 'verified': True, 'by': 'key sha256:ab', 'digest': request['cosign']['digest']}}))",
        seen = seen.display().to_string()
    );
    let binary = VerifierBinary::new(scripted(dir.path(), &body), Duration::from_secs(30));

    let verdict = binary.run(&cosign()).await.unwrap();

    assert_eq!(
        verdict,
        Verdict::Verified {
            by: "key sha256:ab".into(),
            digest: DIGEST.into()
        }
    );
    let seen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(seen).unwrap()).unwrap();
    assert_eq!(seen["cosign"]["registry"]["dockerConfig"], DOCKER_CONFIG);
    assert_eq!(seen["timeoutSeconds"], 30);
}

#[tokio::test]
async fn a_verification_of_another_digest_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let body = "sys.stdin.read()\nprint(json.dumps({'protocol': 1, 'verified': True, 'by': 'k', 'digest': 'sha256:other'}))";
    let binary = VerifierBinary::new(scripted(dir.path(), body), Duration::from_secs(30));

    let error = binary.run(&cosign()).await.unwrap_err();

    assert!(matches!(error, Error::OtherDigest { .. }), "{error:?}");
}

#[tokio::test]
async fn a_verifier_that_does_not_answer_is_stopped_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let binary = VerifierBinary::new(
        scripted(dir.path(), "time.sleep(600)"),
        Duration::from_millis(1),
    );
    let started = std::time::Instant::now();

    let error = binary.run(&cosign()).await.unwrap_err();

    assert!(matches!(error, Error::Timeout(_)), "{error:?}");
    assert!(error.retryable());
    assert!(started.elapsed() < GRACE + Duration::from_secs(5));
}

#[tokio::test]
async fn an_answer_past_the_bound_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("sys.stdout.write('x' * {})", MAX_ANSWER + 1);
    let binary = VerifierBinary::new(scripted(dir.path(), &body), Duration::from_secs(30));

    let error = binary.run(&cosign()).await.unwrap_err();

    assert!(
        error.to_string().contains("more than 65536 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn a_verifier_that_fails_says_what_it_printed() {
    let dir = tempfile::tempdir().unwrap();
    let body = "sys.stderr.write('panic: something broke')\nsys.exit(2)";
    let binary = VerifierBinary::new(scripted(dir.path(), body), Duration::from_secs(30));

    let error = binary.run(&cosign()).await.unwrap_err();

    assert!(matches!(error, Error::Failed { .. }), "{error:?}");
    assert!(
        error.to_string().contains("panic: something broke"),
        "{error}"
    );
}

#[tokio::test]
async fn a_missing_verifier_says_how_to_build_it() {
    let binary = VerifierBinary::new(
        "/nonexistent/tenancy-hub-verify".into(),
        Duration::from_secs(1),
    );

    let error = binary.run(&cosign()).await.unwrap_err();

    assert!(error.to_string().contains("kind/verifier.sh"), "{error}");
    assert_eq!(error.metric_label(), "spawn");
}

fn verified() -> Verdict {
    Verdict::Verified {
        by: "key sha256:ab".into(),
        digest: DIGEST.into(),
    }
}

fn unsigned() -> Verdict {
    Verdict::Refused {
        refusal: Refusal::Unsigned,
        reason: "no signature".into(),
    }
}

#[tokio::test]
async fn a_chart_is_verified_once_however_many_ask_at_once() {
    let cache = VerdictCache::new(16);
    let runs = AtomicUsize::new(0);
    let check = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(verified())
    };

    let verdicts =
        futures::future::join_all((0..20).map(|_| cache.get_or_check(cosign().key(), check))).await;

    assert!(verdicts.into_iter().all(|v| v.unwrap() == verified()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        cache.checking.lock().unwrap().is_empty(),
        "no gate is left behind"
    );
}

#[test]
fn the_key_follows_the_digest_and_the_trust_material_not_the_registry_access() {
    let key = cosign().key();
    let mut other_credentials = cosign();
    let mut other_key = cosign();
    if let Check::Cosign {
        chart, public_keys, ..
    } = &mut other_key
    {
        public_keys.push("another key".into());
        chart.registry.docker_config = None;
    }
    if let Check::Cosign { chart, .. } = &mut other_credentials {
        chart.registry.docker_config = Some("{}".into());
    }

    assert_eq!(other_credentials.key(), key);
    assert_ne!(other_key.key(), key);
    assert_ne!(
        notation().key(),
        key,
        "same digest, other kind of signature"
    );
    assert_eq!(provenance().key().digest, DIGEST);
    assert_ne!(provenance().key(), cosign().key());
}

#[test]
fn a_changed_root_log_key_identity_or_log_rule_is_a_new_check() {
    let key = keyless().key();
    let changed = |change: fn(&mut Keyless)| {
        let mut check = keyless();
        if let Check::Cosign {
            keyless: Some(k), ..
        } = &mut check
        {
            change(k);
        }
        check.key()
    };

    assert_eq!(keyless().key(), key);
    assert_ne!(cosign().key(), key, "keys only is another trust");
    assert_ne!(changed(|k| k.certificates.push("another root".into())), key);
    assert_ne!(changed(|k| k.rekor_public_key = None), key);
    assert_ne!(changed(|k| k.identities[0].subject = ".*".into()), key);
    assert_ne!(changed(|k| k.identities[0].issuer = ".*".into()), key);
    assert_ne!(changed(|k| k.transparency_log = TransparencyLog::Skip), key);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_kept_briefly_and_an_error_not_at_all() {
    let cache = VerdictCache::new(16);
    let runs = AtomicUsize::new(0);
    let refuse = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(unsigned())
    };

    cache.get_or_check(cosign().key(), refuse).await.unwrap();
    cache.get_or_check(cosign().key(), refuse).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "kept for a while");
    tokio::time::advance(REFUSAL_TTL).await;
    cache.get_or_check(cosign().key(), refuse).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "looked at again once it expired"
    );

    let fail = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err(Error::Registry("unreachable".into()))
    };
    assert!(cache.get_or_check(notation().key(), fail).await.is_err());
    assert!(cache.get_or_check(notation().key(), fail).await.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 4, "an error is tried again");
}

#[tokio::test(start_paused = true)]
async fn a_verification_is_kept_until_room_runs_out_the_least_recently_used_first() {
    let cache = VerdictCache::new(2);
    let key = |n: u8| VerdictKey {
        digest: format!("sha256:{n}"),
        trust: "t".into(),
    };
    for n in 0..2 {
        cache
            .get_or_check(key(n), || async { Ok(verified()) })
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(24 * 3600)).await;
    assert!(cache.get(&key(0)).is_some(), "no expiry for a verification");

    cache
        .get_or_check(key(2), || async { Ok(verified()) })
        .await
        .unwrap();

    assert!(cache.get(&key(1)).is_none(), "the least recently used went");
    assert!(cache.get(&key(0)).is_some());
    assert!(cache.get(&key(2)).is_some());
}
