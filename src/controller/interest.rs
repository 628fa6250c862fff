//! Which resources ask for each release key, so news about a release wakes every one of them.

use std::collections::HashSet;

use dashmap::DashMap;
use kube::runtime::reflector::ObjectRef;

use crate::{api::crd::TenancyController, api::key::ReleaseKey};

/// Which resources ask for each release key, so news about a release wakes all of them.
#[derive(Default)]
pub(crate) struct Interest {
    by_key: DashMap<ReleaseKey, HashSet<ObjectRef<TenancyController>>>,
    by_owner: DashMap<ObjectRef<TenancyController>, Vec<ReleaseKey>>,
}

impl Interest {
    /// Records the keys one resource asks for, replacing what it asked for before.
    pub(crate) fn set(
        &self,
        owner: &ObjectRef<TenancyController>,
        keys: impl Iterator<Item = ReleaseKey>,
    ) {
        let keys: Vec<ReleaseKey> = keys.collect();
        if let Some((_, old)) = self.by_owner.remove(owner) {
            for key in old {
                if let Some(mut set) = self.by_key.get_mut(&key) {
                    set.remove(owner);
                }
                self.by_key.remove_if(&key, |_, set| set.is_empty());
            }
        }
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(owner.clone());
        }
        self.by_owner.insert(owner.clone(), keys);
    }

    /// The resources asking for a key.
    pub(crate) fn of(&self, key: &ReleaseKey) -> Vec<ObjectRef<TenancyController>> {
        self.by_key
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}
