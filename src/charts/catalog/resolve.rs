//! How the catalog resolves remote charts and checks their signatures: the `Resolve` trait and its implementation by the chart cache.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::{
    charts::cache::{
        ChartCache, Resolved,
        git::{
            GitChart,
            files::{FileContent, FileGroup},
        },
    },
    charts::catalog::key::{Remote, RemoteKey},
    plan::Verified,
    policy::source::SourceUrl,
};

/// What the signature rules found of a resolved chart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Every rule passed.
    Verified(Verified),
    /// A rule refused it: which, and why.
    Refused(String),
}

/// Resolves remote charts and checks their signatures: the chart cache and the verifier in the
/// operator, a script in tests.
pub(crate) trait Resolve: Send + Sync {
    /// Resolves `key`, every fetch staying under `scope`; a repository index fetched at or
    /// after `since` is used again (None: any fetched one).
    fn resolve<'a>(
        &'a self,
        key: &'a RemoteKey,
        scope: &'a SourceUrl,
        since: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>>;

    /// Checks what `key` resolved to against its signature rules (`key.trust`, not empty); an
    /// error when no verdict could be reached.
    fn verify<'a>(
        &'a self,
        key: &'a RemoteKey,
        scope: &'a SourceUrl,
        resolved: &'a Resolved,
    ) -> BoxFuture<'a, Result<Checked, String>> {
        let _ = (key, scope, resolved);
        Box::pin(async {
            Err("this process checks no chart signatures; run the operator with the verifier (--verifier)".to_owned())
        })
    }

    /// Forgets what no resolution used since `before`.
    fn forget(&self, _before: Instant) {}

    /// Makes the Git sources of these repositories (names in normal form) due at once;
    /// returns how many were known.
    fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        let _ = repositories;
        0
    }

    /// The commit a Git ref names now and the values files asked of it at that commit.
    fn git_files<'a>(&'a self, group: &'a FileGroup<'a>) -> BoxFuture<'a, GitFiles> {
        let _ = group;
        Box::pin(async { Err("this process reads no Git values files".to_owned()) })
    }
}

/// What [`Resolve::git_files`] answers.
pub(crate) type GitFiles = Result<(String, BTreeMap<String, FileContent>), String>;

impl Resolve for Arc<ChartCache> {
    fn resolve<'a>(
        &'a self,
        key: &'a RemoteKey,
        scope: &'a SourceUrl,
        since: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        Box::pin(async move {
            let (constraint, credentials) = (key.constraint.as_deref(), &key.credentials);
            match &key.remote {
                Remote::Repository { url, chart } => {
                    self.repository(url, chart, constraint, scope, credentials, since)
                        .await
                }
                Remote::Oci(reference) => self.oci(reference, constraint, credentials).await,
                Remote::Git {
                    url,
                    path,
                    reference,
                    chart,
                    interval_secs,
                    tenant,
                } => {
                    let chart = GitChart {
                        url,
                        path,
                        reference,
                        chart,
                        tenant,
                        interval: Duration::from_secs(*interval_secs),
                    };
                    self.git(&chart, credentials, &key.trust).await
                }
            }
            .map_err(|e| e.to_string())
        })
    }

    fn forget(&self, before: Instant) {
        self.forget_indexes(before);
    }

    fn git_files<'a>(&'a self, group: &'a FileGroup<'a>) -> BoxFuture<'a, GitFiles> {
        Box::pin(async move {
            ChartCache::git_files(self, group)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        self.git.make_due(repositories)
    }
}
