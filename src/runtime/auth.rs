//! Who calls the status API: bearer tokens reviewed by the hub (TokenReview), the hub namespaces each caller may read (SubjectAccessReview), answers cached briefly and shared by concurrent callers, reviews budgeted per address and per caller.
//!
//! A token the operator has not seen costs a TokenReview on the hub. Answers are remembered (a
//! bounded cache), and reviews of new tokens are budgeted per remote address and in all (token
//! buckets): a flood of random tokens costs the hub at most the budget's reviews, and its callers
//! get 429 with `Retry-After`, while tokens already reviewed keep being answered from the cache.
//! Access reviews are asked once for callers asking the same question at the same time (the
//! others wait for that answer), remembered by user, groups, extra and namespace, and budgeted
//! per user name: a caller's flood (many requests, many tokens of one account) costs the hub at
//! most its budget of reviews, and then 429, while other callers are answered.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    future::Future,
    hash::Hash,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, UserInfo},
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, Resource, api::PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use dashmap::DashMap;

use crate::{api::crd::TenancyController, metrics::Metrics};

pub(crate) use budgets::Rate;
use budgets::{Buckets, Budgets};

/// How long the hub may take to answer one review before the request is answered 503.
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the hub's answer to a review is used before it is asked again.
pub(crate) const REVIEW_TTL: Duration = Duration::from_secs(30);
/// Token reviews remembered at most (by the token's SHA-256, never the token).
const TOKEN_ENTRIES: usize = 1024;
/// Access reviews remembered at most, one per identity and hub namespace.
const ACCESS_ENTRIES: usize = 8192;
/// Access reviews one request asks the hub at once.
const PARALLEL_REVIEWS: usize = 8;
/// Reviews of new tokens one remote address may cause: a burst, then so many per second.
pub(crate) const NEW_TOKENS_PER_ADDRESS: Rate = Rate {
    burst: 10,
    per_second: 1,
};
/// Reviews of new tokens all callers together may cause: a burst, then so many per second.
pub(crate) const NEW_TOKENS_IN_ALL: Rate = Rate {
    burst: 100,
    per_second: 10,
};
/// Remote addresses whose budgets are remembered at most.
const ADDRESSES: usize = 4096;
/// Access reviews one caller (by user name) may cause: a burst, then so many per second.
pub(crate) const ACCESS_REVIEWS_PER_CALLER: Rate = Rate {
    burst: 64,
    per_second: 8,
};
/// Callers whose budgets of access reviews are remembered at most.
const CALLERS: usize = 4096;

/// Why a request to the status API has no identity to answer for.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// No `Authorization` header.
    #[error(
        "no bearer token: send `Authorization: Bearer <token>` with a token the hub accepts (e.g. `kubectl create token SERVICE_ACCOUNT -n NAMESPACE`)"
    )]
    NoToken,
    /// An `Authorization` header that is not `Bearer <token>`.
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    /// The hub's TokenReview did not accept the token.
    #[error("the hub did not accept the bearer token")]
    Rejected,
    /// Too many new tokens from this address, or from every caller together, were reviewed lately.
    #[error(
        "too many new bearer tokens lately; try again in {}s (tokens already accepted keep working)",
        retry_after.as_secs()
    )]
    Busy {
        /// How long until a review of a new token is allowed again.
        retry_after: Duration,
    },
    /// The caller caused more access reviews lately than its budget allows.
    #[error(
        "{user} caused too many access reviews lately; try again in {}s (the answers already given are remembered)",
        retry_after.as_secs()
    )]
    CallerBusy {
        /// The caller's user name.
        user: String,
        /// How long until the caller's next access review is allowed.
        retry_after: Duration,
    },
    /// The hub failed a review or did not answer in time.
    #[error("cannot check the caller with the hub ({review}): {reason}; try again later")]
    Hub {
        /// The review that failed: `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// What went wrong.
        reason: String,
    },
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let body = Json(serde_json::json!({ "error": self.to_string() }));
        match self {
            Self::Hub { .. } => (StatusCode::SERVICE_UNAVAILABLE, body).into_response(),
            Self::Busy { retry_after } | Self::CallerBusy { retry_after, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, retry_after.as_secs().to_string())],
                body,
            )
                .into_response(),
            Self::NoToken | Self::NotBearer | Self::Rejected => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                body,
            )
                .into_response(),
        }
    }
}

/// A bearer token. It is shown redacted, so it cannot reach a log or an error by accident.
pub(crate) struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
    ///
    /// # Errors
    /// [`AuthError::NoToken`] without a header, [`AuthError::NotBearer`] for any other shape.
    pub(crate) fn from_header(value: Option<&HeaderValue>) -> Result<Self, AuthError> {
        let value = value.ok_or(AuthError::NoToken)?;
        let value = value.to_str().map_err(|_| AuthError::NotBearer)?;
        let (scheme, token) = value.split_once(' ').ok_or(AuthError::NotBearer)?;
        let token = token.trim_matches(' ');
        if !scheme.eq_ignore_ascii_case("bearer")
            || token.is_empty()
            || token.contains(char::is_whitespace)
        {
            return Err(AuthError::NotBearer);
        }
        Ok(Self(token.to_owned()))
    }

    /// The token's SHA-256, the key its review is remembered by.
    fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

/// Who the hub says a token belongs to: the user info of its TokenReview.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Identity {
    /// The user name, e.g. `system:serviceaccount:team-a:viewer`.
    pub(crate) username: String,
    /// The user's uid, if the authenticator gives one.
    pub(crate) uid: String,
    /// The user's groups.
    pub(crate) groups: Vec<String>,
    /// Further attributes the authenticator gives (for ServiceAccount tokens: the pod, the credential id).
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

impl From<UserInfo> for Identity {
    fn from(user: UserInfo) -> Self {
        Self {
            username: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }
    }
}

/// The hub namespaces in which a caller may `get` `Controller`s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// Every namespace: the caller may get Controllers cluster-wide.
    Everywhere,
    /// These of the namespaces asked about, and no other.
    Namespaces(BTreeSet<String>),
}

impl Access {
    /// Whether the caller may get Controllers in hub namespace `namespace`.
    pub(crate) fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Everywhere => true,
            Self::Namespaces(allowed) => allowed.contains(namespace),
        }
    }
}

/// Answers remembered for a time to live, at most `capacity` of them: when full, expired answers
/// go, then the oldest. Hand-written because it is one small map; a cache crate would be a new
/// dependency for it.
struct Expiring<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Eq + Hash + Clone, V: Clone> Expiring<K, V> {
    fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            entries: HashMap::new(),
        }
    }

    /// The answer for `key`, unless there is none or it is older than the time to live at `now`.
    fn get(&self, key: &K, now: Instant) -> Option<V> {
        let (at, value) = self.entries.get(key)?;
        (now.duration_since(*at) < self.ttl).then(|| value.clone())
    }

    /// Remembers `value` for `key` as of `now`, making room first when full.
    fn insert(&mut self, key: K, value: V, now: Instant) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (at, _)| now.duration_since(*at) < ttl);
            if self.entries.len() >= self.capacity
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now, value));
    }
}

/// Checks callers with the hub, remembering each answer for [`REVIEW_TTL`], so a dashboard that
/// polls does not cost the hub a review per request; reviews of new tokens are budgeted per remote
/// address and in all, access reviews per caller.
pub(crate) struct Reviewer {
    hub: Client,
    /// Token digest → who it belongs to, or None when the hub rejected it.
    tokens: Mutex<Expiring<[u8; 32], Option<Arc<Identity>>>>,
    /// Whether an identity may get Controllers in a hub namespace (or cluster-wide).
    access: Mutex<Expiring<AccessKey, bool>>,
    /// Held while the hub reviews one token: who sends the same waits for its answer.
    reviewing: Gates<[u8; 32]>,
    /// Held while the hub is asked one access question: who asks the same waits for its answer.
    asking: Gates<AccessKey>,
    /// What reviews of new tokens are left, per remote address and in all.
    budgets: Mutex<Budgets>,
    /// What access reviews are left, per caller's user name.
    callers: Mutex<Buckets<String>>,
    /// Counts the reviews asked.
    metrics: Arc<Metrics>,
}

/// Who, in which hub namespace (None: cluster-wide), and doing what to Controllers (`get`,
/// `patch`).
type AccessKey = (Arc<Identity>, Option<String>, &'static str);

/// One gate per question being asked of the hub.
type Gates<K> = DashMap<K, Arc<tokio::sync::Mutex<()>>>;

/// Runs `ask` holding the gate of `key`: callers of the same key wait for one another (each
/// `ask` looks first for the answer the one before remembered), other keys go on meanwhile.
/// The last caller done lets the gate go.
async fn one_at_a_time<K: Eq + Hash + Clone, T>(
    gates: &Gates<K>,
    key: &K,
    ask: impl Future<Output = T>,
) -> T {
    let gate = gates.entry(key.clone()).or_default().clone();
    let answer = {
        let _asking = gate.lock().await;
        ask.await
    };
    // The map holds one more than this caller: no one else waits.
    gates.remove_if(key, |_, held| Arc::strong_count(held) <= 2);
    answer
}

impl Reviewer {
    /// A reviewer asking `hub`, with nothing remembered yet, counting its reviews in `metrics`.
    pub(crate) fn new(hub: Client, metrics: Arc<Metrics>) -> Self {
        Self::with_budgets(hub, metrics, NEW_TOKENS_PER_ADDRESS, NEW_TOKENS_IN_ALL)
    }

    /// A reviewer asking `hub`, whose reviews of new tokens are budgeted at `per_address` for
    /// each remote address and `in_all` for every caller together.
    pub(crate) fn with_budgets(
        hub: Client,
        metrics: Arc<Metrics>,
        per_address: Rate,
        in_all: Rate,
    ) -> Self {
        Self {
            hub,
            tokens: Mutex::new(Expiring::new(REVIEW_TTL, TOKEN_ENTRIES)),
            access: Mutex::new(Expiring::new(REVIEW_TTL, ACCESS_ENTRIES)),
            reviewing: DashMap::new(),
            asking: DashMap::new(),
            budgets: Mutex::new(Budgets::new(per_address, in_all, Instant::now())),
            callers: Mutex::new(Buckets::new(ACCESS_REVIEWS_PER_CALLER, CALLERS)),
            metrics,
        }
    }

    /// The same, with access reviews budgeted at `per_caller` for each user name.
    #[cfg(test)]
    pub(crate) fn with_caller_budget(self, per_caller: Rate) -> Self {
        Self {
            callers: Mutex::new(Buckets::new(per_caller, CALLERS)),
            ..self
        }
    }

    /// Who `token`, sent from remote address `from` (when known), belongs to, per the hub's
    /// TokenReview.
    ///
    /// # Errors
    /// [`AuthError::Rejected`] when the review does not accept the token, [`AuthError::Busy`] when
    /// the token is new and the budget of reviews of new tokens (of `from` or of everyone) is
    /// spent, [`AuthError::Hub`] when the hub fails the review or does not answer within
    /// [`REVIEW_TIMEOUT`] (not remembered).
    pub(crate) async fn authenticate(
        &self,
        token: &Token,
        from: Option<IpAddr>,
    ) -> Result<Arc<Identity>, AuthError> {
        let key = token.digest();
        let known = lock(&self.tokens).get(&key, Instant::now());
        let identity = match known {
            Some(identity) => identity,
            None => {
                one_at_a_time(&self.reviewing, &key, async {
                    if let Some(identity) = lock(&self.tokens).get(&key, Instant::now()) {
                        return Ok(identity); // reviewed while this caller waited
                    }
                    lock(&self.budgets)
                        .take(from, Instant::now())
                        .map_err(|retry_after| AuthError::Busy { retry_after })?;
                    let reviewed = self.review_token(token).await?;
                    lock(&self.tokens).insert(key, reviewed.clone(), Instant::now());
                    Ok(reviewed)
                })
                .await?
            }
        };
        identity.ok_or(AuthError::Rejected)
    }

    async fn review_token(&self, token: &Token) -> Result<Option<Arc<Identity>>, AuthError> {
        self.metrics.status_api_review("TokenReview");
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.0.clone(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.hub.clone());
        let answer = on_time("TokenReview", api.create(&PostParams::default(), &review)).await?;
        let status = answer.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(Some(Arc::new(user.into()))),
            _ => {
                let reason = status.error.unwrap_or_default();
                tracing::debug!(%reason, "the hub did not accept a bearer token");
                Ok(None)
            }
        }
    }

    /// In which of `namespaces` `who` may get Controllers; [`Access::Everywhere`] when it may
    /// cluster-wide, which is asked first.
    ///
    /// # Errors
    /// [`AuthError::Hub`] when the hub fails a review or does not answer in time.
    pub(crate) async fn access(
        &self,
        who: &Arc<Identity>,
        namespaces: BTreeSet<String>,
    ) -> Result<Access, AuthError> {
        if self.may(who, None, "get").await? {
            return Ok(Access::Everywhere);
        }
        // Every review asked is let finish, so its answer is remembered even when another of
        // the request's is refused: a retry gets further rather than asking again.
        let answers: Vec<Result<Option<String>, AuthError>> = futures::stream::iter(namespaces)
            .map(|namespace| async move {
                let allowed = self.may(who, Some(namespace.clone()), "get").await?;
                Ok(allowed.then_some(namespace))
            })
            .buffer_unordered(PARALLEL_REVIEWS)
            .collect()
            .await;
        let mut allowed = BTreeSet::new();
        for answer in answers {
            allowed.extend(answer?);
        }
        Ok(Access::Namespaces(allowed))
    }

    /// Whether `who` may patch Controllers in hub namespace `namespace` (suspend them, resume
    /// their rollouts, ask for drift checks), as [`Reviewer::access`] asks for `get`.
    ///
    /// # Errors
    /// [`AuthError::Hub`] when the hub fails the review or does not answer in time.
    pub(crate) async fn may_patch(
        &self,
        who: &Arc<Identity>,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        self.may(who, Some(namespace.to_owned()), "patch").await
    }

    /// Whether `who` may `verb` Controllers in `namespace` (cluster-wide when None):
    /// remembered, or asked once for every caller asking it now, within the caller's budget.
    async fn may(
        &self,
        who: &Arc<Identity>,
        namespace: Option<String>,
        verb: &'static str,
    ) -> Result<bool, AuthError> {
        let key = (who.clone(), namespace, verb);
        if let Some(allowed) = lock(&self.access).get(&key, Instant::now()) {
            return Ok(allowed);
        }
        one_at_a_time(&self.asking, &key, async {
            if let Some(allowed) = lock(&self.access).get(&key, Instant::now()) {
                return Ok(allowed); // answered while this caller waited
            }
            lock(&self.callers)
                .take(&who.username, Instant::now())
                .map_err(|retry_after| AuthError::CallerBusy {
                    user: who.username.clone(),
                    retry_after,
                })?;
            let allowed = self.ask_access(who, key.1.clone(), verb).await?;
            lock(&self.access).insert(key.clone(), allowed, Instant::now());
            Ok(allowed)
        })
        .await
    }

    /// Asks the hub whether `who` may `verb` Controllers in `namespace` (cluster-wide when None).
    async fn ask_access(
        &self,
        who: &Identity,
        namespace: Option<String>,
        verb: &'static str,
    ) -> Result<bool, AuthError> {
        self.metrics.status_api_review("SubjectAccessReview");
        let review = access_review(who, namespace, verb);
        let api: Api<SubjectAccessReview> = Api::all(self.hub.clone());
        let answer = on_time(
            "SubjectAccessReview",
            api.create(&PostParams::default(), &review),
        )
        .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// The SubjectAccessReview asking whether `who` may `verb` Controllers in `namespace`
/// (everywhere when None).
fn access_review(who: &Identity, namespace: Option<String>, verb: &str) -> SubjectAccessReview {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: some(&who.username),
            uid: some(&who.uid),
            groups: (!who.groups.is_empty()).then(|| who.groups.clone()),
            extra: (!who.extra.is_empty()).then(|| who.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(TenancyController::group(&()).into_owned()),
                resource: Some(TenancyController::plural(&()).into_owned()),
                verb: Some(verb.into()),
                namespace,
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// The answer of a hub call, or [`AuthError::Hub`] when it fails or takes longer than [`REVIEW_TIMEOUT`].
async fn on_time<T>(
    review: &'static str,
    call: impl Future<Output = kube::Result<T>>,
) -> Result<T, AuthError> {
    let reason = match tokio::time::timeout(REVIEW_TIMEOUT, call).await {
        Ok(Ok(answer)) => return Ok(answer),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {REVIEW_TIMEOUT:?}"),
    };
    tracing::warn!(review, %reason, "the hub did not review a status API caller");
    Err(AuthError::Hub { review, reason })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fake hub for tests: answers TokenReviews and SubjectAccessReviews by rule, and counts them.
#[cfg(test)]
pub(crate) mod fake {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;

    /// The token of an identity that may get Controllers everywhere.
    pub(crate) const ADMIN: &str = "admin-token";
    /// The token of `system:serviceaccount:team-a:viewer`, which may get (not patch) Controllers
    /// in `team-a` only.
    pub(crate) const TEAM_A: &str = "team-a-token";
    /// The token of `system:serviceaccount:team-a:other`, which may get Controllers in `team-a`
    /// only: another identity with [`TEAM_A`]'s access.
    pub(crate) const TEAM_A_OTHER: &str = "team-a-other-token";
    /// A token whose review the hub fails with a 500.
    pub(crate) const BROKEN: &str = "broken-token";

    /// A hub client answered by [`answer`], and how many requests it got.
    pub(crate) fn hub() -> (Client, Arc<AtomicUsize>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let path = request.uri().path().to_owned();
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (code, answer) = answer(&path, &body);
                send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                        .unwrap(),
                );
            }
        });
        (Client::new(service, "default"), asked)
    }

    /// The fake hub's rule: [`ADMIN`] and [`TEAM_A`] are known tokens, [`BROKEN`] fails.
    fn answer(path: &str, body: &Value) -> (u16, Value) {
        match path {
            "/apis/authentication.k8s.io/v1/tokenreviews" => {
                let user = match body["spec"]["token"].as_str().unwrap() {
                    ADMIN => json!({"username": "admin", "groups": ["system:masters"]}),
                    TEAM_A => json!({"username": "system:serviceaccount:team-a:viewer",
                        "uid": "u-1", "groups": ["system:serviceaccounts"]}),
                    TEAM_A_OTHER => json!({"username": "system:serviceaccount:team-a:other",
                        "uid": "u-2", "groups": ["system:serviceaccounts"]}),
                    BROKEN => {
                        return (
                            500,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "etcdserver: request timed out", "code": 500}),
                        );
                    }
                    _ => return (201, review(body, json!({"error": "invalid bearer token"}))),
                };
                (
                    201,
                    review(body, json!({"authenticated": true, "user": user})),
                )
            }
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                let spec = &body["spec"];
                let namespace = spec["resourceAttributes"]["namespace"].as_str();
                let verb = spec["resourceAttributes"]["verb"].as_str();
                let allowed = match spec["user"].as_str().unwrap() {
                    "admin" => true,
                    "system:serviceaccount:team-a:viewer"
                    | "system:serviceaccount:team-a:other" => {
                        namespace == Some("team-a") && verb == Some("get")
                    }
                    _ => false,
                };
                (201, review(body, json!({"allowed": allowed})))
            }
            // The Events of a hub namespace, for the fleet view's Controller pages: none.
            events if events.starts_with("/api/v1/namespaces/") && events.ends_with("/events") => (
                200,
                json!({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": []}),
            ),
            other => panic!("the fake hub does not serve {other}"),
        }
    }

    /// A review as the hub answers it: the request with a status.
    pub(crate) fn review(request: &Value, status: Value) -> Value {
        let mut answer = request.clone();
        answer["status"] = status;
        answer
    }
}

mod budgets;

#[cfg(test)]
mod tests;
