//! An Alert's webhook from its Secret: read from the Alert's own namespace only, used only when a `TenancyPolicy` allows it as it allows `valuesFrom`, its address an `http(s)` URL; what is wrong said without a byte of the Secret.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, ResourceExt, api::ListParams};

use crate::{
    api::alert::{Alert, ProviderType},
    api::crd::ValuesKind,
    policy::Admission,
};

/// The Secret key holding the webhook's URL.
pub(crate) const ADDRESS_KEY: &str = "address";
/// The Secret key holding the generic provider's signing key.
pub(crate) const HMAC_KEY: &str = "hmacKey";
/// How long reading the Secret may take.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the admission is now (the policies change while the operator runs).
pub(crate) type AdmissionNow = std::sync::Arc<dyn Fn() -> Admission + Send + Sync>;

/// Where an Alert sends, and how it signs. Its `Debug` shows the endpoint's scheme and host only.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The provider's kind.
    pub(crate) provider: ProviderType,
    /// The webhook's URL (a secret: never shown whole).
    pub(crate) url: url::Url,
    /// The generic provider's signing key, when given.
    pub(crate) hmac_key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("url", &shown(&self.url))
            .field("signed", &self.hmac_key.is_some())
            .finish()
    }
}

/// A URL as status and logs may show it: scheme, host and port, nothing of the path, query or
/// credentials (a webhook's path is often its token).
pub(crate) fn shown(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// Why an Alert cannot send; every message names the Secret and what to do, and holds nothing
/// read from it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Problem {
    /// The Secret does not exist.
    #[error(
        "Secret {namespace}/{name} does not exist: create it in the Alert's namespace with key address (the webhook's URL)"
    )]
    SecretMissing { namespace: String, name: String },
    /// No policy allows reading it; the admission's words.
    #[error("{0}; until then nothing is sent")]
    SecretNotAllowed(String),
    /// The Secret could not be read.
    #[error("Secret {namespace}/{name} could not be read: {why}; tried again within a minute")]
    SecretUnreadable {
        namespace: String,
        name: String,
        why: String,
    },
    /// It lacks the address.
    #[error("Secret {namespace}/{name} has no key address: put the webhook's URL under it")]
    AddressMissing { namespace: String, name: String },
    /// The address is no `http(s)` URL.
    #[error(
        "the address in Secret {namespace}/{name} {why}: give an http:// or https:// URL of the webhook"
    )]
    AddressInvalid {
        namespace: String,
        name: String,
        why: String,
    },
}

impl Problem {
    /// The `Ready` condition's reason for it.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::SecretMissing { .. } => "SecretNotFound",
            Self::SecretNotAllowed(_) => "SecretNotAllowed",
            Self::SecretUnreadable { .. } => "SecretUnreadable",
            Self::AddressMissing { .. } => "AddressMissing",
            Self::AddressInvalid { .. } => "AddressInvalid",
        }
    }
}

/// What reading an Alert's Secret found: its labels and data, or nothing.
pub(crate) type Found = Option<(BTreeMap<String, String>, BTreeMap<String, ByteString>)>;

/// The endpoint an Alert of `namespace` sends to, from what its Secret `name` holds (pure): the
/// policy is asked first, so nothing of a Secret no rule allows is looked at.
pub(crate) fn endpoint(
    namespace: &str,
    name: &str,
    provider: ProviderType,
    found: &Found,
    admission: &Admission,
    internal: bool,
) -> Result<Endpoint, Problem> {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    let Some((labels, data)) = found else {
        // Refused as an unlabelled one that exists would be: whether a Secret no rule allows
        // exists is never told.
        admission
            .may_read_values(&namespace, ValuesKind::Secret, &name, &BTreeMap::new())
            .map_err(Problem::SecretNotAllowed)?;
        return Err(Problem::SecretMissing { namespace, name });
    };
    admission
        .may_read_values(&namespace, ValuesKind::Secret, &name, labels)
        .map_err(Problem::SecretNotAllowed)?;
    let Some(raw) = data.get(ADDRESS_KEY) else {
        return Err(Problem::AddressMissing { namespace, name });
    };
    let invalid = |why: &str| Problem::AddressInvalid {
        namespace: namespace.clone(),
        name: name.clone(),
        why: why.to_owned(),
    };
    let text = std::str::from_utf8(&raw.0).map_err(|_| invalid("is not text"))?;
    let url = url::Url::parse(text.trim()).map_err(|_| invalid("is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("is not http(s)"));
    }
    let inside = url.host().map_or(Some("no host"), |h| {
        crate::policy::source::internal_host(&h)
    });
    if let Some(why) = inside.filter(|_| !internal) {
        return Err(invalid(&format!(
            "leads back into the hub ({why}); such a webhook is refused unless the operator runs with --notify-internal-addresses"
        )));
    }
    let hmac_key = match provider {
        ProviderType::Generic => data
            .get(HMAC_KEY)
            .map(|k| k.0.clone())
            .filter(|k| !k.is_empty()),
        _ => None,
    };
    Ok(Endpoint {
        provider,
        url,
        hmac_key,
    })
}

/// Reads the Secret an Alert names, in the Alert's namespace only (a list narrowed to its name,
/// as `valuesFrom` reads), then makes its endpoint.
pub(crate) async fn resolve(
    hub: &kube::Client,
    alert: &Alert,
    admission: &Admission,
    internal: bool,
) -> Result<Endpoint, Problem> {
    let namespace = alert.namespace().unwrap_or_default();
    let name = alert.spec.provider.secret_ref.name.clone();
    let api: Api<Secret> = Api::namespaced(hub.clone(), &namespace);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let listed = tokio::time::timeout(READ_TIMEOUT, api.list(&params)).await;
    let found: Found = match listed {
        Ok(Ok(list)) => list.items.into_iter().next().map(|s| {
            let labels = s.labels().clone();
            (labels, s.data.unwrap_or_default())
        }),
        Ok(Err(e)) => {
            return Err(Problem::SecretUnreadable {
                namespace,
                name,
                why: unreadable(&e),
            });
        }
        Err(_) => {
            return Err(Problem::SecretUnreadable {
                namespace,
                name,
                why: "the hub did not answer in time".into(),
            });
        }
    };
    endpoint(
        &namespace,
        &name,
        alert.spec.provider.type_,
        &found,
        admission,
        internal,
    )
}

/// A failed read in words that cannot hold the Secret's content: the API's status code and
/// reason only.
fn unreadable(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("the hub answered {} {}", s.code, s.reason),
        _ => "the hub could not be reached".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::{TenancyPolicySpec, ValuesRule};
    use crate::policy::{Mode, NamedPolicy};

    const URL: &str = "https://hooks.example.com/services/T0/B0/s3cr3t-t0ken?sig=abc";

    fn admission(rules: Vec<ValuesRule>) -> Admission {
        Admission {
            mode: Mode::Enforce,
            policies: vec![NamedPolicy {
                name: "team-a".into(),
                spec: TenancyPolicySpec {
                    hub_namespaces: vec!["team-a".into()],
                    trusted: true,
                    values_from: rules,
                    ..Default::default()
                },
            }],
            operator_namespace: "tenancy-hub".into(),
        }
    }

    fn allowed() -> Admission {
        admission(vec![ValuesRule {
            kind: Some(ValuesKind::Secret),
            names: vec!["hook".into()],
            ..Default::default()
        }])
    }

    fn secret(pairs: &[(&str, &[u8])]) -> Found {
        Some((
            BTreeMap::new(),
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ))
    }

    #[test]
    fn an_allowed_secret_gives_its_endpoint_and_shows_only_scheme_and_host() {
        let e = endpoint(
            "team-a",
            "hook",
            ProviderType::Generic,
            &secret(&[("address", URL.as_bytes()), ("hmacKey", b"k3y")]),
            &allowed(),
            false,
        )
        .unwrap();
        assert_eq!(e.url.as_str(), URL);
        assert_eq!(e.hmac_key.as_deref(), Some(&b"k3y"[..]));
        assert_eq!(shown(&e.url), "https://hooks.example.com");
        let debug = format!("{e:?}");
        assert!(
            !debug.contains("s3cr3t") && !debug.contains("k3y"),
            "{debug}"
        );
    }

    #[test]
    fn a_secret_no_policy_allows_is_refused_naming_it_and_what_to_do() {
        let refused = endpoint(
            "team-a",
            "platform-token",
            ProviderType::Generic,
            &secret(&[("address", URL.as_bytes())]),
            &allowed(),
            false,
        )
        .unwrap_err();
        assert_eq!(refused.reason(), "SecretNotAllowed");
        let text = refused.to_string();
        assert!(text.contains("team-a/platform-token"), "{text}");
        assert!(text.contains("a platform admin adds one"), "{text}");
        let ungoverned = endpoint(
            "team-b",
            "hook",
            ProviderType::Generic,
            &secret(&[("address", URL.as_bytes())]),
            &allowed(),
            false,
        )
        .unwrap_err();
        assert!(ungoverned.to_string().contains("no TenancyPolicy governs"));
    }

    #[test]
    fn a_missing_secret_no_policy_allows_is_refused_as_one_that_exists() {
        let refused = |found: &Found| {
            endpoint(
                "team-a",
                "platform-token",
                ProviderType::Generic,
                found,
                &allowed(),
                false,
            )
            .unwrap_err()
        };
        let (absent, present) = (
            refused(&None),
            refused(&secret(&[("address", URL.as_bytes())])),
        );
        assert_eq!(absent.reason(), "SecretNotAllowed");
        assert_eq!(absent.to_string(), present.to_string());
        let missing = endpoint(
            "team-a",
            "hook",
            ProviderType::Generic,
            &None,
            &allowed(),
            false,
        )
        .unwrap_err();
        assert_eq!(
            missing.reason(),
            "SecretNotFound",
            "an allowed name is told"
        );
    }

    #[test]
    fn no_secret_value_reaches_any_error() {
        let cases: Vec<(Found, Admission)> = vec![
            (None, allowed()),
            (secret(&[("address", URL.as_bytes())]), admission(vec![])),
            (secret(&[("hmacKey", b"s3cr3t-k3y")]), allowed()),
            (secret(&[("address", b"ftp://s3cr3t@host/x")]), allowed()),
            (secret(&[("address", b"s3cr3t not a url")]), allowed()),
            (secret(&[("address", b"\xff\xfes3cr3t")]), allowed()),
            (
                secret(&[("address", b"http://169.254.169.254/s3cr3t")]),
                allowed(),
            ),
            (
                secret(&[("address", b"http://metadata.google.internal/s3cr3t")]),
                allowed(),
            ),
        ];
        for (found, admission) in cases {
            let e = endpoint(
                "team-a",
                "hook",
                ProviderType::Generic,
                &found,
                &admission,
                false,
            )
            .unwrap_err();
            let text = e.to_string();
            assert!(!text.contains("s3cr3t") && !text.contains("k3y"), "{text}");
            assert!(text.contains("team-a/hook"), "{text}");
        }
    }

    #[test]
    fn a_webhook_leading_back_into_the_hub_is_refused_unless_the_operator_allows_it() {
        for address in [
            "http://127.0.0.1:8080/hook",
            "http://[::1]/hook",
            "http://localhost/hook",
            "http://169.254.169.254/latest",
        ] {
            let found = secret(&[("address", address.as_bytes())]);
            let refused = endpoint(
                "team-a",
                "hook",
                ProviderType::Generic,
                &found,
                &allowed(),
                false,
            )
            .unwrap_err();
            assert_eq!(refused.reason(), "AddressInvalid");
            assert!(
                refused.to_string().contains("--notify-internal-addresses"),
                "{refused}"
            );
            assert!(
                endpoint(
                    "team-a",
                    "hook",
                    ProviderType::Generic,
                    &found,
                    &allowed(),
                    true
                )
                .is_ok()
            );
        }
    }

    #[test]
    fn a_labelled_secret_is_allowed_by_a_label_rule() {
        let by_label = admission(vec![ValuesRule {
            kind: Some(ValuesKind::Secret),
            match_labels: BTreeMap::from([("notify".into(), "true".into())]),
            ..Default::default()
        }]);
        let labelled: Found = Some((
            BTreeMap::from([("notify".into(), "true".into())]),
            BTreeMap::from([("address".into(), ByteString(URL.into()))]),
        ));
        assert!(
            endpoint(
                "team-a",
                "any",
                ProviderType::Slack,
                &labelled,
                &by_label,
                false
            )
            .is_ok()
        );
        assert!(
            endpoint(
                "team-a",
                "any",
                ProviderType::Slack,
                &secret(&[("address", URL.as_bytes())]),
                &by_label,
                false
            )
            .is_err()
        );
    }
}
