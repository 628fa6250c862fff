//! The credentials and CA a chart source is fetched with: read from its Secret at each fetch (so a changed Secret takes effect without a restart), parsed and checked, and never shown.
//!
//! Keys, as Kubernetes and Flux name them: `username` and `password` (basic auth), `token` (a
//! bearer token; a registry token for OCI), `.dockerconfigjson` (OCI registries' logins),
//! `ca.crt` (a PEM CA bundle trusted for this source besides the system's roots), `tls.crt` and
//! `tls.key` (a PEM client certificate and its key). A Secret is read by listing its namespace
//! with a field selector on its name, as `valuesFrom` Secrets are: the operator lists Secrets
//! already and holds no `get` on them.

use std::collections::BTreeMap;

use base64::Engine as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::ListParams};

use crate::policy::access::Credentials;

/// Largest Secret used for a source (all its keys together).
const MAX_SECRET_BYTES: usize = 1 << 20;

/// The keys a source Secret may hold, in words, for messages.
pub(crate) const KEYS: &str =
    "username and password, token, .dockerconfigjson, ca.crt, tls.crt and tls.key";

/// A Secret as read.
#[derive(Clone, Default)]
pub(crate) struct SecretData {
    /// Its data, by key.
    pub(crate) data: BTreeMap<String, Vec<u8>>,
    /// Its resource version: clients built from it are kept under it.
    pub(crate) version: String,
}

impl SecretData {
    /// Refuses a Secret larger than a source's may be (all its keys together).
    pub(crate) fn bounded(&self) -> Result<(), String> {
        let size: usize = self.data.values().map(Vec::len).sum();
        match size > MAX_SECRET_BYTES {
            true => Err(format!(
                "holds more than {} KiB; refused",
                MAX_SECRET_BYTES >> 10
            )),
            false => Ok(()),
        }
    }

    /// The text of `key` without its trailing newlines, None when absent; an error (naming the
    /// key, never its content) when it is not UTF-8.
    pub(crate) fn text(&self, key: &str) -> Result<Option<String>, String> {
        self.data
            .get(key)
            .map(|v| {
                String::from_utf8(v.clone())
                    .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                    .map_err(|_| format!("its key {key} is not UTF-8 text"))
            })
            .transpose()
    }
}

#[cfg(test)]
impl SecretData {
    /// A Secret holding `pairs` as text, at version 7.
    pub(crate) fn of(pairs: &[(&str, &str)]) -> Self {
        Self {
            data: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
            version: "7".into(),
        }
    }
}

/// Reads Secrets by name: the hub's API in the operator, a map in tests.
pub(crate) trait ReadSecret: Send + Sync {
    /// The Secret `namespace/name`, None when there is none.
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SecretData>, String>>;

    /// The labels of the Secret `namespace/name` (nothing of its data), None when there is none.
    fn labels<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>>;
}

/// Reads Secrets from the hub by listing their namespace with a field selector on the name.
pub(crate) struct HubSecrets(pub(crate) kube::Client);

fn by_name(name: &str) -> ListParams {
    ListParams::default()
        .fields(&format!("metadata.name={name}"))
        .limit(1)
}

impl ReadSecret for HubSecrets {
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SecretData>, String>> {
        Box::pin(async move {
            let api: Api<Secret> = Api::namespaced(self.0.clone(), namespace);
            let list = api.list(&by_name(name)).await.map_err(|e| e.to_string())?;
            Ok(list.items.into_iter().next().map(|s| SecretData {
                data: s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect(),
                version: s.metadata.resource_version.unwrap_or_default(),
            }))
        })
    }

    fn labels<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>> {
        Box::pin(async move {
            let api: Api<Secret> = Api::namespaced(self.0.clone(), namespace);
            let list = api
                .list_metadata(&by_name(name))
                .await
                .map_err(|e| e.to_string())?;
            Ok(list
                .items
                .into_iter()
                .next()
                .map(|s| s.metadata.labels.unwrap_or_default()))
        })
    }
}

/// The Secrets the hub's fetches read, and where the platform's live.
#[derive(Clone)]
pub(crate) struct SourceSecrets {
    /// Reads them.
    pub(crate) reader: std::sync::Arc<dyn ReadSecret>,
    /// The operator's own namespace, which holds the platform's Secrets (`secretRef`).
    pub(crate) operator_namespace: String,
}

/// How a request authenticates.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `username` and `password`.
    Basic { username: String, password: String },
    /// `token`.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Self::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

/// What a source's Secret holds, parsed. Its `Debug` form shows which keys, never their content.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Material {
    /// The Secret's resource version.
    pub(crate) version: String,
    /// Basic auth or a bearer token.
    pub(crate) auth: Option<Auth>,
    /// An OCI registries' login file (`.dockerconfigjson`).
    pub(crate) docker_config: Option<Vec<u8>>,
    /// PEM CA bundle.
    pub(crate) ca: Option<Vec<u8>>,
    /// PEM client certificate and key.
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            None => "none",
            Some(Auth::Basic { .. }) => "basic",
            Some(Auth::Bearer(_)) => "bearer",
        };
        f.debug_struct("Material")
            .field("version", &self.version)
            .field("auth", &auth)
            .field("docker_config", &self.docker_config.is_some())
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// Text of at least this many characters taken from a Secret is masked in messages.
const MASKED_FROM: usize = 4;

impl Material {
    /// Parses a source's Secret: which keys it holds, each checked. The error says which key is
    /// missing or unusable, never its content.
    pub(crate) fn parse(secret: &SecretData, oci: bool) -> Result<Self, String> {
        secret.bounded()?;
        let text = |key: &str| secret.text(key);
        let (username, password, token) = (text("username")?, text("password")?, text("token")?);
        let auth = match (username, password, token) {
            (Some(_), Some(_), Some(_)) => {
                return Err(
                    "holds both username/password and token: keep one way to authenticate".into(),
                );
            }
            (Some(username), Some(password), None) if !username.is_empty() => {
                Some(Auth::Basic { username, password })
            }
            (Some(_), Some(_), None) => return Err("its key username is empty".into()),
            (Some(_), None, _) => return Err("has key username but no key password".into()),
            (None, Some(_), _) => return Err("has key password but no key username".into()),
            (None, None, Some(token)) if !token.is_empty() => Some(Auth::Bearer(token)),
            (None, None, Some(_)) => return Err("its key token is empty".into()),
            (None, None, None) => None,
        };
        let docker_config = secret.data.get(".dockerconfigjson").cloned();
        if let Some(config) = &docker_config {
            let parsed: serde_json::Value = serde_json::from_slice(config)
                .map_err(|_| "its key .dockerconfigjson is not JSON".to_owned())?;
            if !parsed
                .get("auths")
                .is_some_and(serde_json::Value::is_object)
            {
                return Err("its key .dockerconfigjson has no \"auths\" object".into());
            }
            if !oci {
                return Err(
                    "holds .dockerconfigjson, which serves OCI registries only: give a Helm repository username and password, or token".into(),
                );
            }
            if auth.is_some() {
                return Err(
                    "holds both .dockerconfigjson and username/password or token: keep one".into(),
                );
            }
        }
        let pem = |key: &str, marker: &str| -> Result<Option<Vec<u8>>, String> {
            match secret.data.get(key) {
                None => Ok(None),
                Some(v) if String::from_utf8_lossy(v).contains(marker) => Ok(Some(v.clone())),
                Some(_) => Err(format!("its key {key} holds no PEM {marker}")),
            }
        };
        let ca = pem("ca.crt", "-----BEGIN CERTIFICATE-----")?;
        let identity = match (
            pem("tls.crt", "-----BEGIN CERTIFICATE-----")?,
            pem("tls.key", "PRIVATE KEY-----")?,
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err("has key tls.crt but no key tls.key".into()),
            (None, Some(_)) => return Err("has key tls.key but no key tls.crt".into()),
        };
        if auth.is_none() && docker_config.is_none() && ca.is_none() && identity.is_none() {
            return Err(format!("holds none of the keys {KEYS}"));
        }
        Ok(Self {
            version: secret.version.clone(),
            auth,
            docker_config,
            ca,
            identity,
        })
    }

    /// Replaces every piece of the Secret's content in `text` (a password, a token, the
    /// credentials in a docker config) by `***`, for messages that quote a tool.
    pub(crate) fn mask(&self, text: &str) -> String {
        let mut pieces: Vec<String> = Vec::new();
        match &self.auth {
            Some(Auth::Basic { password, .. }) => pieces.push(password.clone()),
            Some(Auth::Bearer(token)) => pieces.push(token.clone()),
            None => {}
        }
        if let Some(config) = &self.docker_config {
            pieces.extend(docker_secrets(config));
        }
        let mut out = text.to_owned();
        for piece in pieces.iter().filter(|p| p.len() >= MASKED_FROM) {
            out = out.replace(piece.as_str(), "***");
        }
        out
    }

    /// The registries' login file `helm pull --registry-config` reads for `host`: the Secret's
    /// `.dockerconfigjson` as it is, or one made of its username and password or token; an empty
    /// one when it holds neither, so helm never falls back on a login of the operator's user.
    pub(crate) fn registry_config(&self, host: &str) -> Vec<u8> {
        if let Some(config) = &self.docker_config {
            return config.clone();
        }
        registry_config(self.auth.as_ref(), host)
    }
}

/// A registries' login file holding `auth` for `host` (none: an empty one).
pub(crate) fn registry_config(auth: Option<&Auth>, host: &str) -> Vec<u8> {
    let entry = match auth {
        None => return br#"{"auths":{}}"#.to_vec(),
        Some(Auth::Basic { username, password }) => {
            let pair = format!("{username}:{password}");
            serde_json::json!({ "auth": base64::engine::general_purpose::STANDARD.encode(pair) })
        }
        Some(Auth::Bearer(token)) => serde_json::json!({ "registrytoken": token }),
    };
    serde_json::to_vec(&serde_json::json!({ "auths": { host: entry } }))
        .expect("plain data serializes")
}

/// The secret strings of a docker config: each `auth` (and what it decodes to), `password`,
/// `identitytoken` and `registrytoken`.
fn docker_secrets(config: &[u8]) -> Vec<String> {
    let Ok(serde_json::Value::Object(top)) = serde_json::from_slice(config) else {
        return Vec::new();
    };
    let Some(serde_json::Value::Object(auths)) = top.get("auths") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in auths.values().filter_map(serde_json::Value::as_object) {
        for key in ["auth", "password", "identitytoken", "registrytoken"] {
            if let Some(value) = entry.get(key).and_then(serde_json::Value::as_str) {
                out.push(value.to_owned());
                if key == "auth"
                    && let Ok(pair) = base64::engine::general_purpose::STANDARD.decode(value)
                    && let Some((_, password)) = String::from_utf8_lossy(&pair).split_once(':')
                {
                    out.push(password.to_owned());
                }
            }
        }
    }
    out
}

impl SourceSecrets {
    /// The namespace and name of the Secret `credentials` name.
    fn place<'a>(&'a self, credentials: &'a Credentials) -> Option<(&'a str, &'a str)> {
        match credentials {
            Credentials::None => None,
            Credentials::Platform { secret, .. } => Some((&self.operator_namespace, secret)),
            Credentials::Tenant {
                namespace, secret, ..
            } => Some((namespace, secret)),
        }
    }

    /// What `credentials` name, read and parsed now (None for [`Credentials::None`]). A tenant
    /// Secret only rules on labels allow is read only once its labels match one (an absent one is
    /// judged as one without labels, so the refusal tells nothing of whether it exists). The
    /// error names the Secret, the policy and the source, and says what to do.
    pub(crate) async fn material(
        &self,
        credentials: &Credentials,
        oci: bool,
    ) -> Result<Option<Material>, String> {
        let Some(data) = self.read(credentials, KEYS).await? else {
            return Ok(None);
        };
        let (policy, prefix) = credentials.origin().unwrap_or_default();
        let (namespace, name) = self.place(credentials).unwrap_or_default();
        Material::parse(&data, oci).map(Some).map_err(|why| {
            format!(
                "Secret {namespace}/{name}, named for source {prefix} by TenancyPolicy {policy}, {why}; its keys: {KEYS}"
            )
        })
    }

    /// The Secret `credentials` name, read now (None for [`Credentials::None`]), under the same
    /// rules as [`SourceSecrets::material`]; `keys` says, in a refusal, which keys it needs.
    pub(crate) async fn read(
        &self,
        credentials: &Credentials,
        keys: &str,
    ) -> Result<Option<SecretData>, String> {
        let Some((namespace, name)) = self.place(credentials) else {
            return Ok(None);
        };
        let (policy, prefix) = credentials.origin().unwrap_or_default();
        let secret = format!("Secret {namespace}/{name}");
        let unreadable = |e: String| {
            format!(
                "reading {secret} (named for source {prefix} by TenancyPolicy {policy}): {e}; read again at the next fetch"
            )
        };
        if let Credentials::Tenant { labels: sets, .. } = credentials
            && !sets.is_empty()
        {
            let labels = self
                .reader
                .labels(namespace, name)
                .await
                .map_err(unreadable)?
                .unwrap_or_default();
            if !sets
                .iter()
                .any(|set| set.iter().all(|(k, v)| labels.get(k) == Some(v)))
            {
                return Err(format!(
                    "{secret} may not be used for source {prefix}: no tenantSecrets rule allows it (TenancyPolicy {policy} allows only Secrets named in its rule or carrying its labels); a platform admin adds it to the rule, or it is given the rule's labels"
                ));
            }
        }
        let Some(data) = self
            .reader
            .read(namespace, name)
            .await
            .map_err(unreadable)?
        else {
            let whose = match credentials {
                Credentials::Tenant { .. } => "the Controller's hub namespace",
                _ => "the operator's namespace",
            };
            return Err(format!(
                "{secret}, named for source {prefix} by TenancyPolicy {policy}, does not exist: create it in {whose} with the keys the source needs ({keys})"
            ));
        };
        Ok(Some(data))
    }
}

/// What to do about a failed fetch of a source, from the failure's text, or None: wrong or
/// missing credentials (401), credentials without access (403), a certificate from an unknown
/// CA, an expired or otherwise invalid certificate. Names the Secret and policy that gave the
/// credentials, or says none did.
pub(crate) fn hint(
    failure: &str,
    credentials: &Credentials,
    operator_namespace: &str,
) -> Option<String> {
    let lower = failure.to_ascii_lowercase();
    let (policy, prefix) = credentials.origin().unwrap_or_default();
    let secret = credentials
        .secret(operator_namespace)
        .map(|s| format!("{s} (TenancyPolicy {policy}, source {prefix})"));
    const NAME_ONE: &str = "a platform admin names a Secret holding them in a sources entry (secretRef) of a TenancyPolicy governing the Controller's hub namespace";
    // Words, not bare status numbers: a port or a digest may hold "401".
    if lower.contains("unauthorized") {
        Some(match secret {
            Some(secret) => format!(
                "the source refused the credentials of {secret}: check its keys username and password (or token, or .dockerconfigjson)"
            ),
            None => format!("the source asks for credentials and none were given: {NAME_ONE}"),
        })
    } else if lower.contains("forbidden") || lower.contains("denied") {
        Some(match secret {
            Some(secret) => format!(
                "the credentials of {secret} lack access to this chart: grant their account access on the source"
            ),
            None => format!("the source refuses anonymous access: {NAME_ONE}"),
        })
    } else if ["unknownissuer", "unknown authority", "unknown ca"]
        .iter()
        .any(|w| lower.contains(w))
    {
        Some(match secret {
            Some(secret) => format!(
                "its certificate is signed by a CA the hub does not trust: add that CA as ca.crt to {secret}"
            ),
            None => "its certificate is signed by a CA the hub does not trust: a platform admin names a Secret holding it as ca.crt in a sources entry (secretRef) of a TenancyPolicy for this source".to_owned(),
        })
    } else if ["expired", "notvalidyet", "not yet valid"]
        .iter()
        .any(|w| lower.contains(w))
    {
        Some("its certificate has expired or is not valid yet: the source's admins renew it".into())
    } else if lower.contains("certificate")
        && (lower.contains("invalid") || lower.contains("not valid"))
    {
        Some("its certificate is not valid for this host: the source's admins fix it, or the URL names the host it is issued for".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
