//! Git values files in the chart catalog: what each file read as when last loaded, looked up by the planner; which Controllers read it, woken when a push changes it.

use std::collections::{BTreeMap, BTreeSet};

use dashmap::DashMap;
use futures::StreamExt as _;

use crate::{
    api::crd::RefKind,
    charts::cache::git::files::FileGroup,
    plan::{GitFileLookup, GitFileSource, OwnerId},
    policy::access::{Credentials, Trust},
};

use super::{ChartCatalog, RESOLVE_CONCURRENCY};

/// The Git values files known to the catalog.
#[derive(Default)]
pub(crate) struct GitValues {
    /// What each file read as when last loaded.
    files: DashMap<GitFileSource, GitFileLookup>,
    /// Who read each file in its last plan.
    readers: DashMap<GitFileSource, BTreeSet<OwnerId>>,
}

/// The files of one repository at one ref, fetched with the same credentials under the same
/// rules: what one request to the fetcher reads.
type GroupKey = (String, RefKind, u64, Credentials, Trust);

fn group_of(source: &GitFileSource) -> GroupKey {
    (
        source.url.clone(),
        source.reference.clone(),
        source.interval_secs,
        source.credentials.clone(),
        source.trust.clone(),
    )
}

impl ChartCatalog {
    /// What is known of a Git values file, for the planner.
    pub(crate) fn git_file(&self, source: &GitFileSource) -> GitFileLookup {
        self.git_values.files.get(source).map_or_else(
            || GitFileLookup::Unreadable("not read yet".into()),
            |f| f.clone(),
        )
    }

    /// Notes that `owner`'s last plan read `sources` (and no others), and loads those never
    /// loaded. Returns whether it loaded any: the plan is then made again with them.
    pub(crate) async fn load_git_files(
        &self,
        owner: &OwnerId,
        sources: &BTreeSet<GitFileSource>,
    ) -> bool {
        let values = &self.git_values;
        values.readers.retain(|source, owners| {
            if !sources.contains(source) {
                owners.remove(owner);
            }
            !owners.is_empty()
        });
        for source in sources {
            values
                .readers
                .entry(source.clone())
                .or_default()
                .insert(owner.clone());
        }
        let pending: BTreeSet<GitFileSource> = sources
            .iter()
            .filter(|s| !values.files.contains_key(*s))
            .cloned()
            .collect();
        if pending.is_empty() {
            return false;
        }
        self.load(&pending).await;
        true
    }

    /// Loads every file a plan read again (the cache asks the fetcher only of refs whose
    /// interval has passed), forgets those no plan reads any more; returns the Controllers
    /// reading a file whose content or commit changed.
    pub(crate) async fn refresh_git_files(&self) -> BTreeSet<OwnerId> {
        let values = &self.git_values;
        values
            .files
            .retain(|source, _| values.readers.contains_key(source));
        let known: BTreeSet<GitFileSource> =
            values.readers.iter().map(|r| r.key().clone()).collect();
        let changed = self.load(&known).await;
        changed
            .iter()
            .filter_map(|s| values.readers.get(s).map(|o| o.clone()))
            .flatten()
            .collect()
    }

    /// Loads `sources`, one fetcher request per repository and ref; returns those whose lookup
    /// changed.
    async fn load(&self, sources: &BTreeSet<GitFileSource>) -> BTreeSet<GitFileSource> {
        let mut groups: BTreeMap<GroupKey, Vec<GitFileSource>> = BTreeMap::new();
        for source in sources {
            groups
                .entry(group_of(source))
                .or_default()
                .push(source.clone());
        }
        let answers: Vec<(Vec<GitFileSource>, super::GitFiles)> = futures::stream::iter(groups)
            .map(|(key, members)| async move {
                let (url, reference, interval_secs, credentials, trust) = &key;
                let group = FileGroup {
                    url,
                    reference,
                    interval_secs: *interval_secs,
                    credentials,
                    trust,
                    paths: members.iter().map(|s| s.path.clone()).collect(),
                };
                let answer = self.resolver.git_files(&group).await;
                (members, answer)
            })
            .buffer_unordered(RESOLVE_CONCURRENCY)
            .collect()
            .await;
        let mut changed = BTreeSet::new();
        for (members, answer) in answers {
            for source in &members {
                let lookup = match &answer {
                    Err(why) => GitFileLookup::Unreadable(why.clone()),
                    Ok((commit, files)) => match files.get(&source.path).cloned().flatten() {
                        Some(content) => GitFileLookup::Found {
                            commit: commit.clone(),
                            content,
                        },
                        None => GitFileLookup::Missing {
                            commit: commit.clone(),
                        },
                    },
                };
                let old = self.git_values.files.insert(source.clone(), lookup.clone());
                if old.as_ref() != Some(&lookup) {
                    if let Some(old) = old
                        && matches!(lookup, GitFileLookup::Unreadable(_))
                        && !matches!(old, GitFileLookup::Unreadable(_))
                    {
                        // Keep what was read while the source fails; say why once.
                        tracing::warn!(file = %source, "cannot read a Git values file again; keeping what was read before");
                        self.git_values.files.insert(source.clone(), old);
                        continue;
                    }
                    changed.insert(source.clone());
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests;
