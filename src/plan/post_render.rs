//! A release's post-render as made for one cluster: the chart's post-renderers, then those of the overrides selecting the cluster, and its common metadata, with their references rendered for the cluster as values are (pure).

use serde::{Deserialize, Serialize};

use crate::{
    api::crd::{Chart, ChartOverride, CommonMetadata, Image, Kustomize, Patch, PatchTarget},
    plan::values::{self, Scope, TemplateError},
};

/// The most a release's post-render may weigh, its patches' text and metadata together.
pub(crate) const MAX_POST_RENDER_BYTES: usize = 64 * 1024;

/// What the Helm executor runs over a release's rendered manifest before applying it, as the
/// executor's pipe carries it (`postRender`, see `helm-sdk/postrender.go`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PostRender {
    /// Each post-renderer's patches then images, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) renderers: Vec<Kustomize>,
    /// Labels and annotations set on every object, last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) common_metadata: Option<CommonMetadata>,
    /// The policy allowing the release lets it change RBAC objects, admission webhooks and
    /// policies, and CRDs. Not part of the fingerprint: a policy's change makes no revision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) allow_sensitive_kinds: bool,
}

impl PostRender {
    /// What of it changes the deployed manifest, for the release's fingerprint.
    pub(crate) fn deployed(&self) -> PostRender {
        PostRender {
            allow_sensitive_kinds: false,
            ..self.clone()
        }
    }
}

/// The post-render of `chart` for the cluster of `scope`, with `selected` the overrides picking
/// it; None when it asks for none. Err: what is wrong, naming the field.
pub(crate) fn render<'a>(
    chart: &'a Chart,
    selected: impl Iterator<Item = (usize, &'a ChartOverride)>,
    scope: &Scope<'_>,
) -> Result<Option<PostRender>, String> {
    let mut out = PostRender::default();
    let chart_own = chart
        .post_renderers
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("postRenderers[{i}]"), r));
    let overrides = selected.flat_map(|(o, over)| {
        over.post_renderers
            .iter()
            .enumerate()
            .map(move |(i, r)| (format!("overrides[{o}].postRenderers[{i}]"), r))
    });
    for (at, renderer) in chart_own.chain(overrides) {
        let Some(kustomize) = &renderer.kustomize else {
            continue;
        };
        let at = format!("{at}.kustomize");
        out.renderers
            .push(render_kustomize(kustomize, scope).map_err(|e| format!("{at}{e}"))?);
    }
    if let Some(meta) = &chart.common_metadata {
        out.common_metadata = Some(CommonMetadata {
            labels: render_map(&meta.labels, scope, "commonMetadata.labels")?,
            annotations: render_map(&meta.annotations, scope, "commonMetadata.annotations")?,
        });
    }
    if out == PostRender::default() {
        return Ok(None);
    }
    let size = serde_json::to_vec(&out).map_or(usize::MAX, |v| v.len());
    if size > MAX_POST_RENDER_BYTES {
        return Err(format!(
            "the post-render made is {size} bytes, more than the {MAX_POST_RENDER_BYTES} one release may have"
        ));
    }
    Ok(Some(out))
}

/// One renderer's texts rendered; Err: `.patches[i]: why` or `.images[i]: why`.
fn render_kustomize(k: &Kustomize, scope: &Scope<'_>) -> Result<Kustomize, String> {
    let text = |s: &str| values::render_text(s, scope);
    let opt = |s: &Option<String>| s.as_deref().map(text).transpose();
    let patches = k
        .patches
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let target = p
                .target
                .as_ref()
                .map(|t| render_target(t, scope))
                .transpose();
            let made = || -> Result<Patch, TemplateError> {
                Ok(Patch {
                    patch: text(&p.patch)?,
                    target: target?,
                })
            };
            made().map_err(|e| format!(".patches[{i}]: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let images = k
        .images
        .iter()
        .enumerate()
        .map(|(i, img)| {
            let made = || -> Result<Image, TemplateError> {
                Ok(Image {
                    name: text(&img.name)?,
                    new_name: opt(&img.new_name)?,
                    new_tag: opt(&img.new_tag)?,
                    digest: opt(&img.digest)?,
                })
            };
            made().map_err(|e| format!(".images[{i}]: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Kustomize { patches, images })
}

/// A target with its fields rendered.
fn render_target(t: &PatchTarget, scope: &Scope<'_>) -> Result<PatchTarget, TemplateError> {
    let opt = |s: &Option<String>| {
        s.as_deref()
            .map(|s| values::render_text(s, scope))
            .transpose()
    };
    Ok(PatchTarget {
        group: opt(&t.group)?,
        version: opt(&t.version)?,
        kind: opt(&t.kind)?,
        name: opt(&t.name)?,
        namespace: opt(&t.namespace)?,
        label_selector: opt(&t.label_selector)?,
        annotation_selector: opt(&t.annotation_selector)?,
    })
}

/// Labels or annotations with their values rendered.
fn render_map(
    map: &std::collections::BTreeMap<String, String>,
    scope: &Scope<'_>,
    what: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    map.iter()
        .map(|(k, v)| {
            values::render_text(v, scope)
                .map(|v| (k.clone(), v))
                .map_err(|e| format!("{what} {k:?}: {e}"))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
