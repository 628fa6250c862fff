//! The archives on disk: kept by sha256 within a byte bound, least recently used removed first, never one checked out.

use std::{
    collections::HashMap,
    io::Read as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::{metrics::Metrics, plan::ChartSource, policy::access::Credentials};

use crate::charts::{common::*, index::yaml_error};

/// The sha256 of a file's content, as hex.
pub(crate) fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The version in the `Chart.yaml` at the top of a chart archive.
pub(crate) fn archive_version(path: &Path) -> std::result::Result<String, String> {
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

/// One archive on disk.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) size: u64,
    /// When it was last used, as a tick of [`State::clock`].
    pub(crate) used: u64,
    /// Helm calls using it now; it is not removed while any does.
    pub(crate) users: usize,
}

/// What the cache holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Archives by sha256.
    pub(crate) files: HashMap<String, Stored>,
    /// Their total size.
    pub(crate) total: u64,
    /// Counts uses, to order archives by their last one.
    pub(crate) clock: u64,
    /// The archive of each remote chart version, by whose credentials fetched it.
    pub(crate) pins: HashMap<(ChartSource, Credentials, String), String>,
}

/// The archives on disk and their bound, shared with every checkout.
#[derive(Debug)]
pub(crate) struct ArchiveStore {
    pub(crate) dir: PathBuf,
    pub(crate) limit: u64,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) state: Mutex<State>,
}

impl ArchiveStore {
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.tgz"))
    }

    pub(crate) fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            dir: self.dir.clone(),
            source,
        }
    }

    /// Whether the archive `digest` is on disk; marks it used.
    pub(crate) fn has(&self, digest: &str) -> bool {
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
    pub(crate) fn keep(&self, from: &Path, digest: &str, size: u64) -> Result<()> {
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
    pub(crate) fn evict(&self, state: &mut State) {
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

    pub(crate) fn drop_file(&self, state: &mut State, digest: &str) {
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
    pub(crate) store: Arc<ArchiveStore>,
    pub(crate) digest: String,
    pub(crate) path: PathBuf,
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
