//! Leader election on a `coordination.k8s.io/v1` Lease on the hub, so one replica works at a time.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{Api, api::PostParams};
use tokio::{
    task::JoinHandle,
    time::{Instant, MissedTickBehavior},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Results of leader election.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why leadership could not be taken or given up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The timings cannot keep two replicas from working at once.
    #[error("invalid leader election settings for Lease {lease}: {reason}")]
    Config {
        /// The lease, as `namespace/name`.
        lease: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// RBAC does not let the operator use the lease.
    #[error(
        "cannot read or write Lease {lease}: {source}; the operator's identity needs get/create/update on leases in {namespace}"
    )]
    Forbidden {
        /// The lease, as `namespace/name`.
        lease: String,
        /// The lease's namespace.
        namespace: String,
        /// What the hub answered.
        source: kube::Error,
    },
    /// The lease's namespace does not exist on the hub.
    #[error(
        "cannot create Lease {lease}: {source}; create namespace {namespace} on the hub or choose another lease namespace"
    )]
    NoNamespace {
        /// The lease, as `namespace/name`.
        lease: String,
        /// The missing namespace.
        namespace: String,
        /// What the hub answered.
        source: kube::Error,
    },
    /// The hub refused the lease as invalid.
    #[error(
        "the hub rejected Lease {lease}: {source}; the lease name must be a valid Kubernetes object name"
    )]
    Rejected {
        /// The lease, as `namespace/name`.
        lease: String,
        /// What the hub answered.
        source: kube::Error,
    },
    /// Any other failure talking to the hub.
    #[error("cannot {action} Lease {lease}: {source}; check that the hub is reachable")]
    Api {
        /// What was being done.
        action: &'static str,
        /// The lease, as `namespace/name`.
        lease: String,
        /// What went wrong.
        source: kube::Error,
    },
}

impl Error {
    /// Classifies a failed call on the lease.
    fn from_kube(config: &LeaseConfig, action: &'static str, source: kube::Error) -> Self {
        let lease = config.lease();
        let namespace = config.namespace.clone();
        match &source {
            kube::Error::Api(s) if s.code == 401 || s.code == 403 => Self::Forbidden {
                lease,
                namespace,
                source,
            },
            kube::Error::Api(s) if s.code == 404 => Self::NoNamespace {
                lease,
                namespace,
                source,
            },
            kube::Error::Api(s) if s.code == 400 || s.code == 422 => {
                Self::Rejected { lease, source }
            }
            _ => Self::Api {
                action,
                lease,
                source,
            },
        }
    }

    /// Whether trying again later may succeed.
    fn is_transient(&self) -> bool {
        matches!(self, Self::Api { .. })
    }
}

/// How leadership is held.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Hub namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (default `tenancy-hub`).
    pub name: String,
    /// This replica, for example `<hostname>-<pid>`.
    pub identity: String,
    /// A standby may take over this long after the last renewal (default 10s; whole seconds count).
    pub lease_duration: Duration,
    /// How often the leader renews and a standby retries (default 2s).
    pub renew_every: Duration,
    /// A leader that could not renew for this long steps down (default 7s; below `lease_duration`).
    pub renew_deadline: Duration,
}

impl LeaseConfig {
    /// The default Lease `tenancy-hub` in `namespace`, held as `identity`, with the default timings.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: "tenancy-hub".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(7),
        }
    }

    /// The lease as `namespace/name`, for messages.
    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `leaseDurationSeconds` as written: whole seconds, so never longer than `lease_duration`.
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Checks that a leader steps down before a standby may take over.
    fn validate(&self) -> Result<()> {
        let seconds = Duration::from_secs(self.lease_seconds().unsigned_abs().into());
        let reason = if seconds.is_zero() {
            "the lease duration must be at least 1s"
        } else if self.renew_deadline >= seconds {
            "the renew deadline must be shorter than the lease duration (in whole seconds)"
        } else if self.renew_every.is_zero() || self.renew_every >= self.renew_deadline {
            "renew every must be above zero and shorter than the renew deadline"
        } else {
            return Ok(());
        };
        Err(Error::Config {
            lease: self.lease(),
            reason: format!(
                "{reason} (lease duration {:?}, renew deadline {:?}, renew every {:?})",
                self.lease_duration, self.renew_deadline, self.renew_every
            ),
        })
    }

    /// The span of every task working on this lease.
    fn span(&self) -> tracing::Span {
        tracing::info_span!("leader_election", lease = %self.lease(), identity = %self.identity)
    }

    /// A new lease held by this replica since `now`.
    fn new_lease(&self, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.lease_seconds()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        }
    }
}

/// A pure decision: given the lease as read and `now`, may `identity` take or keep it?
///
/// Yes when there is no lease or no holder, when `identity` holds it, or when it expired
/// (`renewTime + leaseDurationSeconds < now`). A holder without a renew time or duration cannot
/// show that it is alive, so its lease counts as expired.
pub fn may_acquire(lease: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = lease else { return true };
    match spec.holder_identity.as_deref() {
        None | Some("") => return true,
        Some(holder) if holder == identity => return true,
        Some(_) => {}
    }
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    renewed
        .0
        .checked_add(SignedDuration::from_secs(seconds.into()))
        .is_ok_and(|expiry| expiry < now)
}

/// Whether a failed call lost a race with another writer (conflict or already exists).
fn raced(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

/// What one try at taking the lease found.
enum Attempt {
    /// This replica holds the lease now.
    Acquired,
    /// Another replica holds a fresh lease.
    Held(String),
    /// Another writer changed the lease first; read it again.
    Raced,
}

/// Takes the lease if it is free, expired or ours.
async fn try_acquire(api: &Api<Lease>, config: &LeaseConfig) -> Result<Attempt> {
    let now = Timestamp::now();
    let fail = |action, e| Error::from_kube(config, action, e);
    let Some(mut lease) = api
        .get_opt(&config.name)
        .await
        .map_err(|e| fail("read", e))?
    else {
        return match api
            .create(&PostParams::default(), &config.new_lease(now))
            .await
        {
            Ok(_) => Ok(Attempt::Acquired),
            Err(e) if raced(&e) => Ok(Attempt::Raced),
            Err(e) => Err(fail("create", e)),
        };
    };
    if !may_acquire(lease.spec.as_ref(), &config.identity, now) {
        let holder = lease.spec.and_then(|s| s.holder_identity);
        return Ok(Attempt::Held(holder.unwrap_or_default()));
    }
    let spec = lease.spec.get_or_insert_default();
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    spec.holder_identity = Some(config.identity.clone());
    spec.lease_duration_seconds = Some(config.lease_seconds());
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(Attempt::Acquired),
        Err(e) if raced(&e) || matches!(&e, kube::Error::Api(s) if s.code == 404) => {
            Ok(Attempt::Raced)
        }
        Err(e) => Err(fail("update", e)),
    }
}

/// What one renewal found.
enum Renewal {
    /// The lease is ours for another `lease_duration`.
    Renewed,
    /// Someone else holds the lease (or nobody, after it was released by another hand).
    Taken(Option<String>),
}

/// Renews the lease if this replica still holds it; recreates it if it was deleted.
async fn renew_once(api: &Api<Lease>, config: &LeaseConfig) -> Result<Renewal, kube::Error> {
    loop {
        let now = Timestamp::now();
        let Some(mut lease) = api.get_opt(&config.name).await? else {
            match api
                .create(&PostParams::default(), &config.new_lease(now))
                .await
            {
                Ok(_) => return Ok(Renewal::Renewed),
                Err(e) if raced(&e) => continue,
                Err(e) => return Err(e),
            }
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
            return Ok(Renewal::Taken(spec.holder_identity.clone()));
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(config.lease_seconds());
        match api
            .replace(&config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => return Ok(Renewal::Renewed),
            Err(e) if raced(&e) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Renews every `renew_every` until `stop`; cancels `lost` when another holder is seen or no
/// renewal succeeded for `renew_deadline` since `renewed` (when the last written renew time was taken).
async fn keep_renewing(
    api: Api<Lease>,
    config: LeaseConfig,
    lost: CancellationToken,
    stop: CancellationToken,
    mut renewed: Instant,
) {
    let mut ticker = tokio::time::interval_at(renewed + config.renew_every, config.renew_every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let reason = loop {
        let deadline = renewed + config.renew_deadline;
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(deadline) => {
                break format!("no renewal succeeded for {:?}", config.renew_deadline);
            }
            _ = ticker.tick() => {}
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            outcome = tokio::time::timeout_at(deadline, renew_once(&api, &config)) => outcome,
        };
        match outcome {
            Ok(Ok(Renewal::Renewed)) => {
                renewed = started;
                tracing::trace!("renewed the lease");
            }
            Ok(Ok(Renewal::Taken(holder))) => {
                break format!("the lease is now held by {}", holder.unwrap_or_default());
            }
            Ok(Err(error)) => tracing::warn!(
                %error,
                "could not renew Lease {}; retrying until the renew deadline",
                config.lease()
            ),
            Err(_) => tracing::warn!(
                "renewing Lease {} did not finish before the renew deadline",
                config.lease()
            ),
        }
    };
    tracing::error!(%reason, "lost leadership of Lease {}; stopping all work", config.lease());
    lost.cancel();
}

/// Holds leadership: renews the lease in a task until released, dropped or lost.
pub struct Leadership {
    api: Api<Lease>,
    config: LeaseConfig,
    span: tracing::Span,
    lost: CancellationToken,
    stop: CancellationToken,
    renewal: JoinHandle<()>,
}

impl Leadership {
    /// Blocks until this replica holds the lease (trying every `renew_every`), or until `cancel`
    /// fires (then `Ok(None)`). Unreachable hubs are retried; RBAC and invalid settings are errors.
    pub async fn acquire(
        client: kube::Client,
        config: LeaseConfig,
        cancel: &CancellationToken,
    ) -> Result<Option<Leadership>> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let span = config.span();
        let mut ticker = tokio::time::interval(config.renew_every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut seen: Option<String> = None;
        let attempts = async {
            loop {
                ticker.tick().await;
                let started = Instant::now();
                match try_acquire(&api, &config).await {
                    Ok(Attempt::Acquired) => return Ok(started),
                    Ok(Attempt::Held(holder)) if seen.as_ref() != Some(&holder) => {
                        tracing::info!("waiting for leadership held by {holder}");
                        seen = Some(holder);
                    }
                    Ok(Attempt::Held(_) | Attempt::Raced) => {}
                    Err(error) if error.is_transient() => {
                        tracing::warn!(%error, "could not take the lease; retrying");
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        .instrument(span.clone());
        let renewed = tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            renewed = attempts => renewed?,
        };
        span.in_scope(|| tracing::info!("acquired leadership of Lease {}", config.lease()));
        let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
        let renewal = tokio::spawn(
            keep_renewing(
                api.clone(),
                config.clone(),
                lost.clone(),
                stop.clone(),
                renewed,
            )
            .instrument(span.clone()),
        );
        Ok(Some(Leadership {
            api,
            config,
            span,
            lost,
            stop,
            renewal,
        }))
    }

    /// A token cancelled when leadership ends: lost (renewal failed past `renew_deadline`, or another
    /// holder was seen), released or dropped. The caller must stop all work when it fires.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Gives the lease up so a standby takes over on its next try; call it on graceful shutdown
    /// after work has stopped. Does nothing to a lease another replica holds by now.
    pub async fn release(mut self) -> Result<()> {
        self.stop.cancel();
        if let Err(error) = (&mut self.renewal).await {
            tracing::warn!(%error, "the lease renewal task failed");
        }
        let span = self.span.clone();
        self.clear().instrument(span).await
    }

    /// Clears holder and renew time if the lease is still ours.
    async fn clear(&self) -> Result<()> {
        let fail = |action, e| Error::from_kube(&self.config, action, e);
        loop {
            let lease = self.api.get_opt(&self.config.name).await;
            let Some(mut lease) = lease.map_err(|e| fail("read", e))? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.acquire_time = None;
            spec.renew_time = None;
            match self
                .api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::info!("released leadership of Lease {}", self.config.lease());
                    return Ok(());
                }
                Err(e) if raced(&e) => continue,
                Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 404) => return Ok(()),
                Err(e) => return Err(fail("release", e)),
            }
        }
    }
}

impl Drop for Leadership {
    /// Stops renewing; the lease then expires unless it was released.
    fn drop(&mut self) {
        self.stop.cancel();
        self.lost.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use serde_json::json;

    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn held_by(holder: Option<&str>, renewed_secs_ago: Option<i64>, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed_secs_ago.map(|s| MicroTime(now() - SignedDuration::from_secs(s))),
            lease_duration_seconds: Some(duration),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_lease_may_be_acquired() {
        assert!(may_acquire(None, "a", now()));
    }

    #[test]
    fn a_lease_without_a_holder_may_be_acquired() {
        assert!(may_acquire(Some(&held_by(None, Some(1), 10)), "a", now()));
    }

    #[test]
    fn a_lease_with_an_empty_holder_may_be_acquired() {
        assert!(may_acquire(
            Some(&held_by(Some(""), Some(1), 10)),
            "a",
            now()
        ));
    }

    #[test]
    fn our_own_lease_may_be_kept() {
        assert!(may_acquire(
            Some(&held_by(Some("a"), Some(1), 10)),
            "a",
            now()
        ));
    }

    #[test]
    fn an_expired_lease_of_another_holder_may_be_taken() {
        assert!(may_acquire(
            Some(&held_by(Some("b"), Some(11), 10)),
            "a",
            now()
        ));
    }

    #[test]
    fn a_fresh_lease_of_another_holder_may_not_be_taken() {
        assert!(!may_acquire(
            Some(&held_by(Some("b"), Some(1), 10)),
            "a",
            now()
        ));
    }

    #[test]
    fn a_lease_renewed_exactly_one_duration_ago_is_not_yet_expired() {
        assert!(!may_acquire(
            Some(&held_by(Some("b"), Some(10), 10)),
            "a",
            now()
        ));
    }

    #[test]
    fn a_lease_of_another_holder_without_a_renew_time_may_be_taken() {
        assert!(may_acquire(Some(&held_by(Some("b"), None, 10)), "a", now()));
    }

    #[test]
    fn a_renew_deadline_as_long_as_the_lease_is_refused() {
        let mut config = LeaseConfig::new("ops", "a");
        config.renew_deadline = config.lease_duration;
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("ops/tenancy-hub"), "{error}");
        assert!(error.contains("renew deadline must be shorter"), "{error}");
    }

    #[test]
    fn the_default_timings_are_valid() {
        LeaseConfig::new("ops", "a").validate().unwrap();
    }

    /// A hub that answers every request with `code` and `body`, counting the writes.
    fn hub(code: u16, body: serde_json::Value, writes: Arc<AtomicUsize>) -> kube::Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            if request.method() != http::Method::GET {
                writes.fetch_add(1, Ordering::SeqCst);
            }
            let response = http::Response::builder()
                .status(code)
                .body(kube::client::Body::from(body.to_string().into_bytes()));
            async move { response }
        });
        kube::Client::new(service, "default")
    }

    fn lease_held_by(holder: &str) -> serde_json::Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "tenancy-hub", "namespace": "ops", "resourceVersion": "7"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 3600,
                "renewTime": MicroTime(Timestamp::now()),
            },
        })
    }

    fn failure(code: u16, reason: &str) -> serde_json::Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": "refused by the test", "reason": reason, "code": code})
    }

    /// A leadership as `acquire` returns it, without talking to the hub first.
    fn leading(client: kube::Client) -> Leadership {
        let config = LeaseConfig::new("ops", "a");
        let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
        let api = Api::namespaced(client, "ops");
        let renewal = tokio::spawn(keep_renewing(
            api.clone(),
            config.clone(),
            lost.clone(),
            stop.clone(),
            Instant::now(),
        ));
        Leadership {
            api,
            span: config.span(),
            config,
            lost,
            stop,
            renewal,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_keeps_renewing_while_the_hub_answers() {
        let writes = Arc::new(AtomicUsize::new(0));
        let leadership = leading(hub(200, lease_held_by("a"), writes.clone()));
        let lost = leadership.lost();
        let waited = tokio::time::timeout(Duration::from_secs(61), lost.cancelled()).await;
        assert!(waited.is_err(), "leadership was lost");
        assert_eq!(writes.load(Ordering::SeqCst), 30);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
        let start = Instant::now();
        let leadership = leading(hub(503, failure(503, "ServiceUnavailable"), Arc::default()));
        leadership.lost().cancelled().await;
        assert_eq!(start.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_sees_another_holder_steps_down_at_its_next_renewal() {
        let start = Instant::now();
        let writes = Arc::new(AtomicUsize::new(0));
        let leadership = leading(hub(200, lease_held_by("b"), writes.clone()));
        leadership.lost().cancelled().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(writes.load(Ordering::SeqCst), 0, "it wrote another's lease");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_leadership_stops_renewing_and_signals_lost() {
        let writes = Arc::new(AtomicUsize::new(0));
        let leadership = leading(hub(200, lease_held_by("a"), writes.clone()));
        let lost = leadership.lost();
        drop(leadership);
        assert!(lost.is_cancelled());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(writes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_waits_for_a_fresh_lease_of_another_holder_until_cancelled() {
        let writes = Arc::new(AtomicUsize::new(0));
        let client = hub(200, lease_held_by("b"), writes.clone());
        let cancel = CancellationToken::new();
        tokio::spawn({
            let cancel = cancel.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                cancel.cancel();
            }
        });
        let acquired = Leadership::acquire(client, LeaseConfig::new("ops", "a"), &cancel).await;
        assert!(acquired.unwrap().is_none());
        assert_eq!(writes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_says_which_permissions_are_missing_when_forbidden() {
        let client = hub(403, failure(403, "Forbidden"), Arc::default());
        let config = LeaseConfig::new("ops", "a");
        let cancel = CancellationToken::new();
        let error = match Leadership::acquire(client, config, &cancel).await {
            Err(error) => error.to_string(),
            Ok(_) => panic!("acquired a forbidden lease"),
        };
        assert!(error.contains("Lease ops/tenancy-hub"), "{error}");
        assert!(
            error.contains("needs get/create/update on leases in ops"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn releasing_a_lease_another_replica_took_leaves_it_alone() {
        let writes = Arc::new(AtomicUsize::new(0));
        let leadership = leading(hub(200, lease_held_by("b"), writes.clone()));
        leadership.release().await.unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 0);
    }
}
