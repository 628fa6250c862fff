//! A chart's custom health checks, in Flux's words (`healthCheckExprs`): CEL expressions that say when objects of a kind the chart owns are current, in progress or failed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Characters one health expression may hold.
pub const MAX_EXPRESSION_LENGTH: usize = 1024;

/// How objects of one kind the chart deploys are judged (Flux's `healthCheckExprs[]`). Each
/// expression is CEL over the object's top-level fields (`metadata`, `spec`, `status`, …) and
/// must return a boolean. They are tried in Flux's order: `inProgress`, then `failed`, then
/// `current`; the first that holds decides, and none holding means in progress. An object whose
/// controller has not seen its newest spec (`status.observedGeneration` below
/// `metadata.generation`) is in progress whatever they say.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    /// The kind's API version, for example `bitnami.com/v1alpha1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,

    /// The kind, for example `SealedSecret`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,

    /// True when the object is ready, for example
    /// `status.conditions.filter(e, e.type == 'Synced').all(e, e.status == 'True')`.
    #[schemars(length(min = 1, max = 1024))]
    pub current: String,

    /// True while the object is still being worked on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub in_progress: Option<String>,

    /// True when the object failed: it halts a rollout at once, where one in progress only
    /// halts it at the progress deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub failed: Option<String>,
}
