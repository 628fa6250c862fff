//! What the agent sees in its own cluster, put into reports: the pods and workloads of the namespaces the hub asked for, and the release records, each coalesced to at most one write a second.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, RwLock},
    time::Duration,
};

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::ClusterName,
    helm::seal::SealKey,
    member::link::MemberLink,
    member::pull::agent::outbox::Outbox,
    member::pull::messages::{Observed, observed_name},
    observe::model::ScopeState,
    observe::records::{FOREIGN_SELECTOR, MANAGED_SELECTOR, Record},
    observe::watch::{ClusterWatch, Namespaces},
};

/// How long changes gather before they are reported.
const COALESCE: Duration = Duration::from_millis(300);

/// The namespaces the hub asked the agent to watch, and a tick when it asks for more.
pub(crate) struct Wanted {
    /// The namespaces.
    pub(crate) namespaces: Namespaces,
    /// Ticks when namespaces are added.
    pub(crate) grown: watch::Sender<u64>,
    /// Ticks on every change, for the reporter.
    pub(crate) changed: watch::Sender<u64>,
}

impl Wanted {
    /// None wanted yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            namespaces: Arc::new(RwLock::new(BTreeSet::new())),
            grown: watch::channel(0).0,
            changed: watch::channel(0).0,
        })
    }

    /// Takes the hub's newest list.
    pub(crate) fn set(&self, namespaces: BTreeSet<String>) {
        let grew = {
            let mut held = self.namespaces.write().expect("namespaces lock");
            if *held == namespaces {
                return;
            }
            let grew = namespaces.difference(&held).next().is_some();
            *held = namespaces;
            grew
        };
        if grew {
            self.grown.send_modify(|n| *n += 1);
        }
        self.changed.send_modify(|n| *n += 1);
    }
}

/// Watches the wanted namespaces of the agent's cluster through `local` and reports what runs
/// there, until `stop`.
pub(crate) async fn observe(
    cluster: ClusterName,
    local: Arc<dyn MemberLink>,
    wanted: Arc<Wanted>,
    outbox: Arc<Outbox>,
    stop: CancellationToken,
) {
    let (events, mut changes) = mpsc::channel(1024);
    let watch = ClusterWatch {
        cluster: cluster.clone(),
        namespaces: wanted.namespaces.clone(),
        grown: wanted.grown.subscribe(),
        shares: Default::default(),
        events,
        stop: stop.clone(),
    };
    tokio::spawn(local.watch_workloads(watch));
    let mut scopes: HashMap<String, ScopeState> = HashMap::new();
    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let mut asked = wanted.changed.subscribe();
    let mut tick = tokio::time::interval(COALESCE);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            change = changes.recv() => {
                let Some((scope, change)) = change else { return };
                scopes
                    .entry(scope.namespace.clone())
                    .or_default()
                    .apply(change, k8s_openapi::jiff::Timestamp::now());
                dirty.insert(scope.namespace);
            }
            _ = asked.changed() => {}
            _ = tick.tick() => {
                let now = wanted.namespaces.read().expect("namespaces lock").clone();
                for gone in reported.difference(&now).cloned().collect::<Vec<_>>() {
                    outbox.delete(observed_name(&gone));
                    scopes.remove(&gone);
                    reported.remove(&gone);
                }
                for namespace in std::mem::take(&mut dirty) {
                    let (Some(scope), true) = (scopes.get(&namespace), now.contains(&namespace)) else {
                        continue;
                    };
                    let report = Observed {
                        cluster: cluster.clone(),
                        namespace: namespace.clone(),
                        pods: scope.pods.values().cloned().collect(),
                        workloads: scope.workloads.values().cloned().collect(),
                        problem: scope.problem.clone(),
                    };
                    outbox.put(observed_name(&namespace), "observed", &report);
                    reported.insert(namespace);
                }
            }
        }
    }
}

/// Follows the release records of `local`, managed or foreign, and reports them in pieces (each
/// cut to what the hub reads), at most once a second, until `stop`.
pub(crate) async fn records(
    cluster: ClusterName,
    local: Arc<dyn MemberLink>,
    managed: bool,
    seal: SealKey,
    outbox: Arc<Outbox>,
    stop: CancellationToken,
) {
    let selector = if managed {
        MANAGED_SELECTOR
    } else {
        FOREIGN_SELECTOR
    };
    let mut events = local.release_records(selector);
    let mut followed = Followed::default();
    let mut dirty = false;
    let mut written = BTreeSet::new();
    let mut tick = tokio::time::interval(COALESCE);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => {
                let Some(event) = event else { return };
                dirty |= followed.take(event);
            }
            _ = tick.tick(), if dirty => {
                dirty = false;
                let sealed = |r: &ObjectMeta| {
                    let (Some(namespace), Some(labels)) = (&r.namespace, &r.labels) else {
                        return false;
                    };
                    seal.verifies(&cluster, namespace, labels)
                };
                outbox.put_records(&cluster, managed, followed.held.values().cloned(), sealed, &mut written);
            }
        }
    }
}

/// The release records one watch follows, by namespace and name, cut to what the hub reads.
#[derive(Default)]
struct Followed {
    /// What the watch holds now.
    held: BTreeMap<(String, String), ObjectMeta>,
    /// A listing under way, which replaces `held` once done.
    listing: Option<BTreeMap<(String, String), ObjectMeta>>,
}

impl Followed {
    /// Takes one event of the watch in: true when what is held changed, so it is reported.
    fn take(&mut self, event: Result<watcher::Event<Record>, watcher::Error>) -> bool {
        let id = |m: &ObjectMeta| {
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            )
        };
        let strip = crate::member::pull::pieces::slim;
        match event {
            Ok(watcher::Event::Init) => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Ok(watcher::Event::InitApply(r)) => {
                let m = strip(r.metadata);
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(id(&m), m);
                false
            }
            Ok(watcher::Event::InitDone) => {
                self.held = self.listing.take().unwrap_or_default();
                true
            }
            Ok(watcher::Event::Apply(r)) => {
                let m = strip(r.metadata);
                self.held.insert(id(&m), m);
                true
            }
            Ok(watcher::Event::Delete(r)) => {
                self.held.remove(&id(&r.metadata));
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "the release records watch broke; it lists again");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(namespace: &str, name: &str) -> Record {
        let mut r = Record::default();
        r.metadata.namespace = Some(namespace.into());
        r.metadata.name = Some(name.into());
        r.metadata.uid = Some("uid".into());
        r
    }

    fn held(followed: &Followed) -> Vec<(String, String)> {
        followed.held.keys().cloned().collect()
    }

    fn ids(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect()
    }

    #[test]
    fn a_listing_replaces_what_is_held_only_once_done() {
        let mut followed = Followed::default();
        assert!(followed.take(Ok(watcher::Event::Apply(record("team-a", "old")))));
        assert!(!followed.take(Ok(watcher::Event::Init)));
        assert!(!followed.take(Ok(watcher::Event::InitApply(record("team-a", "web")))));
        assert_eq!(
            held(&followed),
            ids(&[("team-a", "old")]),
            "until the list is done"
        );
        assert!(followed.take(Ok(watcher::Event::InitDone)));
        assert_eq!(held(&followed), ids(&[("team-a", "web")]));
    }

    #[test]
    fn changes_are_held_cut_to_what_the_hub_reads_and_a_broken_watch_changes_nothing() {
        let mut followed = Followed::default();
        assert!(followed.take(Ok(watcher::Event::Apply(record("team-a", "web")))));
        assert!(followed.take(Ok(watcher::Event::Apply(record("team-b", "db")))));
        assert_eq!(followed.held[&("team-a".into(), "web".into())].uid, None);
        assert!(!followed.take(Err(watcher::Error::NoResourceVersion)));
        assert!(followed.take(Ok(watcher::Event::Delete(record("team-a", "web")))));
        assert_eq!(held(&followed), ids(&[("team-b", "db")]));
    }

    #[test]
    fn the_hubs_list_ticks_grown_only_for_new_namespaces_and_changed_for_any_change() {
        let wanted = Wanted::new();
        let (grown, changed) = (wanted.grown.subscribe(), wanted.changed.subscribe());
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        wanted.set(set(&["team-a", "team-b"]));
        assert_eq!((*grown.borrow(), *changed.borrow()), (1, 1));
        wanted.set(set(&["team-a", "team-b"]));
        assert_eq!(
            (*grown.borrow(), *changed.borrow()),
            (1, 1),
            "the same list"
        );
        wanted.set(set(&["team-a"]));
        assert_eq!((*grown.borrow(), *changed.borrow()), (1, 2), "shrunk");
        wanted.set(set(&["team-c"]));
        assert_eq!((*grown.borrow(), *changed.borrow()), (2, 3));
        assert_eq!(*wanted.namespaces.read().unwrap(), set(&["team-c"]));
    }
}
