//! The Alert reconciler: each Alert's `Ready` from its Secret and the policies, looked at on every change of the Alert or of a policy and every minute (a few at once). What it sent, failed or dropped is counted and written by `notify::book`.

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    runtime::{
        Controller, PredicateConfig, WatchStreamExt,
        controller::{Action, Config as RuntimeConfig},
        predicates,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    api::alert::Alert,
    notify::{
        book::patch_status,
        budget::{ALERTS_PER_NAMESPACE, newly_followed, rank},
        provider::{AdmissionNow, Endpoint, Problem, Reach, SecretReader, shown},
    },
};

/// How often an Alert's Secret is looked at again, so one created or fixed shows within this.
pub(crate) const RECHECK: Duration = Duration::from_secs(60);
/// Alerts looked at at once.
pub(crate) const LOOKS: u16 = 8;

/// The `Ready` condition for what resolving the Alert found (pure): True naming where messages
/// go, or False with the problem's reason and words.
pub(crate) fn ready(
    found: &Result<Endpoint, Problem>,
    suspended: bool,
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let (status, reason, message) = match found {
        Ok(e) if suspended => (
            "False",
            "Suspended",
            format!(
                "suspended: nothing is sent to {} until suspend is unset",
                shown(&e.url)
            ),
        ),
        Ok(e) => (
            "True",
            "Ready",
            format!(
                "messages go to {} as {}{}",
                shown(&e.url),
                e.provider,
                if e.hmac_key.is_some() { ", signed" } else { "" }
            ),
        ),
        Err(problem) => ("False", problem.reason(), problem.to_string()),
    };
    let since = previous
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == status)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: since,
        observed_generation: generation,
    }
}

/// What the Alert readiness loop uses.
struct Readiness {
    hub: kube::Client,
    admission: AdmissionNow,
    reach: Reach,
    reader: Arc<SecretReader>,
    store: Store<Alert>,
}

/// What following the Alerts takes: the hub, what the policies allow now, where webhooks may
/// lead, and the reader of their Secrets.
pub(crate) struct Follow {
    /// Client of the hub.
    pub(crate) hub: kube::Client,
    /// What the policies allow now.
    pub(crate) admission: AdmissionNow,
    /// Where webhooks may lead.
    pub(crate) reach: Reach,
    /// Reads the Alerts' Secrets.
    pub(crate) reader: Arc<SecretReader>,
}

/// Follows the Alerts of `scope` (every namespace when None): the store the dispatcher reads,
/// and each Alert's `Ready` kept current until cancelled, judged again at once whenever
/// `policies` says a TenancyPolicy changed.
pub(crate) fn follow(
    parts: Follow,
    scope: Option<&str>,
    policies: mpsc::Receiver<()>,
    cancel: CancellationToken,
) -> (
    Store<Alert>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let api: Api<Alert> = match scope {
        Some(ns) => Api::namespaced(parts.hub.clone(), ns),
        None => Api::all(parts.hub.clone()),
    };
    // Looked at again on a new generation (or deletion), not on the status writes it makes.
    // An Alert deleted in a namespace over the cap lets the oldest one refused in: it is looked
    // at again at once, not at its next recheck.
    let (store, writer) = reflector::store();
    let (let_in, admitted) = mpsc::unbounded_channel();
    let deletions = store.clone();
    let changes = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(gone)) = event
                && let Some(next) =
                    newly_followed(&deletions.state(), &gone.namespace().unwrap_or_default())
            {
                let _ = let_in.send(ObjectRef::from_obj(&*next));
            }
        })
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let policies = futures::stream::unfold(policies, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let admitted = futures::stream::unfold(admitted, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let runtime = Controller::for_stream(changes, store.clone())
        .with_config(RuntimeConfig::default().concurrency(LOOKS))
        .reconcile_all_on(policies)
        .reconcile_on(admitted)
        .graceful_shutdown_on(cancel.cancelled_owned());
    let ctx = Arc::new(Readiness {
        hub: parts.hub,
        admission: parts.admission,
        reach: parts.reach,
        reader: parts.reader,
        store: store.clone(),
    });
    let run = runtime
        .run(look, |_, _, _| Action::requeue(RECHECK), ctx)
        .for_each(|_| async {});
    (store, run)
}

/// What an Alert can send to: nothing past the namespace's cap (its Secret not even judged),
/// else its Secret judged and resolved as a send would.
async fn found(alert: &Alert, ctx: &Readiness) -> Result<Endpoint, Problem> {
    if let Some((place, _)) = rank(&ctx.store.state(), alert)
        && place >= ALERTS_PER_NAMESPACE
    {
        return Err(Problem::TooManyAlerts {
            namespace: alert.namespace().unwrap_or_default(),
            cap: ALERTS_PER_NAMESPACE,
        });
    }
    ctx.reader
        .resolve(alert, &(ctx.admission)(), &ctx.reach)
        .await
}

/// Looks at one Alert: its Secret resolved as a send would, and the status written when what it
/// says changed.
async fn look(alert: Arc<Alert>, ctx: Arc<Readiness>) -> Result<Action, kube::Error> {
    let found = found(&alert, &ctx).await;
    let status = alert.status.clone().unwrap_or_default();
    let generation = alert.metadata.generation;
    let condition = ready(
        &found,
        alert.spec.suspend,
        &status.conditions,
        generation,
        Timestamp::now(),
    );
    let endpoint = found.as_ref().ok().map(|e| shown(&e.url));
    let same = status.conditions.iter().any(|c| {
        c.type_ == "Ready"
            && c.status == condition.status
            && c.reason == condition.reason
            && c.message == condition.message
    }) && status.endpoint == endpoint
        && status.observed_generation == generation;
    if !same {
        if let Err(problem) = &found {
            tracing::warn!(alert = %format!("{}/{}", alert.namespace().unwrap_or_default(), alert.name_any()), reason = problem.reason(), "Alert cannot send: {problem}");
        }
        let patch = serde_json::json!({"status": {
            "conditions": [condition],
            "endpoint": endpoint,
            "observedGeneration": generation,
        }});
        patch_status(&ctx.hub, &ObjectRef::from_obj(&*alert), &patch)
            .await
            .map_err(|why| kube::Error::Service(why.into()))?;
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::alert::ProviderType;

    #[test]
    fn ready_says_where_messages_go_and_keeps_its_transition_time() {
        let e = Endpoint {
            provider: ProviderType::Generic,
            url: "https://hooks.example.com:8443/s3cr3t".parse().unwrap(),
            hmac_key: Some(b"k".to_vec()),
        };
        let t0 = Timestamp::UNIX_EPOCH;
        let c = ready(&Ok(e.clone()), false, &[], Some(1), t0);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Ready"));
        assert_eq!(
            c.message,
            "messages go to https://hooks.example.com:8443 as generic, signed"
        );
        let later = ready(
            &Ok(e.clone()),
            false,
            std::slice::from_ref(&c),
            Some(2),
            Timestamp::now(),
        );
        assert_eq!(later.last_transition_time, c.last_transition_time);
        let suspended = ready(&Ok(e), true, &[c], Some(2), Timestamp::now());
        assert_eq!(suspended.reason, "Suspended");
        let missing = ready(
            &Err(Problem::SecretMissing {
                namespace: "a".into(),
                name: "hook".into(),
            }),
            false,
            &[],
            None,
            t0,
        );
        assert_eq!(
            (missing.status.as_str(), missing.reason.as_str()),
            ("False", "SecretNotFound")
        );
        assert!(missing.message.contains("a/hook"));
    }
}
