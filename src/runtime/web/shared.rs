//! Fleet pages built once per access group: viewers whose reviewed access is the same (the same set of hub namespaces, or everywhere), asking for the same filters, share one build of the matrix per model fingerprint, and at most one build per [`COALESCE`] while the model keeps changing.
//!
//! At 1,000 clusters the matrix is some 260 KB of HTML; without sharing, every open live stream
//! built it again on every change, and with 1,000 members reporting the model changes many times
//! a second, so the view's cost grew with viewers × changes. A build is keyed by the viewer's
//! [`Access`] as the hub reviewed it for this request and the filters: a viewer is only ever
//! given a page built for an access equal to its own, and what it may see is reviewed for every
//! request as before (through the reviewer's cache). A build is given out while the fingerprint
//! it was built at holds, for at most [`FRESH`] (so a change the fingerprint misses is still
//! shown, as the streams' recheck did), and, whatever the fingerprint, for [`COALESCE`] after it
//! was built; the fingerprint it was built at goes with it, so a stream given an older build
//! builds again on its next tick: a change reaches an open page within two ticks. At most
//! [`HELD`] builds are kept. Hand-written: one small map of single-flight cells (tokio's
//! `OnceCell`), no cache crate needed.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::OnceCell, time::Instant};

use crate::runtime::{
    auth::Access,
    web::{html::Page, view::Filters},
};

/// How long a shared build is given out: the streams' recheck, `live::RECHECK`.
pub(crate) const FRESH: Duration = super::live::RECHECK;
/// How long a build is given out to its access group whatever the fingerprint: shorter than a
/// stream's tick (`live::TICK`), so a stream's next tick gets a build made after the change.
pub(crate) const COALESCE: Duration = Duration::from_millis(250);
/// Builds held at once (access groups × filters) before the oldest go.
pub(crate) const HELD: usize = 256;

/// A fleet page as built for one access group: the page and its filter form.
pub(crate) struct SharedPage {
    /// The matrix.
    pub(crate) page: Arc<Page>,
    /// The filter form above it.
    pub(crate) filters: String,
}

/// Whose build: an access group and its filters.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    access: Access,
    filters: Filters,
}

/// One build: when it was asked for first, at which fingerprint, and the page once built.
struct Entry {
    at: Instant,
    fingerprint: u64,
    cell: Arc<OnceCell<Arc<SharedPage>>>,
}

impl Entry {
    /// Whether it may be given to a viewer of its group asking at `fingerprint`.
    fn serves(&self, fingerprint: u64) -> bool {
        let age = self.at.elapsed();
        age < COALESCE || (self.fingerprint == fingerprint && age < FRESH)
    }
}

/// The shared builds of the fleet page.
#[derive(Default)]
pub(crate) struct SharedPages {
    entries: Mutex<HashMap<Key, Entry>>,
    #[cfg(test)]
    builds: std::sync::atomic::AtomicUsize,
}

impl SharedPages {
    /// The fleet page for viewers of `access` with `filters` at `fingerprint`, and the
    /// fingerprint it was built at: built by `build` once for all of them (one build at a time per
    /// group; the others wait for it), or the build another viewer of the same access made, while
    /// it serves (see the module).
    pub(crate) async fn get_or_build(
        &self,
        access: &Access,
        filters: &Filters,
        fingerprint: u64,
        build: impl FnOnce() -> SharedPage,
    ) -> (Arc<SharedPage>, u64) {
        let key = Key {
            access: access.clone(),
            filters: filters.clone(),
        };
        let (cell, built_at) = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            entries.retain(|_, e| e.at.elapsed() < FRESH);
            if !entries.contains_key(&key)
                && entries.len() >= HELD
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.at)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
            let entry = entries.entry(key).or_insert_with(|| Entry {
                at: Instant::now(),
                fingerprint,
                cell: Arc::default(),
            });
            if !entry.serves(fingerprint) {
                *entry = Entry {
                    at: Instant::now(),
                    fingerprint,
                    cell: Arc::default(),
                };
            }
            (entry.cell.clone(), entry.fingerprint)
        };
        let page = cell
            .get_or_init(|| async {
                #[cfg(test)]
                self.builds
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Arc::new(build())
            })
            .await
            .clone();
        (page, built_at)
    }

    /// Builds made so far.
    #[cfg(test)]
    pub(crate) fn builds(&self) -> usize {
        self.builds.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn page(text: &str) -> SharedPage {
        let mut page = Page::new("Fleet");
        page.fixed(text.to_owned());
        SharedPage {
            page: Arc::new(page),
            filters: String::new(),
        }
    }

    fn namespaces(names: &[&str]) -> Access {
        Access::Namespaces(names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>())
    }

    #[tokio::test(start_paused = true)]
    async fn viewers_of_the_same_access_share_one_build_per_fingerprint() {
        let shared = SharedPages::default();
        let (a, filters) = (namespaces(&["team-a"]), Filters::default());
        for _ in 0..5 {
            let (got, at) = shared.get_or_build(&a, &filters, 1, || page("a")).await;
            assert_eq!((got.page.main().as_str(), at), ("a", 1));
            tokio::time::advance(COALESCE).await;
        }
        assert_eq!(shared.builds(), 1, "one build while the fingerprint holds");
        let (got, at) = shared.get_or_build(&a, &filters, 2, || page("a2")).await;
        assert_eq!(
            (got.page.main().as_str(), at),
            ("a2", 2),
            "a new fingerprint is built again"
        );
        assert_eq!(shared.builds(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_model_keeps_changing_a_group_gets_one_build_per_coalesce() {
        let shared = SharedPages::default();
        let (a, filters) = (namespaces(&["team-a"]), Filters::default());
        shared.get_or_build(&a, &filters, 1, || page("one")).await;
        tokio::time::advance(COALESCE - Duration::from_millis(1)).await;
        let (got, at) = shared.get_or_build(&a, &filters, 2, || page("two")).await;
        assert_eq!(
            (got.page.main().as_str(), at),
            ("one", 1),
            "told the fingerprint it was built at"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        let (got, at) = shared.get_or_build(&a, &filters, 3, || page("three")).await;
        assert_eq!((got.page.main().as_str(), at), ("three", 3));
        assert!(
            COALESCE < super::super::live::TICK,
            "a stream's next tick builds after a change"
        );
    }

    #[tokio::test]
    async fn a_viewer_is_never_given_a_page_built_for_another_access() {
        let shared = SharedPages::default();
        let filters = Filters::default();
        let groups = [
            (namespaces(&["team-a", "team-b"]), "a+b"),
            (namespaces(&["team-a"]), "a"),
            (namespaces(&["team-b"]), "b"),
            (namespaces(&[]), "none"),
            (Access::Everywhere, "everywhere"),
        ];
        for (access, text) in &groups {
            shared
                .get_or_build(access, &filters, 7, || page(text))
                .await;
        }
        // Asked again, in another order, each gets its own: never another group's build.
        for (access, text) in groups.iter().rev() {
            let (got, _) = shared
                .get_or_build(access, &filters, 7, || panic!("built again for {text}"))
                .await;
            assert_eq!(got.page.main(), *text);
        }
        assert_eq!(shared.builds(), groups.len());
    }

    #[tokio::test]
    async fn different_filters_are_built_apart() {
        let shared = SharedPages::default();
        let a = namespaces(&["team-a"]);
        let failed = Filters {
            state: "failed".into(),
            ..Filters::default()
        };
        shared
            .get_or_build(&a, &Filters::default(), 1, || page("all"))
            .await;
        let (got, _) = shared.get_or_build(&a, &failed, 1, || page("failed")).await;
        assert_eq!(got.page.main(), "failed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_build_is_given_out_no_longer_than_it_is_fresh() {
        let shared = SharedPages::default();
        let (a, filters) = (namespaces(&["team-a"]), Filters::default());
        shared.get_or_build(&a, &filters, 1, || page("old")).await;
        tokio::time::advance(FRESH - Duration::from_millis(1)).await;
        let (got, _) = shared.get_or_build(&a, &filters, 1, || page("new")).await;
        assert_eq!(got.page.main(), "old");
        tokio::time::advance(Duration::from_millis(1)).await;
        let (got, _) = shared.get_or_build(&a, &filters, 1, || page("new")).await;
        assert_eq!(got.page.main(), "new", "past FRESH it is built again");
    }

    #[tokio::test]
    async fn concurrent_viewers_wait_for_one_build() {
        let shared = Arc::new(SharedPages::default());
        let a = namespaces(&["team-a"]);
        let asks = (0..16).map(|_| {
            let (shared, a) = (shared.clone(), a.clone());
            tokio::spawn(async move {
                shared
                    .get_or_build(&a, &Filters::default(), 3, || page("a"))
                    .await
                    .0
                    .page
                    .main()
            })
        });
        for asked in futures::future::join_all(asks).await {
            assert_eq!(asked.unwrap(), "a");
        }
        assert_eq!(shared.builds(), 1);
    }

    #[tokio::test]
    async fn the_builds_held_are_bounded() {
        let shared = SharedPages::default();
        for i in 0..HELD + 10 {
            let access = namespaces(&[&format!("team-{i}")]);
            shared
                .get_or_build(&access, &Filters::default(), 1, || page("x"))
                .await;
        }
        let held = shared.entries.lock().unwrap().len();
        assert!(held <= HELD, "{held} builds held");
    }
}
