//! What is known of each chart: chart-home directories by content digest, repository and OCI charts by resolved version.

use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use dashmap::DashMap;
use futures::{StreamExt, future::BoxFuture};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::{
    api::crd::RefKind,
    api::crd::{Chart, ControllerSpec},
    charts::cache::{
        ChartCache, Resolved,
        git::{
            GitChart,
            files::{FileContent, FileGroup},
        },
    },
    plan::{self, ChartLookup, ChartSource, Verified},
    policy::Scope,
    policy::access::{Credentials, Trust},
    policy::source::{SourceUrl, redact},
};

/// Resolutions run at once by one refresh.
const RESOLVE_CONCURRENCY: usize = 4;

/// What a directory looked like when its digest was taken: every file's path, size and mtime.
type DirectoryListing = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// A chart outside the chart home.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Remote {
    /// A chart in a Helm repository.
    Repository { url: String, chart: String },
    /// An `oci://` reference.
    Oci(String),
    /// A chart directory of a Git repository at a ref.
    Git {
        url: String,
        path: String,
        reference: RefKind,
        chart: String,
        interval_secs: u64,
    },
}

/// A remote chart with the version constraint it is asked for with, whose credentials it is
/// fetched with and the signature rules it must pass: what one Controller resolved with
/// credentials is never another's without, nor what one checked under no rule another's under
/// some.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RemoteKey {
    remote: Remote,
    constraint: Option<String>,
    pub(crate) credentials: Credentials,
    pub(crate) trust: Trust,
}

impl RemoteKey {
    /// The key of a repository or OCI chart; a chart-home directory's path otherwise.
    fn of<'a>(
        source: &'a ChartSource,
        (credentials, trust): (&Credentials, &Trust),
        constraint: Option<&str>,
    ) -> Result<Self, &'a Path> {
        let remote = match source {
            ChartSource::Directory(path) => return Err(path),
            ChartSource::Repository { url, chart } => Remote::Repository {
                url: url.clone(),
                chart: chart.clone(),
            },
            ChartSource::Oci(reference) => Remote::Oci(reference.clone()),
            ChartSource::Git {
                url,
                path,
                reference,
                chart,
                interval_secs,
            } => Remote::Git {
                url: url.clone(),
                path: path.clone(),
                reference: reference.clone(),
                chart: chart.clone(),
                interval_secs: *interval_secs,
            },
        };
        Ok(Self {
            remote,
            constraint: constraint.map(str::to_owned),
            credentials: credentials.clone(),
            trust: trust.clone(),
        })
    }

    /// The OCI reference (`oci://…`), when it is an OCI chart.
    pub(crate) fn oci(&self) -> Option<&str> {
        match &self.remote {
            Remote::Oci(reference) => Some(reference),
            Remote::Repository { .. } | Remote::Git { .. } => None,
        }
    }

    /// Whether it is a Git chart.
    pub(crate) fn is_git(&self) -> bool {
        matches!(self.remote, Remote::Git { .. })
    }

    /// The chart in words, for messages: name, constraint and where it is looked for, without
    /// credentials.
    fn describe(&self) -> String {
        let version = match &self.constraint {
            Some(c) => format!("version {c}"),
            None => "(newest version)".to_owned(),
        };
        redact(&match &self.remote {
            Remote::Repository { url, chart } => format!("chart {chart} {version} from {url}"),
            Remote::Oci(reference) => format!("chart {reference} {version}"),
            Remote::Git {
                url,
                path,
                reference,
                chart,
                ..
            } => format!("chart {chart} from Git {url} path {path} at {reference}"),
        })
    }

    /// Why the chart cannot be used, from helm's error.
    fn missing(&self, error: &str) -> String {
        let check = match self.remote {
            Remote::Repository { .. } => "check repo/version",
            Remote::Oci(_) => "check the oci:// reference/version",
            Remote::Git { .. } => "check git (url, ref, path) and the source's Secret",
        };
        redact(&format!(
            "cannot resolve {}: {error}; {check}",
            self.describe()
        ))
    }
}

/// A chart the planner may ask about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Wanted {
    /// A chart-home directory.
    Directory(PathBuf),
    /// A repository or OCI chart with its constraint, and the prefix its fetches stay under.
    Remote(Box<RemoteKey>, SourceUrl),
}

/// Every chart a spec names that `allowed` lets the hub fetch (the tenancy policies' and the
/// chart-source rules' say: a refused chart is never read or fetched), with where its fetches
/// must stay.
pub(crate) fn wanted_by(
    spec: &ControllerSpec,
    chart_home: &Path,
    allowed: &dyn Fn(&Chart) -> Option<Scope>,
) -> HashSet<Wanted> {
    spec.tenancies
        .iter()
        .flat_map(|t| &t.charts)
        .filter_map(|c| {
            let scope = allowed(c)?;
            let source = plan::source_of(c, chart_home);
            let (credentials, trust) = match &scope {
                Scope::Under(_, credentials, trust) => (credentials.clone(), trust.clone()),
                Scope::ChartHome => Default::default(),
            };
            match (
                RemoteKey::of(&source, (&credentials, &trust), c.version.as_deref()),
                scope,
            ) {
                (Err(path), _) => (!path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir))
                .then(|| Wanted::Directory(path.to_owned())),
                (Ok(key), Scope::Under(prefix, ..)) => Some(Wanted::Remote(Box::new(key), prefix)),
                (Ok(_), Scope::ChartHome) => None,
            }
        })
        .collect()
}

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
                } => {
                    let chart = GitChart {
                        url,
                        path,
                        reference,
                        chart,
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

/// A chart-home directory as last read.
struct Directory {
    stamp: DirectoryListing,
    digest: String,
    /// When a spec last named it.
    seen: Instant,
}

/// One remote chart and constraint: its last resolution.
struct Entry {
    /// Held while helm runs, so one entry is never resolved twice at once.
    flight: tokio::sync::Mutex<()>,
    slot: Mutex<Slot>,
}

struct Slot {
    /// The last successful resolution (verified, when its key has signature rules).
    good: Option<Resolved>,
    /// How `good` was verified, when its key has signature rules.
    verified: Option<Verified>,
    /// Why the last resolution was refused by a signature rule, when it was.
    refused: Option<String>,
    /// Why the last attempt failed, when it did.
    failure: Option<String>,
    /// When it was last attempted.
    tried: Option<Instant>,
    /// The prefix its fetches stayed under then: another one (the policies changed) makes the
    /// attempt stale.
    scope: Option<SourceUrl>,
    /// When a spec last named it.
    seen: Instant,
}

impl Entry {
    fn new(now: Instant) -> Self {
        Self {
            flight: tokio::sync::Mutex::new(()),
            slot: Mutex::new(Slot {
                good: None,
                verified: None,
                refused: None,
                failure: None,
                tried: None,
                scope: None,
                seen: now,
            }),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, key: &RemoteKey) -> ChartLookup {
        let slot = self.slot();
        if let Some(refused) = &slot.refused {
            return ChartLookup::Unverified(refused.clone());
        }
        match (&slot.good, &slot.failure) {
            (Some(good), _) if key.trust.is_empty() => ChartLookup::Found {
                version: Some(good.version.clone()),
                digest: good.digest.clone(),
                verified: None,
                commit: good.git.as_ref().map(|g| g.commit.clone()),
            },
            (Some(good), _) => match &slot.verified {
                // A repository chart has no digest of its own: the archive checked is its.
                Some(verified) => ChartLookup::Found {
                    version: Some(good.version.clone()),
                    digest: Some(
                        good.digest
                            .clone()
                            .unwrap_or_else(|| format!("sha256:{}", verified.archive)),
                    ),
                    verified: Some(verified.clone()),
                    commit: good.git.as_ref().map(|g| g.commit.clone()),
                },
                None => ChartLookup::Unverified(format!(
                    "the signatures of {} are not checked yet",
                    key.describe()
                )),
            },
            (None, Some(failure)) => ChartLookup::Missing(failure.clone()),
            (None, None) => ChartLookup::Missing(format!("{} is not resolved yet", key.describe())),
        }
    }
}

/// The chart catalog: looked up by the planner, filled before each plan and refreshed every
/// interval.
pub(crate) struct ChartCatalog {
    resolver: Box<dyn Resolve>,
    interval: Duration,
    directories: DashMap<PathBuf, Directory>,
    remote: DashMap<RemoteKey, Arc<Entry>>,
    git_values: git_values::GitValues,
    /// Woken when a push hook made Git sources due.
    git_due: tokio::sync::Notify,
}

impl ChartCatalog {
    /// A catalog resolving repository and OCI charts through `cache`, again when a resolution
    /// is older than `interval`; checking no signatures.
    #[cfg(test)]
    pub(crate) fn new(cache: Arc<ChartCache>, interval: Duration) -> Self {
        Self::with_resolver(Box::new(cache), interval)
    }

    /// A catalog resolving and checking charts through `resolver`.
    pub(crate) fn with_resolver(resolver: Box<dyn Resolve>, interval: Duration) -> Self {
        Self {
            resolver,
            interval,
            directories: DashMap::new(),
            remote: DashMap::new(),
            git_values: Default::default(),
            git_due: tokio::sync::Notify::new(),
        }
    }

    /// Makes the Git sources of these repositories due at once and wakes whoever waits in
    /// [`ChartCatalog::git_woken`]; returns how many were known.
    pub(crate) fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        let made = self.resolver.make_due(repositories);
        if made > 0 {
            self.git_due.notify_one();
        }
        made
    }

    /// Returns once a push hook made Git sources due.
    pub(crate) async fn git_woken(&self) {
        self.git_due.notified().await;
    }

    /// How often charts are looked at again.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Brings what is known of every chart `spec` names up to date: directories are read again
    /// when their files changed, remote charts resolved when never resolved or resolved longer
    /// than the interval ago.
    pub(crate) async fn prepare(
        &self,
        spec: &ControllerSpec,
        chart_home: &Path,
        allowed: &(dyn Fn(&Chart) -> Option<Scope> + Sync),
    ) {
        let now = Instant::now();
        let interval = self.interval;
        let fresh = move |tried: Instant| now.duration_since(tried) < interval;
        let wanted = wanted_by(spec, chart_home, allowed);
        futures::stream::iter(wanted)
            .for_each_concurrent(RESOLVE_CONCURRENCY, |w| async move {
                match w {
                    Wanted::Directory(path) => {
                        self.refresh_directory(&path, now);
                    }
                    Wanted::Remote(key, scope) => {
                        self.resolve(&key, &scope, now, now.checked_sub(interval), fresh)
                            .await;
                    }
                }
            })
            .await;
    }

    /// What is known of a chart fetched with `credentials` under the signature rules `trust`
    /// now, for the planner.
    pub(crate) fn lookup(
        &self,
        source: &ChartSource,
        credentials: &Credentials,
        trust: &Trust,
        version: Option<&str>,
    ) -> ChartLookup {
        match RemoteKey::of(source, (credentials, trust), version) {
            Err(path) => match self.directories.get(path) {
                Some(entry) => ChartLookup::Found {
                    version: None,
                    digest: Some(entry.digest.clone()),
                    verified: None,
                    commit: None,
                },
                None => ChartLookup::Missing(format!(
                    "no chart (Chart.yaml) at {}; add it to the chart home (--chart-home), or set repo or an oci:// chartName",
                    path.display()
                )),
            },
            Ok(key) => match self.remote.get(&key) {
                Some(entry) => entry.lookup(&key),
                None => ChartLookup::Missing(format!("{} is not resolved yet", key.describe())),
            },
        }
    }

    /// Reads every wanted directory again and resolves every wanted remote chart again (one
    /// resolved while this waited counts); forgets charts no spec named for an interval.
    /// Returns the charts whose lookup changed.
    pub(crate) async fn refresh(&self, wanted: &HashSet<Wanted>) -> HashSet<Wanted> {
        let now = Instant::now();
        self.forget_unwanted(wanted, now);
        futures::stream::iter(wanted.clone())
            .map(|w| async move {
                let changed = match &w {
                    Wanted::Directory(path) => self.refresh_directory(path, now),
                    Wanted::Remote(key, scope) => {
                        self.resolve(key, scope, now, Some(now), |tried| tried > now)
                            .await
                    }
                };
                changed.then_some(w)
            })
            .buffer_unordered(RESOLVE_CONCURRENCY)
            .filter_map(futures::future::ready)
            .collect()
            .await
    }

    /// Resolves every wanted Git chart again: the cache asks the fetcher only of the sources
    /// whose interval has passed. Returns the charts whose lookup changed.
    pub(crate) async fn refresh_git(&self, wanted: &HashSet<Wanted>) -> HashSet<Wanted> {
        let now = Instant::now();
        let git: Vec<Wanted> = wanted
            .iter()
            .filter(|w| matches!(w, Wanted::Remote(key, _) if key.is_git()))
            .cloned()
            .collect();
        futures::stream::iter(git)
            .map(|w| async move {
                let Wanted::Remote(key, scope) = &w else {
                    return None;
                };
                self.resolve(key, scope, now, Some(now), |tried| tried > now)
                    .await
                    .then_some(w)
            })
            .buffer_unordered(RESOLVE_CONCURRENCY)
            .filter_map(futures::future::ready)
            .collect()
            .await
    }

    fn forget_unwanted(&self, wanted: &HashSet<Wanted>, now: Instant) {
        let unused = |seen: Instant| now.duration_since(seen) >= self.interval;
        self.directories
            .retain(|path, d| wanted.contains(&Wanted::Directory(path.clone())) || !unused(d.seen));
        let keys: HashSet<&RemoteKey> = wanted
            .iter()
            .filter_map(|w| match w {
                Wanted::Remote(key, _) => Some(&**key),
                Wanted::Directory(_) => None,
            })
            .collect();
        self.remote
            .retain(|key, e| keys.contains(key) || !unused(e.slot().seen));
        if let Some(before) = now.checked_sub(self.interval) {
            self.resolver.forget(before);
        }
    }

    /// Resolves a remote chart unless its last attempt, under the same `scope`, is `fresh`,
    /// with a repository index fetched at or after `since`; one resolution of an entry runs at
    /// a time, and who waited for it takes its result. What was resolved under another scope
    /// no longer counts. Returns whether the lookup changed.
    async fn resolve(
        &self,
        key: &RemoteKey,
        scope: &SourceUrl,
        now: Instant,
        since: Option<Instant>,
        fresh: impl Fn(Instant) -> bool,
    ) -> bool {
        let entry = self
            .remote
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Entry::new(now)))
            .clone();
        entry.slot().seen = now;
        let is_fresh = || {
            let slot = entry.slot();
            slot.scope.as_ref() == Some(scope) && slot.tried.is_some_and(&fresh)
        };
        if is_fresh() {
            return false;
        }
        let _flight = entry.flight.lock().await;
        if is_fresh() {
            return false;
        }
        let before = entry.lookup(key);
        let result = self.resolver.resolve(key, scope, since).await;
        let checked = match &result {
            Ok(resolved) if !key.trust.is_empty() => {
                Some(self.resolver.verify(key, scope, resolved).await)
            }
            _ => None,
        };
        {
            let mut slot = entry.slot();
            slot.tried = Some(Instant::now());
            if slot
                .scope
                .replace(scope.clone())
                .is_some_and(|old| old != *scope)
            {
                slot.good = None;
                slot.verified = None;
            }
            match result {
                Ok(resolved) => {
                    if slot.good.as_ref() != Some(&resolved) && slot.refused.is_none() {
                        tracing::info!(chart = %key.describe(), version = %resolved.version, digest = resolved.digest.as_deref().unwrap_or(""), "resolved chart");
                    }
                    slot.failure = None;
                    match checked {
                        None => {
                            slot.good = Some(resolved);
                            slot.refused = None;
                        }
                        Some(checked) => take_verdict(&mut slot, key, resolved, checked),
                    }
                }
                Err(error) => {
                    let message = key.missing(&error);
                    if let Some(good) = &slot.good
                        && slot.failure.as_ref() != Some(&message)
                    {
                        tracing::warn!(version = %good.version, "{message}; keeping the version resolved before");
                    }
                    slot.failure = Some(message);
                }
            }
        }
        entry.lookup(key) != before
    }

    /// Takes a directory's digest again when its files changed; forgets it when it is no chart.
    /// Returns whether its digest changed.
    fn refresh_directory(&self, path: &Path, now: Instant) -> bool {
        let Some(stamp) = stamp(path) else {
            return self.directories.remove(path).is_some();
        };
        if let Some(mut known) = self.directories.get_mut(path) {
            known.seen = now;
            if known.stamp == stamp {
                return false;
            }
        }
        match digest_directory(path, &stamp) {
            Ok(digest) => {
                let known = Directory {
                    stamp,
                    digest: digest.clone(),
                    seen: now,
                };
                let old = self.directories.insert(path.to_owned(), known);
                old.is_none_or(|o| o.digest != digest)
            }
            Err(error) => {
                tracing::warn!(chart = %path.display(), %error, "cannot read the chart directory");
                self.directories.remove(path).is_some()
            }
        }
    }
}

/// Takes the signature check of a resolution into its slot: verified, it is the one planned;
/// refused, nothing is (not even what was verified before: the source now serves this); not
/// checked (the registry or the verifier failed), what was verified before of the same content
/// stays, and anything else waits.
fn take_verdict(
    slot: &mut Slot,
    key: &RemoteKey,
    resolved: Resolved,
    checked: Result<Checked, String>,
) {
    let chart = key.describe();
    match checked {
        Ok(Checked::Verified(verified)) => {
            if slot.verified.as_ref() != Some(&verified) {
                tracing::info!(%chart, version = %resolved.version, by = %verified.by, "verified chart signatures");
            }
            slot.good = Some(resolved);
            slot.verified = Some(verified);
            slot.refused = None;
        }
        Ok(Checked::Refused(reason)) => {
            let refused = redact(&format!("{chart} {}: {reason}", resolved.version));
            if slot.refused.as_ref() != Some(&refused) {
                tracing::warn!(%chart, version = %resolved.version, %reason, "chart signatures refused; it reaches no member");
            }
            slot.good = None;
            slot.verified = None;
            slot.refused = Some(refused);
        }
        Err(error) => {
            if slot.good.as_ref() == Some(&resolved) && slot.verified.is_some() {
                tracing::warn!(%chart, %error, "cannot check chart signatures again; keeping the verdict reached before");
                return;
            }
            slot.good = None;
            slot.verified = None;
            slot.refused = Some(redact(&format!(
                "the signatures of {chart} {} cannot be checked: {error}",
                resolved.version
            )));
        }
    }
}

/// Every file below a chart directory with its size and mtime; None when it holds no Chart.yaml.
fn stamp(root: &Path) -> Option<DirectoryListing> {
    if !root.join("Chart.yaml").is_file() {
        return None;
    }
    let mut out = DirectoryListing::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root).ok()?.to_owned();
                out.insert(relative, (meta.len(), meta.modified().ok()));
            }
        }
    }
    Some(out)
}

/// A digest over every file's relative path and content, in path order: 16 hex digits.
fn digest_directory(root: &Path, stamp: &DirectoryListing) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    for relative in stamp.keys() {
        let content = std::fs::read(root.join(relative))?;
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    let digest = hasher.finalize();
    Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
}

mod git_values;

#[cfg(test)]
mod tests;
