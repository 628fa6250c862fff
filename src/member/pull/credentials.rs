//! How an agent logs in to the hub: the member Secret `hub-credentials` (written by `tenancy-hub join`), its bootstrap token exchanged once for the agent's own token, one hub client whose every request carries the newest token, and the rotation that renews the token at half its life.
//!
//! The client is built once; a tower layer sets each request's `Authorization` header from an
//! [`ArcSwap`] holding the token, so a renewed token is used by the very next request, long
//! watches included, without a restart or a new client. kube's own `token_file` refresh would
//! re-read a file every minute, which would put the token on a disk of the member. No token is
//! ever logged: the header is marked sensitive, and errors and logs name only the cluster.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use base64::Engine as _;
use k8s_openapi::{
    ByteString,
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        coordination::v1::{Lease, LeaseSpec},
        core::v1::{Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Config,
    api::{Patch, PatchParams, PostParams},
    client::ClientBuilder,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio_util::sync::CancellationToken;

use crate::api::{
    key::ClusterName,
    member_cluster::{AGENT_ACCOUNT, AGENT_LEASE, pull_namespace},
};

/// The member Secret holding how to reach and log in to the hub.
pub const CREDENTIALS_SECRET: &str = "hub-credentials";
/// The member namespace the agent and its credentials live in, unless told otherwise.
pub const AGENT_NAMESPACE: &str = "tenancy-hub-agent";
/// Secret keys: the hub's API server URL, ...
pub(crate) const SERVER_KEY: &str = "server";
/// ... the PEM certificates it is checked with (none: the system's roots), ...
pub(crate) const CA_KEY: &str = "caData";
/// ... the member's cluster name, ...
pub(crate) const CLUSTER_KEY: &str = "cluster";
/// ... the short-lived bootstrap token `tenancy-hub cluster add --pull` made, until exchanged, ...
pub(crate) const BOOTSTRAP_KEY: &str = "bootstrapToken";
/// ... and the agent's own token once it has one.
pub(crate) const TOKEN_KEY: &str = "token";
/// How long each token of the agent is asked for.
pub(crate) const TOKEN_SECONDS: i64 = 3600;
/// The longest a failed renewal waits before it is tried again.
const RETRY_AT_MOST: Duration = Duration::from_secs(300);

/// Why the agent could not log in to the hub, or keep its token.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The member has no credentials Secret.
    #[error(
        "the member has no Secret {namespace}/{CREDENTIALS_SECRET}: run the `tenancy-hub join` command that `tenancy-hub cluster add --pull NAME` prints on the hub, against this member"
    )]
    MissingSecret {
        /// The member namespace looked in.
        namespace: String,
    },
    /// The credentials Secret could not be read or written.
    #[error("cannot read or write Secret {namespace}/{CREDENTIALS_SECRET} in the member: {source}")]
    Secret {
        /// The member namespace.
        namespace: String,
        /// The API error.
        source: kube::Error,
    },
    /// A field of the Secret is missing or malformed.
    #[error(
        "Secret {namespace}/{CREDENTIALS_SECRET} in the member: {key} {detail}; run `tenancy-hub join` again"
    )]
    Field {
        /// The member namespace.
        namespace: String,
        /// The Secret key.
        key: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Neither token is there.
    #[error(
        "Secret {namespace}/{CREDENTIALS_SECRET} holds no token of cluster {cluster}: run `tenancy-hub cluster add --pull {cluster}` on the hub for a new join command, and run it against this member"
    )]
    NoToken {
        /// The member.
        cluster: ClusterName,
        /// The member namespace.
        namespace: String,
    },
    /// The hub refused the bootstrap token.
    #[error(
        "the bootstrap token of cluster {cluster} was refused by the hub (expired, or the cluster removed?): run `tenancy-hub cluster add --pull {cluster}` on the hub again for a new one, and `tenancy-hub join` with it ({detail})"
    )]
    BootstrapRefused {
        /// The member.
        cluster: ClusterName,
        /// The hub's answer, without the token.
        detail: String,
    },
    /// The agent's own token has expired: it can no longer renew it.
    #[error(
        "the agent's hub token of cluster {cluster} expired at {at}, so it cannot renew it: run `tenancy-hub cluster add --pull {cluster}` on the hub for a bootstrap token, and `tenancy-hub join` with it"
    )]
    TokenExpired {
        /// The member.
        cluster: ClusterName,
        /// When it expired.
        at: Timestamp,
    },
    /// The hub did not issue a token of the agent.
    #[error(
        "cluster {cluster}: the hub did not issue a token of the agent: {source}; is the hub reachable from the member, and the MemberCluster {cluster} still there (`kubectl get membercluster {cluster}` on the hub)?"
    )]
    TokenRequest {
        /// The member.
        cluster: ClusterName,
        /// The API error.
        source: kube::Error,
    },
    /// A client of the hub could not be built from the Secret's server and certificates.
    #[error("cluster {cluster}: cannot make a client of the hub at {server}: {detail}")]
    HubClient {
        /// The member.
        cluster: ClusterName,
        /// The hub's URL.
        server: String,
        /// What failed.
        detail: String,
    },
}

/// The agent's login to the hub: who it is, and the token its hub client sends.
pub(crate) struct HubLogin {
    cluster: ClusterName,
    /// The member namespace of the credentials Secret.
    namespace: String,
    member: Client,
    token: Arc<ArcSwap<String>>,
    hub: Client,
}

impl std::fmt::Debug for HubLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubLogin")
            .field("cluster", &self.cluster)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What the credentials Secret says.
#[derive(Debug)]
struct Stored {
    server: String,
    ca: Option<Vec<u8>>,
    cluster: ClusterName,
    bootstrap: Option<String>,
    token: Option<String>,
}

impl HubLogin {
    /// Reads the member Secret `namespace/hub-credentials`; when it holds a bootstrap token and
    /// no token of the agent, exchanges it for one (and writes it back in place of the bootstrap
    /// token), then logs in with the agent's token.
    pub(crate) async fn load(member: Client, namespace: &str) -> Result<Self, CredentialsError> {
        let secrets: Api<Secret> = Api::namespaced(member.clone(), namespace);
        let secret = secrets
            .get_opt(CREDENTIALS_SECRET)
            .await
            .map_err(|source| CredentialsError::Secret {
                namespace: namespace.into(),
                source,
            })?
            .ok_or_else(|| CredentialsError::MissingSecret {
                namespace: namespace.into(),
            })?;
        let stored = read(namespace, &secret.data.unwrap_or_default())?;
        let cluster = stored.cluster.clone();
        let token = match (&stored.token, &stored.bootstrap) {
            (Some(token), _) => {
                if let Some(at) = expiry(token).filter(|at| *at <= Timestamp::now()) {
                    return Err(CredentialsError::TokenExpired { cluster, at });
                }
                token.clone()
            }
            (None, Some(bootstrap)) => {
                let with_bootstrap =
                    hub_client(&stored, Arc::new(ArcSwap::from_pointee(bootstrap.clone()))).await?;
                let token = request_token(&cluster, with_bootstrap)
                    .await
                    .map_err(|e| refused(&cluster, e))?;
                write_token(&secrets, namespace, &token, true).await?;
                tracing::info!(%cluster, "exchanged the bootstrap token for the agent's own hub token");
                token
            }
            (None, None) => {
                return Err(CredentialsError::NoToken {
                    cluster,
                    namespace: namespace.into(),
                });
            }
        };
        let token = Arc::new(ArcSwap::from_pointee(token));
        let hub = hub_client(&stored, token.clone()).await?;
        let login = Self {
            cluster,
            namespace: namespace.into(),
            member,
            token,
            hub,
        };
        if stored.token.is_none() {
            login.announce().await;
        }
        Ok(login)
    }

    /// The member's cluster name.
    pub(crate) fn cluster(&self) -> &ClusterName {
        &self.cluster
    }

    /// The hub client: every request it sends carries the newest token.
    pub(crate) fn client(&self) -> Client {
        self.hub.clone()
    }

    /// Renews the agent's token at about half its life, until `stop`: asks the hub for a new one
    /// as the agent itself, swaps it in and writes it to the member Secret; a failure is logged
    /// (never the token) and tried again with backoff.
    pub(crate) async fn rotate(self: Arc<Self>, stop: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let wait = if failures == 0 {
                renew_in(&self.token.load(), Timestamp::now())
            } else {
                retry_in(failures)
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
            match self.renew().await {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures += 1;
                    let expired = expiry(&self.token.load()).filter(|at| *at <= Timestamp::now());
                    match expired {
                        Some(at) => {
                            tracing::error!(error = %CredentialsError::TokenExpired { cluster: self.cluster.clone(), at }, "the agent can no longer reach the hub")
                        }
                        None => {
                            tracing::warn!(cluster = %self.cluster, %error, retry_in = ?retry_in(failures), "renewing the agent's hub token failed; the current one still holds")
                        }
                    }
                }
            }
        }
    }

    /// Asks the hub for a new token of the agent, swaps it in and writes it to the member Secret.
    pub(crate) async fn renew(&self) -> Result<(), CredentialsError> {
        let token = request_token(&self.cluster, self.hub.clone())
            .await
            .map_err(|source| CredentialsError::TokenRequest {
                cluster: self.cluster.clone(),
                source,
            })?;
        self.token.store(Arc::new(token.clone()));
        let expires = expiry(&token).map(|at| at.to_string()).unwrap_or_default();
        tracing::info!(cluster = %self.cluster, %expires, "renewed the agent's hub token");
        let secrets: Api<Secret> = Api::namespaced(self.member.clone(), &self.namespace);
        if let Err(error) = write_token(&secrets, &self.namespace, &token, false).await {
            // The Secret's older token holds until it expires; the next renewal writes again.
            tracing::warn!(cluster = %self.cluster, %error, "the renewed token is in use but could not be kept in the member");
        }
        Ok(())
    }

    /// Makes the agent's Lease, when there is none yet, so the hub sees at once that the member
    /// has joined; the agent renews it from then on.
    async fn announce(&self) {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &pull_namespace(&self.cluster));
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(AGENT_LEASE.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.cluster.to_string()),
                lease_duration_seconds: Some(60),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        };
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(error) => {
                tracing::warn!(cluster = %self.cluster, %error, "could not tell the hub that the member joined; the agent's Lease will");
            }
        }
    }
}

/// The credentials a Secret's `data` holds.
fn read(namespace: &str, data: &BTreeMap<String, ByteString>) -> Result<Stored, CredentialsError> {
    let field = |key: &'static str| -> Result<Option<String>, CredentialsError> {
        data.get(key)
            .map(|v| {
                String::from_utf8(v.0.clone())
                    .map(|s| s.trim().to_owned())
                    .map_err(|_| malformed(namespace, key, "is not UTF-8"))
            })
            .transpose()
            .map(|v| v.filter(|s| !s.is_empty()))
    };
    let required =
        |key: &'static str| field(key)?.ok_or_else(|| malformed(namespace, key, "is missing"));
    let token = |key: &'static str| -> Result<Option<String>, CredentialsError> {
        let value = field(key)?;
        if value
            .as_deref()
            .is_some_and(|t| !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(malformed(namespace, key, "is not a bearer token"));
        }
        Ok(value)
    };
    let cluster = required(CLUSTER_KEY)?
        .parse()
        .map_err(|e| malformed(namespace, CLUSTER_KEY, &format!("{e}")))?;
    Ok(Stored {
        server: required(SERVER_KEY)?,
        ca: field(CA_KEY)?.map(String::into_bytes),
        cluster,
        bootstrap: token(BOOTSTRAP_KEY)?,
        token: token(TOKEN_KEY)?,
    })
}

fn malformed(namespace: &str, key: &'static str, detail: &str) -> CredentialsError {
    CredentialsError::Field {
        namespace: namespace.into(),
        key,
        detail: detail.into(),
    }
}

/// A client of the hub the Secret names, checked with its certificates, whose every request
/// carries the token `token` holds at the time.
async fn hub_client(
    stored: &Stored,
    token: Arc<ArcSwap<String>>,
) -> Result<Client, CredentialsError> {
    let failed = |detail: String| CredentialsError::HubClient {
        cluster: stored.cluster.clone(),
        server: stored.server.clone(),
        detail,
    };
    let ca = stored
        .ca
        .as_ref()
        .map(|pem| base64::engine::general_purpose::STANDARD.encode(pem));
    let kubeconfig: Kubeconfig = serde_json::from_value(serde_json::json!({
        "clusters": [{"name": "hub", "cluster": {"server": stored.server, "certificate-authority-data": ca}}],
        "users": [{"name": "agent", "user": {}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "agent"}}],
        "current-context": "hub",
    }))
    .map_err(|e| failed(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| failed(e.to_string()))?;
    config.connect_timeout = Some(crate::clusters::registry::CONNECT_TIMEOUT);
    let builder = ClientBuilder::try_from(config).map_err(|e| failed(e.to_string()))?;
    let bearer = tower::util::MapRequestLayer::new(move |mut request: http::Request<_>| {
        let value = format!("Bearer {}", token.load());
        // Checked when read: a token is visible ASCII.
        if let Ok(mut value) = http::HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value);
        }
        request
    });
    Ok(builder.with_layer(&bearer).build())
}

/// Asks the hub, through `hub`, for a token of the agent of `cluster`.
async fn request_token(cluster: &ClusterName, hub: Client) -> Result<String, kube::Error> {
    let accounts: Api<ServiceAccount> = Api::namespaced(hub, &pull_namespace(cluster));
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = tokio::time::timeout(
        crate::api::HUB_WRITE_TIMEOUT,
        accounts.create_token_request(AGENT_ACCOUNT, &PostParams::default(), &request),
    )
    .await
    .unwrap_or_else(|_| Err(kube::Error::Service("no answer in time".into())))?;
    answer
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| kube::Error::Service("the hub answered without a token".into()))
}

/// What a failed exchange of the bootstrap token means.
fn refused(cluster: &ClusterName, error: kube::Error) -> CredentialsError {
    match &error {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => {
            CredentialsError::BootstrapRefused {
                cluster: cluster.clone(),
                detail: format!("{} {}", s.code, s.reason),
            }
        }
        _ => CredentialsError::TokenRequest {
            cluster: cluster.clone(),
            source: error,
        },
    }
}

/// Writes the agent's `token` into the credentials Secret, dropping the bootstrap token when
/// `exchanged`.
async fn write_token(
    secrets: &Api<Secret>,
    namespace: &str,
    token: &str,
    exchanged: bool,
) -> Result<(), CredentialsError> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(token);
    let mut data = serde_json::json!({ TOKEN_KEY: encoded });
    if exchanged {
        data[BOOTSTRAP_KEY] = serde_json::Value::Null;
    }
    let patch = serde_json::json!({ "data": data });
    secrets
        .patch(
            CREDENTIALS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
        .map_err(|source| CredentialsError::Secret {
            namespace: namespace.into(),
            source,
        })
}

/// A JWT's `iat` (when it says) and `exp` claims, read without verifying it: only the hub
/// decides whether a token holds, the agent only plans its renewal from them.
fn claims(token: &str) -> Option<(Option<Timestamp>, Timestamp)> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let at = |claim: &str| Timestamp::from_second(json.get(claim)?.as_i64()?).ok();
    Some((at("iat"), at("exp")?))
}

/// When a token expires, when it says.
fn expiry(token: &str) -> Option<Timestamp> {
    claims(token).map(|(_, exp)| exp)
}

/// How long until `token` should be renewed: at half its life (from `iat`, or from `now` when it
/// does not say), right away when that is past; in 30 minutes when it says nothing.
fn renew_in(token: &str, now: Timestamp) -> Duration {
    let Some((issued, expires)) = claims(token) else {
        return Duration::from_secs(1800);
    };
    let issued = issued.unwrap_or(now).min(expires);
    let half = issued + expires.duration_since(issued) / 2;
    Duration::try_from(half.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// How long to wait after the `failures`-th failure in a row: 5 s, doubled each time, at most
/// [`RETRY_AT_MOST`].
fn retry_in(failures: u32) -> Duration {
    Duration::from_secs(5)
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(RETRY_AT_MOST)
}

/// An agent's login, for the end-to-end tests: [`HubLogin`] through the crate's edge.
#[doc(hidden)]
pub struct AgentLogin(Arc<HubLogin>);

#[doc(hidden)]
impl AgentLogin {
    /// [`HubLogin::load`].
    pub async fn load(member: Client, namespace: &str) -> Result<Self, CredentialsError> {
        HubLogin::load(member, namespace)
            .await
            .map(|l| Self(Arc::new(l)))
    }

    /// [`HubLogin::cluster`].
    pub fn cluster(&self) -> String {
        self.0.cluster().to_string()
    }

    /// [`HubLogin::client`].
    pub fn client(&self) -> Client {
        self.0.client()
    }

    /// [`HubLogin::renew`].
    pub async fn renew(&self) -> Result<(), CredentialsError> {
        self.0.renew().await
    }

    /// [`HubLogin::rotate`], spawned.
    pub fn rotate(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.0.clone().rotate(stop))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unsigned JWT with these claims.
    fn jwt(claims: serde_json::Value) -> String {
        let part = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.{}",
            part(br#"{"alg":"RS256"}"#),
            part(claims.to_string().as_bytes()),
            part(b"signature")
        )
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_tokens_expiry_is_read_from_its_claims_without_verifying_it() {
        let token =
            jwt(serde_json::json!({"iat": 1_800_000_000, "exp": 1_800_003_600, "sub": "x"}));
        assert_eq!(
            claims(&token),
            Some((Some(at(1_800_000_000)), at(1_800_003_600)))
        );
        assert_eq!(expiry("not-a-jwt"), None);
        assert_eq!(expiry("a.!!!.c"), None);
        assert_eq!(expiry(&jwt(serde_json::json!({"iat": 1}))), None);
    }

    #[test]
    fn a_token_is_renewed_at_half_its_life() {
        let token = jwt(serde_json::json!({"iat": 1_800_000_000, "exp": 1_800_003_600}));
        assert_eq!(
            renew_in(&token, at(1_800_000_000)),
            Duration::from_secs(1800)
        );
        assert_eq!(
            renew_in(&token, at(1_800_001_000)),
            Duration::from_secs(800)
        );
        assert_eq!(
            renew_in(&token, at(1_800_002_000)),
            Duration::ZERO,
            "past half: now"
        );
        let no_iat = jwt(serde_json::json!({"exp": 1_800_003_600}));
        assert_eq!(
            renew_in(&no_iat, at(1_800_002_600)),
            Duration::from_secs(500)
        );
        assert_eq!(renew_in("opaque", at(0)), Duration::from_secs(1800));
    }

    #[test]
    fn failed_renewals_back_off_up_to_five_minutes() {
        assert_eq!(retry_in(1), Duration::from_secs(5));
        assert_eq!(retry_in(2), Duration::from_secs(10));
        assert_eq!(retry_in(7), Duration::from_secs(300));
        assert_eq!(retry_in(40), RETRY_AT_MOST);
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn the_credentials_secret_reads_with_either_token_and_says_what_is_missing() {
        let stored = read(
            "tenancy-hub-agent",
            &data(&[
                ("server", "https://hub.example:6443\n"),
                ("cluster", "edge-1"),
                ("bootstrapToken", "abc.def.ghi"),
            ]),
        )
        .unwrap();
        assert_eq!(stored.server, "https://hub.example:6443");
        assert_eq!(stored.cluster.as_str(), "edge-1");
        assert_eq!(stored.bootstrap.as_deref(), Some("abc.def.ghi"));
        assert!(stored.token.is_none() && stored.ca.is_none());

        let missing = read("ns", &data(&[("cluster", "edge-1")])).unwrap_err();
        assert!(
            missing.to_string().contains("server is missing"),
            "{missing}"
        );
        assert!(
            missing.to_string().contains("tenancy-hub join"),
            "{missing}"
        );
        let bad = read("ns", &data(&[("server", "s"), ("cluster", "Edge_1")])).unwrap_err();
        assert!(bad.to_string().contains("cluster"), "{bad}");
        let spaced = read(
            "ns",
            &data(&[("server", "s"), ("cluster", "e"), ("token", "s3cr3t tok")]),
        )
        .unwrap_err();
        assert!(
            spaced.to_string().contains("not a bearer token"),
            "{spaced}"
        );
        assert!(
            !spaced.to_string().contains("s3cr3t"),
            "the token is never quoted"
        );
    }

    #[test]
    fn a_refused_bootstrap_token_says_how_to_get_a_new_one() {
        let cluster: ClusterName = "edge-1".parse().unwrap();
        let status = kube::core::Status::failure("Unauthorized", "Unauthorized").with_code(401);
        let error = refused(&cluster, kube::Error::Api(Box::new(status)));
        let message = error.to_string();
        assert!(
            message.contains("refused by the hub (expired")
                && message.contains("tenancy-hub cluster add --pull edge-1"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn every_request_of_the_hub_client_carries_the_newest_token() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        let seen = tokio::spawn(async move {
            let mut headers = Vec::new();
            for _ in 0..2 {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buffer = vec![0u8; 4096];
                let n = socket.read(&mut buffer).await.unwrap();
                let request = String::from_utf8_lossy(&buffer[..n]).to_lowercase();
                let auth = request
                    .lines()
                    .find_map(|l| l.strip_prefix("authorization: "))
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                headers.push(auth);
                let body = r#"{"major":"1","minor":"36","gitVersion":"v1.36.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(answer.as_bytes()).await.unwrap();
            }
            headers
        });
        let stored = Stored {
            server,
            ca: None,
            cluster: "edge-1".parse().unwrap(),
            bootstrap: None,
            token: None,
        };
        let token = Arc::new(ArcSwap::from_pointee("first".to_owned()));
        let client = hub_client(&stored, token.clone()).await.unwrap();
        client.apiserver_version().await.unwrap();
        token.store(Arc::new("second".to_owned()));
        client.apiserver_version().await.unwrap();
        assert_eq!(seen.await.unwrap(), ["bearer first", "bearer second"]);
    }
}
