//! An Alert's webhook from its Secret: judged against the policies' `alertSecrets` before anything of it is read, read from the Alert's own namespace only (once per [`REUSE`] per Secret, a few reads per tenant at once), its address an `http(s)` URL that does not lead inside; what is wrong said without a byte of the Secret.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use dashmap::DashMap;
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, ResourceExt, api::ListParams};
use tokio::sync::{Mutex, Semaphore};

use crate::{
    api::alert::{Alert, ProviderType},
    metrics::Metrics,
    notify::address::{Allowed, HubApi, refused},
    policy::{Admission, AlertSecret},
};

/// The Secret key holding the webhook's URL.
pub(crate) const ADDRESS_KEY: &str = "address";
/// The Secret key holding the generic provider's signing key.
pub(crate) const HMAC_KEY: &str = "hmacKey";
/// How long reading the Secret may take, waiting for a turn included.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long what one read of a Secret found is used again, by every Alert naming it.
pub(crate) const REUSE: Duration = Duration::from_secs(10);
/// Reads of one hub namespace's Alert Secrets at once.
pub(crate) const READS_PER_TENANT: usize = 2;
/// Secrets remembered before the stale ones are forgotten.
const REMEMBERED: usize = 1024;

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
    /// The namespace holds more Alerts than the operator follows.
    #[error(
        "hub namespace {namespace} holds more than the {cap} Alerts the operator follows per namespace, and this one is among the newest: it sends nothing; delete Alerts it does not need (the oldest {cap} are followed)"
    )]
    TooManyAlerts { namespace: String, cap: usize },
    /// The address is no `http(s)` URL.
    #[error("the address in Secret {namespace}/{name} {why}")]
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
            Self::TooManyAlerts { .. } => "TooManyAlerts",
        }
    }
}

/// What reading an Alert's Secret found: its labels and data, or nothing.
pub(crate) type Found = Option<(BTreeMap<String, String>, BTreeMap<String, ByteString>)>;

/// Where webhooks may lead: the hub's API server never; inside the cluster or a private
/// network only where a policy lists it, or anywhere but the hub's API server when the operator
/// runs with `--notify-internal-addresses`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reach {
    /// `--notify-internal-addresses`.
    pub(crate) internal: bool,
    /// The hub's API server.
    pub(crate) hub: HubApi,
}

impl Reach {
    /// What the policies governing `namespace` let its Alerts reach inside.
    pub(crate) fn allowed(&self, admission: &Admission, namespace: &str) -> Allowed {
        match self.internal {
            true => Allowed::any(),
            false => Allowed::parse(&admission.alert_internal_addresses(namespace)),
        }
    }
}

/// The endpoint an Alert of `namespace` sends to, from what its Secret `name` holds (pure):
/// the policy is asked first, so nothing of a Secret no rule allows is looked at.
pub(crate) fn endpoint(
    namespace: &str,
    name: &str,
    provider: ProviderType,
    found: &Found,
    admission: &Admission,
    reach: &Reach,
) -> Result<Endpoint, Problem> {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    // An absent Secret is judged as an unlabelled one that exists would be: whether a Secret
    // no rule allows exists is never told.
    let no_labels = BTreeMap::new();
    let labels = found.as_ref().map_or(&no_labels, |(labels, _)| labels);
    admission
        .may_send_alert(&namespace, &name, labels)
        .map_err(Problem::SecretNotAllowed)?;
    let Some((_, data)) = found else {
        return Err(Problem::SecretMissing { namespace, name });
    };
    let Some(raw) = data.get(ADDRESS_KEY) else {
        return Err(Problem::AddressMissing { namespace, name });
    };
    let invalid = |why: &str| Problem::AddressInvalid {
        namespace: namespace.clone(),
        name: name.clone(),
        why: why.to_owned(),
    };
    const GIVE: &str = ": give an http:// or https:// URL of the webhook";
    let text = std::str::from_utf8(&raw.0).map_err(|_| invalid(&format!("is not text{GIVE}")))?;
    let url = url::Url::parse(text.trim()).map_err(|_| invalid(&format!("is not a URL{GIVE}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid(&format!("is not http(s) with a host{GIVE}")));
    }
    if let Some(why) = refused(&url, &reach.allowed(admission, &namespace), &reach.hub) {
        return Err(invalid(&why));
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

/// One Secret as last read, shared by the Alerts naming it.
type Remembered = Arc<Mutex<Option<(Instant, Found)>>>;

/// Reads the Secrets Alerts name: only after the policies allow them, at most once per
/// [`REUSE`] per Secret whatever the number of Alerts naming it, [`READS_PER_TENANT`] at once
/// per hub namespace; keeps only the keys it uses.
pub(crate) struct SecretReader {
    hub: kube::Client,
    metrics: Arc<Metrics>,
    recent: DashMap<(String, String), Remembered>,
    turns: DashMap<String, Arc<Semaphore>>,
}

impl SecretReader {
    /// A reader through `hub`, counting into `metrics`.
    pub(crate) fn new(hub: kube::Client, metrics: Arc<Metrics>) -> Self {
        Self {
            hub,
            metrics,
            recent: DashMap::new(),
            turns: DashMap::new(),
        }
    }

    /// The endpoint of `alert`: its Secret judged by name, by its labels when a rule needs
    /// them (its metadata read alone), then read whole and judged again with its address.
    pub(crate) async fn resolve(
        &self,
        alert: &Alert,
        admission: &Admission,
        reach: &Reach,
    ) -> Result<Endpoint, Problem> {
        let namespace = alert.namespace().unwrap_or_default();
        let name = alert.spec.provider.secret_ref.name.clone();
        let found = match admission.alert_secret(&namespace, &name) {
            AlertSecret::Refused(why) => return Err(Problem::SecretNotAllowed(why)),
            AlertSecret::ByLabels => {
                let labels = self.labels(&namespace, &name).await?;
                admission
                    .may_send_alert(&namespace, &name, &labels)
                    .map_err(Problem::SecretNotAllowed)?;
                self.read(&namespace, &name).await?
            }
            AlertSecret::Allowed => self.read(&namespace, &name).await?,
        };
        let provider = alert.spec.provider.type_;
        endpoint(&namespace, &name, provider, &found, admission, reach)
    }

    /// A turn to read in `namespace`, waited for within [`READ_TIMEOUT`].
    async fn turn(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Problem> {
        let turns = self
            .turns
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(READS_PER_TENANT)))
            .clone();
        match tokio::time::timeout(READ_TIMEOUT, turns.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(unreadable_because(
                namespace,
                name,
                "too many reads of this namespace's Alert Secrets are waiting",
            )),
        }
    }

    /// The labels of Secret `name` (empty when it does not exist), from its metadata alone.
    async fn labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeMap<String, String>, Problem> {
        let _turn = self.turn(namespace, name).await?;
        let api: Api<Secret> = Api::namespaced(self.hub.clone(), namespace);
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let listed = tokio::time::timeout(READ_TIMEOUT, api.list_metadata(&params)).await;
        match listed {
            Ok(Ok(list)) => Ok(list
                .items
                .into_iter()
                .next()
                .map(|m| m.labels().clone())
                .unwrap_or_default()),
            Ok(Err(e)) => Err(unreadable_because(namespace, name, &unreadable(&e))),
            Err(_) => Err(unreadable_because(
                namespace,
                name,
                "the hub did not answer in time",
            )),
        }
    }

    /// What Secret `name` holds (its labels, its address and key), read again only when the
    /// last read is older than [`REUSE`].
    async fn read(&self, namespace: &str, name: &str) -> Result<Found, Problem> {
        let key = (namespace.to_owned(), name.to_owned());
        if self.recent.len() > REMEMBERED {
            // Kept: the fresh ones, and those being read now.
            self.recent.retain(|_, r| match r.try_lock() {
                Ok(r) => r.as_ref().is_some_and(|(at, _)| at.elapsed() < REUSE),
                Err(_) => true,
            });
        }
        let remembered = self.recent.entry(key).or_default().clone();
        let mut last = remembered.lock().await;
        if let Some((at, found)) = last.as_ref()
            && at.elapsed() < REUSE
        {
            return Ok(found.clone());
        }
        let found = self.read_now(namespace, name).await?;
        *last = Some((Instant::now(), found.clone()));
        Ok(found)
    }

    /// Reads Secret `name` from the hub (a list narrowed to its name, as `valuesFrom` reads).
    async fn read_now(&self, namespace: &str, name: &str) -> Result<Found, Problem> {
        let _turn = self.turn(namespace, name).await?;
        let api: Api<Secret> = Api::namespaced(self.hub.clone(), namespace);
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let listed = tokio::time::timeout(READ_TIMEOUT, api.list(&params)).await;
        match listed {
            Ok(Ok(list)) => {
                let secret = list.items.into_iter().next();
                let data = secret.as_ref().and_then(|s| s.data.as_ref());
                self.metrics
                    .alert_secret_read(data.map_or(0, |d| d.values().map(|v| v.0.len()).sum()));
                Ok(secret.map(|s| {
                    let kept = s
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(k, _)| k == ADDRESS_KEY || k == HMAC_KEY)
                        .collect();
                    (s.metadata.labels.unwrap_or_default(), kept)
                }))
            }
            Ok(Err(e)) => Err(unreadable_because(namespace, name, &unreadable(&e))),
            Err(_) => Err(unreadable_because(
                namespace,
                name,
                "the hub did not answer in time",
            )),
        }
    }
}

fn unreadable_because(namespace: &str, name: &str, why: &str) -> Problem {
    Problem::SecretUnreadable {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        why: why.to_owned(),
    }
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
    use crate::api::policy::{AlertSecretRule, TenancyPolicySpec};
    use crate::policy::{Mode, NamedPolicy};

    const URL: &str = "https://hooks.example.com/services/T0/B0/s3cr3t-t0ken?sig=abc";

    fn admission(rules: Vec<AlertSecretRule>) -> Admission {
        Admission {
            mode: Mode::Enforce,
            policies: vec![NamedPolicy {
                name: "team-a".into(),
                spec: TenancyPolicySpec {
                    hub_namespaces: vec!["team-a".into()],
                    trusted: true,
                    alert_secrets: rules,
                    ..Default::default()
                },
            }],
            operator_namespace: "tenancy-hub".into(),
        }
    }

    fn allowed() -> Admission {
        admission(vec![AlertSecretRule {
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
            &Reach::default(),
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
            &Reach::default(),
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
            &Reach::default(),
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
                &Reach::default(),
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
            &Reach::default(),
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
                &Reach::default(),
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
            "http://10.96.0.1/api",
            "http://100.100.100.200/latest/meta-data",
            "http://[fd00::1]/hook",
            "http://kubernetes.default.svc/api",
            "http://alertmanager.monitoring.svc.cluster.local:9093/hook",
        ] {
            let found = secret(&[("address", address.as_bytes())]);
            let refused = endpoint(
                "team-a",
                "hook",
                ProviderType::Generic,
                &found,
                &allowed(),
                &Reach::default(),
            )
            .unwrap_err();
            assert_eq!(refused.reason(), "AddressInvalid");
            assert!(
                refused.to_string().contains("alertInternalAddresses"),
                "{refused}"
            );
            let host = address.split('/').nth(2).unwrap();
            assert!(!refused.to_string().contains(host), "{refused}");
            assert!(
                endpoint(
                    "team-a",
                    "hook",
                    ProviderType::Generic,
                    &found,
                    &allowed(),
                    &Reach {
                        internal: true,
                        ..Reach::default()
                    }
                )
                .is_ok()
            );
        }
    }

    #[test]
    fn a_secret_allowed_for_values_only_is_refused_to_an_alert() {
        let mut values_only = admission(Vec::new());
        values_only.policies[0].spec.values_from = vec![crate::api::policy::ValuesRule {
            kind: Some(crate::api::crd::ValuesKind::Secret),
            names: vec!["hook".into()],
            ..Default::default()
        }];
        let refused = endpoint(
            "team-a",
            "hook",
            ProviderType::Generic,
            &secret(&[("address", URL.as_bytes())]),
            &values_only,
            &Reach::default(),
        )
        .unwrap_err();
        assert_eq!(refused.reason(), "SecretNotAllowed");
        assert!(
            refused.to_string().contains("no alertSecrets rule"),
            "{refused}"
        );
        assert!(matches!(
            values_only.alert_secret("team-a", "hook"),
            AlertSecret::Refused(_)
        ));
        let allowed = allowed();
        assert!(
            allowed
                .may_read_values(
                    "team-a",
                    crate::api::crd::ValuesKind::Secret,
                    "hook",
                    &BTreeMap::new()
                )
                .is_err(),
            "an Alert's Secret feeds no chart values"
        );
    }

    #[test]
    fn a_secret_is_judged_by_name_before_it_is_read_and_by_labels_only_where_a_rule_needs_them() {
        let by_name = allowed();
        assert_eq!(by_name.alert_secret("team-a", "hook"), AlertSecret::Allowed);
        assert!(matches!(
            by_name.alert_secret("team-a", "big"),
            AlertSecret::Refused(_)
        ));
        assert!(matches!(
            by_name.alert_secret("team-z", "hook"),
            AlertSecret::Refused(why) if why.contains("no TenancyPolicy governs")
        ));
        let by_label = admission(vec![AlertSecretRule {
            match_labels: BTreeMap::from([("notify".into(), "true".into())]),
            ..Default::default()
        }]);
        assert_eq!(
            by_label.alert_secret("team-a", "big"),
            AlertSecret::ByLabels
        );
        let any = admission(vec![AlertSecretRule::default()]);
        assert_eq!(any.alert_secret("team-a", "big"), AlertSecret::Allowed);
    }

    #[test]
    fn a_labelled_secret_is_allowed_by_a_label_rule() {
        let by_label = admission(vec![AlertSecretRule {
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
                &Reach::default()
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
                &Reach::default()
            )
            .is_err()
        );
    }
}
