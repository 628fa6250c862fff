//! Registration hot reload: the file and its kubeconfigs are re-read when they change; a valid edit swaps the registry, an invalid one is refused.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use kube::runtime::events::EventType;
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;

use dashmap::DashMap;
use kube::runtime::reflector::Store;

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ReleaseKey},
    clusters::registry::{
        ClusterRegistry, Digest, HubSource, RegistrationFile, RegistryError, digest_file,
        kubeconfig_paths,
    },
    controller::context::Members,
    controller::events::Events,
    metrics::Metrics,
    plan::OwnerId,
};

/// How often the registration file and its kubeconfigs are checked for changes.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Diff {
    /// Clusters newly registered.
    pub(crate) added: BTreeSet<ClusterName>,
    /// Clusters no longer registered.
    pub(crate) removed: BTreeSet<ClusterName>,
    /// Clusters whose context, kubeconfig (its path or its content) or labels changed.
    pub(crate) changed: BTreeSet<ClusterName>,
}

/// Compares two registries by name, registration entry and kubeconfig content.
pub(crate) fn diff(old: &ClusterRegistry, new: &ClusterRegistry) -> Diff {
    let mut d = Diff::default();
    for m in new.iter() {
        match old.get(&m.entry.name) {
            None => {
                d.added.insert(m.entry.name.clone());
            }
            Some(o)
                if o.entry != m.entry
                    || o.kubeconfig != m.kubeconfig
                    || o.kubeconfig_digest != m.kubeconfig_digest =>
            {
                d.changed.insert(m.entry.name.clone());
            }
            Some(_) => {}
        }
    }
    d.removed = old
        .iter()
        .map(|m| m.entry.name.clone())
        .filter(|n| new.get(n).is_none())
        .collect();
    d
}

/// What a reload is decided on: the registration file's text and the digest of every kubeconfig
/// it uses, so rotated credentials are noticed while the file itself stays the same.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Sources {
    /// The registration file's text.
    pub(crate) text: String,
    /// Each kubeconfig the hub and the entries use, with the digest of its content (`None`: unreadable).
    pub(crate) kubeconfigs: BTreeMap<PathBuf, Option<Digest>>,
}

impl Sources {
    /// Reads the registration file and digests the kubeconfigs it names (none while it does not parse).
    pub(crate) fn read(path: &Path, hub: &HubSource) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let kubeconfigs = RegistrationFile::parse(path, &text)
            .map(|file| kubeconfig_paths(hub, &file))
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let digest = digest_file(&p);
                (p, digest)
            })
            .collect();
        Ok(Self { text, kubeconfigs })
    }

    /// What the registry in force was built from, given the registration text it was built from.
    pub(crate) fn of(text: String, registry: &ClusterRegistry) -> Self {
        let kubeconfigs = registry
            .iter()
            .filter(|m| !m.kubeconfig.as_os_str().is_empty())
            .map(|m| (m.kubeconfig.clone(), m.kubeconfig_digest))
            .collect();
        Self { text, kubeconfigs }
    }
}

/// What a reload changes and tells: the member clusters, the releases their removal leaves
/// behind, and the Controllers it warns through Events.
pub(crate) struct Reach {
    /// The member clusters.
    pub(crate) members: Members,
    /// Releases left in clusters removed from the registration file, with their owners.
    pub(crate) orphans: Arc<DashMap<ReleaseKey, OwnerId>>,
    /// Every `Controller` on the hub, warned when a reload is refused.
    pub(crate) controllers: Store<TenancyController>,
    /// Publishes the warnings.
    pub(crate) events: Arc<Events>,
    /// Counts reloads.
    pub(crate) metrics: Arc<Metrics>,
}

/// Everything a reload needs besides what it changes.
pub(crate) struct Reloader {
    /// The registration file.
    pub(crate) path: PathBuf,
    /// Where the hub is.
    pub(crate) hub: HubSource,
    /// Where release-record watches send their changes.
    pub(crate) records: Sender<crate::observe::releases::RecordChange>,
    /// Where resources are woken for a reconcile.
    pub(crate) everything: Sender<()>,
}

impl Reloader {
    /// Checks the file and its kubeconfigs every [`CHECK_EVERY`] until cancelled and applies each
    /// change of their content.
    pub(crate) async fn run(self, ctx: Reach, cancel: CancellationToken) {
        // What the registry in force came from: a kubeconfig changed since is noticed at once.
        let mut last = std::fs::read_to_string(&self.path)
            .ok()
            .map(|text| Sources::of(text, &ctx.members.registry.load()));
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => return,
            }
            let sources = match Sources::read(&self.path, &self.hub) {
                Ok(s) => s,
                Err(e) => {
                    if last.is_some() {
                        tracing::error!(file = %self.path.display(), error = %e, "cannot read the registration file; keeping the last good registry");
                        last = None;
                    }
                    continue;
                }
            };
            if last.as_ref() == Some(&sources) {
                continue;
            }
            let sources = last.insert(sources);
            match self.apply(&ctx, &sources.text, &cancel).await {
                Ok(d) => {
                    ctx.metrics.registry_reload(true);
                    tracing::info!(added = ?d.added, removed = ?d.removed, changed = ?d.changed, "registration file reloaded");
                }
                Err(e) => {
                    ctx.metrics.registry_reload(false);
                    let kept = ctx.members.registry.load().names().len();
                    let note = format!(
                        "{e}; the last good registry ({kept} clusters) stays in force until the file is fixed"
                    );
                    tracing::error!("{note}");
                    self.report(&ctx, note).await;
                }
            }
        }
    }

    async fn report(&self, ctx: &Reach, note: String) {
        for c in ctx.controllers.state() {
            crate::controller::events::publish(
                &ctx.events,
                &c,
                EventType::Warning,
                "RegistrationRejected",
                "Reload",
                note.clone(),
            )
            .await;
        }
    }

    async fn apply(
        &self,
        ctx: &Reach,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<Diff, RegistryError> {
        let file = RegistrationFile::parse(&self.path, text)?;
        let new = ClusterRegistry::connect(&self.hub, &file).await?;
        let old = ctx.members.registry.load_full();
        let d = diff(&old, &new);
        let fresh = |n: &ClusterName| d.added.contains(n) || d.changed.contains(n);
        for cluster in &d.removed {
            for (key, owner) in ctx.members.releases.managed(Some(cluster)) {
                ctx.orphans.insert(key, owner);
            }
        }
        ctx.orphans.retain(|k, _| {
            !d.added.contains(&k.scope.cluster) && !d.changed.contains(&k.scope.cluster)
        });
        // Swapped against whatever is in force now: joined members that changed since `old`
        // was read are carried over, not lost.
        ctx.members
            .registry
            .rcu(|current| new.clone().keeping(current, fresh));
        for cluster in &d.removed {
            ctx.members.releases.forget(cluster);
            ctx.members.health.forget(cluster);
        }
        for cluster in d.added.iter().chain(&d.changed) {
            let link = ctx.members.links.get(cluster).expect("in the new registry");
            ctx.members.releases.watch(
                cluster.clone(),
                |selector| link.release_records(selector),
                self.records.clone(),
                cancel,
            );
        }
        for gone in ctx.members.watches.refresh(&ctx.members.links, &d.changed) {
            ctx.members.model.forget(&gone);
        }
        let _ = self.everything.send(()).await;
        Ok(d)
    }
}

/// Follows a change of the joined (pull) members as a reload follows the file's: releases of a
/// member gone become orphans, a member added or changed gets its release-record watch, and the
/// workload watches follow.
pub(crate) fn joined_changed(
    ctx: &Reach,
    change: &crate::clusters::joined::Change,
    records: &Sender<crate::observe::releases::RecordChange>,
    cancel: &CancellationToken,
) {
    for cluster in &change.removed {
        for (key, owner) in ctx.members.releases.managed(Some(cluster)) {
            ctx.orphans.insert(key, owner);
        }
        ctx.members.releases.forget(cluster);
        ctx.members.health.forget(cluster);
    }
    for cluster in change.added.iter().chain(&change.changed) {
        let Some(link) = ctx.members.links.get(cluster) else {
            continue;
        };
        ctx.members.releases.watch(
            cluster.clone(),
            |selector| link.release_records(selector),
            records.clone(),
            cancel,
        );
    }
    for gone in ctx
        .members
        .watches
        .refresh(&ctx.members.links, &change.changed)
    {
        ctx.members.model.forget(&gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn registry(kubeconfig: &std::path::Path, entries: &str) -> ClusterRegistry {
        let file = RegistrationFile::parse(std::path::Path::new("clusters.yaml"), entries).unwrap();
        let hub = HubSource {
            kubeconfig: Some(kubeconfig.to_owned()),
            context: Some("hub".into()),
        };
        ClusterRegistry::connect(&hub, &file).await.unwrap()
    }

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts:\n  - {name: hub, context: {cluster: c, user: u}}\n  - {name: a, context: {cluster: c, user: u}}\n  - {name: b, context: {cluster: c, user: u}}\n";

    #[tokio::test]
    async fn a_reload_tells_added_removed_and_changed_clusters_apart() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        std::fs::write(&kc, KUBECONFIG).unwrap();
        let k = kc.display();
        let old = registry(&kc, &format!("clusters:\n  - {{name: one, context: a, kubeconfig: {k}}}\n  - {{name: two, context: a, kubeconfig: {k}}}\n")).await;
        let new = registry(
            &kc,
            &format!("clusters:\n  - {{name: two, context: b, kubeconfig: {k}}}\n  - {{name: three, context: a, kubeconfig: {k}}}\n"),
        )
        .await;
        let d = diff(&old, &new);
        assert_eq!(names(&d.added), ["three"]);
        assert_eq!(names(&d.removed), ["one"]);
        assert_eq!(names(&d.changed), ["two"]);
        assert_eq!(diff(&new, &new), Diff::default());
    }

    fn names(s: &BTreeSet<ClusterName>) -> Vec<String> {
        s.iter().map(ToString::to_string).collect()
    }

    #[tokio::test]
    async fn rotated_credentials_change_exactly_the_clusters_using_that_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let (rotated, steady) = (dir.path().join("rotated"), dir.path().join("steady"));
        std::fs::write(&rotated, KUBECONFIG).unwrap();
        std::fs::write(&steady, KUBECONFIG).unwrap();
        let entries = format!(
            "clusters:\n  - {{name: one, context: a, kubeconfig: {}}}\n  - {{name: two, context: a, kubeconfig: {}}}\n",
            rotated.display(),
            steady.display()
        );
        let old = registry(&steady, &entries).await;
        std::fs::write(&rotated, KUBECONFIG.replace("token: t", "token: rotated")).unwrap();
        let new = registry(&steady, &entries).await;
        let d = diff(&old, &new);
        assert_eq!(names(&d.changed), ["one"]);
        assert!(d.added.is_empty() && d.removed.is_empty());

        let kept = new.keeping(&old, |n| d.changed.contains(n));
        let same = |name: &str| {
            let name = name.parse().unwrap();
            Arc::ptr_eq(kept.get(&name).unwrap(), old.get(&name).unwrap())
        };
        assert!(!same("one"), "the changed cluster gets its new client");
        assert!(same("two") && same("hub"), "the others keep theirs");
    }

    #[tokio::test]
    async fn a_kubeconfig_rewritten_with_new_content_is_noticed_and_the_same_content_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (kc, file) = (
            dir.path().join("kubeconfig"),
            dir.path().join("clusters.yaml"),
        );
        std::fs::write(&kc, KUBECONFIG).unwrap();
        let text = format!(
            "clusters:\n  - {{name: one, context: a, kubeconfig: {}}}\n",
            kc.display()
        );
        std::fs::write(&file, &text).unwrap();
        let hub = HubSource {
            kubeconfig: Some(kc.clone()),
            context: Some("hub".into()),
        };
        let connected = registry(&kc, &text).await;
        let first = Sources::read(&file, &hub).unwrap();
        assert_eq!(first, Sources::of(text.clone(), &connected));
        assert_eq!(first.kubeconfigs.len(), 1, "hub and member share one file");

        std::fs::write(&kc, KUBECONFIG).unwrap();
        assert_eq!(Sources::read(&file, &hub).unwrap(), first);

        std::fs::write(&kc, KUBECONFIG.replace("token: t", "token: rotated")).unwrap();
        let rotated = Sources::read(&file, &hub).unwrap();
        assert_eq!(rotated.text, first.text);
        assert_ne!(rotated.kubeconfigs[&kc], first.kubeconfigs[&kc]);

        std::fs::remove_file(&kc).unwrap();
        assert_eq!(Sources::read(&file, &hub).unwrap().kubeconfigs[&kc], None);
    }
}
