//! A release's manifest diff: the manifest its chart renders now, as an install or upgrade would deploy it, against the revision deployed on its cluster, with what came from Secrets masked on both sides. `tenancy-hub diff` prints it and the fleet view shows it, both through [`compare`].

use std::{collections::HashSet, sync::Arc};

use crate::{
    api::key::ReleaseKey,
    charts::cache::ChartCache,
    helm::args::{HelmOptions, RenderFor},
    member::{Links, MemberLink},
    observe::records::Deployed,
    plan::{Masked, Release, values},
    status::next::{Action, Next},
};

pub(crate) mod mask;

pub(crate) use mask::{mask_secrets, unified};

/// What renders charts for a diff: helm as the operator calls it, and the chart cache whose
/// archives an install or upgrade would use (fetched and verified the same way).
#[derive(Clone)]
pub(crate) struct Renderer {
    /// Helm, its timeout and the executor that post-renders.
    pub(crate) helm: HelmOptions,
    /// The chart archives.
    pub(crate) cache: Arc<ChartCache>,
}

impl Renderer {
    /// The manifest `release` renders as `render` says, from the archive an upgrade would install,
    /// post-rendered by the executor when the release has post-renderers.
    pub(crate) async fn render(
        &self,
        release: &Release,
        render: &RenderFor,
    ) -> Result<String, String> {
        let archive = self.cache.checkout(
            &release.source,
            &release.credentials,
            release.version.as_deref(),
            release.exact_archive(),
        );
        let archive = archive.as_ref().map(|a| a.path());
        let manifest = crate::helm::cli::template(&self.helm, release, archive, render).await?;
        match &release.post_render {
            // The executor's own post-renderer, so the diff is what an install deploys.
            Some(post_render) => {
                crate::helm::preview::post_render(&self.helm, &manifest, post_render).await
            }
            None => Ok(manifest),
        }
    }
}

/// One release whose diff is asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked<'a> {
    /// The release.
    pub(crate) key: &'a ReleaseKey,
    /// The release as planned; None for an uninstall.
    pub(crate) release: Option<&'a Release>,
    /// The Helm action planned for it.
    pub(crate) action: Action,
    /// The revision deployed now, if any.
    pub(crate) revision: Option<i64>,
}

/// Why a diff could not be made; the words never hold what came from a Secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unmade {
    /// The deployed revision's record could not be read from its cluster.
    #[error("its deployed manifest cannot be read: {0}")]
    Deployed(String),
    /// Helm (or the post-renderer) failed to render the chart.
    #[error("the chart does not render: {0}")]
    Render(String),
    /// The release's cluster is no longer registered.
    #[error("cluster {0} is no longer registered")]
    Unregistered(String),
    /// A rollback renders no chart: Helm deploys an earlier revision as it recorded it.
    #[error("a rollback deploys an earlier revision as Helm recorded it; no chart is rendered")]
    Rollback,
}

/// The diff of what a Controller's newest plan does `next` to one release, made through `links`
/// (the deployed revision, the cluster's capabilities) and `renderer`, Secrets masked with `salt`.
pub(crate) async fn planned(
    links: &Links,
    renderer: &Renderer,
    next: &Next,
    salt: &[u8],
) -> Result<Option<String>, Unmade> {
    if next.action != Action::Uninstall && next.release.is_none() {
        return Err(Unmade::Rollback);
    }
    let member = links
        .get(&next.key.scope.cluster)
        .ok_or_else(|| Unmade::Unregistered(next.key.scope.cluster.to_string()))?;
    let render = match next.release {
        Some(_) => member.capabilities().await,
        None => RenderFor::default(),
    };
    let asked = Asked {
        key: &next.key,
        release: next.release.as_deref(),
        action: next.action,
        revision: next.revision,
    };
    compare(renderer, member.as_ref(), asked, &render, salt).await
}

/// The diff of `asked`: the manifest its deployed revision holds on `member` against the one its
/// chart renders for `render` (`is_upgrade` set from the action), Secrets' values masked with
/// `salt`, and what its values take from Secrets (for an uninstall: every deployed value) masked
/// everywhere; None when they are the same.
pub(crate) async fn compare(
    renderer: &Renderer,
    member: &dyn MemberLink,
    asked: Asked<'_>,
    render: &RenderFor,
    salt: &[u8],
) -> Result<Option<String>, Unmade> {
    let deployed = match asked.revision {
        Some(revision) => member
            .manifest(asked.key.clone(), revision)
            .await
            .map_err(|e| Unmade::Deployed(e.to_string()))?
            .unwrap_or_default(),
        None => Deployed::default(),
    };
    let masks = match asked.release {
        Some(release) => masks_of(release, &deployed),
        // An uninstall plans no values, so which of the deployed ones came from a Secret is not
        // known: every one is masked.
        None => {
            let mut all = Vec::new();
            values::leaves(&deployed.values, &mut all);
            Masked::new(all)
        }
    };
    let rendered = match asked.release {
        Some(release) => {
            let render = RenderFor {
                is_upgrade: asked.action == Action::Upgrade,
                ..render.clone()
            };
            // Helm's message may quote a value (a chart's `fail`): masked as the manifests are.
            renderer
                .render(release, &render)
                .await
                .map_err(|e| Unmade::Render(masks.redact(&e)))?
        }
        None => String::new(),
    };
    Ok(diff_of(asked, &masks, &deployed.manifest, &rendered, salt))
}

/// The unified diff of `asked`'s `deployed` manifest against its `rendered` one, `masks` and
/// every Secret's values masked (with `salt`) on both sides; None when they are the same.
pub(crate) fn diff_of(
    asked: Asked<'_>,
    masks: &Masked,
    deployed: &str,
    rendered: &str,
    salt: &[u8],
) -> Option<String> {
    let (old_name, new_name) = names(asked);
    let diff = unified(
        &mask_secrets(&masks.redact(deployed), salt),
        &mask_secrets(&masks.redact(rendered), salt),
        &old_name,
        &new_name,
    );
    Some(diff).filter(|d| !d.is_empty())
}

/// The names a diff of `asked` gives its two sides: `key (revision N)`, or `/dev/null` for the
/// side an install or uninstall does not have.
pub(crate) fn names(asked: Asked<'_>) -> (String, String) {
    let key = asked.key;
    let old = match asked.revision {
        Some(r) => format!("{key} (revision {r})"),
        None => "/dev/null".to_owned(),
    };
    let new = match asked.action {
        Action::Uninstall => "/dev/null".to_owned(),
        _ => format!("{key} (revision {})", asked.revision.map_or(1, |r| r + 1)),
    };
    (old, new)
}

/// What is masked in a release's diff: what its values take from Secrets now and, when it reads
/// any, every piece of the deployed revision's values that its values now do not give openly (a
/// Secret's earlier content among them).
pub(crate) fn masks_of(release: &Release, deployed: &Deployed) -> Masked {
    if release.masked.is_empty() {
        return release.masked.clone();
    }
    let mut now = Vec::new();
    if let Some(values) = &release.values {
        values::leaves(values, &mut now);
    }
    let open: HashSet<&String> = now.iter().filter(|p| !release.masked.holds(p)).collect();
    let mut before = Vec::new();
    values::leaves(&deployed.values, &mut before);
    release
        .masked
        .with(before.into_iter().filter(|p| !open.contains(p)))
}

/// A salt for the masks' hashes, new for each process: the same value shows the same hash in
/// one process's diffs, and no hash can be looked up elsewhere.
pub(crate) fn salt() -> [u8; 8] {
    std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::process::id(),
    )
    .to_le_bytes()
}

#[cfg(test)]
mod tests;
