//! Signing charts with the lab's tools for the tests and benchmarks of signatures: cosign key pairs and signatures, and the digests helm reports.

use std::{path::Path, process::Command};

use super::{lab::Lab, repo::OciRegistry};

/// Runs a command to success, returning what it printed on stdout and stderr.
#[allow(dead_code)] // used by some test crates only
pub fn run(command: &mut Command) -> String {
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

/// The manifest digest of a chart version in the registry, as `helm pull` reports it.
#[allow(dead_code)] // used by some test crates only
pub fn oci_digest(lab: &Lab, registry: &OciRegistry, version: &str) -> String {
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

/// cosign as the lab built it, its key password set, trusting the lab's CA.
#[allow(dead_code)] // used by some test crates only
pub fn cosign(lab: &Lab, registry: &OciRegistry, dir: &Path) -> Command {
    let mut command = Command::new(lab.signing_tools().join("cosign"));
    command
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "lab")
        .env("SSL_CERT_FILE", &registry.ca);
    command
}

/// A directory with cosign key pairs `good` and `other` (`good.key`, `good.pub`, …).
#[allow(dead_code)] // used by some test crates only
pub fn key_pairs(lab: &Lab, registry: &OciRegistry) -> tempfile::TempDir {
    let keys = tempfile::tempdir().unwrap();
    for name in ["good", "other"] {
        run(cosign(lab, registry, keys.path()).args([
            "generate-key-pair",
            "--output-key-prefix",
            name,
        ]));
    }
    keys
}
