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
    ffi::OsString,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
    time::SystemTime,
};

use dashmap::DashMap;
use reqwest::Url;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::{
    charts::{
        constraint,
        credentials::{self, Material, SourceSecrets},
        fetch::{self, Access, Fetcher},
    },
    metrics::Metrics,
    plan::ChartSource,
    policy::access::Credentials,
    policy::source::{Refused, SourceUrl, redact},
    queue::failure::trim_error,
};

pub(crate) use crate::charts::common::*;
use crate::charts::{index::*, store::*};

/// The digest helm prints on a `Digest:` line (OCI pulls; helm 4 prints it on stderr).
pub(crate) fn parse_digest(stdout: &str, stderr: &str) -> Option<String> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find_map(|l| l.trim().strip_prefix("Digest:"))
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
}

/// The private files an OCI pull reads its credentials from: paths only ever reach argv.
#[derive(Debug, Default)]
struct PullFiles {
    /// The registries' login file (`--registry-config`), always given, so helm never falls back
    /// on a login of the operator's user.
    registry_config: PathBuf,
    /// `--ca-file`.
    ca: Option<PathBuf>,
    /// `--cert-file` and `--key-file`.
    identity: Option<(PathBuf, PathBuf)>,
}

impl PullFiles {
    /// Writes what `material` holds for the registry `host` into `dir` (private to the
    /// operator), each file 0600.
    fn write(dir: &Path, material: Option<&Material>, host: &str) -> std::io::Result<Self> {
        let private = |name: &str, content: &[u8]| -> std::io::Result<PathBuf> {
            use std::os::unix::fs::OpenOptionsExt as _;
            let path = dir.join(name);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(content)?;
            Ok(path)
        };
        let config = match material {
            Some(m) => m.registry_config(host),
            None => credentials::registry_config(None, host),
        };
        Ok(Self {
            registry_config: private("config.json", &config)?,
            ca: material
                .and_then(|m| m.ca.as_deref())
                .map(|ca| private("ca.crt", ca))
                .transpose()?,
            identity: match material.and_then(|m| m.identity.as_ref()) {
                Some((cert, key)) => Some((private("tls.crt", cert)?, private("tls.key", key)?)),
                None => None,
            },
        })
    }
}

/// Arguments of `helm pull` of an OCI chart into `into`, its credentials read from `files`:
/// every value inside one `--flag=value` argument and the reference after `--`, so nothing can
/// pose as a flag; never a credential, only the paths of the files holding them.
fn pull_args(
    reference: &str,
    constraint: Option<&str>,
    into: &Path,
    files: &PullFiles,
) -> Vec<OsString> {
    let flag = |name: &str, path: &Path| {
        let mut arg = OsString::from(format!("--{name}="));
        arg.push(path);
        arg
    };
    let mut args: Vec<OsString> = vec!["pull".into(), flag("destination", into)];
    if let Some(constraint) = constraint {
        args.push(format!("--version={constraint}").into());
    }
    args.push(flag("registry-config", &files.registry_config));
    if let Some(ca) = &files.ca {
        args.push(flag("ca-file", ca));
    }
    if let Some((cert, key)) = &files.identity {
        args.push(flag("cert-file", cert));
        args.push(flag("key-file", key));
    }
    args.push("--".into());
    args.push(reference.into());
    args
}

/// The `host[:port]` of an OCI reference.
fn registry_host(reference: &str) -> &str {
    let rest = reference.strip_prefix("oci://").unwrap_or(reference);
    rest.split('/').next().unwrap_or(rest)
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
    async fn get(
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

    /// Resolves an OCI chart: `helm pull` of the newest version matching `constraint`, with
    /// `credentials`, kept in the cache under its sha256. The digest is the manifest's, as helm
    /// prints it.
    pub(crate) async fn oci(
        &self,
        reference: &str,
        constraint: Option<&str>,
        credentials: &Credentials,
    ) -> Result<Resolved> {
        let material = self.material(credentials, true).await?;
        self.pull(reference, constraint, credentials, material.as_ref())
            .await
            .map_err(|e| self.hinted(e, credentials))
    }

    async fn pull(
        &self,
        reference: &str,
        constraint: Option<&str>,
        credentials: &Credentials,
        material: Option<&Material>,
    ) -> Result<Resolved> {
        let failed = |message: String| Error::Pull {
            reference: redact(reference),
            message: redact(&material.map_or(message.clone(), |m| m.mask(&message))),
        };
        let scratch = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        // Beside the scratch directory, not in it: helm writes the chart there.
        let private = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        let files = PullFiles::write(private.path(), material, registry_host(reference))
            .map_err(|e| self.store.io(e))?;
        let mut command = tokio::process::Command::new(&self.helm);
        command
            .args(pull_args(reference, constraint, scratch.path(), &files))
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
            (
                ChartSource::Oci(reference.to_owned()),
                credentials.clone(),
                version.clone(),
            ),
            sha.clone(),
        );
        Ok(Resolved {
            version,
            digest,
            archive: Some(sha),
            provenance: None,
            git: None,
        })
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
mod signing;

#[cfg(test)]
mod tests;
