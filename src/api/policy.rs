//! The cluster-scoped `multitenancy.dev/v1alpha1` `TenancyPolicy`: where tenants may deliver, from which chart sources, as whom.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the `Controller` resources of some hub namespaces may deliver, and as whom.
///
/// Written by platform admins. A release is allowed when one policy that governs its
/// `Controller`'s hub namespace allows its cluster, its target namespace and its chart source
/// together; several policies may govern one hub namespace, and what any of them allows is allowed.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multitenancy.dev",
    version = "v1alpha1",
    kind = "TenancyPolicy",
    shortname = "tenpol",
    category = "tenancy",
    doc = "Allows the Controllers of some hub namespaces to deliver to some clusters and namespaces, from some chart sources, as an identity of their own.",
    printcolumn(
        name = "Hub-Namespaces",
        type_ = "string",
        json_path = ".spec.hubNamespaces"
    ),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "User", type_ = "string", json_path = ".spec.impersonate.user"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.clusters) || has(self.clusterSelector)")
        .message("name the allowed clusters, select them by label, or both: a policy without either allows no cluster"),
    validation = Rule::new("has(self.impersonate) != (has(self.trusted) && self.trusted)")
        .message("say as whom Helm acts for this policy's releases: impersonate an identity of the tenants' own, or set trusted: true to let Helm act with the operator's own credentials (not both)")
)]
pub struct TenancyPolicySpec {
    /// Hub namespaces whose `Controller` resources this policy governs, by exact name.
    #[schemars(
        length(min = 1, max = 256),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub hub_namespaces: Vec<String>,

    /// Registered cluster names releases may go to. The hub cluster (`hub`) is allowed only when
    /// named here, never by `clusterSelector`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub clusters: Vec<String>,

    /// Allows the member clusters whose registration labels match (an empty selector matches
    /// every member). With neither `clusters` nor `clusterSelector`, no cluster is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<PolicyClusterSelector>,

    /// Target namespaces releases may go to: an exact name, a prefix ending in `*` (`team-a-*`),
    /// or `*` for any. `kube-system`, `kube-public`, `kube-node-lease` and the operator's own
    /// namespace are matched only by their exact name, never by a pattern.
    #[schemars(
        length(min = 1, max = 256),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^([*]|[a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-z0-9][-a-z0-9]*[*])$")
        )
    )]
    pub namespaces: Vec<String>,

    /// Where charts may come from: `chart-home` (the operator's local chart directory), or a URL
    /// prefix: `https://charts.example.com/` for Helm repositories, `oci://registry.example.com/team-a/`
    /// for OCI charts. A prefix matches whole path segments. `http://` repositories are refused
    /// unless a prefix here names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 2048),
            regex(pattern = r"^(chart-home|https://[^/@]+.*|http://[^/@]+.*|oci://[^/@]+.*)$")
        )
    )]
    pub chart_sources: Vec<String>,

    /// Chart sources with what the hub fetches them with: each entry allows its prefix as a
    /// `chartSources` entry does, and may name a Secret of the operator's own namespace holding
    /// the source's credentials and CA (`secretRef`), and Secrets of the governed hub namespaces
    /// a Controller may name for it instead (`tenantSecrets`). Among the entries of the policies
    /// governing a Controller's hub namespace whose prefix holds a chart's source, the longest
    /// prefix applies (ties: the first policy by name). Credentials are sent to the source's own
    /// scheme, host and port only, and never reach argv, logs, status or a member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub sources: Vec<SourceAccess>,

    /// The identity Helm acts as in the target clusters for releases this policy allows, so the
    /// cluster's own RBAC decides what a chart may create. Exactly one of `impersonate` and
    /// `trusted: true` must be given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonate: Option<Impersonation>,

    /// Lets Helm act with the operator's own credentials for releases this policy allows: the
    /// platform admin's explicit choice to trust these hub namespaces with every right the
    /// operator holds in the allowed clusters. Exactly one of `impersonate` and `trusted: true`
    /// must be given; a policy with neither allows nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,

    /// Which Secrets and ConfigMaps of the governed hub namespaces their Controllers may read
    /// values from (`valuesFrom`), in every mode. None when empty: a Controller reads only
    /// what a rule here allows, and only in its own hub namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_from: Vec<ValuesRule>,

    /// Which Secrets of the governed hub namespaces their `Alert`s may send to (the Secret holds
    /// the webhook's URL and signing key). Separate from `valuesFrom`, which never allows an
    /// Alert's Secret, nor this a chart's values. None when empty: an Alert's Secret is read
    /// only when a rule here allows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub alert_secrets: Vec<AlertSecretRule>,

    /// Addresses inside the cluster or a private network the governed namespaces' Alerts may
    /// send to, otherwise refused: a CIDR (`10.20.0.0/16`, `fd00:1::/64`, `127.0.0.1/32`) or a
    /// host name exactly (`alertmanager.monitoring.svc`). The hub's own API server is never
    /// allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^([0-9a-fA-F:.]+/[0-9]{1,3}|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")
        )
    )]
    pub alert_internal_addresses: Vec<String>,

    /// What the governed Controllers' charts may ask of Helm itself (their `install`,
    /// `upgrade` and `uninstall` settings). Absent: everything the chart entry offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRule>,

    /// Lets the governed Controllers take over (`adopt: true` on a chart) an existing Helm
    /// release tenancy-hub does not own, in the clusters and namespaces this policy allows,
    /// as this policy's identity. Default false: such a release is a `Conflict`. A release
    /// another Controller owns (its records sealed by the operator) is never taken over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_adoption: bool,
}

/// What a policy lets its releases ask of Helm.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HelmRule {
    /// Whether a chart may set `install.disableHooks` or `upgrade.disableHooks`: skipping the
    /// hooks a platform relies on (a migration, a registration Job). Default true; false makes
    /// such a release `Forbidden` under this policy. Uninstalls skip delete hooks by default
    /// whatever this says, as they always have.
    #[serde(default = "yes")]
    pub allow_disable_hooks: bool,

    /// The CRD policies (`install.crds`, `upgrade.crds`, with their defaults `Create` and
    /// `Skip` when unset) the governed charts may use. Default `[Skip, Create]`: a chart may
    /// create the CRDs a cluster lacks, as the release's identity, never change one there.
    /// `CreateReplace` changes a cluster-wide schema every tenant of the cluster shares: list it
    /// to let these charts replace their CRDs; a release using a policy not listed is
    /// `Forbidden`, with nothing run.
    #[serde(default = "create_and_skip")]
    #[schemars(length(max = 3))]
    pub crd_policies: Vec<crate::api::crd::CrdPolicy>,

    /// Whether a chart may set `postRenderers` or `commonMetadata` (its own or an override's):
    /// patches over what the chart renders. Default true; false makes such a release `Forbidden`
    /// under this policy.
    #[serde(default = "yes")]
    pub allow_post_renderers: bool,

    /// Whether post-render patches and `commonMetadata` may change objects of the sensitive
    /// kinds: RBAC (Role, ClusterRole, RoleBinding, ClusterRoleBinding), admission webhooks and
    /// policies, CustomResourceDefinitions. Default false: a patch naming one is `Forbidden`, and
    /// the Helm executor fails a release whose patched manifest changes one (a patch may retarget
    /// the object it aims at, so the result is judged, not the target).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_post_render_sensitive_kinds: bool,
}

impl Default for HelmRule {
    fn default() -> Self {
        Self {
            allow_disable_hooks: true,
            crd_policies: create_and_skip(),
            allow_post_renderers: true,
            allow_post_render_sensitive_kinds: false,
        }
    }
}

/// The CRD policies a policy allows unless it says otherwise: those that never change a CRD
/// that exists.
pub(crate) fn create_and_skip() -> Vec<crate::api::crd::CrdPolicy> {
    use crate::api::crd::CrdPolicy;
    vec![CrdPolicy::Skip, CrdPolicy::Create]
}

fn yes() -> bool {
    true
}

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
        .message("a Git source's url is https:// or ssh:// (http:// for a server on a private network)"),
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
    /// Tags that may be taken, by a `tag` or as the newest tag of a `semver` range (`v*`, `*`);
    /// none when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
    /// Whether a chart may name a `commit` directly. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_commits: bool,
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

/// Secrets of a governed hub namespace a Controller may name for a source: those named here or
/// carrying every label here; every Secret of the namespace when neither is given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantSecretRule {
    /// Secret names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed Secret carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl TenantSecretRule {
    /// True when the rule allows the Secret `name` whatever its labels.
    pub fn allows_by_name(&self, name: &str) -> bool {
        (self.names.is_empty() && self.match_labels.is_empty())
            || self.names.iter().any(|n| n == name)
    }

    /// True when the rule allows the Secret `name` with `labels`.
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.allows_by_name(name)
            || (!self.match_labels.is_empty()
                && self
                    .match_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// Secrets an Alert of a governed hub namespace may send to: those named here or carrying
/// every label here; every Secret of the namespace when neither is given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertSecretRule {
    /// Secret names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed Secret carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl AlertSecretRule {
    /// The same rule as a `valuesFrom` rule of kind Secret, which decides alike.
    fn as_values_rule(&self) -> ValuesRule {
        ValuesRule {
            kind: Some(crate::api::crd::ValuesKind::Secret),
            names: self.names.clone(),
            match_labels: self.match_labels.clone(),
        }
    }

    /// True when the rule allows the Secret `name` with `labels`.
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.as_values_rule()
            .allows(crate::api::crd::ValuesKind::Secret, name, labels)
    }

    /// True when the rule may allow a Secret of that name only by its labels (so they must be
    /// looked at); false when it allows or refuses by name alone.
    pub fn needs_labels(&self, name: &str) -> bool {
        !self.match_labels.is_empty() && !self.allows(name, &BTreeMap::new())
    }
}

/// Hub objects a governed Controller may read values from: those of the kind (both when
/// omitted) named here or carrying every label here; every object of the kind when neither is
/// given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValuesRule {
    /// `Secret` or `ConfigMap`; both when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::api::crd::ValuesKind>,
    /// Object names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed object carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl ValuesRule {
    /// True when the rule allows the object of `kind`, `name` and `labels`.
    pub fn allows(
        &self,
        kind: crate::api::crd::ValuesKind,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let kind_ok = self.kind.is_none_or(|k| k == kind);
        let named = self.names.iter().any(|n| n == name);
        let labelled = !self.match_labels.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v));
        let any = self.names.is_empty() && self.match_labels.is_empty();
        kind_ok && (any || named || labelled)
    }
}

impl TenancyPolicySpec {
    /// Whom Helm acts as for this policy's releases: `Ok(None)` for the operator's own
    /// credentials (`trusted: true`), `Ok(Some(..))` for an impersonated identity, or the reason
    /// the policy names no identity (neither field, or both).
    pub fn identity(&self) -> Result<Option<&Impersonation>, &'static str> {
        match (&self.impersonate, self.trusted) {
            (Some(who), false) => Ok(Some(who)),
            (None, true) => Ok(None),
            (None, false) => Err(
                "it names no identity: set impersonate, or trusted: true to let Helm act with the operator's own credentials",
            ),
            (Some(_), true) => Err(
                "it sets both impersonate and trusted: keep one, so the identity Helm acts as is unambiguous",
            ),
        }
    }
}

/// Selects registered member clusters by label.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyClusterSelector {
    /// Every label here must be present, with this value, on the cluster's registration entry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A user and groups Helm impersonates (`--kube-as-user`, `--kube-as-group`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Impersonation {
    /// User name, as the target clusters' RBAC knows it (for example `team-a-deployer`, or
    /// `system:serviceaccount:NAMESPACE:NAME`).
    #[schemars(length(min = 1, max = 253))]
    pub user: String,

    /// Groups of the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = Rule::new("!self.exists(g, g == 'system:masters')")
        .message("impersonating system:masters would give tenants every right: use a group of their own"))]
    pub groups: Vec<String>,

    /// A ClusterRole the operator binds to this user in every target namespace it creates for
    /// the policy's releases (a RoleBinding `tenancy-hub-deployer`), so the identity holds those
    /// rights there and nowhere else. Without it, the target clusters' admins grant the rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub namespace_role: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_policy_crd_is_cluster_scoped_and_carries_its_rules() {
        let crd = TenancyPolicy::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("tenancypolicies.multitenancy.dev")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        let yaml = serde_yaml::to_string(&crd).unwrap();
        for needle in [
            "impersonating system:masters",
            "a policy without either allows no cluster",
            "pattern: ^([*]|",
            "pattern: ^(chart-home|",
            "set trusted: true to let Helm act",
        ] {
            assert!(yaml.contains(needle), "CRD lacks {needle:?}");
        }
    }

    #[test]
    fn the_committed_policy_crd_matches_the_code() {
        let committed = include_str!("../../crds/tenancypolicies.multitenancy.dev.yaml");
        assert!(
            committed.strip_prefix("---\n") == Some(crate::api::policy_crd_yaml().as_str()),
            "crds/tenancypolicies.multitenancy.dev.yaml is stale: run kind/crds.sh"
        );
    }

    #[test]
    fn the_example_of_the_documentation_parses() {
        let p: TenancyPolicy = serde_yaml::from_str(
            "apiVersion: multitenancy.dev/v1alpha1\nkind: TenancyPolicy\nmetadata: {name: team-a}\nspec:\n  hubNamespaces: [team-a]\n  clusters: [member-1]\n  clusterSelector: {matchLabels: {env: dev}}\n  namespaces: [team-a, \"team-a-*\"]\n  chartSources: [chart-home, \"https://charts.example.com/\"]\n  impersonate: {user: team-a-deployer, groups: [team-a], namespaceRole: admin}\n",
        )
        .unwrap();
        assert_eq!(p.spec.namespaces, ["team-a", "team-a-*"]);
        let who = p.spec.impersonate.unwrap();
        assert_eq!(who.user, "team-a-deployer");
        assert_eq!(who.namespace_role.as_deref(), Some("admin"));
    }
}
