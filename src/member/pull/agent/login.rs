//! The agent's login to the hub: the `hub-credentials` Secret its join left in its own cluster, a bootstrap token exchanged once for the agent's own short-lived token, and that token renewed at half its life without a restart.
//!
//! The hub client reads its token from a file that kube's client reloads at least once a
//! minute, so every request, long-running watches included, uses the newest token; a renewed
//! token is written there and back into the member's Secret (never to a log).
//!
//! Each of the agent's own tokens is bound to a Secret of its hub namespace made for it
//! (`agent-token-…`). Once a newer token has been in use for [`RETIRE_AFTER`] (longer than the
//! client takes to read the file again), the older token's Secret is deleted, and the hub refuses
//! that token from then on: a token copied from the member stops working minutes after its
//! renewal instead of living out its hour.

use std::{path::PathBuf, sync::Arc, time::Duration};

use base64::Engine as _;
use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    core::v1::{Secret, ServiceAccount},
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    config::{
        AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
        NamedContext,
    },
};
use tokio_util::sync::CancellationToken;

use crate::api::{
    key::ClusterName,
    member_cluster::{AGENT_ACCOUNT, pull_namespace},
};

/// The member Secret a join writes.
pub(crate) const CREDENTIALS_SECRET: &str = "hub-credentials";
/// How long each agent token lives.
const TOKEN_SECONDS: i64 = 3600;
/// How long the token a bootstrap token is exchanged for lives (the least the hub grants): it is
/// replaced by a bound token at once.
const FIRST_TOKEN_SECONDS: i64 = 600;
/// How long a replaced token keeps working: longer than the client takes to read the token file
/// again (a minute).
pub(crate) const RETIRE_AFTER: Duration = Duration::from_secs(90);
/// The label of the Secrets the agent's tokens are bound to.
pub(crate) const TOKEN_LABEL: &str = "multitenancy.dev/agent-token";
/// The name prefix of those Secrets.
const TOKEN_SECRET_PREFIX: &str = "agent-token-";

/// Errors of logging in to the hub.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The member Secret is missing or incomplete.
    #[error(
        "the member Secret {namespace}/{CREDENTIALS_SECRET} {problem}; join the member first (tenancy-hub cluster add --pull NAME on the hub prints how)"
    )]
    Credentials {
        /// The member namespace.
        namespace: String,
        /// What is wrong.
        problem: String,
    },
    /// The hub refused the bootstrap token.
    #[error(
        "the hub refused the bootstrap token of member {cluster} ({source}); it may have expired: run tenancy-hub cluster add --pull {cluster} again for a new one"
    )]
    Bootstrap {
        /// The member.
        cluster: ClusterName,
        /// The API error.
        source: kube::Error,
    },
    /// The hub or the member could not be reached.
    #[error("member {cluster}: {what}: {reason}")]
    Io {
        /// The member.
        cluster: String,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// What the agent logs in to the hub with.
pub(crate) struct HubLogin {
    cluster: ClusterName,
    member: Client,
    namespace: String,
    hub: Client,
    token_file: PathBuf,
    token: std::sync::Mutex<String>,
    /// Whether the token is the one a bootstrap token was just exchanged for, bound to nothing.
    fresh_join: bool,
    /// Renew this often instead of at half the token's life (tests).
    renew_every: Option<Duration>,
    /// Keeps the token file's directory while the login lives.
    _dir: tempfile::TempDir,
}

impl HubLogin {
    /// Reads the member's `hub-credentials` in `namespace` through `member` and logs in, first
    /// exchanging its bootstrap token for the agent's own when it holds no token yet.
    pub(crate) async fn load(
        member: Client,
        namespace: &str,
        renew_every: Option<Duration>,
    ) -> Result<Self, Error> {
        let secrets: Api<Secret> = Api::namespaced(member.clone(), namespace);
        let missing = |problem: String| Error::Credentials {
            namespace: namespace.to_owned(),
            problem,
        };
        let secret = secrets
            .get_opt(CREDENTIALS_SECRET)
            .await
            .map_err(|e| missing(format!("cannot be read ({e})")))?
            .ok_or_else(|| missing("does not exist".into()))?;
        let data = secret.data.unwrap_or_default();
        let field = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let server = field("server").ok_or_else(|| missing("holds no server".into()))?;
        let ca = field("caData").ok_or_else(|| missing("holds no caData".into()))?;
        let cluster: ClusterName = field("cluster")
            .ok_or_else(|| missing("holds no cluster".into()))?
            .parse()
            .map_err(|e| missing(format!("names no valid cluster ({e})")))?;
        let dir = tempfile::Builder::new()
            .prefix("tenancy-hub-agent-")
            .tempdir()
            .map_err(|e| io(&cluster, "making the token directory", e))?;
        let token_file = dir.path().join("token");
        // A bootstrap token is a new join: it wins over a token an earlier join left.
        let fresh_join = field("bootstrapToken").is_some();
        let token = match (field("token"), field("bootstrapToken")) {
            (_, Some(bootstrap)) => {
                let hub = client(&server, &ca, Auth::Token(&bootstrap)).await?;
                let token = request_token(&hub, &cluster, None, FIRST_TOKEN_SECONDS)
                    .await
                    .map_err(|source| match source {
                        kube::Error::Api(_) => Error::Bootstrap {
                            cluster: cluster.clone(),
                            source,
                        },
                        other => io(
                            &cluster,
                            "reaching the hub at the server of its join",
                            other,
                        ),
                    })?;
                save(&secrets, &cluster, &token, true).await?;
                tracing::info!(%cluster, "joined the hub: the bootstrap token is exchanged for the agent's own");
                token
            }
            (Some(token), None) => token,
            (None, None) => return Err(missing("holds neither token nor bootstrapToken".into())),
        };
        write_token(&token_file, &token).map_err(|e| io(&cluster, "writing the token file", e))?;
        let hub = client(&server, &ca, Auth::File(&token_file)).await?;
        Ok(Self {
            cluster,
            member,
            namespace: namespace.to_owned(),
            hub,
            token_file,
            token: std::sync::Mutex::new(token),
            fresh_join,
            renew_every,
            _dir: dir,
        })
    }

    /// The member's name on the hub.
    pub(crate) fn cluster(&self) -> &ClusterName {
        &self.cluster
    }

    /// The hub client; its requests carry the newest token.
    pub(crate) fn client(&self) -> Client {
        self.hub.clone()
    }

    /// Renews the token at half its life until `stop` (at once after a join, whose token is
    /// bound to nothing), retrying with backoff on failure; retires each replaced token.
    pub(crate) async fn rotate(self: Arc<Self>, stop: CancellationToken) {
        let mut failures = 0u32;
        let mut first = self.fresh_join;
        loop {
            let token = self.token.lock().expect("token lock").clone();
            let wait = if failures > 0 {
                Duration::from_secs(5 * u64::from(failures.min(12)))
            } else if std::mem::take(&mut first) {
                Duration::ZERO
            } else {
                self.renew_every.unwrap_or_else(|| half_life(&token))
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            match self.renew().await {
                Ok(()) => {
                    failures = 0;
                    tracing::info!(cluster = %self.cluster, "the agent's hub token is renewed");
                    let login = self.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = tokio::time::sleep(RETIRE_AFTER + Duration::from_secs(5)) => {
                                login.retire().await;
                            }
                        }
                    });
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(cluster = %self.cluster, error = %e, "cannot renew the agent's hub token yet");
                }
            }
        }
    }

    /// A new token bound to a new Secret of the agent's hub namespace, written to the token
    /// file and the member Secret; the tokens it replaces long enough ago are retired first.
    async fn renew(&self) -> Result<(), Error> {
        self.retire().await;
        let bound = self
            .bound_secrets()
            .create(&PostParams::default(), &token_secret())
            .await
            .map_err(|e| {
                io(
                    &self.cluster,
                    "making the Secret a new token is bound to",
                    e,
                )
            })?;
        let token = request_token(
            &self.hub,
            &self.cluster,
            Some((bound.name_any(), bound.uid().unwrap_or_default())),
            TOKEN_SECONDS,
        )
        .await
        .map_err(|e| io(&self.cluster, "requesting a new token", e))?;
        write_token(&self.token_file, &token)
            .map_err(|e| io(&self.cluster, "writing the token file", e))?;
        let secrets: Api<Secret> = Api::namespaced(self.member.clone(), &self.namespace);
        save(&secrets, &self.cluster, &token, false).await?;
        *self.token.lock().expect("token lock") = token;
        Ok(())
    }

    /// The agent's Secrets in its hub namespace.
    fn bound_secrets(&self) -> Api<Secret> {
        Api::namespaced(self.hub.clone(), &pull_namespace(&self.cluster))
    }

    /// Deletes the Secret of every token replaced more than [`RETIRE_AFTER`] ago, which the hub
    /// then refuses.
    async fn retire(&self) {
        let api = self.bound_secrets();
        let params = ListParams::default().labels(TOKEN_LABEL);
        let listed = match api.list_metadata(&params).await {
            Ok(listed) => listed.items,
            Err(error) => {
                tracing::warn!(cluster = %self.cluster, %error, "cannot list the agent's replaced tokens to retire them");
                return;
            }
        };
        let made: Vec<(String, i64)> = listed
            .iter()
            .map(|m| {
                let at = m.metadata.creation_timestamp.as_ref();
                (m.name_any(), at.map_or(0, |t| t.0.as_second()))
            })
            .collect();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        for name in retired(made, now, RETIRE_AFTER) {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(cluster = %self.cluster, secret = %name, "a replaced hub token is retired")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(error) => {
                    tracing::warn!(cluster = %self.cluster, secret = %name, %error, "cannot retire a replaced hub token yet")
                }
            }
        }
    }
}

/// A new Secret for a token to be bound to.
fn token_secret() -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(TOKEN_SECRET_PREFIX.to_owned()),
            labels: Some([(TOKEN_LABEL.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Of the token Secrets `made` (name, creation in Unix seconds), those whose token was replaced
/// by a newer one at least `grace` before `now`: every one but the newest, once the next newer
/// one is `grace` old.
fn retired(mut made: Vec<(String, i64)>, now: i64, grace: Duration) -> Vec<String> {
    made.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    made.windows(2)
        .filter(|pair| now - pair[1].1 >= grace)
        .map(|pair| pair[0].0.clone())
        .collect()
}

/// How the hub client authenticates.
enum Auth<'a> {
    Token(&'a str),
    File(&'a std::path::Path),
}

/// A hub client for `server`, trusting `ca` (PEM, or base64 of PEM).
async fn client(server: &str, ca: &str, auth: Auth<'_>) -> Result<Client, Error> {
    let ca_data = if ca.contains("-----BEGIN") {
        base64::engine::general_purpose::STANDARD.encode(ca)
    } else {
        ca.to_owned()
    };
    let mut user = AuthInfo::default();
    match auth {
        Auth::Token(token) => user.token = Some(token.to_owned().into()),
        Auth::File(path) => user.token_file = Some(path.display().to_string()),
    }
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "hub".into(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority_data: Some(ca_data),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "agent".into(),
            auth_info: Some(user),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: "hub".into(),
            context: Some(Context {
                cluster: "hub".into(),
                user: Some("agent".into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some("hub".into()),
        ..Default::default()
    };
    let fail = |reason: String| Error::Io {
        cluster: "hub".into(),
        what: "building the hub client",
        reason,
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    config.connect_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).map_err(|e| fail(e.to_string()))
}

/// A new agent token from the hub, living `seconds`, bound to the Secret `bound` (name, uid)
/// when given: it is refused once that Secret is gone.
async fn request_token(
    hub: &Client,
    cluster: &ClusterName,
    bound: Option<(String, String)>,
    seconds: i64,
) -> kube::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), &pull_namespace(cluster));
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            bound_object_ref: bound.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: Some(name),
                uid: Some(uid),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answered = accounts
        .create_token_request(AGENT_ACCOUNT, &PostParams::default(), &request)
        .await?;
    Ok(answered.status.and_then(|s| s.token).unwrap_or_default())
}

/// Writes `token` into the member Secret, dropping the bootstrap token when `joined`.
async fn save(
    secrets: &Api<Secret>,
    cluster: &ClusterName,
    token: &str,
    joined: bool,
) -> Result<(), Error> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(token);
    let mut data = serde_json::json!({ "token": encoded });
    if joined {
        data["bootstrapToken"] = serde_json::Value::Null;
    }
    secrets
        .patch(
            CREDENTIALS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "data": data })),
        )
        .await
        .map(|_| ())
        .map_err(|e| io(cluster, "writing the token into the member Secret", e))
}

/// Replaces the token file's content at once (a new file renamed over it), readable by the
/// owner only.
fn write_token(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    use std::{io::Write as _, os::unix::fs::PermissionsExt as _};
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(token.as_bytes())?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Half the time until `token` (a JWT) expires; half an hour when that cannot be read.
fn half_life(token: &str) -> Duration {
    let fallback = Duration::from_secs(1800);
    let Some(payload) = token.split('.').nth(1) else {
        return fallback;
    };
    let Ok(bytes) =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('='))
    else {
        return fallback;
    };
    let Some(exp) = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|claims| claims.get("exp")?.as_i64())
    else {
        return fallback;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Duration::from_secs(u64::try_from((exp - now) / 2).unwrap_or(0).max(10))
}

fn io(cluster: &ClusterName, what: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        cluster: cluster.to_string(),
        what,
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: i64) -> String {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::json!({ "exp": exp }).to_string());
        format!("e30.{claims}.sig")
    }

    #[test]
    fn a_token_is_renewed_at_half_its_life() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let half = half_life(&jwt(now + 3600)).as_secs();
        assert!((1795..=1800).contains(&half), "{half}");
        assert_eq!(half_life(&jwt(now - 5)), Duration::from_secs(10));
        assert_eq!(half_life("not a jwt"), Duration::from_secs(1800));
    }

    #[test]
    fn a_replaced_token_is_retired_once_its_successor_is_old_enough() {
        let grace = Duration::from_secs(90);
        let made = |list: &[(&str, i64)]| -> Vec<(String, i64)> {
            list.iter().map(|(n, t)| (n.to_string(), *t)).collect()
        };
        // The newest token always stays; one replaced 100 s ago goes, one replaced 30 s ago stays.
        assert_eq!(
            retired(made(&[("c", 970), ("a", 0), ("b", 900)]), 1000, grace),
            ["a"]
        );
        assert_eq!(
            retired(made(&[("a", 0), ("b", 900), ("c", 905)]), 1000, grace),
            ["a", "b"]
        );
        assert!(retired(made(&[("only", 0)]), 1000, grace).is_empty());
        assert!(retired(Vec::new(), 1000, grace).is_empty());
    }
}
