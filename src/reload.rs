//! Registration hot reload: the file is re-read when it changes; a valid edit swaps the registry, an invalid one is refused.

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use kube::runtime::{events::EventType, reflector::ObjectRef};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::{
    Context,
    crd::Controller,
    key::ClusterName,
    registry::{ClusterRegistry, HubSource, RegistrationFile, RegistryError},
};

/// How often the registration file is checked for changes.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Clusters newly registered.
    pub added: BTreeSet<ClusterName>,
    /// Clusters no longer registered.
    pub removed: BTreeSet<ClusterName>,
    /// Clusters whose context, kubeconfig or labels changed.
    pub changed: BTreeSet<ClusterName>,
}

/// Compares two registries by name and registration entry.
pub fn diff(old: &ClusterRegistry, new: &ClusterRegistry) -> Diff {
    let mut d = Diff::default();
    for m in new.iter() {
        match old.get(&m.entry.name) {
            None => {
                d.added.insert(m.entry.name.clone());
            }
            Some(o) if o.entry != m.entry || o.kubeconfig != m.kubeconfig => {
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

/// Everything a reload needs besides the shared context.
pub struct Reloader {
    /// The registration file.
    pub path: PathBuf,
    /// Where the hub is.
    pub hub: HubSource,
    /// Where release-record watches send their changes.
    pub records: UnboundedSender<crate::releases::RecordChange>,
    /// Where resources are woken for a reconcile.
    pub trigger: UnboundedSender<ObjectRef<Controller>>,
}

impl Reloader {
    /// Checks the file every [`CHECK_EVERY`] until cancelled and applies each change of its content.
    pub async fn run(self, ctx: Arc<Context>, cancel: CancellationToken) {
        let mut last = std::fs::read_to_string(&self.path).ok();
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => return,
            }
            let text = match std::fs::read_to_string(&self.path) {
                Ok(t) => t,
                Err(e) => {
                    if last.is_some() {
                        tracing::error!(file = %self.path.display(), error = %e, "cannot read the registration file; keeping the last good registry");
                        last = None;
                    }
                    continue;
                }
            };
            if last.as_deref() == Some(text.as_str()) {
                continue;
            }
            last = Some(text.clone());
            match self.apply(&ctx, &text, &cancel).await {
                Ok(d) => {
                    ctx.metrics.registry_reload(true);
                    tracing::info!(added = ?d.added, removed = ?d.removed, changed = ?d.changed, "registration file reloaded");
                }
                Err(e) => {
                    ctx.metrics.registry_reload(false);
                    let kept = ctx.registry.load().iter().count();
                    let note = format!(
                        "{e}; the last good registry ({kept} clusters) stays in force until the file is fixed"
                    );
                    tracing::error!("{note}");
                    self.report(&ctx, note).await;
                }
            }
        }
    }

    async fn report(&self, ctx: &Context, note: String) {
        for c in ctx.controllers.state() {
            crate::reconcile::publish(
                ctx,
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
        ctx: &Context,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<Diff, RegistryError> {
        let file = RegistrationFile::parse(&self.path, text)?;
        let new = Arc::new(ClusterRegistry::connect(&self.hub, &file).await?);
        let old = ctx.registry.load_full();
        let d = diff(&old, &new);
        let (applied, _) = ctx.releases.snapshot();
        for a in applied
            .values()
            .filter(|a| d.removed.contains(&a.key.scope.cluster))
        {
            if let Some(owner) = &a.owner {
                ctx.orphans.insert(a.key.clone(), owner.clone());
            }
        }
        ctx.orphans.retain(|k, _| {
            !d.added.contains(&k.scope.cluster) && !d.changed.contains(&k.scope.cluster)
        });
        ctx.registry.store(new.clone());
        for cluster in &d.removed {
            ctx.releases.forget(cluster);
            ctx.health.forget(cluster);
        }
        for cluster in d.added.iter().chain(&d.changed) {
            let member = new.get(cluster).expect("in the new registry");
            ctx.releases.watch(
                cluster.clone(),
                member.client.clone(),
                self.records.clone(),
                cancel,
            );
        }
        for gone in ctx.watches.refresh(&new, &d.changed) {
            ctx.model.forget(&gone);
        }
        for c in ctx.controllers.state() {
            let _ = self.trigger.send(ObjectRef::from_obj(&*c));
        }
        Ok(d)
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

    #[tokio::test]
    async fn a_reload_tells_added_removed_and_changed_clusters_apart() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts:\n  - {name: hub, context: {cluster: c, user: u}}\n  - {name: a, context: {cluster: c, user: u}}\n  - {name: b, context: {cluster: c, user: u}}\n",
        )
        .unwrap();
        let k = kc.display();
        let old = registry(&kc, &format!("clusters:\n  - {{name: one, context: a, kubeconfig: {k}}}\n  - {{name: two, context: a, kubeconfig: {k}}}\n")).await;
        let new = registry(
            &kc,
            &format!("clusters:\n  - {{name: two, context: b, kubeconfig: {k}}}\n  - {{name: three, context: a, kubeconfig: {k}}}\n"),
        )
        .await;
        let d = diff(&old, &new);
        let names =
            |s: &BTreeSet<ClusterName>| s.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names(&d.added), ["three"]);
        assert_eq!(names(&d.removed), ["one"]);
        assert_eq!(names(&d.changed), ["two"]);
        assert_eq!(diff(&new, &new), Diff::default());
    }
}
