//! Helm repository charts in the cache: the index fetched once per interval, the newest version matching a constraint, its archive fetched under the source's scope and verified by sha256.

use std::{
    io::Write as _,
    sync::{Arc, PoisonError},
};

use reqwest::Url;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::{
    charts::{
        cache::{ARCHIVE_LIMIT, ChartCache, Error, MAX_VERSION, PARTIAL, Resolved, Result, hex},
        constraint,
        fetch::{self, Access},
        index::*,
    },
    plan::ChartSource,
    policy::access::Credentials,
    policy::source::{Refused, SourceUrl, redact},
};

impl ChartCache {
    /// Resolves a repository chart, every fetch staying under `scope`: the repository's index
    /// (fetched again only when it was fetched before `since`; None: any fetched index will do),
    /// the newest version matching `constraint`, and its archive fetched into the cache unless
    /// there already. An archive whose digest differs from the index's, that lies outside the
    /// scope or that cannot be fetched fails the resolution: helm never fetches a repository
    /// chart itself.
    pub(crate) async fn repository(
        &self,
        url: &str,
        chart: &str,
        constraint: Option<&str>,
        scope: &SourceUrl,
        credentials: &Credentials,
        since: Option<Instant>,
    ) -> Result<Resolved> {
        let material = self.material(credentials, false).await?;
        let access = self.access(credentials, material.as_ref(), scope);
        self.resolve_repository(url, chart, constraint, scope, access.as_ref(), since)
            .await
            .map_err(|e| self.hinted(e, credentials))
    }

    async fn resolve_repository(
        &self,
        url: &str,
        chart: &str,
        constraint: Option<&str>,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
        since: Option<Instant>,
    ) -> Result<Resolved> {
        let repository = SourceUrl::parse(url)
            .and_then(|r| match r.scheme() {
                "http" | "https" => Ok(r),
                other => Err(Refused::Scheme(other.to_owned())),
            })
            .map_err(|reason| Error::Source {
                url: redact(url),
                reason,
            })?;
        if !scope.holds(&repository) {
            return Err(Error::Outside {
                url: repository.to_string(),
                scope: scope.clone(),
            });
        }
        let index = self.index(&repository, scope, access, since).await?;
        let shown = repository.to_string();
        let versions = index
            .entries
            .get(chart)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::NoChart {
                chart: chart.to_owned(),
                url: shown.clone(),
            })?;
        let listed = versions
            .iter()
            .map(|e| e.version.as_str())
            .filter(|v| v.len() <= MAX_VERSION);
        let version = constraint::select(listed, constraint)?.ok_or_else(|| Error::NoVersion {
            chart: chart.to_owned(),
            url: shown.clone(),
            constraint: constraint.unwrap_or("*").to_owned(),
        })?;
        let entry = versions
            .iter()
            .find(|e| e.version == version)
            .expect("selected from these");
        let (archive, location) = self
            .archive(url, &repository, chart, entry, scope, access)
            .await?;
        Ok(Resolved {
            version: version.to_owned(),
            digest: None,
            archive: Some(archive),
            provenance: Some(format!("{location}.prov")),
            git: None,
        })
    }

    /// The repository's index: the one fetched at or after `since` under the same scope, or a
    /// new fetch.
    async fn index(
        &self,
        repository: &SourceUrl,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
        since: Option<Instant>,
    ) -> Result<Arc<Index>> {
        let credentials = access.map_or(&Credentials::None, |a| a.credentials);
        let slot = self
            .indexes
            .entry((repository.clone(), scope.clone(), credentials.clone()))
            .or_default()
            .clone();
        *slot.used.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let mut fetched = slot.fetched.lock().await;
        if let Some((at, index)) = fetched.as_ref()
            && since.is_none_or(|since| *at >= since)
        {
            return Ok(index.clone());
        }
        let at = Instant::now();
        let location = index_url(repository)?;
        let mut bytes = Vec::new();
        self.get(
            &location,
            scope,
            access,
            self.index_limit,
            "index",
            |chunk| {
                bytes.extend_from_slice(chunk);
                Ok(())
            },
        )
        .await?;
        let index = Arc::new(parse_index(&location, &bytes)?);
        tracing::debug!(repository = %repository, bytes = bytes.len(), "fetched the repository index");
        *fetched = Some((at, index.clone()));
        Ok(index)
    }

    /// Forgets the indexes no resolution used since `before`.
    pub(crate) fn forget_indexes(&self, before: Instant) {
        self.indexes.retain(|_, slot| {
            slot.used
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|used| used >= before)
        });
        let kept: std::collections::HashSet<String> =
            self.store.state().files.keys().cloned().collect();
        self.git.forget(before, &kept);
    }

    /// Fetches an index entry's archive into the cache unless it is there, verifying it against
    /// the entry's digest, and pins it to the chart of `url` (as the spec writes it) at the
    /// entry's version; its URL, taken relative to the repository, must lie under `scope`.
    /// Returns its sha256 and where it was fetched from.
    async fn archive(
        &self,
        url: &str,
        repository: &SourceUrl,
        chart: &str,
        entry: &IndexEntry,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
    ) -> Result<(String, Url)> {
        let pin = (
            ChartSource::Repository {
                url: url.to_owned(),
                chart: chart.to_owned(),
            },
            access.map_or(Credentials::None, |a| a.credentials.clone()),
            entry.version.clone(),
        );
        let (location, expected) = archive_of(repository, chart, entry, scope)?;
        let flight = self
            .downloads
            .entry(location.to_string())
            .or_default()
            .clone();
        let result = async {
            let _flight = flight.lock().await;
            let known = expected
                .clone()
                .or_else(|| self.store.state().pins.get(&pin).cloned());
            if let Some(digest) = known
                && self.store.has(&digest)
            {
                self.store.metrics.chart_cache(true);
                return Ok(digest);
            }
            self.store.metrics.chart_cache(false);
            let mismatch = |expected, got| Error::Mismatch {
                chart: chart.to_owned(),
                version: entry.version.clone(),
                url: repository.to_string(),
                expected,
                got,
            };
            self.download(&location, scope, access, expected.as_deref(), mismatch)
                .await
        }
        .await;
        self.downloads.remove(location.as_str());
        let digest = result?;
        self.store.state().pins.insert(pin, digest.clone());
        Ok((digest, location))
    }

    /// Downloads an archive into the cache, refusing it with `mismatch(expected, got)` unless
    /// its sha256 is `expected` (when given). Returns its sha256.
    async fn download(
        &self,
        location: &Url,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
        expected: Option<&str>,
        mismatch: impl FnOnce(String, String) -> Error,
    ) -> Result<String> {
        let partial = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempfile_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        let mut file = partial.as_file();
        let mut hasher = Sha256::new();
        let size = self
            .get(location, scope, access, ARCHIVE_LIMIT, "archive", |chunk| {
                hasher.update(chunk);
                file.write_all(chunk)
            })
            .await?;
        let got = hex(&hasher.finalize());
        if let Some(expected) = expected
            && expected != got
        {
            return Err(mismatch(expected.to_owned(), got));
        }
        let (_, path) = partial.keep().map_err(|e| self.store.io(e.error))?;
        let kept = self.store.keep(&path, &got, size);
        if kept.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        kept?;
        tracing::info!(archive = %redact(location.as_str()), bytes = size, "fetched a chart archive into the cache");
        Ok(got)
    }

    /// GETs `url` under `scope` (see [`Fetcher::get`]); a chunk the sink cannot keep is the
    /// cache directory's failure.
    pub(super) async fn get(
        &self,
        url: &Url,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
        limit: u64,
        kind: &'static str,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.fetcher
            .get(url, scope, access, limit, kind, sink)
            .await
            .map_err(|e| match e {
                fetch::Error::Sink { source, .. } => self.store.io(source),
                other => Error::Fetch(other),
            })
    }
}
