//! The chart cache: repository indexes fetched once per interval, chart archives fetched once and verified by sha256, kept on disk within a size bound.
//!
//! Every fetch stays under the `chartSources` prefix that allows the repository (its scope):
//! the index, the archive URLs it lists (taken relative to it, as helm does) and each redirect,
//! followed here one hop at a time rather than by the HTTP client. Names are resolved by a
//! resolver that drops loopback, link-local and unspecified addresses unless the scope itself
//! names such a host (a policy listed it). What a repository sends is never shown: errors say
//! what failed (status, size, where the YAML breaks), not what the body holds.

use std::{
    collections::HashMap,
    ffi::OsString,
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime},
};

use dashmap::DashMap;
use reqwest::Url;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::{
    charts::{
        constraint,
        fetch::{self, Fetcher},
    },
    metrics::Metrics,
    plan::ChartSource,
    policy::source::{self, Refused, SourceUrl, redact},
    queue::failure::trim_error,
};

/// The exact version a remote chart resolved to, and its OCI manifest digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The chart's version, passed to helm as `--version`.
    pub(crate) version: String,
    /// The OCI manifest digest (`sha256:…`); None for repository charts.
    pub(crate) digest: Option<String>,
}

/// Largest repository index fetched, unless set otherwise (`run --chart-index-limit`).
pub(crate) const DEFAULT_INDEX_LIMIT: u64 = 32 << 20;
/// Longest version an index may list; longer ones are passed over, so an index cannot fill a
/// status with text of its own.
const MAX_VERSION: usize = 128;
/// Largest chart archive fetched.
pub(crate) const ARCHIVE_LIMIT: u64 = 64 << 20;
/// Default bound of the archives kept.
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;
/// How long one `helm pull` may take before it is stopped.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// Prefix of the files and directories being written; removed at start.
const PARTIAL: &str = ".partial-";

/// Why a chart could not be fetched or kept. URLs in it carry no credentials.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The HTTP fetch failed or was refused.
    #[error(transparent)]
    Fetch(fetch::Error),
    /// A URL that does not parse.
    #[error("{url} is not a valid URL: {reason}")]
    Url { url: String, reason: String },
    /// A repository URL the chart sources rules refuse.
    #[error("the repository {url} {reason}")]
    Source { url: String, reason: Refused },
    /// A repository outside the prefix its fetches must stay under.
    #[error("the repository {url} is outside the chartSources prefix {scope}; refused")]
    Outside { url: String, scope: SourceUrl },
    /// The index does not parse; where, never what it holds.
    #[error("{url} is not a Helm repository index: {reason}")]
    Index { url: String, reason: String },
    /// The index has no such chart.
    #[error("chart {chart} not found in the repository {url}")]
    NoChart { chart: String, url: String },
    /// No version of the chart satisfies the constraint.
    #[error("no version of chart {chart} in the repository {url} matches {constraint}")]
    NoVersion {
        chart: String,
        url: String,
        constraint: String,
    },
    /// The constraint does not parse.
    #[error(transparent)]
    Constraint(#[from] constraint::Invalid),
    /// The index lists no archive for the version.
    #[error("chart {chart} version {version} in the repository {url} lists no archive URL")]
    NoArchive {
        chart: String,
        version: String,
        url: String,
    },
    /// The index lists the archive outside the prefix, or at a URL that does not parse.
    #[error(
        "chart {chart} version {version}: the index of {url} lists its archive at {reason}; refused: archives are fetched only under the chartSources prefix that allows the repository"
    )]
    ArchiveRefused {
        chart: String,
        version: String,
        url: String,
        reason: String,
    },
    /// The index lists a digest that is no sha256.
    #[error(
        "chart {chart} version {version} in the repository {url}: the index's digest is not a sha256 (64 hex digits); refused"
    )]
    BadDigest {
        chart: String,
        version: String,
        url: String,
    },
    /// The archive is not the one the index describes.
    #[error(
        "chart {chart} version {version} from {url}: digest mismatch, expected {expected}, got {got}; the repository changed the archive"
    )]
    Mismatch {
        chart: String,
        version: String,
        url: String,
        expected: String,
        got: String,
    },
    /// `helm pull` failed.
    #[error("helm pull {reference}: {message}")]
    Pull { reference: String, message: String },
    /// The archive holds no readable `Chart.yaml`.
    #[error("the chart archive from {origin} has no readable Chart.yaml: {reason}")]
    Archive { origin: String, reason: String },
    /// The cache directory cannot be read or written.
    #[error("the chart cache {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The chart cache's result.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// One version of a chart as a repository index lists it.
#[derive(Clone, Debug, Deserialize)]
struct IndexEntry {
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// The part of a repository index the cache reads: every chart's versions.
#[derive(Debug, Default, Deserialize)]
struct Index {
    #[serde(default)]
    entries: HashMap<String, Vec<IndexEntry>>,
}

/// Parses an index (YAML or JSON), keeping only what the cache reads. A failure says where
/// the YAML breaks, never what it holds (serde's messages quote the offending value).
fn parse_index(url: &Url, bytes: &[u8]) -> Result<Index> {
    serde_yaml::from_slice(bytes).map_err(|e| Error::Index {
        url: redact(url.as_str()),
        reason: yaml_error(&e),
    })
}

/// Where a YAML document breaks, without its content.
fn yaml_error(error: &serde_yaml::Error) -> String {
    match error.location() {
        Some(at) => format!("YAML error at line {}, column {}", at.line(), at.column()),
        None => "YAML error".to_owned(),
    }
}

/// The index URL of a repository (in normal form): `URL/index.yaml`.
fn index_url(repository: &SourceUrl) -> Result<Url> {
    let mut url = parse_url(repository.as_str())?;
    let path = format!("{}/index.yaml", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// The repository as a directory, against which an index's relative archive URLs are taken,
/// as helm takes them.
fn archive_base(repository: &SourceUrl) -> Result<Url> {
    let mut base = parse_url(repository.as_str())?;
    let path = format!("{}/", base.path().trim_end_matches('/'));
    base.set_path(&path);
    Ok(base)
}

/// Where an index entry's archive is (its first URL, taken relative to the repository, which
/// must lie under `scope`) and the sha256 it must have, when the index gives one.
fn archive_of(
    repository: &SourceUrl,
    chart: &str,
    entry: &IndexEntry,
    scope: &SourceUrl,
) -> Result<(Url, Option<String>)> {
    let (chart, version, url) = (
        chart.to_owned(),
        entry.version.clone(),
        repository.to_string(),
    );
    let expected = match entry.digest.as_deref().map(normal_digest) {
        Some(None) => {
            return Err(Error::BadDigest {
                chart,
                version,
                url,
            });
        }
        Some(Some(digest)) => Some(digest),
        None => None,
    };
    let Some(reference) = entry.urls.first() else {
        return Err(Error::NoArchive {
            chart,
            version,
            url,
        });
    };
    match source::follow(&archive_base(repository)?, reference, scope) {
        Ok(location) => Ok((location, expected)),
        Err(reason) => Err(Error::ArchiveRefused {
            chart,
            version,
            url,
            reason,
        }),
    }
}

fn parse_url(url: &str) -> Result<Url> {
    Url::parse(url).map_err(|e| Error::Url {
        url: redact(url),
        reason: e.to_string(),
    })
}

/// An index digest as lowercase hex, without a `sha256:` prefix; None unless 64 hex digits.
fn normal_digest(digest: &str) -> Option<String> {
    let digest = digest.trim();
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .to_ascii_lowercase();
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// Whether a file name is a cached archive's: 64 lowercase hex digits and `.tgz`.
fn digest_of_name(name: &str) -> Option<&str> {
    let digest = name.strip_suffix(".tgz")?;
    (digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then_some(digest)
}

/// The sha256 of a file's content, as hex.
fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The version in the `Chart.yaml` at the top of a chart archive.
fn archive_version(path: &Path) -> std::result::Result<String, String> {
    #[derive(Deserialize)]
    struct ChartYaml {
        version: String,
    }
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.path().map_err(|e| e.to_string())?.into_owned();
        if name.components().count() == 2 && name.ends_with("Chart.yaml") {
            let mut text = String::new();
            entry
                .take(1 << 20)
                .read_to_string(&mut text)
                .map_err(|e| e.to_string())?;
            let chart: ChartYaml = serde_yaml::from_str(&text)
                .map_err(|e| format!("Chart.yaml: {}", yaml_error(&e)))?;
            if chart.version.len() > MAX_VERSION {
                return Err(format!(
                    "Chart.yaml's version is longer than {MAX_VERSION} characters"
                ));
            }
            return Ok(chart.version);
        }
    }
    Err("no Chart.yaml at its top".into())
}

/// The digest helm prints on a `Digest:` line (OCI pulls; helm 4 prints it on stderr).
pub(crate) fn parse_digest(stdout: &str, stderr: &str) -> Option<String> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find_map(|l| l.trim().strip_prefix("Digest:"))
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
}

/// Arguments of `helm pull` of an OCI chart into `into`: every value inside one `--flag=value`
/// argument and the reference after `--`, so nothing can pose as a flag.
fn pull_args(reference: &str, constraint: Option<&str>, into: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["pull".into()];
    let mut destination = OsString::from("--destination=");
    destination.push(into);
    args.push(destination);
    if let Some(constraint) = constraint {
        args.push(format!("--version={constraint}").into());
    }
    args.push("--".into());
    args.push(reference.into());
    args
}

/// One archive on disk.
#[derive(Debug)]
struct Stored {
    size: u64,
    /// When it was last used, as a tick of [`State::clock`].
    used: u64,
    /// Helm calls using it now; it is not removed while any does.
    users: usize,
}

/// What the cache holds.
#[derive(Debug, Default)]
struct State {
    /// Archives by sha256.
    files: HashMap<String, Stored>,
    /// Their total size.
    total: u64,
    /// Counts uses, to order archives by their last one.
    clock: u64,
    /// The archive of each remote chart version.
    pins: HashMap<(ChartSource, String), String>,
}

/// The archives on disk and their bound, shared with every checkout.
#[derive(Debug)]
struct ArchiveStore {
    dir: PathBuf,
    limit: u64,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

impl ArchiveStore {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.tgz"))
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            dir: self.dir.clone(),
            source,
        }
    }

    /// Whether the archive `digest` is on disk; marks it used.
    fn has(&self, digest: &str) -> bool {
        let mut state = self.state();
        if !state.files.contains_key(digest) {
            return false;
        }
        if !self.path_of(digest).is_file() {
            self.drop_file(&mut state, digest);
            return false;
        }
        state.clock += 1;
        let now = state.clock;
        state.files.get_mut(digest).expect("checked").used = now;
        true
    }

    /// Moves a complete, verified file under its digest's name (a rename: a crash leaves either
    /// no archive or the whole one) and removes the least recently used archives beyond the bound.
    fn keep(&self, from: &Path, digest: &str, size: u64) -> Result<()> {
        std::fs::File::open(from)
            .and_then(|f| f.sync_all())
            .map_err(|e| self.io(e))?;
        std::fs::rename(from, self.path_of(digest)).map_err(|e| self.io(e))?;
        let mut state = self.state();
        state.clock += 1;
        let used = state.clock;
        if let Some(stored) = state.files.get_mut(digest) {
            stored.used = used;
        } else {
            state.files.insert(
                digest.to_owned(),
                Stored {
                    size,
                    used,
                    users: 0,
                },
            );
            state.total += size;
        }
        self.evict(&mut state);
        Ok(())
    }

    /// Removes least recently used archives no helm call uses until the total is within the bound.
    fn evict(&self, state: &mut State) {
        while state.total > self.limit {
            let Some(victim) = state
                .files
                .iter()
                .filter(|(_, f)| f.users == 0)
                .min_by_key(|(_, f)| f.used)
                .map(|(digest, _)| digest.clone())
            else {
                break;
            };
            if let Err(e) = std::fs::remove_file(self.path_of(&victim))
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(archive = %victim, error = %e, "cannot remove a chart archive from the cache");
            }
            tracing::debug!(archive = %victim, "removed the least recently used chart archive");
            self.drop_file(state, &victim);
        }
        self.metrics.chart_cache_size(state.total);
    }

    fn drop_file(&self, state: &mut State, digest: &str) {
        if let Some(stored) = state.files.remove(digest) {
            state.total -= stored.size;
        }
        state.pins.retain(|_, d| d != digest);
        self.metrics.chart_cache_size(state.total);
    }
}

/// A cached archive a helm call installs from; it stays on disk until this is dropped.
#[derive(Debug)]
pub(crate) struct Checkout {
    store: Arc<ArchiveStore>,
    digest: String,
    path: PathBuf,
}

impl Checkout {
    /// The archive's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let mut state = self.store.state();
        if let Some(stored) = state.files.get_mut(&self.digest) {
            stored.users -= 1;
        }
        self.store.evict(&mut state);
    }
}

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
    store: Arc<ArchiveStore>,
    helm: PathBuf,
    fetcher: Fetcher,
    index_limit: u64,
    /// By repository and scope, both in normal form.
    indexes: DashMap<(SourceUrl, SourceUrl), Arc<IndexSlot>>,
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
            indexes: DashMap::new(),
            downloads: DashMap::new(),
        })
    }

    /// Refuses repository indexes larger than `bytes` (default [`DEFAULT_INDEX_LIMIT`]).
    pub(crate) fn with_index_limit(mut self, bytes: u64) -> Self {
        self.index_limit = bytes;
        self
    }

    /// Where the archives are kept.
    pub(crate) fn dir(&self) -> &Path {
        &self.store.dir
    }

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
        let index = self.index(&repository, scope, since).await?;
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
        self.archive(url, &repository, chart, entry, scope).await?;
        Ok(Resolved {
            version: version.to_owned(),
            digest: None,
        })
    }

    /// The repository's index: the one fetched at or after `since` under the same scope, or a
    /// new fetch.
    async fn index(
        &self,
        repository: &SourceUrl,
        scope: &SourceUrl,
        since: Option<Instant>,
    ) -> Result<Arc<Index>> {
        let slot = self
            .indexes
            .entry((repository.clone(), scope.clone()))
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
        self.get(&location, scope, self.index_limit, "index", |chunk| {
            bytes.extend_from_slice(chunk);
            Ok(())
        })
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
    }

    /// Fetches an index entry's archive into the cache unless it is there, verifying it against
    /// the entry's digest, and pins it to the chart of `url` (as the spec writes it) at the
    /// entry's version; its URL, taken relative to the repository, must lie under `scope`.
    async fn archive(
        &self,
        url: &str,
        repository: &SourceUrl,
        chart: &str,
        entry: &IndexEntry,
        scope: &SourceUrl,
    ) -> Result<()> {
        let pin = (
            ChartSource::Repository {
                url: url.to_owned(),
                chart: chart.to_owned(),
            },
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
            self.download(&location, scope, expected.as_deref(), mismatch)
                .await
        }
        .await;
        self.downloads.remove(location.as_str());
        let digest = result?;
        self.store.state().pins.insert(pin, digest);
        Ok(())
    }

    /// Downloads an archive into the cache, refusing it with `mismatch(expected, got)` unless
    /// its sha256 is `expected` (when given). Returns its sha256.
    async fn download(
        &self,
        location: &Url,
        scope: &SourceUrl,
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
            .get(location, scope, ARCHIVE_LIMIT, "archive", |chunk| {
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
    async fn get(
        &self,
        url: &Url,
        scope: &SourceUrl,
        limit: u64,
        kind: &'static str,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.fetcher
            .get(url, scope, limit, kind, sink)
            .await
            .map_err(|e| match e {
                fetch::Error::Sink { source, .. } => self.store.io(source),
                other => Error::Fetch(other),
            })
    }

    /// Resolves an OCI chart: `helm pull` of the newest version matching `constraint`, kept in
    /// the cache under its sha256. The digest is the manifest's, as helm prints it.
    pub(crate) async fn oci(&self, reference: &str, constraint: Option<&str>) -> Result<Resolved> {
        let failed = |message: String| Error::Pull {
            reference: redact(reference),
            message: redact(&message),
        };
        let scratch = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        let mut command = tokio::process::Command::new(&self.helm);
        command
            .args(pull_args(reference, constraint, scratch.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| {
            failed(format!(
                "cannot run {}: {e}; install helm or pass --helm",
                self.helm.display()
            ))
        })?;
        let out = match tokio::time::timeout(PULL_TIMEOUT, child.wait_with_output()).await {
            Err(_) => {
                return Err(failed(format!(
                    "helm did not finish within {}s and was stopped",
                    PULL_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(failed(format!("helm failed to run: {e}"))),
            Ok(Ok(out)) if !out.status.success() => {
                return Err(failed(trim_error(&String::from_utf8_lossy(&out.stderr))));
            }
            Ok(Ok(out)) => out,
        };
        let digest = parse_digest(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
        );
        let pulled = std::fs::read_dir(scratch.path())
            .map_err(|e| self.store.io(e))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "tgz"))
            .ok_or_else(|| failed("helm wrote no chart archive".into()))?;
        let read = pulled.clone();
        let (sha, size, version) = tokio::task::spawn_blocking(move || {
            let sha = sha256_of(&read)?;
            let size = std::fs::metadata(&read)?.len();
            Ok::<_, std::io::Error>((sha, size, archive_version(&read)))
        })
        .await
        .expect("hashing does not panic")
        .map_err(|e| self.store.io(e))?;
        let version = version.map_err(|reason| Error::Archive {
            origin: redact(reference),
            reason,
        })?;
        self.store.metrics.chart_fetched("archive", size);
        let hit = self.store.has(&sha);
        self.store.metrics.chart_cache(hit);
        if !hit {
            self.store.keep(&pulled, &sha, size)?;
        }
        self.store.state().pins.insert(
            (ChartSource::Oci(reference.to_owned()), version.clone()),
            sha,
        );
        Ok(Resolved { version, digest })
    }

    /// The cached archive of a remote chart's exact version, held on disk until the checkout
    /// is dropped; None for chart-home charts and charts the cache does not hold (helm then
    /// fetches them itself). Counted as a hit or a miss.
    pub(crate) fn checkout(&self, source: &ChartSource, version: Option<&str>) -> Option<Checkout> {
        if matches!(source, ChartSource::Directory(_)) {
            return None;
        }
        let found = version.and_then(|v| self.take(source, v));
        self.store.metrics.chart_cache(found.is_some());
        found
    }

    fn take(&self, source: &ChartSource, version: &str) -> Option<Checkout> {
        let store = &self.store;
        let mut state = store.state();
        let digest = state
            .pins
            .get(&(source.clone(), version.to_owned()))?
            .clone();
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

#[cfg(test)]
mod tests;
