//! The keys of the Git webhook Secrets, kept a few seconds so a flood of hooks costs at most one read of each Secret per period.
//!
//! A Secret is read through [`ReadSecret`] when its key is not held or was read [`KEY_TTL`] ago
//! or longer; hooks arriving meanwhile wait for that one read rather than making their own. What
//! the read found is kept for [`KEY_TTL`]: the key, or that there is none (no Secret, no
//! `token` key, an empty one, or a read that failed, logged once per period). So a Secret changed
//! or deleted takes effect within [`KEY_TTL`], and one created after a hook found it missing
//! does too. At most [`CACHED`] Secrets are kept; past it, the oldest read is dropped.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::OnceCell, time::Instant};

use crate::charts::credentials::ReadSecret;

/// How long a Secret's key (or its absence) is kept after it was read.
pub(crate) const KEY_TTL: Duration = Duration::from_secs(5);
/// Secrets whose keys are kept at once.
const CACHED: usize = 64;
/// The key of the webhook Secret holding the shared secret (or GitLab's token).
pub(crate) const SECRET_KEY: &str = "token";

/// A webhook Secret's key, None when there is none to check against.
pub(crate) type Key = Option<Arc<[u8]>>;

/// One read of a Secret: when it started and what it found, once it did.
type Read = (Instant, Arc<OnceCell<Key>>);

/// The keys of the webhook Secrets of the operator's namespace, by Secret name.
#[derive(Default)]
pub(crate) struct KeyCache {
    reads: Mutex<HashMap<String, Read>>,
}

impl KeyCache {
    /// The key of Secret `namespace/name`, read through `secrets` unless read less than
    /// [`KEY_TTL`] ago.
    pub(crate) async fn key(&self, secrets: &dyn ReadSecret, namespace: &str, name: &str) -> Key {
        let cell = self.current(name);
        cell.get_or_init(|| read(secrets, namespace, name))
            .await
            .clone()
    }

    /// The read of `name` to wait for: the one started less than [`KEY_TTL`] ago, or a new one.
    fn current(&self, name: &str) -> Arc<OnceCell<Key>> {
        let now = Instant::now();
        let fresh = |(started, _): &Read| now.duration_since(*started) < KEY_TTL;
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(read) = reads.get(name).filter(|r| fresh(r)) {
            return read.1.clone();
        }
        if reads.len() >= CACHED && !reads.contains_key(name) {
            reads.retain(|_, read| fresh(read));
            let oldest = reads
                .iter()
                .min_by_key(|(_, (started, _))| *started)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest.filter(|_| reads.len() >= CACHED) {
                reads.remove(&oldest);
            }
        }
        let cell = Arc::new(OnceCell::new());
        reads.insert(name.to_owned(), (now, cell.clone()));
        cell
    }

    /// How many Secrets' keys are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.reads.lock().unwrap().len()
    }
}

/// Reads the key of Secret `namespace/name`.
async fn read(secrets: &dyn ReadSecret, namespace: &str, name: &str) -> Key {
    match secrets.read(namespace, name).await {
        Ok(secret) => secret?
            .data
            .get(SECRET_KEY)
            .filter(|key| !key.is_empty())
            .map(|key| Arc::from(key.as_slice())),
        Err(error) => {
            tracing::warn!(
                %namespace, secret = %name, %error,
                "cannot read a Git webhook Secret: hooks signed with it are refused for {}s, then it is read again; check that the operator may get Secrets in {namespace}",
                KEY_TTL.as_secs()
            );
            None
        }
    }
}
