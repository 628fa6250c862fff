//! Chart signatures, checked once at the hub: runs `tenancy-hub-verify` (cosign, Notation, Helm provenance) on one chart digest and keeps its verdict by digest and trust material.
//!
//! The verifier is a Go program of its own (source in `verifier/`, built by `kind/verifier.sh`,
//! shipped in the image): one JSON request on its stdin, one JSON answer on its stdout, so keys,
//! registry credentials and CA bundles never reach argv, a file or a log. The process has a
//! deadline, dies when dropped, and its answer is read within a bound. A verdict (verified, or
//! refused with a reason) is kept per digest and trust material, so a chart is verified once
//! however many clusters and releases get it; a refusal is kept only briefly, since a chart pushed
//! before it was signed becomes verifiable, and an error not at all.

use std::{
    collections::HashMap,
    fmt,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _},
    time::Instant,
};

use crate::api::policy::{OidcIdentityMatch, TransparencyLog};

/// The version of the request and the answer; the verifier's `protocolVersion` (verifier/main.go)
/// and the shared fixtures in `verifier/testdata/protocol` change with it.
pub const PROTOCOL_VERSION: u32 = 1;
/// The verifier's file name, as `kind/verifier.sh` builds it and the image ships it.
pub const BINARY: &str = "tenancy-hub-verify";
/// Largest answer read from the verifier's stdout.
const MAX_ANSWER: u64 = 64 << 10;
/// Largest part of the verifier's stderr kept for an error.
const MAX_STDERR: u64 = 4 << 10;
/// How long past its own deadline the verifier may take to answer before it is stopped.
const GRACE: Duration = Duration::from_secs(5);
/// How long a refusal is kept: a chart signed after it was pushed is verified at the next look after.
pub const REFUSAL_TTL: Duration = Duration::from_secs(60);
/// Verdicts kept, the least recently used going first.
pub const DEFAULT_VERDICTS: usize = 4096;

/// How to reach an OCI registry, inline: what the platform team's source Secret holds.
#[derive(Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RegistryAccess {
    /// A docker config (`config.json`) with the registry's credentials under `auths`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_config: Option<String>,
    /// PEM CA certificates the registry's TLS certificate chains to, in place of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

impl fmt::Debug for RegistryAccess {
    /// Says whether credentials are there, never what they are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAccess")
            .field(
                "docker_config",
                &self.docker_config.as_ref().map(|_| "<hidden>"),
            )
            .field("ca_bundle", &self.ca_bundle.is_some())
            .finish()
    }
}

/// An OCI chart: its repository (`host[:port]/path`, no scheme) and manifest digest.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OciChart {
    /// The chart's repository, `host[:port]/path`.
    pub reference: String,
    /// The manifest digest that must be signed, `sha256:<hex>`.
    pub digest: String,
    /// How to reach the registry.
    pub registry: RegistryAccess,
}

/// One signature check, as the verifier reads it (`{"cosign": {…}}` and so on).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Check {
    /// A cosign signature of the OCI chart by one of the PEM public keys, or keyless.
    Cosign {
        /// The chart and its registry.
        #[serde(flatten)]
        chart: OciChart,
        /// PEM public keys (PKIX), any of which may have signed it.
        public_keys: Vec<String>,
        /// Keyless signatures trusted besides the keys; None: keys only.
        #[serde(skip_serializing_if = "Option::is_none")]
        keyless: Option<Keyless>,
    },
    /// A Notation signature of the OCI chart by a certificate of the trust store (PEM CA
    /// certificates) naming a trusted identity (`x509.subject: …`, or `*`).
    Notation {
        /// The chart and its registry.
        #[serde(flatten)]
        chart: OciChart,
        /// PEM CA certificates the signing certificates chain to.
        trust_store: String,
        /// The signers trusted, as a Notation trust policy names them.
        trusted_identities: Vec<String>,
    },
    /// The Helm provenance (`.prov`) of a repository chart's archive, signed by a key of the PGP
    /// keyring (armored, binary or keybox).
    Provenance {
        /// The archive's sha256 (`sha256:<hex>`), as the chart cache names it.
        #[serde(skip)]
        digest: String,
        /// Path of the archive.
        archive: PathBuf,
        /// Path of its `.prov`; None: the repository serves none.
        #[serde(skip_serializing_if = "Option::is_none")]
        provenance: Option<PathBuf>,
        /// The archive's name in the repository (`chart-1.2.3.tgz`), which the `.prov` lists.
        file_name: String,
        /// The PGP public keyring (base64 on the wire).
        #[serde(serialize_with = "as_base64")]
        keyring: Vec<u8>,
    },
}

/// Keyless cosign signatures a check trusts: certificates chaining to `certificates`, of one of
/// the `identities`, in the transparency log unless the rule skips it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Keyless {
    /// PEM CA certificates: the roots (self-signed) and the intermediates.
    pub certificates: Vec<String>,
    /// The transparency log's PEM public key; None when the rule is `Skip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rekor_public_key: Option<String>,
    /// The identities trusted, as the policy's `matchOIDCIdentity`.
    pub identities: Vec<OidcIdentityMatch>,
    /// Whether a signature must carry an entry of the log.
    pub transparency_log: TransparencyLog,
}

fn as_base64<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

impl Check {
    /// The digest the check is about: the manifest's, or the archive's.
    pub fn digest(&self) -> &str {
        match self {
            Check::Cosign { chart, .. } | Check::Notation { chart, .. } => &chart.digest,
            Check::Provenance { digest, .. } => digest,
        }
    }

    /// What the verdict is kept under: the digest and a hash of the trust material (the kind of
    /// signature, keys, trust store and identities, keyless CA certificates, log key, identities
    /// and log rule, keyring and file name), so a changed root or identity is a new check. Registry access is
    /// not part of it: it decides whether a verdict can be reached, not which.
    pub fn key(&self) -> VerdictKey {
        let mut hash = Sha256::new();
        let mut part = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        match self {
            Check::Cosign {
                public_keys,
                keyless,
                ..
            } => {
                part(b"cosign");
                public_keys.iter().for_each(|k| part(k.as_bytes()));
                if let Some(keyless) = keyless {
                    part(b"keyless");
                    part(&(keyless.certificates.len() as u64).to_be_bytes());
                    keyless.certificates.iter().for_each(|c| part(c.as_bytes()));
                    part(b"rekor");
                    part(keyless.rekor_public_key.as_deref().unwrap_or("").as_bytes());
                    part(&(keyless.identities.len() as u64).to_be_bytes());
                    for identity in &keyless.identities {
                        part(identity.issuer.as_bytes());
                        part(identity.subject.as_bytes());
                    }
                    part(match keyless.transparency_log {
                        TransparencyLog::Require => b"require",
                        TransparencyLog::Skip => b"skip",
                    });
                }
            }
            Check::Notation {
                trust_store,
                trusted_identities,
                ..
            } => {
                part(b"notation");
                part(trust_store.as_bytes());
                trusted_identities.iter().for_each(|i| part(i.as_bytes()));
            }
            Check::Provenance {
                file_name, keyring, ..
            } => {
                part(b"provenance");
                part(file_name.as_bytes());
                part(keyring);
            }
        }
        VerdictKey {
            digest: self.digest().to_owned(),
            trust: format!("{:x}", hash.finalize()),
        }
    }
}

/// What a verdict is kept under: a chart digest and the hash of the trust material.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct VerdictKey {
    /// The chart digest.
    pub digest: String,
    /// The sha256 (hex) of the trust material.
    pub trust: String,
}

/// The one JSON object written on the verifier's stdin.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    protocol: u32,
    timeout_seconds: u64,
    #[serde(flatten)]
    check: &'a Check,
}

/// The request for `check` with a deadline of `timeout`, as bytes for the verifier's stdin.
pub fn request(check: &Check, timeout: Duration) -> Vec<u8> {
    let request = Request {
        protocol: PROTOCOL_VERSION,
        timeout_seconds: timeout.as_secs().max(1),
        check,
    };
    serde_json::to_vec(&request).expect("a request serializes")
}

/// Why a chart is not verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No signature of the digest (or no `.prov`).
    Unsigned,
    /// Signatures, none by a trusted key or identity.
    Untrusted,
    /// A trusted signature of other content: swapped after signing, or copied.
    Mismatch,
    /// A signature that does not parse or verify.
    Invalid,
}

impl Refusal {
    /// The failure label of a metric, and the code on the wire.
    pub fn metric_label(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::Untrusted => "untrusted",
            Refusal::Mismatch => "mismatch",
            Refusal::Invalid => "invalid",
        }
    }
}

/// The verifier's verdict on one chart digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Signed by `by` (a key's fingerprint, a certificate's subject, a PGP identity); `digest` is
    /// the digest that was verified.
    Verified {
        /// Who signed it.
        by: String,
        /// The digest verified.
        digest: String,
    },
    /// Not verified, with the reason in words for the status.
    Refused {
        /// Why, as a code.
        refusal: Refusal,
        /// Why, in words.
        reason: String,
    },
}

/// Why no verdict was reached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The verifier cannot be started.
    #[error(
        "cannot run the signature verifier {path}: {source}; build it with kind/verifier.sh or install {BINARY}"
    )]
    Spawn {
        /// The verifier's path.
        path: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// It did not answer in time and was stopped.
    #[error("the signature verifier did not answer within {}s and was stopped; retry", .0.as_secs())]
    Timeout(Duration),
    /// It exited without an answer.
    #[error("the signature verifier failed ({status}): {stderr}")]
    Failed {
        /// How it exited.
        status: String,
        /// What it printed on stderr, its first 4 KiB.
        stderr: String,
    },
    /// Its answer is not one this operator reads.
    #[error(
        "the signature verifier's answer is not protocol {PROTOCOL_VERSION}: {0}; rebuild it from this operator's source with kind/verifier.sh"
    )]
    Answer(String),
    /// It verified another digest than it was asked about.
    #[error("the signature verifier verified {got}, not {want}; refused")]
    OtherDigest {
        /// The digest asked about.
        want: String,
        /// The digest it verified.
        got: String,
    },
    /// The registry could not be reached, refused the credentials or timed out.
    #[error("{0}")]
    Registry(String),
    /// The trust material (keys, certificates, identities, keyring) is not usable.
    #[error("{0}")]
    Trust(String),
    /// The request was malformed or named files the verifier cannot read.
    #[error("{0}")]
    Request(String),
    /// The verifier does not do what was asked.
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    /// Whether trying again may help (an unreachable registry, a verifier that did not answer),
    /// as opposed to a setting someone must change.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_) | Error::Failed { .. } | Error::Registry(_)
        )
    }

    /// The failure label of a metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Spawn { .. } => "spawn",
            Error::Timeout(_) => "timeout",
            Error::Failed { .. } => "failed",
            Error::Answer(_) | Error::OtherDigest { .. } => "answer",
            Error::Registry(_) => "registry",
            Error::Trust(_) => "trust",
            Error::Request(_) => "request",
            Error::Unsupported(_) => "unsupported",
        }
    }
}

/// A `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The one JSON object on the verifier's stdout.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    protocol: u32,
    verified: bool,
    by: Option<String>,
    digest: Option<String>,
    refused: Option<String>,
    reason: Option<String>,
    error: Option<AnswerError>,
}

#[derive(Deserialize)]
struct AnswerError {
    kind: String,
    message: String,
}

/// Reads the verifier's answer into a verdict or an error.
pub fn parse_answer(stdout: &[u8]) -> Result<Verdict> {
    let answer: Answer = serde_json::from_slice(stdout)
        .map_err(|e| Error::Answer(format!("it does not parse: {e}")))?;
    if answer.protocol != PROTOCOL_VERSION {
        return Err(Error::Answer(format!(
            "it speaks protocol {}",
            answer.protocol
        )));
    }
    if let Some(error) = answer.error {
        return Err(match error.kind.as_str() {
            "registry" => Error::Registry(error.message),
            "trust" => Error::Trust(error.message),
            "request" => Error::Request(error.message),
            "unsupported" => Error::Unsupported(error.message),
            other => Error::Answer(format!("an error of unknown kind {other:?}")),
        });
    }
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    if answer.verified {
        let (Some(by), Some(digest)) = (nonempty(answer.by), nonempty(answer.digest)) else {
            return Err(Error::Answer(
                "a verified answer names no signer or digest".into(),
            ));
        };
        return Ok(Verdict::Verified { by, digest });
    }
    let refusal = match answer.refused.as_deref() {
        Some("unsigned") => Refusal::Unsigned,
        Some("untrusted") => Refusal::Untrusted,
        Some("mismatch") => Refusal::Mismatch,
        Some("invalid") => Refusal::Invalid,
        other => {
            return Err(Error::Answer(format!(
                "a refusal of unknown code {other:?}"
            )));
        }
    };
    let reason = nonempty(answer.reason).unwrap_or_else(|| refusal.metric_label().to_owned());
    Ok(Verdict::Refused { refusal, reason })
}

/// The verifier to run: `given`, else [`BINARY`] beside `helm`, else on PATH, else the bare
/// name (starting it then fails, saying how to build it).
pub fn locate(given: Option<&std::path::Path>, helm: &std::path::Path) -> PathBuf {
    crate::charts::common::locate_tool(given, helm, BINARY).unwrap_or_else(|| PathBuf::from(BINARY))
}

/// The verifier program and the deadline of each check.
#[derive(Clone, Debug)]
pub struct VerifierBinary {
    path: PathBuf,
    timeout: Duration,
}

impl VerifierBinary {
    /// The verifier at `path` (a bare name is looked up on PATH), each check within `timeout`.
    pub fn new(path: PathBuf, timeout: Duration) -> Self {
        Self { path, timeout }
    }

    /// The command that runs one check: no arguments (everything goes on stdin), every stream a
    /// pipe, killed when dropped.
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.path);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs one check: its verdict, of the digest it was asked about.
    pub async fn run(&self, check: &Check) -> Result<Verdict> {
        let request = request(check, self.timeout);
        let verdict = tokio::time::timeout(self.timeout + GRACE, self.exchange(&request))
            .await
            .map_err(|_| Error::Timeout(self.timeout + GRACE))??;
        if let Verdict::Verified { digest, .. } = &verdict
            && digest != check.digest()
        {
            return Err(Error::OtherDigest {
                want: check.digest().to_owned(),
                got: digest.clone(),
            });
        }
        Ok(verdict)
    }

    /// Starts the verifier, writes the request and reads the answer, each stream bounded.
    async fn exchange(&self, request: &[u8]) -> Result<Verdict> {
        let mut child = self.command().spawn().map_err(|source| Error::Spawn {
            path: self.path.display().to_string(),
            source,
        })?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        // A verifier that exits early closes its stdin; its answer or status says why.
        let write = async move {
            let _ = stdin.write_all(request).await;
            drop(stdin);
        };
        let ((), out, err) = tokio::join!(
            write,
            read_bounded(stdout, MAX_ANSWER),
            keep_head(stderr, MAX_STDERR)
        );
        let Some(out) = out else {
            return Err(Error::Answer(format!(
                "it wrote more than {MAX_ANSWER} bytes"
            )));
        };
        let status = child
            .wait()
            .await
            .map_err(|e| Error::Answer(format!("waiting for it failed: {e}")))?;
        if !status.success() && out.is_empty() {
            let stderr = String::from_utf8_lossy(&err).trim().to_owned();
            return Err(Error::Failed {
                status: status.to_string(),
                stderr,
            });
        }
        parse_answer(&out)
    }
}

/// Reads a stream to its end, or None past `limit` bytes (the rest is left unread).
async fn read_bounded(stream: impl AsyncRead + Unpin, limit: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    stream.take(limit + 1).read_to_end(&mut out).await.ok()?;
    (out.len() as u64 <= limit).then_some(out)
}

/// Reads a stream to its end, keeping its first `limit` bytes.
async fn keep_head(mut stream: impl AsyncRead + Unpin, limit: u64) -> Vec<u8> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut chunk).await {
        let room = (limit as usize).saturating_sub(head.len());
        head.extend_from_slice(&chunk[..n.min(room)]);
    }
    head
}

/// A verdict kept, and until when (None: as long as there is room).
struct Kept {
    verdict: Verdict,
    until: Option<Instant>,
    used: u64,
}

/// The kept verdicts and the clock of their use.
#[derive(Default)]
struct Table {
    entries: HashMap<VerdictKey, Kept>,
    clock: u64,
}

/// Verdicts by digest and trust material, bounded, with one check at a time per key: a chart is
/// verified once however many clusters and releases ask at once.
pub struct VerdictCache {
    kept: Mutex<Table>,
    checking: Mutex<HashMap<VerdictKey, Arc<tokio::sync::Mutex<()>>>>,
    limit: usize,
}

impl VerdictCache {
    /// A cache of at most `limit` verdicts.
    pub fn new(limit: usize) -> Self {
        Self {
            kept: Mutex::default(),
            checking: Mutex::default(),
            limit: limit.max(1),
        }
    }

    /// The kept verdict of `key`, if still good.
    pub fn get(&self, key: &VerdictKey) -> Option<Verdict> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.clock += 1;
        let clock = kept.clock;
        let entry = kept.entries.get_mut(key)?;
        if entry.until.is_some_and(|until| Instant::now() >= until) {
            kept.entries.remove(key);
            return None;
        }
        entry.used = clock;
        Some(entry.verdict.clone())
    }

    /// Keeps a verdict: a verification as long as there is room, a refusal for `REFUSAL_TTL`.
    fn put(&self, key: VerdictKey, verdict: Verdict) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.clock += 1;
        let used = kept.clock;
        let until =
            matches!(verdict, Verdict::Refused { .. }).then(|| Instant::now() + REFUSAL_TTL);
        kept.entries.insert(
            key,
            Kept {
                verdict,
                until,
                used,
            },
        );
        while kept.entries.len() > self.limit {
            let oldest = kept
                .entries
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(key, _)| key.clone())
                .expect("the cache is not empty");
            kept.entries.remove(&oldest);
        }
    }

    /// The verdict of `key`: the kept one, else `check`'s, kept for the next caller. Callers
    /// asking for one key at once wait for a single check; an error is not kept.
    pub async fn get_or_check<F, Fut>(&self, key: VerdictKey, check: F) -> Result<Verdict>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Verdict>>,
    {
        if let Some(verdict) = self.get(&key) {
            return Ok(verdict);
        }
        let gate = self
            .checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .clone();
        let held = gate.lock().await;
        let result = match self.get(&key) {
            Some(verdict) => Ok(verdict),
            None => check().await.inspect(|v| self.put(key.clone(), v.clone())),
        };
        drop(held);
        let mut checking = self.checking.lock().unwrap_or_else(PoisonError::into_inner);
        // The last holder of the gate removes it.
        if Arc::strong_count(&gate) == 2 {
            checking.remove(&key);
        }
        result
    }
}

/// The verifier with its verdicts: what the chart catalog asks before a chart is planned.
pub struct Verifier {
    binary: VerifierBinary,
    verdicts: VerdictCache,
}

impl Verifier {
    /// Runs `binary`, keeping at most `limit` verdicts.
    pub fn new(binary: VerifierBinary, limit: usize) -> Self {
        Self {
            binary,
            verdicts: VerdictCache::new(limit),
        }
    }

    /// The verdict on one chart digest under one trust material, checked at most once while kept.
    pub async fn verify(&self, check: &Check) -> Result<Verdict> {
        self.verdicts
            .get_or_check(check.key(), || self.binary.run(check))
            .await
    }
}

#[cfg(test)]
mod tests;
