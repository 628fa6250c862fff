//! Leader election on a `coordination.k8s.io/v1` Lease on the hub, so one replica works at a time.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};
use tokio::{
    task::JoinHandle,
    time::{Instant, MissedTickBehavior},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Results of leader election.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

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
        "cannot create Lease {lease}: {source}; namespace {namespace} does not exist on the hub: create namespace {namespace} on the hub (kubectl create namespace {namespace}), pass --lease-namespace to use another, or pass --leader-elect=false for a lab"
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
    pub(crate) fn is_transient(&self) -> bool {
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
    /// A standby may take over once it has seen the lease unchanged this long (default 10s; whole
    /// seconds count).
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

/// What this replica knows of another holder's lease: the record it last read, and when it first
/// read that record, by its own monotonic clock.
///
/// The holder's `renewTime` is the holder's clock, so it is never compared with ours: a few seconds
/// of skew would let a standby take over from a leader that still renews. As in client-go, a lease
/// expires when its record has not changed for a lease duration measured here.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    /// The record as last read (None: no lease), and the instant it was first read like that.
    seen: Option<(Option<LeaseSpec>, Instant)>,
}

impl Observer {
    /// Notes the lease as read at `now`; the clock starts again only when the record changed.
    pub(crate) fn observe(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        if self
            .seen
            .as_ref()
            .is_none_or(|(record, _)| record.as_ref() != spec)
        {
            self.seen = Some((spec.cloned(), now));
        }
    }

    /// How long the record last observed has stayed unchanged at `now`; None before any.
    pub(crate) fn unchanged_for(&self, now: Instant) -> Option<Duration> {
        self.seen
            .as_ref()
            .map(|(_, since)| now.saturating_duration_since(*since))
    }

    /// Whether the record last observed has stayed unchanged for `duration` at `now`; nothing
    /// observed yet has not expired.
    pub(crate) fn expired(&self, now: Instant, duration: Duration) -> bool {
        self.seen
            .as_ref()
            .is_some_and(|(_, since)| now.saturating_duration_since(*since) >= duration)
    }
}

/// A pure decision: given the lease as just observed by `observer`, may `identity` take or keep it
/// at `now`?
///
/// Yes when there is no lease or no holder, when `identity` holds it, or when the observer has seen
/// the same record for the holder's `leaseDurationSeconds` (`fallback` when it states none).
pub(crate) fn may_acquire(
    lease: Option<&LeaseSpec>,
    identity: &str,
    observer: &Observer,
    now: Instant,
    fallback: Duration,
) -> bool {
    let Some(spec) = lease else { return true };
    match spec.holder_identity.as_deref() {
        None | Some("") => return true,
        Some(holder) if holder == identity => return true,
        Some(_) => {}
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(fallback, Duration::from_secs);
    observer.expired(now, duration)
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

/// Takes the lease if it is free, ours, or unchanged for a lease duration as `observer` saw it.
async fn try_acquire(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observer: &mut Observer,
) -> Result<Attempt> {
    let fail = |action, e| Error::from_kube(config, action, e);
    let lease = api
        .get_opt(&config.name)
        .await
        .map_err(|e| fail("read", e))?;
    // Read after the answer: the record is at least this old here, so expiry is never early.
    let observed = Instant::now();
    observer.observe(lease.as_ref().and_then(|l| l.spec.as_ref()), observed);
    // Written for people and other tools to read; never compared with another replica's clock.
    let now = Timestamp::now();
    let Some(mut lease) = lease else {
        return match api
            .create(&PostParams::default(), &config.new_lease(now))
            .await
        {
            Ok(_) => Ok(Attempt::Acquired),
            Err(e) if raced(&e) => Ok(Attempt::Raced),
            Err(e) => Err(fail("create", e)),
        };
    };
    let fallback = config.lease_duration;
    if !may_acquire(
        lease.spec.as_ref(),
        &config.identity,
        observer,
        observed,
        fallback,
    ) {
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
    ///
    /// While another replica holds the lease, `standby` is called with the holder's identity each
    /// time the holder changes (and once at first), so the caller can say what it waits for.
    pub async fn acquire(
        client: kube::Client,
        config: LeaseConfig,
        cancel: &CancellationToken,
        mut standby: impl FnMut(&str) + Send,
    ) -> Result<Option<Leadership>> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let span = config.span();
        let mut ticker = tokio::time::interval(config.renew_every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut observer = Observer::default();
        let mut seen: Option<String> = None;
        let attempts = async {
            loop {
                ticker.tick().await;
                let started = Instant::now();
                match try_acquire(&api, &config, &mut observer).await {
                    Ok(Attempt::Acquired) => return Ok(started),
                    Ok(Attempt::Held(holder)) if seen.as_ref() != Some(&holder) => {
                        tracing::info!(
                            %holder,
                            "standby: waiting for leadership of Lease {} held by {holder}",
                            config.lease()
                        );
                        standby(&holder);
                        seen = Some(holder);
                    }
                    Ok(Attempt::Held(holder)) => tracing::debug!(
                        "Lease {} is still held by {holder}; trying again in {:?}",
                        config.lease(),
                        config.renew_every
                    ),
                    Ok(Attempt::Raced) => {}
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
        Ok(Some(Self::start(api, config, span, renewed)))
    }

    /// One try at taking the lease now, judged with what `observer` has seen of it: Some when
    /// this replica holds it afterwards (and renews it from then on).
    pub(crate) async fn try_take(
        client: kube::Client,
        config: LeaseConfig,
        observer: &mut Observer,
    ) -> Result<Option<Leadership>> {
        config.validate()?;
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let span = config.span();
        let started = Instant::now();
        match try_acquire(&api, &config, observer)
            .instrument(span.clone())
            .await?
        {
            Attempt::Acquired => Ok(Some(Self::start(api, config, span, started))),
            Attempt::Held(_) | Attempt::Raced => Ok(None),
        }
    }

    /// Leadership just taken (the renew time written was taken at `renewed`): renews from now on.
    fn start(api: Api<Lease>, config: LeaseConfig, span: tracing::Span, renewed: Instant) -> Self {
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
        Leadership {
            api,
            config,
            span,
            lost,
            stop,
            renewal,
        }
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
mod tests;
