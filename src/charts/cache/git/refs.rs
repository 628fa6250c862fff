//! Resolving a Git chart's ref to a commit through the fetcher, at most once per interval, and for a semver range only among the tags the policies allow (checked again on the answer).

use std::path::Path;

use tokio::time::Instant;

use crate::{
    api::crd::RefKind,
    charts::cache::ChartCache,
    policy::access::{Credentials, Trust},
};

use super::{
    FETCHER, GitChart, TIMEOUT_SECS, ask, failed,
    protocol::{Access, Found, Request},
};

impl ChartCache {
    /// The commit `chart`'s ref names: the last resolution while younger than its interval,
    /// else the fetcher's `resolve`; a semver range among the tags of `trust` only.
    pub(super) async fn resolve_ref(
        &self,
        fetcher: &Path,
        chart: &GitChart<'_>,
        url: &str,
        access: &Access,
        (credentials, trust): (&Credentials, &Trust),
        secrets: &[&str],
    ) -> std::result::Result<Found, String> {
        let tags = trust.tags.clone();
        let key = (
            url.to_owned(),
            chart.reference.clone(),
            credentials.clone(),
            tags,
        );
        if let Some(known) = self.git.refs.get(&key)
            && known.0.elapsed() < chart.interval
        {
            return Ok(known.1.clone());
        }
        let tags = trust.tags.as_deref();
        if let (RefKind::Semver(range), Some([])) = (chart.reference, tags) {
            return Err(format!(
                "semver {range} may pick no tag: no Git entry of the policies holding this repository and path lists tags; a platform admin lists the tag patterns it may pick (v1.*, *)"
            ));
        }
        let request = Request::resolve(url, chart.reference, tags, access, TIMEOUT_SECS);
        let found = failed(url, ask(fetcher, &request, secrets).await?)?;
        if let (RefKind::Semver(range), Some(patterns)) = (chart.reference, tags) {
            let tag = found
                .reference
                .strip_prefix("refs/tags/")
                .unwrap_or(&found.reference);
            if !patterns
                .iter()
                .any(|p| crate::policy::git::pattern_allows(p, tag))
            {
                return Err(format!(
                    "the fetcher resolved semver {range} to {}, which no tag pattern allowed ({}) matches: update {FETCHER}",
                    found.reference,
                    patterns.join(", ")
                ));
            }
        }
        if let RefKind::Commit(asked) = chart.reference
            && !found.commit.eq_ignore_ascii_case(asked)
        {
            return Err(format!(
                "the fetcher resolved commit {asked} to another commit, {}",
                found.commit
            ));
        }
        self.git.refs.insert(key, (Instant::now(), found.clone()));
        Ok(found)
    }
}
