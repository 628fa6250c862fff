//! Which namespaces a pull member's agent watches (pure): one watch call per shard of the hub's Controllers, each written by the replica leading that shard, and the agent watching the union of the calls of the newest shard count.
//!
//! With one replica (one shard) there is one call, `watch`. With `--shards K`, shard *s*'s call is
//! `watch-<s>-of-<K>` and names the namespaces of that shard's Controllers only, so no replica
//! writes over another's. When the shard count changes, the calls of the old count stay until
//! their member goes; the agent goes by the count of the newest call and leaves the others out.

use std::collections::{BTreeMap, BTreeSet};

/// The name of shard `shard`'s watch call when the hub's Controllers are in `shards` shards.
pub fn watch_name(shard: u32, shards: u32) -> String {
    if shards <= 1 {
        "watch".to_owned()
    } else {
        format!("watch-{shard}-of-{shards}")
    }
}

/// True for the name of a watch call of any shard count.
pub(crate) fn is_watch_name(name: &str) -> bool {
    name == "watch"
        || name.strip_prefix("watch-").is_some_and(|rest| {
            rest.split_once("-of-").is_some_and(|(s, k)| {
                s.parse::<u32>().is_ok() && k.parse::<u32>().is_ok_and(|k| k > 1)
            })
        })
}

/// One watch call as the agent took it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// The shard count of the replica that wrote it.
    pub shards: u32,
    /// When it was written, in milliseconds since the epoch, by the writer's clock.
    pub at_millis: u64,
    /// The namespaces it names.
    pub namespaces: BTreeSet<String>,
}

/// The watch calls of one member, by object name.
#[derive(Debug, Default)]
pub struct WatchCalls {
    calls: BTreeMap<String, Watched>,
}

impl WatchCalls {
    /// Takes the call named `name` in, replacing the one of that name.
    pub fn take(&mut self, name: &str, call: Watched) {
        self.calls.insert(name.to_owned(), call);
    }

    /// Forgets the call named `name` (deleted on the hub).
    pub fn remove(&mut self, name: &str) {
        self.calls.remove(name);
    }

    /// The namespaces to watch: the union of the calls of the shard count of the newest call.
    pub fn wanted(&self) -> BTreeSet<String> {
        let Some(newest) = self
            .calls
            .iter()
            .max_by_key(|(name, c)| (c.at_millis, c.shards, *name))
            .map(|(_, c)| c.shards)
        else {
            return BTreeSet::new();
        };
        self.calls
            .values()
            .filter(|c| c.shards == newest)
            .flat_map(|c| c.namespaces.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(shards: u32, at_millis: u64, namespaces: &[&str]) -> Watched {
        Watched {
            shards,
            at_millis,
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn set(namespaces: &[&str]) -> BTreeSet<String> {
        namespaces.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_shard_has_the_one_call_it_always_had() {
        assert_eq!(watch_name(0, 1), "watch");
        assert_eq!(watch_name(0, 0), "watch");
        assert_eq!(watch_name(2, 4), "watch-2-of-4");
        for name in ["watch", "watch-0-of-2", "watch-3-of-4"] {
            assert!(is_watch_name(name), "{name}");
        }
        for name in [
            "watchful",
            "watch-0-of-1",
            "watch-x-of-2",
            "work-abc",
            "watch-1",
        ] {
            assert!(!is_watch_name(name), "{name}");
        }
    }

    #[test]
    fn the_calls_of_every_shard_are_watched_together_and_one_replaces_only_itself() {
        let mut calls = WatchCalls::default();
        calls.take("watch-0-of-2", call(2, 10, &["a", "b"]));
        calls.take("watch-1-of-2", call(2, 11, &["c"]));
        assert_eq!(calls.wanted(), set(&["a", "b", "c"]));
        // Shard 0 narrows: shard 1's namespace stays.
        calls.take("watch-0-of-2", call(2, 12, &["a"]));
        assert_eq!(calls.wanted(), set(&["a", "c"]));
        calls.take("watch-1-of-2", call(2, 13, &[]));
        assert_eq!(calls.wanted(), set(&["a"]));
        calls.remove("watch-0-of-2");
        assert_eq!(calls.wanted(), set(&[]));
    }

    #[test]
    fn a_new_shard_count_leaves_the_old_counts_calls_out() {
        let mut calls = WatchCalls::default();
        calls.take("watch", call(1, 10, &["a", "b", "c"]));
        calls.take("watch-0-of-2", call(2, 20, &["a"]));
        assert_eq!(calls.wanted(), set(&["a"]), "the newest count goes");
        calls.take("watch-1-of-2", call(2, 21, &["b", "c"]));
        assert_eq!(calls.wanted(), set(&["a", "b", "c"]));
        // Back to one replica: its call is the newest, the two shards' calls are left out.
        calls.take("watch", call(1, 30, &["b"]));
        assert_eq!(calls.wanted(), set(&["b"]));
    }

    #[test]
    fn nothing_is_watched_before_any_call() {
        assert!(WatchCalls::default().wanted().is_empty());
    }
}
