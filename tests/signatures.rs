//! End-to-end tests of chart signatures: the real verifier (tenancy-hub-verify) on charts the lab's tools signed, in the lab's registry (cosign, Notation) and as Helm provenance (`helm package --sign` with a gpg keyring); and the operator delivering, under a policy that asks signatures, the signed charts to push and pull members and nothing unsigned, signed by another key, or swapped after signing; keyless cosign against the lab's own CA, refusing another identity and another CA.

mod common;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{
    agent::{deployed_revision, hub_cli, join},
    fixtures::{DEADLINE, chart, message, put_secret, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
    repo::{ChartRepo, OciRegistry, example_chart, package},
    signing::{cosign, key_pairs, oci_digest, run},
};
use kube::Api;
use tenancy_hub::{
    api::{
        crd::{ControllerSpec, ControllerStatus, SecretReference, TenancyController},
        policy::{OidcIdentityMatch, SourceAccess, SourceVerify, TransparencyLog, VerifyProvider},
    },
    charts::verify::{Check, Keyless, OciChart, Refusal, RegistryAccess, Verdict, VerifierBinary},
};

/// The example chart with a note of its own in values.yaml, so its archive differs.
fn chart_with(note: &str, dir: &Path) -> PathBuf {
    let chart = dir.join("deployment-example");
    run(Command::new("cp")
        .arg("-r")
        .arg(example_chart())
        .arg(&chart));
    let values = chart.join("values.yaml");
    let mut text = std::fs::read_to_string(&values).unwrap();
    text.push_str(&format!("\n# {note}\n"));
    std::fs::write(values, text).unwrap();
    chart
}

/// The verifier of the lab, with a deadline of a minute per check.
fn verifier(lab: &Lab) -> VerifierBinary {
    VerifierBinary::new(lab.verifier(), Duration::from_secs(60))
}

/// The lab registry's chart at `digest`, reached with the lab's CA.
fn oci_chart(registry: &OciRegistry, digest: &str) -> OciChart {
    OciChart {
        reference: format!("{}/charts/deployment-example", registry.host),
        digest: digest.to_owned(),
        registry: RegistryAccess {
            docker_config: None,
            ca_bundle: Some(std::fs::read_to_string(&registry.ca).unwrap()),
        },
    }
}

/// The refusal of a verdict, or a panic saying what it was.
fn refusal(verdict: Verdict) -> Refusal {
    match verdict {
        Verdict::Refused { refusal, .. } => refusal,
        other => panic!("want a refusal, got {other:?}"),
    }
}

/// The median of `runs` timed checks, printed for BENCHMARKS.md.
async fn median_cost(what: &str, verifier: &VerifierBinary, check: &Check, runs: usize) {
    let mut took = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        verifier.run(check).await.unwrap();
        took.push(started.elapsed());
    }
    took.sort();
    println!(
        "one {what} verification: median {:?} of {runs} (min {:?}, max {:?})",
        took[runs / 2],
        took[0],
        took[runs - 1]
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn cosign_signatures_are_checked_by_the_real_verifier() {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    let keys = key_pairs(&lab, &registry);
    let dir = keys.path();
    let sign = |key: &str, digest: &str, out: &[&str]| {
        let target = format!("{}/charts/deployment-example@{digest}", registry.host);
        run(cosign(&lab, &registry, dir)
            .args(["sign", "--key", key, "--tlog-upload=false", "--yes"])
            .args(out)
            .arg(target));
    };
    let good = std::fs::read_to_string(dir.join("good.pub")).unwrap();
    let check = |digest: &str| Check::Cosign {
        chart: oci_chart(&registry, digest),
        public_keys: vec![good.clone()],
        keyless: None,
    };
    let verifier = verifier(&lab);

    // Signed with the trusted key: verified, by that key, of that digest.
    registry.push(&lab, &example_chart(), "1.0.0").await;
    let signed = oci_digest(&lab, &registry, "1.0.0");
    sign(
        "good.key",
        &signed,
        &[
            "--output-payload",
            "payload.json",
            "--output-signature",
            "payload.sig",
        ],
    );
    let verdict = verifier.run(&check(&signed)).await.unwrap();
    let Verdict::Verified { by, digest } = &verdict else {
        panic!("want verified, got {verdict:?}")
    };
    assert!(by.starts_with("key sha256:"), "{by}");
    assert_eq!(digest, &signed);

    // Unsigned.
    registry.push(&lab, &example_chart(), "1.0.1").await;
    let unsigned = oci_digest(&lab, &registry, "1.0.1");
    assert_eq!(
        refusal(verifier.run(&check(&unsigned)).await.unwrap()),
        Refusal::Unsigned
    );

    // Signed by another key.
    registry.push(&lab, &example_chart(), "1.0.2").await;
    let other = oci_digest(&lab, &registry, "1.0.2");
    sign("other.key", &other, &[]);
    assert_eq!(
        refusal(verifier.run(&check(&other)).await.unwrap()),
        Refusal::Untrusted
    );

    // The signed version swapped for other content after signing: a digest nobody signed; with
    // the good chart's signature copied onto it, a signature of other content.
    let changed = tempfile::tempdir().unwrap();
    registry
        .push(&lab, &chart_with("swapped", changed.path()), "1.0.0")
        .await;
    let swapped = oci_digest(&lab, &registry, "1.0.0");
    assert_ne!(swapped, signed);
    assert_eq!(
        refusal(verifier.run(&check(&swapped)).await.unwrap()),
        Refusal::Unsigned
    );
    run(cosign(&lab, &registry, dir)
        .args(["attach", "signature", "--payload", "payload.json"])
        .args(["--signature", "payload.sig"])
        .arg(format!(
            "{}/charts/deployment-example@{swapped}",
            registry.host
        )));
    assert_eq!(
        refusal(verifier.run(&check(&swapped)).await.unwrap()),
        Refusal::Mismatch
    );

    // Signed as an OCI 1.1 referrer (the lab's registry has no referrers API: its tag schema).
    registry.push(&lab, &example_chart(), "1.0.3").await;
    let referred = oci_digest(&lab, &registry, "1.0.3");
    run(cosign(&lab, &registry, dir)
        .env("COSIGN_EXPERIMENTAL", "1")
        .args(["sign", "--key", "good.key", "--tlog-upload=false", "--yes"])
        .arg("--registry-referrers-mode=oci-1-1")
        .arg(format!(
            "{}/charts/deployment-example@{referred}",
            registry.host
        )));
    assert!(matches!(
        verifier.run(&check(&referred)).await.unwrap(),
        Verdict::Verified { .. }
    ));

    median_cost("cosign", &verifier, &check(&signed), 9).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn notation_signatures_are_checked_by_the_real_verifier() {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    let certs = tempfile::tempdir().unwrap();
    let tool = lab.signing_tools().join("tenancy-hub-notation-sign");
    for name in ["charts.lab", "stranger.lab"] {
        run(Command::new(&tool).arg("cert").arg(certs.path()).arg(name));
    }
    let sign = |name: &str, digest: &str| {
        let file = |ext: &str| certs.path().join(format!("{name}.{ext}"));
        run(Command::new(&tool)
            .arg("sign")
            .arg("--key")
            .arg(file("key"))
            .arg("--cert")
            .arg(file("crt"))
            .args(["--ca-file", &registry.ca])
            .arg(format!(
                "{}/charts/deployment-example@{digest}",
                registry.host
            )));
    };
    let trust_store = std::fs::read_to_string(certs.path().join("charts.lab-ca.crt")).unwrap();
    let check = |digest: &str| Check::Notation {
        chart: oci_chart(&registry, digest),
        trust_store: trust_store.clone(),
        trusted_identities: vec![
            "x509.subject: C=US, ST=WA, O=tenancy-hub lab, CN=charts.lab".into(),
        ],
    };
    let verifier = verifier(&lab);

    registry.push(&lab, &example_chart(), "2.0.0").await;
    let signed = oci_digest(&lab, &registry, "2.0.0");
    sign("charts.lab", &signed);
    let verdict = verifier.run(&check(&signed)).await.unwrap();
    assert_eq!(
        verdict,
        Verdict::Verified {
            by: "CN=charts.lab,O=tenancy-hub lab,ST=WA,C=US".into(),
            digest: signed.clone()
        }
    );

    registry.push(&lab, &example_chart(), "2.0.1").await;
    let unsigned = oci_digest(&lab, &registry, "2.0.1");
    assert_eq!(
        refusal(verifier.run(&check(&unsigned)).await.unwrap()),
        Refusal::Unsigned
    );

    registry.push(&lab, &example_chart(), "2.0.2").await;
    let stranger = oci_digest(&lab, &registry, "2.0.2");
    sign("stranger.lab", &stranger);
    assert_eq!(
        refusal(verifier.run(&check(&stranger)).await.unwrap()),
        Refusal::Untrusted
    );

    median_cost("Notation", &verifier, &check(&signed), 9).await;
}

/// A gpg home of its own, with one signing key of `uid` and no passphrase; its agent is stopped
/// when dropped.
struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    fn new(uid: &str) -> Self {
        let home = tempfile::Builder::new().prefix("gpg").tempdir().unwrap();
        let gpg = Self { home };
        run(gpg
            .command()
            .args(["--pinentry-mode", "loopback", "--passphrase", ""])
            .args(["--quick-gen-key", uid, "rsa2048", "sign", "never"]));
        gpg
    }

    fn command(&self) -> Command {
        let mut command = Command::new("gpg");
        command.env("GNUPGHOME", self.home.path()).arg("--batch");
        command
    }

    /// `gpg ARGS` written to a file of the home, returned.
    fn export(&self, args: &[&str], name: &str) -> PathBuf {
        let path = self.home.path().join(name);
        let out = self.command().args(args).output().unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "gpg {args:?}"
        );
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    /// `chart` packaged as `version` into `dir` and signed by the key of `uid` (`helm package
    /// --sign`, its `.prov` beside it); the archive's path.
    fn package(&self, lab: &Lab, uid: &str, chart: &Path, version: &str, dir: &Path) -> PathBuf {
        run(Command::new(lab.bin_dir().join("helm"))
            .args(["package", "--sign", "--key", uid, "--keyring"])
            .arg(self.secret_keyring())
            .args(["--version", version, "-d"])
            .arg(dir)
            .arg(chart));
        dir.join(format!("deployment-example-{version}.tgz"))
    }

    /// The legacy binary secret keyring `helm package --sign` reads.
    fn secret_keyring(&self) -> PathBuf {
        self.export(&["--export-secret-keys"], "secring.gpg")
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", self.home.path())
            .args(["--kill", "gpg-agent"])
            .status();
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn helm_provenance_is_checked_by_the_real_verifier() {
    let lab = Lab::get();
    let charts = Gpg::new("Charts Lab <charts@lab.test>");
    let stranger = Gpg::new("Stranger <stranger@lab.test>");
    let signed_by = |gpg: &Gpg, uid: &str, chart: &Path, dir: &Path| {
        gpg.package(&lab, uid, chart, "3.0.0", dir)
    };
    let digest_of = |archive: &Path| {
        use sha2::Digest as _;
        format!(
            "sha256:{:x}",
            sha2::Sha256::digest(std::fs::read(archive).unwrap())
        )
    };
    let keyring = std::fs::read(charts.export(&["--export"], "pubring.gpg")).unwrap();
    let armored = std::fs::read(charts.export(&["--export", "--armor"], "pubring.asc")).unwrap();
    let check = |archive: &Path, keyring: &[u8]| Check::Provenance {
        digest: digest_of(archive),
        archive: archive.to_owned(),
        provenance: Some(PathBuf::from(format!("{}.prov", archive.display())))
            .filter(|p| p.exists()),
        file_name: "deployment-example-3.0.0.tgz".into(),
        keyring: keyring.to_owned(),
    };
    let verifier = verifier(&lab);

    // Signed with a key of the keyring, binary or armored.
    let good = tempfile::tempdir().unwrap();
    let archive = signed_by(&charts, "Charts Lab", &example_chart(), good.path());
    for ring in [&keyring, &armored] {
        let verdict = verifier.run(&check(&archive, ring)).await.unwrap();
        let Verdict::Verified { by, digest } = &verdict else {
            panic!("want verified, got {verdict:?}")
        };
        assert!(
            by.starts_with("Charts Lab <charts@lab.test> (PGP key "),
            "{by}"
        );
        assert_eq!(digest, &digest_of(&archive));
    }

    // Unsigned: no .prov.
    let plain = tempfile::tempdir().unwrap();
    let unsigned = package(&lab, &example_chart(), "3.0.0", plain.path());
    assert_eq!(
        refusal(verifier.run(&check(&unsigned, &keyring)).await.unwrap()),
        Refusal::Unsigned
    );

    // Signed by a key not in the keyring.
    let other = tempfile::tempdir().unwrap();
    let strangers = signed_by(&stranger, "Stranger", &example_chart(), other.path());
    assert_eq!(
        refusal(verifier.run(&check(&strangers, &keyring)).await.unwrap()),
        Refusal::Untrusted
    );

    // The archive swapped after signing, its .prov kept.
    let changed = tempfile::tempdir().unwrap();
    let swapped = package(
        &lab,
        &chart_with("swapped", changed.path()),
        "3.0.0",
        changed.path(),
    );
    std::fs::copy(&swapped, &archive).unwrap();
    assert_eq!(
        refusal(verifier.run(&check(&archive, &keyring)).await.unwrap()),
        Refusal::Mismatch
    );

    let signed = signed_by(&charts, "Charts Lab", &example_chart(), good.path());
    median_cost("provenance", &verifier, &check(&signed, &keyring), 9).await;
}

/// One delivery test at a time: each joins a pull member or starts a source of its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The namespace the operator keeps the platform's Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// Controller `name` with `spec`, labelled for the operator of [`Hub::two_teams`].
fn labelled(name: &str, spec: ControllerSpec, id: &str) -> TenancyController {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some(BTreeMap::from([("signatures-test".into(), id.into())]));
    c
}

/// A `sources` entry of `url`, fetched with Secret `secret`, its charts checked by `provider`
/// with the trust material of Secret `trust`.
fn verified_source(
    url: &str,
    secret: Option<&str>,
    provider: VerifyProvider,
    trust: &str,
) -> SourceAccess {
    SourceAccess {
        url: url.into(),
        secret_ref: secret.map(|name| SecretReference { name: name.into() }),
        tenant_secrets: Vec::new(),
        verify: Some(SourceVerify {
            provider,
            secret_ref: SecretReference { name: trust.into() },
            trusted_identities: Vec::new(),
            match_oidc_identity: Vec::new(),
            transparency_log: None,
        }),
        git: None,
    }
}

/// Releases `(name, version)` made by `at` into `namespace` of `clusters`.
fn releases(
    namespace: &str,
    clusters: &[&str],
    at: impl Fn(&str, &str) -> tenancy_hub::api::crd::Chart,
    releases: &[(&str, &str)],
) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            clusters,
            releases
                .iter()
                .map(|(release, version)| at(release, version))
                .collect(),
        )],
        ..Default::default()
    }
}

/// Waits until every `(cluster, release, phase)` holds in Controller `name`'s status.
async fn phases(hub: &Hub, name: &str, want: &[(&str, &str, &str)]) -> ControllerStatus {
    let api: Api<TenancyController> = Api::namespaced(hub.client.clone(), &hub.namespace);
    wait_until(&format!("{want:?}"), DEADLINE, || async {
        let status = api.get(name).await.ok()?.status?;
        want.iter()
            .all(|(cluster, release, phase)| {
                message(&status, cluster, release).is_some_and(|m| m.phase == *phase)
            })
            .then_some(status)
    })
    .await
}

/// Applies Controller `charts` with `spec`, labelled `id`, and waits until every
/// `(cluster, release, phase)` holds in its status.
async fn deliver(
    hub: &Hub,
    spec: ControllerSpec,
    id: &str,
    want: &[(&str, &str, &str)],
) -> ControllerStatus {
    hub.apply_in(&hub.namespace, &labelled("charts", spec, id))
        .await;
    phases(hub, "charts", want).await
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_policy_asking_cosign_signatures_delivers_signed_charts_to_push_and_pull_members_and_nothing_else()
 {
    let _serial = SERIAL.lock().await;
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    let keys = key_pairs(&lab, &registry);
    let dir = keys.path();
    let sign = |key: &str, digest: &str| {
        let target = format!("{}/charts/deployment-example@{digest}", registry.host);
        run(cosign(&lab, &registry, dir)
            .args(["sign", "--key", key, "--tlog-upload=false", "--yes"])
            .arg(target));
    };
    registry.push(&lab, &example_chart(), "1.0.0").await;
    let signed = oci_digest(&lab, &registry, "1.0.0");
    sign("good.key", &signed);
    registry.push(&lab, &example_chart(), "1.0.1").await;
    registry.push(&lab, &example_chart(), "1.0.2").await;
    let stranger = oci_digest(&lab, &registry, "1.0.2");
    sign("other.key", &stranger);

    // The platform's Secrets: the registry's CA, and the key charts must be signed with.
    let (ca, trust) = (unique("registry-ca"), unique("cosign-keys"));
    let pem = std::fs::read_to_string(&registry.ca).unwrap();
    put_secret(&lab, OPERATOR_NAMESPACE, &ca, &[("ca.crt", &pem)]).await;
    let key = std::fs::read_to_string(dir.join("good.pub")).unwrap();
    put_secret(&lab, OPERATOR_NAMESPACE, &trust, &[("charts.pub", &key)]).await;
    let id = unique("signed");
    let (hub, _) = Hub::two_teams(&id, "signatures-test", &["--chart-interval", "2"]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.sources = vec![verified_source(
        &registry.prefix(),
        Some(&ca),
        VerifyProvider::Cosign,
        &trust,
    )];
    hub.policy(&hub.namespace, policy).await;
    // A second policy governing the namespace lists the source with no `verify`: it relaxes
    // nothing, and a Controller has no say at all.
    let mut lax = allow_all(&hub.namespace, &[&registry.prefix()]);
    lax.sources = vec![SourceAccess {
        url: registry.prefix(),
        secret_ref: Some(SecretReference { name: ca.clone() }),
        ..Default::default()
    }];
    hub.policy(&format!("{}-lax", hub.namespace), lax).await;
    let agent_dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let _agent = join(&hub.lab, &edge, "pull-1", agent_dir.path());

    let ns = unique("signed");
    let reference = registry.reference("deployment-example");
    let at = |release: &str, version: &str| {
        let mut c = chart(&reference, release, &[]);
        c.version = Some(version.into());
        c
    };
    let spec = releases(
        &ns,
        &["member-1", &edge],
        at,
        &[
            ("signed", "1.0.0"),
            ("unsigned", "1.0.1"),
            ("stranger", "1.0.2"),
        ],
    );
    let mut want = Vec::new();
    for cluster in ["member-1", edge.as_str()] {
        want.push((cluster, "signed", "Deployed"));
        want.push((cluster, "unsigned", "Unverified"));
        want.push((cluster, "stranger", "Unverified"));
    }
    let status = deliver(&hub, spec, &id, &want).await;
    for cluster in ["member-1", edge.as_str()] {
        let m = message(&status, cluster, "signed").unwrap();
        assert!(m.verified_by.starts_with("cosign: key sha256:"), "{m:?}");
        assert_eq!(m.chart_digest, signed, "{m:?}");
        assert_eq!(m.source, reference, "{m:?}");
        assert_eq!(m.chart_version, "1.0.0", "{m:?}");
        for release in ["unsigned", "stranger"] {
            let m = message(&status, cluster, release).unwrap();
            assert!(
                m.error_message.contains("is not verified")
                    && m.error_message.contains("refused by cosign (TenancyPolicy"),
                "{cluster}/{release}: {m:?}"
            );
            assert!(m.verified_by.is_empty(), "{m:?}");
        }
    }
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "Unverified", "{ready:?}");
    hub.releases_become("member-1", &ns, &[("signed", 1)]).await;
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &ns, "signed"),
        Some(1)
    );
    for release in ["unsigned", "stranger"] {
        assert_eq!(
            deployed_revision(&hub.lab, "pull-1", &ns, release),
            None,
            "nothing unverified reaches the pull member"
        );
    }
    let operator = hub.operator.as_ref().unwrap();
    assert!(
        operator.metric("tenancy_hub_chart_verifications_total") >= 3.0,
        "every check is counted"
    );

    // The signed version swapped for other content after signing: its new digest is nobody's
    // signature, so it is refused, and what runs stays at the signed revision.
    let changed = tempfile::tempdir().unwrap();
    registry
        .push(&lab, &chart_with("swapped", changed.path()), "1.0.0")
        .await;
    let status = phases(
        &hub,
        "charts",
        &[
            ("member-1", "signed", "Unverified"),
            (&edge, "signed", "Unverified"),
        ],
    )
    .await;
    let m = message(&status, "member-1", "signed").unwrap();
    assert!(m.error_message.contains("refused by cosign"), "{m:?}");
    hub.releases_become("member-1", &ns, &[("signed", 1)]).await;
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &ns, "signed"),
        Some(1)
    );
    hub.delete_and_wait_gone("charts").await;
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_policy_asking_helm_provenance_delivers_charts_signed_by_its_keyring_and_nothing_else() {
    let _serial = SERIAL.lock().await;
    let lab = Lab::get();
    let charts = Gpg::new("Charts Lab <charts@lab.test>");
    let stranger = Gpg::new("Stranger <stranger@lab.test>");
    let signed_by = |gpg: &Gpg, uid: &str, version: &str, dir: &Path| {
        let archive = gpg.package(&lab, uid, &example_chart(), version, dir);
        vec![
            archive.clone(),
            PathBuf::from(format!("{}.prov", archive.display())),
        ]
    };
    let repo = ChartRepo::serve(&lab, &[]);
    let out = tempfile::tempdir().unwrap();
    repo.add(&signed_by(&charts, "Charts Lab", "3.0.0", out.path()));
    repo.add(&[package(&lab, &example_chart(), "3.0.1", out.path())]);
    repo.add(&signed_by(&stranger, "Stranger", "3.0.2", out.path()));
    repo.wait_ready().await;
    let keyring = String::from_utf8(
        std::fs::read(charts.export(&["--export", "--armor"], "pub.asc")).unwrap(),
    )
    .unwrap();
    let trust = unique("keyring");
    put_secret(&lab, OPERATOR_NAMESPACE, &trust, &[("keyring", &keyring)]).await;

    let id = unique("prov");
    let (hub, _) = Hub::two_teams(&id, "signatures-test", &["--chart-interval", "2"]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.sources = vec![verified_source(
        &format!("{}/", repo.url),
        None,
        VerifyProvider::Provenance,
        &trust,
    )];
    hub.policy(&hub.namespace, policy).await;
    let ns = unique("prov");
    let at = |release: &str, version: &str| {
        let mut c = chart("deployment-example", release, &[]);
        c.repo = Some(repo.url.clone());
        c.version = Some(version.into());
        c
    };
    let spec = releases(
        &ns,
        &["member-1"],
        at,
        &[
            ("signed", "3.0.0"),
            ("unsigned", "3.0.1"),
            ("stranger", "3.0.2"),
        ],
    );
    let status = deliver(
        &hub,
        spec,
        &id,
        &[
            ("member-1", "signed", "Deployed"),
            ("member-1", "unsigned", "Unverified"),
            ("member-1", "stranger", "Unverified"),
        ],
    )
    .await;
    let m = message(&status, "member-1", "signed").unwrap();
    assert!(
        m.verified_by
            .starts_with("provenance: Charts Lab <charts@lab.test> (PGP key "),
        "{m:?}"
    );
    let archive = std::fs::read(out.path().join("deployment-example-3.0.0.tgz")).unwrap();
    {
        use sha2::Digest as _;
        assert_eq!(
            m.chart_digest,
            format!("sha256:{:x}", sha2::Sha256::digest(&archive)),
            "the archive checked is the one planned"
        );
    }
    for release in ["unsigned", "stranger"] {
        let m = message(&status, "member-1", release).unwrap();
        assert!(
            m.error_message
                .contains("refused by provenance (TenancyPolicy"),
            "{release}: {m:?}"
        );
    }
    hub.releases_become("member-1", &ns, &[("signed", 1)]).await;
    hub.delete_and_wait_gone("charts").await;
}

/// The OIDC issuer the lab's keyless signing certificates name.
const LAB_ISSUER: &str = "https://issuer.lab.test";

/// A CA of the lab's own PKI, `NAME.crt` and `NAME.key` in `dir`, made with openssl.
fn lab_ca(dir: &Path, name: &str) {
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args([
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ])
        .args(["-subj", &format!("/O=tenancy-hub lab/CN={name}")])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign"]));
}

/// A keyless signing certificate as Fulcio would issue it, by CA `ca` for `email` from
/// [`LAB_ISSUER`]: `NAME.crt`, and its key imported for cosign as `NAME.key` (password `lab`).
fn signing_cert(lab: &Lab, registry: &OciRegistry, dir: &Path, name: &str, ca: &str, email: &str) {
    let openssl = |args: &[&str]| run(Command::new("openssl").current_dir(dir).args(args));
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        &format!("{name}.pem"),
        "-out",
        &format!("{name}.csr"),
        "-subj",
        "/O=tenancy-hub lab",
    ]);
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(
        &ext,
        format!(
            "subjectAltName=email:{email}\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=codeSigning\n1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{LAB_ISSUER}\n"
        ),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &format!("{name}.csr"),
        "-CA",
        &format!("{ca}.crt"),
        "-CAkey",
        &format!("{ca}.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        &format!("{name}.crt"),
        "-extfile",
        &format!("{name}.ext"),
    ]);
    run(cosign(lab, registry, dir).args([
        "import-key-pair",
        "--key",
        &format!("{name}.pem"),
        "--output-key-prefix",
        name,
    ]));
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_policy_asking_keyless_cosign_signatures_delivers_charts_of_the_trusted_identity_and_ca_only()
 {
    let _serial = SERIAL.lock().await;
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    for ca in ["lab-ca", "stranger-ca"] {
        lab_ca(dir, ca);
    }
    signing_cert(
        &lab,
        &registry,
        dir,
        "release",
        "lab-ca",
        "release-bot@lab.test",
    );
    signing_cert(
        &lab,
        &registry,
        dir,
        "intruder",
        "lab-ca",
        "intruder@lab.test",
    );
    signing_cert(
        &lab,
        &registry,
        dir,
        "impostor",
        "stranger-ca",
        "release-bot@lab.test",
    );
    // cosign's "bring your own PKI": the key, its certificate and the chain, no transparency log.
    let sign = |signer: &str, ca: &str, version: &str, digest: &str| {
        run(cosign(&lab, &registry, dir)
            .args(["sign", "--key", &format!("{signer}.key")])
            .args(["--certificate", &format!("{signer}.crt")])
            .args(["--certificate-chain", &format!("{ca}.crt")])
            .args(["--tlog-upload=false", "--yes"])
            .arg(format!(
                "{}/charts/deployment-example@{digest}",
                registry.host
            )));
        (version.to_owned(), digest.to_owned())
    };
    let mut pushed = Vec::new();
    for (signer, ca, version) in [
        ("release", "lab-ca", "4.0.0"),
        ("intruder", "lab-ca", "4.0.1"),
        ("impostor", "stranger-ca", "4.0.2"),
    ] {
        registry.push(&lab, &example_chart(), version).await;
        let digest = oci_digest(&lab, &registry, version);
        pushed.push(sign(signer, ca, version, &digest));
    }
    let signed = pushed[0].1.clone();
    let root = std::fs::read_to_string(dir.join("lab-ca.crt")).unwrap();
    let identity = OidcIdentityMatch {
        issuer: r"https://issuer\.lab\.test".into(),
        subject: r"release-bot@lab\.test".into(),
    };

    // The real verifier first: the chart cosign signed with the lab CA's certificate verifies.
    let check = Check::Cosign {
        chart: oci_chart(&registry, &signed),
        public_keys: Vec::new(),
        keyless: Some(Keyless {
            certificates: vec![root.clone()],
            rekor_public_key: None,
            identities: vec![identity.clone()],
            transparency_log: TransparencyLog::Skip,
        }),
    };
    assert_eq!(
        verifier(&lab).run(&check).await.unwrap(),
        Verdict::Verified {
            by: format!("keyless release-bot@lab.test from {LAB_ISSUER}"),
            digest: signed.clone()
        }
    );

    // The platform's Secrets: the registry's CA, and the root signing certificates chain to.
    let (ca, trust) = (unique("registry-ca"), unique("keyless-roots"));
    let pem = std::fs::read_to_string(&registry.ca).unwrap();
    put_secret(&lab, OPERATOR_NAMESPACE, &ca, &[("ca.crt", &pem)]).await;
    put_secret(&lab, OPERATOR_NAMESPACE, &trust, &[("lab-ca.crt", &root)]).await;
    let id = unique("keyless");
    let (hub, _) = Hub::two_teams(&id, "signatures-test", &["--chart-interval", "2"]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    let mut source = verified_source(
        &registry.prefix(),
        Some(&ca),
        VerifyProvider::Cosign,
        &trust,
    );
    let verify = source.verify.as_mut().unwrap();
    verify.match_oidc_identity = vec![identity];
    verify.transparency_log = Some(TransparencyLog::Skip);
    policy.sources = vec![source];
    hub.policy(&hub.namespace, policy).await;

    let ns = unique("keyless");
    let reference = registry.reference("deployment-example");
    let at = |release: &str, version: &str| {
        let mut c = chart(&reference, release, &[]);
        c.version = Some(version.into());
        c
    };
    let versions: Vec<&str> = pushed.iter().map(|(version, _)| version.as_str()).collect();
    let spec = releases(
        &ns,
        &["member-1"],
        at,
        &[
            ("signed", versions[0]),
            ("other-identity", versions[1]),
            ("other-ca", versions[2]),
        ],
    );
    let status = deliver(
        &hub,
        spec,
        &id,
        &[
            ("member-1", "signed", "Deployed"),
            ("member-1", "other-identity", "Unverified"),
            ("member-1", "other-ca", "Unverified"),
        ],
    )
    .await;
    let m = message(&status, "member-1", "signed").unwrap();
    assert_eq!(
        m.verified_by,
        format!("cosign: keyless release-bot@lab.test from {LAB_ISSUER}"),
        "{m:?}"
    );
    assert_eq!(m.chart_digest, signed, "{m:?}");
    for (release, why) in [
        ("other-identity", "matches no matchOIDCIdentity entry"),
        ("other-ca", "does not chain to the trusted CA certificates"),
    ] {
        let m = message(&status, "member-1", release).unwrap();
        assert!(
            m.error_message.contains("refused by cosign (TenancyPolicy")
                && m.error_message.contains(why),
            "{release}: {m:?}"
        );
        assert!(m.verified_by.is_empty(), "{m:?}");
    }
    hub.releases_become("member-1", &ns, &[("signed", 1)]).await;
    hub.delete_and_wait_gone("charts").await;
}
