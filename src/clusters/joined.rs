//! Joined members: the hub's `MemberCluster` objects followed into the registry, so Controllers plan for pull members by name and by label as for the registration file's.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{WatchStreamExt, reflector, watcher},
};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{crd::HUB_CLUSTER, key::ClusterName, member_cluster::MemberCluster},
    clusters::registry::{Joined, JoinedEntry, JoinedMembers, SharedRegistry},
};

/// What one look at the `MemberCluster` objects changed in the registry.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// Members newly joined.
    pub(crate) added: BTreeSet<ClusterName>,
    /// Members whose `MemberCluster` is gone or being deleted.
    pub(crate) removed: BTreeSet<ClusterName>,
    /// Members whose labels or variables changed.
    pub(crate) changed: BTreeSet<ClusterName>,
}

impl Change {
    /// True when nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The registration of each `MemberCluster` that joins: every one not being deleted whose name is
/// a cluster name other than the hub's (the CRD's rules refuse the others already).
pub(crate) fn entries<'a>(
    objects: impl IntoIterator<Item = &'a MemberCluster>,
) -> BTreeMap<ClusterName, JoinedEntry> {
    objects
        .into_iter()
        .filter(|mc| mc.metadata.deletion_timestamp.is_none())
        .filter_map(|mc| {
            let name: ClusterName = mc.name_any().parse().ok()?;
            (name.as_str() != HUB_CLUSTER).then(|| {
                let entry = JoinedEntry {
                    name: name.clone(),
                    labels: mc.spec.labels.clone(),
                    variables: mc.spec.variables.clone(),
                };
                (name, entry)
            })
        })
        .collect()
}

/// The joined members `fresh` describes, keeping the very members of `current` that are
/// unchanged, and what differs from `current`.
pub(crate) fn merge(
    current: &JoinedMembers,
    fresh: BTreeMap<ClusterName, JoinedEntry>,
) -> (JoinedMembers, Change) {
    let mut change = Change {
        removed: current
            .keys()
            .filter(|name| !fresh.contains_key(*name))
            .cloned()
            .collect(),
        ..Change::default()
    };
    let merged = fresh
        .into_iter()
        .map(|(name, entry)| {
            let member = match current.get(&name) {
                Some(kept) if kept.entry == entry => kept.clone(),
                Some(_) => {
                    change.changed.insert(name.clone());
                    Arc::new(Joined { entry })
                }
                None => {
                    change.added.insert(name.clone());
                    Arc::new(Joined { entry })
                }
            };
            (name, member)
        })
        .collect();
    (merged, change)
}

/// The `MemberCluster` objects of the hub as joined members, read once (so the first plans know
/// them); none, with a warning, when the hub has no such resource or does not answer.
pub(crate) async fn list(hub: &Client) -> JoinedMembers {
    let api: Api<MemberCluster> = Api::all(hub.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => merge(&JoinedMembers::new(), entries(&list.items)).0,
        Err(error) => {
            tracing::warn!(%error, "cannot list MemberClusters on the hub (is their CRD installed? `tenancy-hub crd | kubectl apply --server-side -f -`); no pull member is known until they can be listed");
            JoinedMembers::new()
        }
    }
}

/// Follows the hub's `MemberCluster` objects until `stop`: each change of the set, or of a
/// member's labels or variables, swaps the registry's joined members (the file's members stay as
/// they are) and is told to `changed`.
pub(crate) async fn follow(
    hub: Client,
    registry: SharedRegistry,
    changed: impl Fn(&Change) + Send,
    stop: CancellationToken,
) {
    let api: Api<MemberCluster> = Api::all(hub);
    let (store, writer) = reflector::store();
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
    );
    let mut failing = false;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = stop.cancelled() => return,
        };
        match event {
            None => return,
            Some(Ok(
                watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
            )) => {
                failing = false;
                let fresh = entries(store.state().iter().map(|mc| mc.as_ref()));
                let mut change = Change::default();
                registry.rcu(|current| {
                    let (joined, diff) = merge(current.joined_members(), fresh.clone());
                    change = diff;
                    (**current).clone().with_joined(joined)
                });
                if !change.is_empty() {
                    tracing::info!(added = ?change.added, removed = ?change.removed, changed = ?change.changed, "joined members changed");
                    changed(&change);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(error)) if !failing => {
                failing = true;
                tracing::warn!(%error, "watching MemberClusters failed; retrying with backoff (the joined members stay as they were)");
            }
            Some(Err(error)) => tracing::debug!(%error, "watching MemberClusters still fails"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::member_cluster::MemberClusterSpec;

    fn member(name: &str, region: &str) -> MemberCluster {
        MemberCluster::new(
            name,
            MemberClusterSpec {
                labels: BTreeMap::from([("region".to_owned(), region.to_owned())]),
                variables: BTreeMap::new(),
            },
        )
    }

    fn names(set: &BTreeSet<ClusterName>) -> Vec<&str> {
        set.iter().map(ClusterName::as_str).collect()
    }

    #[test]
    fn member_clusters_being_deleted_or_misnamed_do_not_join() {
        let mut leaving = member("edge-2", "west");
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let objects = [
            member("edge-1", "east"),
            leaving,
            member("hub", "east"),
            member("Not_A_Label", "east"),
        ];
        let joined = entries(&objects);
        assert_eq!(
            joined.keys().map(ClusterName::as_str).collect::<Vec<_>>(),
            ["edge-1"]
        );
        assert_eq!(joined[&"edge-1".parse().unwrap()].labels["region"], "east");
    }

    #[test]
    fn a_merge_tells_added_removed_and_relabelled_members_and_keeps_the_others() {
        let (first, change) = merge(
            &JoinedMembers::new(),
            entries(&[member("edge-1", "east"), member("edge-2", "east")]),
        );
        assert_eq!(names(&change.added), ["edge-1", "edge-2"]);
        let (second, change) = merge(
            &first,
            entries(&[
                member("edge-1", "east"),
                member("edge-2", "west"),
                member("edge-3", "east"),
            ]),
        );
        assert_eq!(names(&change.added), ["edge-3"]);
        assert_eq!(names(&change.changed), ["edge-2"]);
        assert!(change.removed.is_empty());
        let edge1: ClusterName = "edge-1".parse().unwrap();
        assert!(
            Arc::ptr_eq(&first[&edge1], &second[&edge1]),
            "unchanged: the same member"
        );
        let (third, change) = merge(&second, entries(&[member("edge-1", "east")]));
        assert_eq!(names(&change.removed), ["edge-2", "edge-3"]);
        assert_eq!(third.len(), 1);
        let (_, change) = merge(&third, entries(&[member("edge-1", "east")]));
        assert!(change.is_empty());
    }
}
