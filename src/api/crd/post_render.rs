//! A chart's post-render patches, images and common metadata, in Flux HelmRelease's words (`postRenderers[].kustomize`, `commonMetadata`): what changes the manifest Helm rendered before it is applied.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One post-renderer (Flux's `postRenderers[]`): kustomize's patches and images, run over the
/// manifest Helm rendered, in order, before the release is applied and recorded.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PostRenderer {
    /// Kustomize's patches and images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<Kustomize>,
}

/// Kustomize's patches then images over the rendered manifest (Flux's
/// `postRenderers[].kustomize`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Kustomize {
    /// Strategic merge patches (a JSON merge patch for kinds kustomize does not know) and JSON6902
    /// patches, applied in order. Unlike kustomize and Flux, a patch whose target matches no
    /// object fails the release, naming the patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub patches: Vec<Patch>,

    /// Container images rewritten, as kustomize's `images`: an image named `name` gets
    /// `newName`, `newTag` or `digest`. An image no container uses is left alone, as kustomize does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub images: Vec<Image>,
}

/// One patch: its text and the objects it applies to.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// A strategic merge patch (YAML naming `apiVersion`, `kind` and `metadata.name` when there is
    /// no `target`) or a JSON6902 patch (a list of operations; needs a `target`). May refer to the
    /// target cluster, as values do: `${cluster.name}`, `${cluster.labels.region}`.
    #[schemars(length(min = 1, max = 16384))]
    pub patch: String,

    /// The objects of the chart the patch applies to; must match at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PatchTarget>,
}

/// Selects objects of the rendered manifest as kustomize's selector does; an omitted field
/// matches any.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PatchTarget {
    /// API group, for example `apps` (regular expression, as kustomize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
    /// API version, for example `v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub version: Option<String>,
    /// Kind, for example `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub kind: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// A label selector, for example `app=web,tier!=cache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub label_selector: Option<String>,
    /// An annotation selector, written as a label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub annotation_selector: Option<String>,
}

/// A container image rewritten (kustomize's `images[]`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// The image as the chart names it, without tag or digest, for example `nginx`.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// The name it gets instead, for example `registry.example/nginx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub new_name: Option<String>,
    /// The tag it gets instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub new_tag: Option<String>,
    /// The digest it gets instead of a tag, for example `sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub digest: Option<String>,
}

/// Labels and annotations set on every object the chart renders, over the chart's own (Flux's
/// `commonMetadata`). Values may refer to the target cluster, as values do.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CommonMetadata {
    /// Labels added to every object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub annotations: BTreeMap<String, String>,
}
