//! End-to-end tests of chart signatures: the real verifier (tenancy-hub-verify) on charts the lab's tools signed, in the lab's registry (cosign, Notation) and as Helm provenance (`helm package --sign` with a gpg keyring).

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{
    lab::Lab,
    repo::{OciRegistry, example_chart, package},
};
use tenancy_hub::charts::verify::{
    Check, OciChart, Refusal, RegistryAccess, Verdict, VerifierBinary,
};

/// Runs a command to success, returning what it printed on stdout and stderr.
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed: {printed}");
    printed
}

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

/// The manifest digest of a chart version in the registry, as `helm pull` reports it.
fn oci_digest(lab: &Lab, registry: &OciRegistry, version: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let printed = run(Command::new(lab.bin_dir().join("helm"))
        .args(["pull", &registry.reference("deployment-example")])
        .args(["--version", version, "--ca-file", &registry.ca, "-d"])
        .arg(dir.path()));
    printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("Digest:"))
        .unwrap_or_else(|| panic!("helm pull printed no digest: {printed}"))
        .trim()
        .to_owned()
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

/// cosign as the lab built it, its key password set, trusting the lab's CA.
fn cosign(lab: &Lab, registry: &OciRegistry, dir: &Path) -> Command {
    let mut command = Command::new(lab.signing_tools().join("cosign"));
    command
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "lab")
        .env("SSL_CERT_FILE", &registry.ca);
    command
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn cosign_signatures_are_checked_by_the_real_verifier() {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    let keys = tempfile::tempdir().unwrap();
    let dir = keys.path();
    for name in ["good", "other"] {
        run(cosign(&lab, &registry, dir).args(["generate-key-pair", "--output-key-prefix", name]));
    }
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
    let helm = lab.bin_dir().join("helm");
    let signed_by = |gpg: &Gpg, uid: &str, chart: &Path, dir: &Path| {
        run(Command::new(&helm)
            .args(["package", "--sign", "--key", uid, "--keyring"])
            .arg(gpg.secret_keyring())
            .args(["--version", "3.0.0", "-d"])
            .arg(dir)
            .arg(chart));
        dir.join("deployment-example-3.0.0.tgz")
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
