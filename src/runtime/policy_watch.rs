//! Follows the `TenancyPolicy` resources: keeps their store current, plans again and judges the Alerts again on a change, and warns of policies that allow nothing or disagree.

use std::collections::BTreeSet;

use futures::StreamExt;
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self},
        watcher,
    },
};
use tokio::sync::mpsc;

use crate::{
    api::policy::TenancyPolicy, controller::context::Settings, controller::context::admission_of,
};

/// Keeps the `TenancyPolicy` store current and has every `Controller` planned again, and every
/// `Alert` judged again (`alerts`), whenever a policy is created, changed or deleted, so policy
/// changes take effect without a restart.
pub(crate) async fn watch_policies(
    api: Api<TenancyPolicy>,
    writer: reflector::store::Writer<TenancyPolicy>,
    (store, settings): (reflector::Store<TenancyPolicy>, Settings),
    (everything, alerts): (mpsc::Sender<()>, mpsc::Sender<()>),
) {
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
    );
    let mut said = BTreeSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::Delete(p)) => {
                tracing::info!(policy = %kube::ResourceExt::name_any(&p), "a TenancyPolicy changed; planning every Controller again");
                said = warn_of_policies(&admission_of(&store, &settings), said);
                let _ = everything.send(()).await;
                // Full: a judgement of every Alert is pending already.
                let _ = alerts.try_send(());
            }
            Ok(watcher::Event::InitDone) => {
                said = warn_of_policies(&admission_of(&store, &settings), said);
                let _ = everything.send(()).await;
                let _ = alerts.try_send(());
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "watching TenancyPolicies failed; retrying"),
        }
    }
}

/// Logs, once per change, policies that name no identity and hub namespaces whose policies
/// disagree on the identity Helm acts as; returns what is said now.
fn warn_of_policies(
    admission: &crate::policy::Admission,
    before: BTreeSet<String>,
) -> BTreeSet<String> {
    let mut now: BTreeSet<String> = admission.disagreements().into_iter().collect();
    for p in &admission.policies {
        if let Err(why) = p.spec.identity() {
            now.insert(format!("TenancyPolicy {} allows nothing: {why}", p.name));
        }
    }
    for warning in now.difference(&before) {
        tracing::warn!(%warning, "tenancy policies");
    }
    now
}
