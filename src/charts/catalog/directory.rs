//! Chart-home directories in the catalog: a digest over their files, taken again only when a file's size or mtime changed.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

use dashmap::DashMap;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// What a directory looked like when its digest was taken: every file's path, size and mtime.
type DirectoryListing = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// A chart-home directory as last read.
pub(super) struct Directory {
    stamp: DirectoryListing,
    pub(super) digest: String,
    /// When a spec last named it.
    pub(super) seen: Instant,
}

/// Takes the digest of the directory at `path` in `directories` again when its files changed;
/// forgets it when it is no chart. Returns whether its digest changed.
pub(super) fn refresh(
    directories: &DashMap<PathBuf, Directory>,
    path: &Path,
    now: Instant,
) -> bool {
    let Some(stamp) = stamp(path) else {
        return directories.remove(path).is_some();
    };
    if let Some(mut known) = directories.get_mut(path) {
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
            let old = directories.insert(path.to_owned(), known);
            old.is_none_or(|o| o.digest != digest)
        }
        Err(error) => {
            tracing::warn!(chart = %path.display(), %error, "cannot read the chart directory");
            directories.remove(path).is_some()
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
