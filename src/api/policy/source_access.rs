//! A TenancyPolicy's chart sources with what the hub fetches them with: credentials, Git paths and refs, push hooks, and the signatures their charts must carry.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::policy::rules::TenantSecretRule;

/// A chart source prefix and what the hub fetches it with.
///
/// The Secrets hold, under these keys (Kubernetes' and Flux's names): `username` and `password`
/// (basic auth), `token` (a bearer token; for OCI registries, a registry token), `.dockerconfigjson`
/// (type `kubernetes.io/dockerconfigjson`: OCI registries' logins), `ca.crt` (PEM CA bundle trusted
/// for this source besides the system's roots), `tls.crt` and `tls.key` (a PEM client certificate
/// and its key). `verify` requires signatures of this source's charts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!self.url.startsWith('ssh://') || has(self.git)")
        .message("an ssh:// source is a Git repository: give git (paths and refs allowed)"),
    validation = Rule::new("!has(self.git) || self.url.startsWith('https://') || self.url.startsWith('ssh://') || self.url.startsWith('http://')")
        .message("a Git source's url is https:// or ssh:// (http:// only with git.insecure: true, for labs)"),
    validation = Rule::new("!has(self.git) || !self.url.startsWith('http://') || (has(self.git.insecure) && self.git.insecure)")
        .message("a plain http:// Git source sends its credentials and takes its charts unprotected: use https:// or ssh://, or set git.insecure: true (for labs only)"),
    validation = Rule::new("!has(self.verify) || (has(self.git) == (self.verify.provider == 'pgp' || self.verify.provider == 'ssh'))")
        .message("a Git source verifies commits (provider pgp or ssh); a Helm repository or OCI source takes cosign, notation or provenance")
)]
pub struct SourceAccess {
    /// URL prefix, written and matched as a `chartSources` entry (whole path segments, after
    /// normalisation): `https://charts.example.com/team-a/` or `oci://registry.example.com/team-a/`.
    /// Listing it here allows it, as listing it in `chartSources` does. With `git`, a prefix of
    /// Git repositories instead (`https://git.example.com/team-a/`, `ssh://git@git.example.com/team-a/`;
    /// a trailing `.git` is not part of a repository's name), which allows Git charts only.
    #[schemars(
        length(min = 1, max = 2048),
        regex(pattern = r"^(https://[^/@]+.*|http://[^/@]+.*|oci://[^/@]+.*|ssh://[^/]+.*)$")
    )]
    pub url: String,

    /// Makes this entry a prefix of Git repositories: the paths in them and the refs charts (and
    /// values files) may be taken from. Git charts are allowed by such entries only, and such an
    /// entry allows no Helm repository or OCI chart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitAccess>,

    /// A Secret of the operator's own namespace (which tenants cannot read) the hub fetches this
    /// source with. Read at each fetch, so a changed Secret takes effect without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<crate::api::crd::SecretReference>,

    /// Secrets of the governed hub namespaces a Controller may name for this source
    /// (`sourceSecretRef` of a chart) instead of `secretRef`: those named here or carrying every
    /// label here. None when empty: a chart naming a Secret is then `Forbidden`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tenant_secrets: Vec<TenantSecretRule>,

    /// Signatures every chart of this source must carry: checked once at the hub, per chart
    /// digest, before anything is planned; an unsigned or badly signed chart is `Unverified` for
    /// its releases and reaches no member. Every governing policy's `verify` of an entry holding
    /// a chart's source applies; a Controller cannot waive one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<SourceVerify>,
}

/// What of the Git repositories under a `sources` prefix may be taken: which paths, at which
/// refs. Patterns are an exact name, `prefix*` or `*`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitAccess {
    /// Directories of the repositories charts and values files may come from, relative to the
    /// root and matched by whole path segments (`charts` holds `charts/web`, not `charts-x`);
    /// empty: the whole repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 1024)))]
    pub paths: Vec<String>,
    /// Branches that may be taken (`main`, `release-*`, `*`); none when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub branches: Vec<String>,
    /// Tags that may be taken (`v1.*`, `*`), by a `tag` or as the newest tag of a `semver`
    /// range: a range is resolved only among the tags these patterns allow (of every entry
    /// holding the repository and path), however new another is; none when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
    /// Whether a chart may name a `commit` directly. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_commits: bool,
    /// Lets this entry's repositories be fetched over plain `http://`, and this entry's
    /// credentials be sent there (as Flux's `insecure`): for labs only, where anyone on the
    /// path reads the credentials and may change the charts. Default false: an `http://` Git
    /// URL is refused, in every mode, unless the entry holding it says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// Push hooks that make this entry's repositories due at once (`POST
    /// /hooks/git/<policy name>` on the operator's HTTP port), signed with the secret under key
    /// `token` of this Secret of the operator's namespace: GitHub's `X-Hub-Signature-256`,
    /// Gitea's and Forgejo's `X-Gitea-Signature`, GitLab's `X-Gitlab-Token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<GitWebhook>,
}

/// The secret a Git entry's push hooks are signed with.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitWebhook {
    /// A Secret of the operator's namespace; its key `token` holds the shared secret.
    pub secret_ref: crate::api::crd::SecretReference,
}

/// The signatures a source's charts must carry and whose trust material checks them.
///
/// The Secret (in the operator's own namespace, like `secretRef`) holds, by provider: `cosign`,
/// PEM public keys under keys ending in `.pub` (any of them may have signed) and, for keyless
/// signatures (`matchOIDCIdentity`), the PEM CA certificates (roots and intermediates) signing
/// certificates chain to under keys ending in `.crt` or `.pem`, and the transparency log's PEM
/// public key under `rekor.pub` (never taken for a signing key); `notation`, PEM CA certificates
/// under keys ending in `.crt` or `.pem` (the trust store); `provenance`, a PGP public keyring
/// (armored or binary) under `keyring`. Read at each check, so a changed key takes effect at the
/// next look.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.matchOIDCIdentity) || self.provider == 'cosign'")
        .message("matchOIDCIdentity is for cosign's keyless signatures; notation names its signers in trustedIdentities"),
    validation = Rule::new("!has(self.transparencyLog) || has(self.matchOIDCIdentity)")
        .message("transparencyLog applies to keyless cosign signatures: set it with matchOIDCIdentity")
)]
pub struct SourceVerify {
    /// `cosign` or `notation` (OCI sources), `provenance` (Helm `.prov` of HTTP(S) repositories),
    /// `pgp` or `ssh` (signed commits of Git sources).
    pub provider: VerifyProvider,
    /// The Secret of the operator's namespace holding the trust material.
    pub secret_ref: crate::api::crd::SecretReference,
    /// Notation only: the signers trusted, as a Notation trust policy names them
    /// (`x509.subject: C=US, O=Example, CN=charts`); empty trusts every certificate chaining to
    /// the trust store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 1024)))]
    pub trusted_identities: Vec<String>,
    /// Cosign only: accepts keyless signatures, made with a short-lived certificate chaining to
    /// the CA certificates of the Secret, whose identity matches one of these (as Flux's
    /// `matchOIDCIdentity`). Public keys of the Secret still verify too.
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub match_oidc_identity: Vec<OidcIdentityMatch>,
    /// Keyless cosign only: whether a signature must be in the transparency log (see
    /// [`TransparencyLog`]); `Require` when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparency_log: Option<TransparencyLog>,
}

/// One identity keyless signatures may be made by: RE2 regular expressions, each matching the
/// whole value (`ci@lab\.test`, `https://git\.example\.com/charts/.*`).
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub struct OidcIdentityMatch {
    /// The OIDC issuer that vouched for the signer, as the signing certificate names it (Fulcio's
    /// issuer extension): `https://issuer\.example\.com`.
    #[schemars(length(min = 1, max = 1024))]
    pub issuer: String,
    /// The signer, one of the certificate's subject alternative names: an email
    /// (`ci@example\.com`) or a URI (a workload's identity).
    #[schemars(length(min = 1, max = 1024))]
    pub subject: String,
}

/// Keyless cosign only: whether a signature must be in the transparency log. `Require` (the
/// default) accepts a signature only with its log entry (a Rekor bundle) that the log's key,
/// `rekor.pub` of the Secret, verifies offline, and checks the certificate against the time the
/// log took it. `Skip` looks at no log: there is then no trusted signing time, so the certificate
/// must be valid at each check.
#[derive(
    JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum TransparencyLog {
    /// A signature must carry a log entry verified with the log's key (`rekor.pub`).
    #[default]
    Require,
    /// No log is looked at; the certificate must be valid at each check.
    Skip,
}

/// Who signs a source's charts, and how.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum VerifyProvider {
    /// A cosign signature by a public key (OCI).
    Cosign,
    /// A Notation signature by a certificate of an x509 trust store (OCI).
    Notation,
    /// A Helm provenance file (`.prov`) signed by a PGP key (HTTP(S) repositories).
    Provenance,
    /// Git commits signed by a PGP key: the Secret's keys ending in `.asc` (armored public keys).
    Pgp,
    /// Git commits signed by an SSH key: the Secret's keys ending in `.pub` (one public key per
    /// line, `ssh-ed25519 AAAA… name`).
    Ssh,
}

impl VerifyProvider {
    /// Its name as the policy writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyProvider::Cosign => "cosign",
            VerifyProvider::Notation => "notation",
            VerifyProvider::Provenance => "provenance",
            VerifyProvider::Pgp => "pgp",
            VerifyProvider::Ssh => "ssh",
        }
    }
}
