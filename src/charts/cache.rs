//! The chart cache: repository indexes fetched once per interval, chart archives fetched once and verified by sha256, kept on disk within a size bound.
//!
//! Every fetch stays under the `chartSources` prefix that allows the repository (its scope):
//! the index, the archive URLs it lists (taken relative to it, as helm does) and each redirect,
//! followed here one hop at a time rather than by the HTTP client. Names are resolved by a
//! resolver that drops loopback, link-local and unspecified addresses unless the scope itself
//! names such a host (a policy listed it). What a repository sends is never shown: errors say
//! what failed (status, size, where the YAML breaks), not what the body holds.
//!
//! A source with credentials (see `charts::credentials`) is fetched with what its Secret holds
//! now, read at each resolution; everything fetched with them (indexes, resolutions, pins) is
//! kept under whose credentials they were, so it is never served to a Controller without them.
//! OCI pulls get them through private files (`--registry-config`, `--ca-file`, `--cert-file`,
//! `--key-file`), never argv.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::SystemTime,
};

use dashmap::DashMap;
use reqwest::Url;
use tokio::time::Instant;

use crate::{
    charts::{
        credentials::{self, Material, SourceSecrets},
        fetch::{Access, Fetcher},
    },
    metrics::Metrics,
    plan::ChartSource,
    policy::access::Credentials,
    policy::source::SourceUrl,
};

pub(crate) use crate::charts::common::*;
use crate::charts::{index::*, store::*};

/// A repository's index as last fetched.
#[derive(Default)]
struct IndexSlot {
    /// Held while it is fetched, so one repository's index is fetched once at a time.
    fetched: tokio::sync::Mutex<Option<(Instant, Arc<Index>)>>,
    /// When a chart resolution last used it.
    used: Mutex<Option<Instant>>,
}

/// The chart cache: owned by the chart catalog (which resolves through it) and handed to the
/// helm executor (which installs from it).
pub(crate) struct ChartCache {
    pub(crate) store: Arc<ArchiveStore>,
    helm: PathBuf,
    fetcher: Fetcher,
    index_limit: u64,
    /// Reads the sources' Secrets; None: a source with credentials cannot be fetched.
    pub(crate) secrets: Option<SourceSecrets>,
    /// The Git fetcher and what it answered.
    pub(crate) git: git::GitState,
    /// By repository and scope, both in normal form, and whose credentials fetched it.
    indexes: DashMap<(SourceUrl, SourceUrl, Credentials), Arc<IndexSlot>>,
    /// Held while an archive is fetched, by its URL, so it is fetched once at a time.
    downloads: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
}

impl ChartCache {
    /// Opens the cache in `dir` (created when missing), keeping at most `limit` bytes of
    /// archives; `helm` pulls OCI charts. Every archive found is verified against its name
    /// (its sha256) and removed when it differs, as are partial files a crash left.
    pub(crate) fn open(
        dir: &Path,
        limit: u64,
        helm: PathBuf,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let io = |source| Error::Io {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with(PARTIAL) {
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
                continue;
            }
            let Some(digest) = digest_of_name(&name) else {
                continue;
            };
            let meta = entry.metadata().map_err(io)?;
            if meta.is_file() && sha256_of(&path).is_ok_and(|d| d == digest) {
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((modified, digest.to_owned(), meta.len()));
            } else {
                tracing::warn!(archive = %path.display(), "removing a cached chart archive whose content does not match its name");
                let _ = std::fs::remove_file(&path);
            }
        }
        found.sort();
        let mut state = State::default();
        for (used, (_, digest, size)) in found.into_iter().enumerate() {
            state.total += size;
            let used = used as u64 + 1;
            state.files.insert(
                digest,
                Stored {
                    size,
                    used,
                    users: 0,
                },
            );
            state.clock = used;
        }
        let fetcher = Fetcher::new(metrics.clone()).map_err(Error::Fetch)?;
        let store = ArchiveStore {
            dir: dir.to_owned(),
            limit,
            metrics,
            state: Mutex::new(State::default()),
        };
        store.evict(&mut state);
        *store.state() = state;
        Ok(Self {
            store: Arc::new(store),
            helm,
            fetcher,
            index_limit: DEFAULT_INDEX_LIMIT,
            secrets: None,
            indexes: DashMap::new(),
            downloads: DashMap::new(),
            git: git::GitState::default(),
        })
    }

    /// Resolves Git charts with the fetcher at `path` (None: Git charts are refused, saying so).
    pub(crate) fn with_git_fetcher(mut self, path: Option<PathBuf>) -> Self {
        self.git.fetcher = path;
        self
    }

    /// Refuses repository indexes larger than `bytes` (default [`DEFAULT_INDEX_LIMIT`]).
    pub(crate) fn with_index_limit(mut self, bytes: u64) -> Self {
        self.index_limit = bytes;
        self
    }

    /// Reads the Secrets sources with credentials are fetched with through `secrets`.
    pub(crate) fn with_secrets(mut self, secrets: SourceSecrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// What `credentials` name, read now; an error says which Secret and what to do.
    async fn material(&self, credentials: &Credentials, oci: bool) -> Result<Option<Material>> {
        if *credentials == Credentials::None {
            return Ok(None);
        }
        let (policy, prefix) = credentials.origin().unwrap_or_default();
        let refused = |reason: String| Error::Credentials {
            prefix: prefix.to_owned(),
            reason,
        };
        let Some(secrets) = &self.secrets else {
            return Err(refused(format!(
                "TenancyPolicy {policy} names credentials for it, which this process does not read"
            )));
        };
        secrets.material(credentials, oci).await.map_err(refused)
    }

    /// How a fetch under `scope` authenticates with `material` (None: anonymously), sending it
    /// to the source's own origin only.
    fn access<'a>(
        &self,
        credentials: &'a Credentials,
        material: Option<&'a Material>,
        scope: &SourceUrl,
    ) -> Option<Access<'a>> {
        material.map(|material| Access {
            credentials,
            secret: credentials
                .secret(self.secrets.as_ref().map_or("", |s| &s.operator_namespace))
                .unwrap_or_default(),
            material,
            origin: origin_of(scope),
        })
    }

    /// `error` with what to do about it, when its text tells (401, 403, an unknown CA, an
    /// expired certificate).
    fn hinted(&self, error: Error, credentials: &Credentials) -> Error {
        let namespace = self
            .secrets
            .as_ref()
            .map_or("", |s| s.operator_namespace.as_str());
        match credentials::hint(&error.to_string(), credentials, namespace) {
            Some(hint) => Error::Hinted {
                error: Box::new(error),
                hint,
            },
            None => error,
        }
    }

    /// The operator's metrics the cache counts in.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.store.metrics
    }

    /// Where the archives are kept.
    pub(crate) fn dir(&self) -> &Path {
        &self.store.dir
    }

    /// The cached archive of a remote chart's exact version, held on disk until the checkout
    /// is dropped; None for chart-home charts and charts the cache does not hold (helm then
    /// fetches them itself). Counted as a hit or a miss.
    /// A chart whose signatures were checked is checked out by the digest of the archive
    /// checked (`exact`), never by its version: what another fetch pinned since is not it.
    pub(crate) fn checkout(
        &self,
        source: &ChartSource,
        credentials: &Credentials,
        version: Option<&str>,
        exact: Option<&str>,
    ) -> Option<Checkout> {
        if matches!(source, ChartSource::Directory(_)) {
            return None;
        }
        let found = match exact {
            Some(digest) => self.hold(digest),
            None => version.and_then(|v| self.take(source, credentials, v)),
        };
        self.store.metrics.chart_cache(found.is_some());
        found
    }

    fn take(
        &self,
        source: &ChartSource,
        credentials: &Credentials,
        version: &str,
    ) -> Option<Checkout> {
        let digest = self
            .store
            .state()
            .pins
            .get(&(source.clone(), credentials.clone(), version.to_owned()))?
            .clone();
        self.hold(&digest)
    }

    /// The archive of sha256 `digest`, held on disk until the checkout is dropped.
    pub(crate) fn hold(&self, digest: &str) -> Option<Checkout> {
        let store = &self.store;
        let mut state = store.state();
        let digest = digest.to_owned();
        let path = store.path_of(&digest);
        if !path.is_file() {
            store.drop_file(&mut state, &digest);
            return None;
        }
        state.clock += 1;
        let used = state.clock;
        let stored = state.files.get_mut(&digest)?;
        stored.users += 1;
        stored.used = used;
        Some(Checkout {
            path,
            store: store.clone(),
            digest,
        })
    }
}

/// The origin (scheme, host, port) of a scope: the only one its credentials are sent to.
fn origin_of(scope: &SourceUrl) -> url::Origin {
    Url::parse(scope.as_str()).map_or_else(
        |_| Url::parse("data:,").expect("a URL").origin(),
        |u| u.origin(),
    )
}

/// The default cache directory: `$XDG_CACHE_HOME/tenancy-hub/charts`, else
/// `~/.cache/tenancy-hub/charts`, else one under the temporary directory.
pub(crate) fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("tenancy-hub").join("charts")
}

pub(crate) mod git;
mod oci;
mod repository;
mod signing;

pub(crate) use oci::registry_host;
#[cfg(test)]
use oci::{PullFiles, parse_digest, pull_args};

#[cfg(test)]
mod tests;
