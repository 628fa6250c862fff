//! The chart cache: repository indexes fetched once per interval, chart archives fetched once and verified by sha256, kept on disk within a size bound.

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
    delivery::{
        charts::{Resolved, redact},
        constraint,
        helm::trim_error,
        plan::ChartSource,
    },
    metrics::Metrics,
};

/// Largest repository index fetched.
pub const INDEX_LIMIT: u64 = 256 << 20;
/// Largest chart archive fetched.
pub const ARCHIVE_LIMIT: u64 = 64 << 20;
/// Default bound of the archives kept.
pub const DEFAULT_SIZE: u64 = 1 << 30;
/// How long connecting to a repository may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a repository may stay silent in the middle of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one fetch may take in all.
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one `helm pull` may take before it is stopped.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// Prefix of the files and directories being written; removed at start.
const PARTIAL: &str = ".partial-";

/// Why a chart could not be fetched or kept. URLs in it carry no credentials.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be built.
    #[error("building the HTTP client of the chart cache: {0}")]
    Client(#[source] reqwest::Error),
    /// A URL that does not parse.
    #[error("{url} is not a valid URL: {reason}")]
    Url { url: String, reason: String },
    /// The request failed: connection, TLS, timeout.
    #[error("fetching {url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("{url} answered {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    /// The answer was larger than allowed.
    #[error("{url} is larger than {limit} MiB; refused")]
    TooLarge { url: String, limit: u64 },
    /// The index does not parse.
    #[error("the repository index {url} does not parse: {reason}")]
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
pub type Result<T, E = Error> = std::result::Result<T, E>;

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

/// Parses an index (YAML or JSON), keeping only what the cache reads.
fn parse_index(url: &Url, bytes: &[u8]) -> Result<Index> {
    serde_yaml::from_slice(bytes).map_err(|e| Error::Index {
        url: redact(url.as_str()),
        reason: e.to_string(),
    })
}

/// The index URL of a repository: `URL/index.yaml`, its query kept.
fn index_url(repository: &str) -> Result<Url> {
    let mut url = parse_url(repository)?;
    let path = format!("{}/index.yaml", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// Where an index entry's archive is: its first URL, taken relative to the repository URL (as
/// a directory, its query kept) when it is not absolute, as helm does.
fn archive_url(repository: &str, reference: &str) -> Result<Url> {
    if let Ok(absolute) = Url::parse(reference) {
        return Ok(absolute);
    }
    let mut base = parse_url(repository)?;
    let path = format!("{}/", base.path().trim_end_matches('/'));
    base.set_path(&path);
    let mut url = base.join(reference).map_err(|e| Error::Url {
        url: redact(reference),
        reason: e.to_string(),
    })?;
    url.set_query(base.query());
    Ok(url)
}

fn parse_url(url: &str) -> Result<Url> {
    Url::parse(url).map_err(|e| Error::Url {
        url: redact(url),
        reason: e.to_string(),
    })
}

/// An index digest as lowercase hex, without a `sha256:` prefix.
fn normal_digest(digest: &str) -> String {
    let digest = digest.trim();
    digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .to_ascii_lowercase()
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
            let chart: ChartYaml = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
            return Ok(chart.version);
        }
    }
    Err("no Chart.yaml at its top".into())
}

/// The digest helm prints on a `Digest:` line (OCI pulls; helm 4 prints it on stderr).
pub fn parse_digest(stdout: &str, stderr: &str) -> Option<String> {
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
struct Shelf {
    dir: PathBuf,
    limit: u64,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

impl Shelf {
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
pub struct Checkout {
    shelf: Arc<Shelf>,
    digest: String,
    path: PathBuf,
}

impl Checkout {
    /// The archive's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let mut state = self.shelf.state();
        if let Some(stored) = state.files.get_mut(&self.digest) {
            stored.users -= 1;
        }
        self.shelf.evict(&mut state);
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
pub struct ChartCache {
    shelf: Arc<Shelf>,
    helm: PathBuf,
    client: reqwest::Client,
    indexes: DashMap<String, Arc<IndexSlot>>,
    /// Held while an archive is fetched, by its URL, so it is fetched once at a time.
    downloads: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
}

impl ChartCache {
    /// Opens the cache in `dir` (created when missing), keeping at most `limit` bytes of
    /// archives; `helm` pulls OCI charts. Every archive found is verified against its name
    /// (its sha256) and removed when it differs, as are partial files a crash left.
    pub fn open(dir: &Path, limit: u64, helm: PathBuf, metrics: Arc<Metrics>) -> Result<Self> {
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
        let shelf = Shelf {
            dir: dir.to_owned(),
            limit,
            metrics,
            state: Mutex::new(State::default()),
        };
        shelf.evict(&mut state);
        *shelf.state() = state;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .timeout(FETCH_TIMEOUT)
            .user_agent(concat!("tenancy-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(Error::Client)?;
        Ok(Self {
            shelf: Arc::new(shelf),
            helm,
            client,
            indexes: DashMap::new(),
            downloads: DashMap::new(),
        })
    }

    /// Where the archives are kept.
    pub fn dir(&self) -> &Path {
        &self.shelf.dir
    }

    /// Resolves a repository chart: the repository's index (fetched again only when it was
    /// fetched before `since`; None: any fetched index will do), the newest version matching
    /// `constraint`, and its archive fetched into the cache unless there already. An archive
    /// whose digest differs from the index's is refused; one that cannot be fetched is left to
    /// helm to fetch when it installs.
    pub async fn repository(
        &self,
        url: &str,
        chart: &str,
        constraint: Option<&str>,
        since: Option<Instant>,
    ) -> Result<Resolved> {
        let index = self.index(url, since).await?;
        let versions = index
            .entries
            .get(chart)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::NoChart {
                chart: chart.to_owned(),
                url: redact(url),
            })?;
        let version = constraint::select(versions.iter().map(|e| e.version.as_str()), constraint)?
            .ok_or_else(|| Error::NoVersion {
                chart: chart.to_owned(),
                url: redact(url),
                constraint: constraint.unwrap_or("*").to_owned(),
            })?;
        let entry = versions
            .iter()
            .find(|e| e.version == version)
            .expect("selected from these");
        match self.archive(url, chart, entry).await {
            Ok(()) => {}
            Err(e @ Error::Mismatch { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(chart, version, error = %e, "cannot keep the chart archive in the cache; helm fetches it itself");
            }
        }
        Ok(Resolved {
            version: version.to_owned(),
            digest: None,
        })
    }

    /// The repository's index: the one fetched at or after `since`, or a new fetch.
    async fn index(&self, url: &str, since: Option<Instant>) -> Result<Arc<Index>> {
        let slot = self.indexes.entry(url.to_owned()).or_default().clone();
        *slot.used.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let mut fetched = slot.fetched.lock().await;
        if let Some((at, index)) = fetched.as_ref()
            && since.is_none_or(|since| *at >= since)
        {
            return Ok(index.clone());
        }
        let at = Instant::now();
        let location = index_url(url)?;
        let mut bytes = Vec::new();
        self.fetch(&location, INDEX_LIMIT, "index", |chunk| {
            bytes.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        let index = Arc::new(parse_index(&location, &bytes)?);
        tracing::debug!(repository = %redact(url), bytes = bytes.len(), "fetched the repository index");
        *fetched = Some((at, index.clone()));
        Ok(index)
    }

    /// Forgets the indexes no resolution used since `before`.
    pub fn forget_indexes(&self, before: Instant) {
        self.indexes.retain(|_, slot| {
            slot.used
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|used| used >= before)
        });
    }

    /// Fetches an index entry's archive into the cache unless it is there, verifying it against
    /// the entry's digest.
    async fn archive(&self, url: &str, chart: &str, entry: &IndexEntry) -> Result<()> {
        let pin = (
            ChartSource::Repository {
                url: url.to_owned(),
                chart: chart.to_owned(),
            },
            entry.version.clone(),
        );
        let expected = entry.digest.as_deref().map(normal_digest);
        let reference = entry.urls.first().ok_or_else(|| Error::NoArchive {
            chart: chart.to_owned(),
            version: entry.version.clone(),
            url: redact(url),
        })?;
        let location = archive_url(url, reference)?;
        let flight = self
            .downloads
            .entry(location.to_string())
            .or_default()
            .clone();
        let result = async {
            let _flight = flight.lock().await;
            let known = expected
                .clone()
                .or_else(|| self.shelf.state().pins.get(&pin).cloned());
            if let Some(digest) = known
                && self.shelf.has(&digest)
            {
                self.shelf.metrics.chart_cache(true);
                return Ok(digest);
            }
            self.shelf.metrics.chart_cache(false);
            let mismatch = |expected, got| Error::Mismatch {
                chart: chart.to_owned(),
                version: entry.version.clone(),
                url: redact(url),
                expected,
                got,
            };
            self.download(&location, expected.as_deref(), mismatch)
                .await
        }
        .await;
        self.downloads.remove(location.as_str());
        let digest = result?;
        self.shelf.state().pins.insert(pin, digest);
        Ok(())
    }

    /// Downloads an archive into the cache, refusing it with `mismatch(expected, got)` unless
    /// its sha256 is `expected` (when given). Returns its sha256.
    async fn download(
        &self,
        location: &Url,
        expected: Option<&str>,
        mismatch: impl FnOnce(String, String) -> Error,
    ) -> Result<String> {
        let partial = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempfile_in(&self.shelf.dir)
            .map_err(|e| self.shelf.io(e))?;
        let mut file = partial.as_file();
        let mut hasher = Sha256::new();
        let size = self
            .fetch(location, ARCHIVE_LIMIT, "archive", |chunk| {
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
        let (_, path) = partial.keep().map_err(|e| self.shelf.io(e.error))?;
        let kept = self.shelf.keep(&path, &got, size);
        if kept.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        kept?;
        tracing::info!(archive = %redact(location.as_str()), bytes = size, "fetched a chart archive into the cache");
        Ok(got)
    }

    /// GETs `url`, handing each chunk to `sink`; refuses answers over `limit` bytes. Counts the
    /// bytes as `kind`. Returns the size.
    async fn fetch(
        &self,
        url: &Url,
        limit: u64,
        kind: &'static str,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        let shown = || redact(url.as_str());
        let failed = |source: reqwest::Error| Error::Fetch {
            url: shown(),
            source: source.without_url(),
        };
        let too_large = || Error::TooLarge {
            url: shown(),
            limit: limit >> 20,
        };
        let mut response = self.client.get(url.clone()).send().await.map_err(failed)?;
        if !response.status().is_success() {
            return Err(Error::Status {
                url: shown(),
                status: response.status(),
            });
        }
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut size = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            size += chunk.len() as u64;
            self.shelf.metrics.chart_fetched(kind, chunk.len() as u64);
            if size > limit {
                return Err(too_large());
            }
            sink(&chunk).map_err(|e| self.shelf.io(e))?;
        }
        Ok(size)
    }

    /// Resolves an OCI chart: `helm pull` of the newest version matching `constraint`, kept in
    /// the cache under its sha256. The digest is the manifest's, as helm prints it.
    pub async fn oci(&self, reference: &str, constraint: Option<&str>) -> Result<Resolved> {
        let failed = |message: String| Error::Pull {
            reference: redact(reference),
            message: redact(&message),
        };
        let scratch = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.shelf.dir)
            .map_err(|e| self.shelf.io(e))?;
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
            .map_err(|e| self.shelf.io(e))?
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
        .map_err(|e| self.shelf.io(e))?;
        let version = version.map_err(|reason| Error::Archive {
            origin: redact(reference),
            reason,
        })?;
        self.shelf.metrics.chart_fetched("archive", size);
        let hit = self.shelf.has(&sha);
        self.shelf.metrics.chart_cache(hit);
        if !hit {
            self.shelf.keep(&pulled, &sha, size)?;
        }
        self.shelf.state().pins.insert(
            (ChartSource::Oci(reference.to_owned()), version.clone()),
            sha,
        );
        Ok(Resolved { version, digest })
    }

    /// The cached archive of a remote chart's exact version, held on disk until the checkout
    /// is dropped; None for chart-home charts and charts the cache does not hold (helm then
    /// fetches them itself). Counted as a hit or a miss.
    pub fn checkout(&self, source: &ChartSource, version: Option<&str>) -> Option<Checkout> {
        if matches!(source, ChartSource::Directory(_)) {
            return None;
        }
        let found = version.and_then(|v| self.take(source, v));
        self.shelf.metrics.chart_cache(found.is_some());
        found
    }

    fn take(&self, source: &ChartSource, version: &str) -> Option<Checkout> {
        let shelf = &self.shelf;
        let mut state = shelf.state();
        let digest = state
            .pins
            .get(&(source.clone(), version.to_owned()))?
            .clone();
        let path = shelf.path_of(&digest);
        if !path.is_file() {
            shelf.drop_file(&mut state, &digest);
            return None;
        }
        state.clock += 1;
        let used = state.clock;
        let stored = state.files.get_mut(&digest)?;
        stored.users += 1;
        stored.used = used;
        Some(Checkout {
            path,
            shelf: shelf.clone(),
            digest,
        })
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/tenancy-hub/charts`, else
/// `~/.cache/tenancy-hub/charts`, else one under the temporary directory.
pub fn default_dir() -> PathBuf {
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A loopback repository serving fixed files, counting the requests of each path.
    struct Repo {
        url: String,
        hits: Arc<Mutex<HashMap<String, usize>>>,
    }

    impl Repo {
        async fn serve(files: Vec<(&str, Vec<u8>)>) -> Self {
            let files: Arc<HashMap<String, Vec<u8>>> =
                Arc::new(files.into_iter().map(|(p, b)| (p.to_owned(), b)).collect());
            let hits = Arc::new(Mutex::new(HashMap::new()));
            let counted = hits.clone();
            let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
                let (files, hits) = (files.clone(), counted.clone());
                async move {
                    let path = uri.path().to_owned();
                    *hits.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    match files.get(&path) {
                        Some(body) => (axum::http::StatusCode::OK, body.clone()),
                        None => (axum::http::StatusCode::NOT_FOUND, Vec::new()),
                    }
                }
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self {
                url: format!("http://{address}/repo"),
                hits,
            }
        }

        fn hits(&self, path: &str) -> usize {
            self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
        }
    }

    fn sha(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    /// An index of chart `web` at each (version, archive URL, archive content).
    fn index(versions: &[(&str, &str, &[u8])]) -> Vec<u8> {
        let mut text = String::from("apiVersion: v1\nentries:\n  web:\n");
        for (version, url, content) in versions {
            text.push_str(&format!(
                "  - apiVersion: v2\n    name: web\n    description: a chart\n    created: \"2026-01-01T00:00:00Z\"\n    version: {version}\n    digest: {}\n    urls:\n    - {url}\n",
                sha(content)
            ));
        }
        text.push_str("generated: \"2026-01-01T00:00:00Z\"\n");
        text.into_bytes()
    }

    fn open(dir: &Path, limit: u64) -> (ChartCache, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let cache = ChartCache::open(dir, limit, "helm".into(), metrics.clone()).unwrap();
        (cache, metrics)
    }

    fn metric(metrics: &Metrics, series: &str) -> f64 {
        metrics
            .render(&Default::default())
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series}"))
    }

    fn repository_source(repo: &Repo) -> ChartSource {
        ChartSource::Repository {
            url: repo.url.clone(),
            chart: "web".into(),
        }
    }

    /// The names of the files in a directory, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    #[tokio::test]
    async fn an_index_and_an_archive_are_fetched_once_for_every_resolution_and_install() {
        let archive = b"the 1.1.0 archive".to_vec();
        let index = index(&[
            ("1.0.0", "charts/web-1.0.0.tgz", b"old"),
            ("1.1.0", "charts/web-1.1.0.tgz", &archive),
        ]);
        let index_size = index.len();
        let repo = Repo::serve(vec![
            ("/repo/index.yaml", index),
            ("/repo/charts/web-1.1.0.tgz", archive.clone()),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, metrics) = open(dir.path(), DEFAULT_SIZE);
        for constraint in [None, Some("^1"), Some(">=1.1.0 <2")] {
            let resolved = cache
                .repository(&repo.url, "web", constraint, None)
                .await
                .unwrap();
            assert_eq!(resolved.version, "1.1.0");
            assert_eq!(resolved.digest, None);
        }
        assert_eq!(repo.hits("/repo/index.yaml"), 1);
        assert_eq!(repo.hits("/repo/charts/web-1.1.0.tgz"), 1);
        assert_eq!(repo.hits("/repo/charts/web-1.0.0.tgz"), 0);

        let source = repository_source(&repo);
        let checkouts: Vec<Checkout> = (0..30)
            .map(|_| cache.checkout(&source, Some("1.1.0")).expect("cached"))
            .collect();
        assert_eq!(std::fs::read(checkouts[0].path()).unwrap(), archive);
        assert_eq!(
            checkouts[0].path(),
            dir.path().join(format!("{}.tgz", sha(&archive)))
        );
        assert!(
            cache.checkout(&source, Some("1.0.0")).is_none(),
            "never fetched"
        );
        assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_hits_total"), 32.0);
        assert_eq!(
            metric(&metrics, "tenancy_hub_chart_cache_misses_total"),
            2.0
        );
        assert_eq!(
            metric(
                &metrics,
                "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
            ),
            index_size as f64
        );
        assert_eq!(
            metric(
                &metrics,
                "tenancy_hub_chart_fetched_bytes_total{kind=\"archive\"}"
            ),
            archive.len() as f64
        );
        assert_eq!(
            metric(&metrics, "tenancy_hub_chart_cache_bytes"),
            archive.len() as f64
        );
    }

    #[tokio::test]
    async fn an_index_fetched_before_since_is_fetched_again_and_a_kept_archive_is_not() {
        let archive = b"archive".to_vec();
        let repo = Repo::serve(vec![
            ("/repo/index.yaml", index(&[("1.0.0", "web.tgz", &archive)])),
            ("/repo/web.tgz", archive),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), DEFAULT_SIZE);
        cache
            .repository(&repo.url, "web", None, None)
            .await
            .unwrap();
        let since = Instant::now();
        cache
            .repository(&repo.url, "web", None, Some(since))
            .await
            .unwrap();
        cache
            .repository(&repo.url, "web", None, Some(since))
            .await
            .unwrap();
        assert_eq!(repo.hits("/repo/index.yaml"), 2, "once per `since`");
        assert_eq!(repo.hits("/repo/web.tgz"), 1);

        let (reopened, metrics) = open(dir.path(), DEFAULT_SIZE);
        reopened
            .repository(&repo.url, "web", None, None)
            .await
            .unwrap();
        assert_eq!(
            repo.hits("/repo/web.tgz"),
            1,
            "an archive kept on disk is found by the index digest after a restart"
        );
        assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_hits_total"), 1.0);
    }

    #[tokio::test]
    async fn an_archive_whose_digest_differs_from_the_index_is_refused_and_not_kept() {
        let repo = Repo::serve(vec![
            (
                "/repo/index.yaml",
                index(&[("1.0.0", "web.tgz", b"what was published")]),
            ),
            ("/repo/web.tgz", b"what is served now".to_vec()),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), DEFAULT_SIZE);
        let error = cache
            .repository(&repo.url, "web", None, None)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "chart web version 1.0.0 from {}: digest mismatch, expected {}, got {}; the repository changed the archive",
                repo.url,
                sha(b"what was published"),
                sha(b"what is served now")
            )
        );
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        assert!(
            cache
                .checkout(&repository_source(&repo), Some("1.0.0"))
                .is_none()
        );
    }

    #[tokio::test]
    async fn an_archive_that_cannot_be_fetched_is_left_to_helm() {
        let repo = Repo::serve(vec![(
            "/repo/index.yaml",
            index(&[("1.0.0", "missing.tgz", b"x")]),
        )])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, metrics) = open(dir.path(), DEFAULT_SIZE);
        let resolved = cache.repository(&repo.url, "web", None, None).await;
        assert_eq!(resolved.unwrap().version, "1.0.0");
        assert!(
            cache
                .checkout(&repository_source(&repo), Some("1.0.0"))
                .is_none()
        );
        assert_eq!(
            metric(&metrics, "tenancy_hub_chart_cache_misses_total"),
            2.0
        );
        assert!(names(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn missing_charts_versions_and_repositories_say_which() {
        let repo = Repo::serve(vec![(
            "/repo/index.yaml",
            index(&[("1.0.0", "web.tgz", b"x")]),
        )])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), DEFAULT_SIZE);
        let error = |chart: &'static str, constraint: Option<&'static str>| {
            let (cache, url) = (&cache, repo.url.clone());
            async move {
                cache
                    .repository(&url, chart, constraint, None)
                    .await
                    .unwrap_err()
                    .to_string()
            }
        };
        assert_eq!(
            error("db", None).await,
            format!("chart db not found in the repository {}", repo.url)
        );
        assert_eq!(
            error("web", Some(">=2")).await,
            format!(
                "no version of chart web in the repository {} matches >=2",
                repo.url
            )
        );
        assert!(
            error("web", Some(">>2"))
                .await
                .contains("invalid version constraint")
        );
        let gone = format!("{}/elsewhere", repo.url);
        let message = cache
            .repository(&gone, "web", None, None)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(message, format!("{gone}/index.yaml answered 404 Not Found"));
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_is_refused() {
        let repo = Repo::serve(vec![("/repo/big", vec![b'x'; 4096])]).await;
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), DEFAULT_SIZE);
        let url = Url::parse(&format!("{}/big", repo.url)).unwrap();
        let error = cache
            .fetch(&url, 1024, "index", |_| Ok(()))
            .await
            .unwrap_err();
        assert!(matches!(error, Error::TooLarge { .. }), "{error}");
        assert!(error.to_string().ends_with("is larger than 0 MiB; refused"));
        let taken = AtomicUsize::new(0);
        cache
            .fetch(&url, 4096, "index", |chunk| {
                taken.fetch_add(chunk.len(), Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(taken.load(Ordering::SeqCst), 4096);
    }

    /// Puts `content` in the cache as an archive of chart `web` from `url` at `version`.
    fn stock(cache: &ChartCache, url: &str, version: &str, content: &[u8]) -> String {
        let digest = sha(content);
        let partial = cache.dir().join(format!("{PARTIAL}{version}"));
        std::fs::write(&partial, content).unwrap();
        cache
            .shelf
            .keep(&partial, &digest, content.len() as u64)
            .unwrap();
        let source = ChartSource::Repository {
            url: url.into(),
            chart: "web".into(),
        };
        cache
            .shelf
            .state()
            .pins
            .insert((source, version.into()), digest.clone());
        digest
    }

    #[test]
    fn the_least_recently_used_archives_go_first_and_never_one_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, metrics) = open(dir.path(), 30);
        let url = "https://charts.example.com";
        let source = ChartSource::Repository {
            url: url.into(),
            chart: "web".into(),
        };
        let a = stock(&cache, url, "1", &[b'a'; 10]);
        let b = stock(&cache, url, "2", &[b'b'; 10]);
        let in_use = cache.checkout(&source, Some("1")).expect("kept");
        stock(&cache, url, "3", &[b'c'; 10]);
        drop(cache.checkout(&source, Some("2")).expect("kept"));
        stock(&cache, url, "4", &[b'd'; 10]);
        assert!(
            dir.path().join(format!("{a}.tgz")).is_file(),
            "the oldest is in use"
        );
        assert!(
            cache.checkout(&source, Some("3")).is_none(),
            "the least recently used of the others went"
        );
        assert!(dir.path().join(format!("{b}.tgz")).is_file());
        assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 30.0);

        drop(in_use);
        stock(&cache, url, "5", &[b'e'; 10]);
        assert!(
            !dir.path().join(format!("{a}.tgz")).exists(),
            "released, the oldest goes first"
        );
        assert!(dir.path().join(format!("{b}.tgz")).is_file());
        assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 30.0);
    }

    #[test]
    fn on_start_archives_are_verified_by_name_and_partial_files_removed() {
        let dir = tempfile::tempdir().unwrap();
        let good = format!("{}.tgz", sha(b"good"));
        std::fs::write(dir.path().join(&good), b"good").unwrap();
        let corrupt = format!("{}.tgz", sha(b"what it was"));
        std::fs::write(dir.path().join(&corrupt), b"half of wh").unwrap();
        std::fs::write(dir.path().join(".partial-abc"), b"a crash left this").unwrap();
        std::fs::create_dir(dir.path().join(".partial-pull")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
        let (_, metrics) = open(dir.path(), DEFAULT_SIZE);
        assert_eq!(names(dir.path()), [good, "notes.txt".to_owned()]);
        assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 4.0);
    }

    #[test]
    fn a_cache_over_its_bound_on_start_keeps_the_most_recently_written() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join(format!("{}.tgz", sha(b"old archive")));
        std::fs::write(&old, b"old archive").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        let new = format!("{}.tgz", sha(b"new archive"));
        std::fs::write(dir.path().join(&new), b"new archive").unwrap();
        open(dir.path(), 15);
        assert_eq!(names(dir.path()), [new]);
    }

    #[test]
    fn archive_urls_are_joined_to_the_repository_as_helm_joins_them() {
        let join = |repo: &str, reference: &str| archive_url(repo, reference).unwrap().to_string();
        assert_eq!(
            join("https://charts.example.com/stable", "web-1.0.0.tgz"),
            "https://charts.example.com/stable/web-1.0.0.tgz"
        );
        assert_eq!(
            join("https://charts.example.com/stable/", "charts/web-1.0.0.tgz"),
            "https://charts.example.com/stable/charts/web-1.0.0.tgz"
        );
        assert_eq!(
            join("https://charts.example.com/stable?token=t", "web-1.0.0.tgz"),
            "https://charts.example.com/stable/web-1.0.0.tgz?token=t",
            "the repository's query goes along"
        );
        assert_eq!(
            join("https://charts.example.com/stable", "/other/web.tgz"),
            "https://charts.example.com/other/web.tgz"
        );
        assert_eq!(
            join(
                "https://charts.example.com",
                "https://cdn.example.net/web.tgz"
            ),
            "https://cdn.example.net/web.tgz"
        );
        assert_eq!(
            index_url("https://charts.example.com/stable/")
                .unwrap()
                .as_str(),
            "https://charts.example.com/stable/index.yaml"
        );
        assert_eq!(
            index_url("http://127.0.0.1:8080").unwrap().as_str(),
            "http://127.0.0.1:8080/index.yaml"
        );
        assert!(index_url("not a url").is_err());
    }

    #[test]
    fn an_index_is_read_for_versions_archive_urls_and_digests_only() {
        let url = Url::parse("https://charts.example.com/index.yaml").unwrap();
        let text = "apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.0.0\n    digest: sha256:ABC\n    urls: [web-1.0.0.tgz, https://mirror/web-1.0.0.tgz]\n    maintainers: [{name: x}]\n  db:\n  - version: 0.1.0\ngenerated: now\n";
        let index = parse_index(&url, text.as_bytes()).unwrap();
        let web = &index.entries["web"][0];
        assert_eq!(web.version, "1.0.0");
        assert_eq!(web.urls[0], "web-1.0.0.tgz");
        assert_eq!(
            web.digest.as_deref().map(normal_digest).as_deref(),
            Some("abc")
        );
        assert!(index.entries["db"][0].urls.is_empty());
        let json =
            r#"{"apiVersion":"v1","entries":{"web":[{"version":"2.0.0","urls":["w.tgz"]}]}}"#;
        assert_eq!(
            parse_index(&url, json.as_bytes()).unwrap().entries["web"][0].version,
            "2.0.0"
        );
        let error = parse_index(&url, b"entries: [").unwrap_err().to_string();
        assert!(
            error.starts_with(
                "the repository index https://charts.example.com/index.yaml does not parse"
            ),
            "{error}"
        );
    }

    #[test]
    fn helm_pull_arguments_keep_the_reference_after_a_double_dash() {
        let args = pull_args(
            "oci://registry.example.com/charts/web",
            Some(">=0.1.0 <1.0.0"),
            Path::new("/cache/.partial-x"),
        );
        assert_eq!(
            args,
            [
                "pull",
                "--destination=/cache/.partial-x",
                "--version=>=0.1.0 <1.0.0",
                "--",
                "oci://registry.example.com/charts/web"
            ]
        );
        assert_eq!(pull_args("oci://r/web", None, Path::new("/d")).len(), 4);
    }

    #[test]
    fn helm_pull_output_gives_the_manifest_digest() {
        let stderr = "Pulled: 127.0.0.1:5000/charts/deployment-example:0.2.0\nDigest: sha256:7086de44fdc4479d4ee397497c065215d6875fc8b81754aaefb53bc3e3691828\n";
        assert_eq!(
            parse_digest("", stderr).as_deref(),
            Some("sha256:7086de44fdc4479d4ee397497c065215d6875fc8b81754aaefb53bc3e3691828")
        );
        assert!(parse_digest(stderr, "").is_some(), "or on stdout");
        assert_eq!(parse_digest("", "Digest:\n"), None);
    }

    #[test]
    fn the_version_of_an_archive_is_read_from_its_chart_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.tgz");
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut tar = tar::Builder::new(gz);
        for (name, content) in [
            ("web/templates/Chart.yaml", "version: 9.9.9\n"),
            (
                "web/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 0.3.0+build.1\n",
            ),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, name, content.as_bytes())
                .unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap();
        assert_eq!(archive_version(&path), Ok("0.3.0+build.1".into()));
        std::fs::write(&path, b"not gzip").unwrap();
        assert!(archive_version(&path).is_err());
    }
}
