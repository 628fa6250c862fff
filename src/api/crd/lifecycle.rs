//! A chart's Helm settings per action (`install`, `upgrade`, `test`, `uninstall`, `maxHistory`) and how a failure is remediated, in Flux HelmRelease's words: how Helm is asked, never what it deploys.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How Helm installs a release the first time. Absent fields keep the operator's defaults
/// (`--helm-timeout`; no wait; hooks run; CRDs created).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Install {
    /// How long Helm may take for the install, hooks and waits included: a duration such as
    /// "30s", "5m" or "1h30m", from 1s to 1h. Default: the operator's `--helm-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('1h')")
        .message("timeout must be between 1s and 1h, for example \"5m\""))]
    pub timeout: Option<String>,

    /// Wait until the release's Deployments, StatefulSets, DaemonSets, Services and PVCs are
    /// ready before the install counts as done (Helm's `--wait`; Flux waits unless
    /// `disableWait`). Default false: done once Helm has applied it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,

    /// Also wait until the release's Jobs have completed (Helm's `--wait-for-jobs`; Flux's
    /// `disableWaitForJobs: false`); implies `wait`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_jobs: bool,

    /// Skip the chart's install hooks (Helm's `--no-hooks`). A TenancyPolicy may forbid it
    /// (`helm.allowDisableHooks: false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_hooks: bool,

    /// What is done with the chart's `crds/` directory: `Create` (the default) creates the CRDs
    /// missing from the cluster, `Skip` leaves them out, `CreateReplace` also replaces those
    /// there (the Helm executor only; never dropping a version still stored). A TenancyPolicy
    /// lists those allowed (`helm.crdPolicies`, default Skip and Create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crd_policy")]
    pub crds: Option<CrdPolicy>,

    /// What is done when the install fails (Helm's error, a wait past its timeout, a failed
    /// test): how often it is tried again, and whether the failed release is uninstalled first.
    /// Absent: tried again only on failures known to pass (a timeout, a conflict), and left as
    /// it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<InstallRemediation>,
}

/// How a failed install is remediated and tried again (Flux's `install.remediation`): between
/// tries the failed release is uninstalled, so the next try is a fresh install.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstallRemediation {
    /// How many times a failed install is tried again, whatever failed, with the queue's
    /// backoff between tries; -1 tries again until the spec changes. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1, max = 100))]
    pub retries: Option<i32>,

    /// Uninstall the release after the last try failed too, instead of leaving it failed for a
    /// person to look at. Default: true when `retries` is set above 0, false otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
}

/// How Helm upgrades a release already installed. Absent fields keep the operator's defaults
/// (`--helm-timeout`; no wait; hooks run; CRDs left alone).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Upgrade {
    /// How long Helm may take for the upgrade, hooks and waits included: a duration such as
    /// "30s", "5m" or "1h30m", from 1s to 1h. Default: the operator's `--helm-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('1h')")
        .message("timeout must be between 1s and 1h, for example \"5m\""))]
    pub timeout: Option<String>,

    /// Wait until the release's workloads are ready before the upgrade counts as done (Helm's
    /// `--wait`; Flux waits unless `disableWait`). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,

    /// Also wait until the release's Jobs have completed (Helm's `--wait-for-jobs`); implies
    /// `wait`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_jobs: bool,

    /// Skip the chart's upgrade hooks (Helm's `--no-hooks`). A TenancyPolicy may forbid it
    /// (`helm.allowDisableHooks: false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_hooks: bool,

    /// Replace objects that cannot be patched, deleting and creating them again (Helm's
    /// `--force-replace`). Helm does this with a client-side apply, so that upgrade is not
    /// server-side; a drift repair never forces.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,

    /// Delete the objects a failed upgrade created (Helm's `--cleanup-on-fail`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleanup_on_fail: bool,

    /// What is done with the chart's `crds/` directory: `Skip` (the default, as Helm) leaves
    /// every CRD alone; `Create` creates the CRDs missing from the cluster, as the release's
    /// identity, and never changes one that exists (the Helm executor only; the `helm` binary
    /// cannot, and such a release is refused there). `CreateReplace` also replaces those there
    /// with the chart's definition, unless it drops a version still stored, which refuses the
    /// upgrade; a TenancyPolicy must list it (`helm.crdPolicies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crd_policy")]
    pub crds: Option<CrdPolicy>,

    /// What is done when the upgrade fails (Helm's error, a wait past its timeout, a failed
    /// test): how often it is tried again, and whether the release is first rolled back to its
    /// last good revision or uninstalled. Absent: tried again only on failures known to pass,
    /// and left as it failed (unless the chart's `rollbackOnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<UpgradeRemediation>,
}

/// How a failed upgrade is remediated and tried again (Flux's `upgrade.remediation`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRemediation {
    /// How many times a failed upgrade is tried again, whatever failed, with the queue's
    /// backoff between tries and the `strategy` done before each; -1 tries again until the spec
    /// changes. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1, max = 100))]
    pub retries: Option<i32>,

    /// Remediate after the last try failed too, instead of leaving the failed revision for a
    /// person to look at. Default: true when `retries` is set above 0, false otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,

    /// What remediating a failed upgrade does: `rollback` (the default) goes back to the last
    /// good revision, which keeps serving; `uninstall` removes the release, so the next try is a
    /// fresh install (the Helm executor only: the `helm` binary executor refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "strategy")]
    pub strategy: Option<RemediationStrategy>,
}

/// What remediating a failed upgrade does (Flux's `upgrade.remediation.strategy`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum RemediationStrategy {
    /// Roll back to the last good revision.
    Rollback,
    /// Uninstall the release.
    Uninstall,
}

/// How Helm uninstalls a release: when the chart leaves the spec (the operator's defaults then,
/// its entry being gone) or when the Controller is deleted (this entry's settings).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Uninstall {
    /// How long Helm may take for the uninstall, hooks and waits included: a duration such as
    /// "30s" or "5m", from 1s to 1h. Default: the operator's `--helm-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('1h')")
        .message("timeout must be between 1s and 1h, for example \"5m\""))]
    pub timeout: Option<String>,

    /// Skip the chart's delete hooks (Helm's `--no-hooks`). Default true, unlike Flux: removing
    /// a release deletes what it installed and runs nothing its record asks for; set false to run
    /// the chart's pre- and post-delete hooks, as the release's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_hooks: Option<bool>,

    /// Keep the release's history after the uninstall (Helm's `--keep-history`): its records stay,
    /// marked uninstalled, and a later install of the same release takes their place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_history: bool,

    /// Wait until every object of the release is deleted (Helm's `--wait`; Flux's
    /// `disableWait: false`). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,
}

/// Whether and how the chart's tests (its `helm.sh/hook: test` objects) run after each install
/// and upgrade, as `helm test` does (Flux's `test`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Test {
    /// Run the tests after every install and upgrade. A test that fails fails the release: it is
    /// reported `Failed` with the tests that failed, tried again like any failed upgrade, halts a
    /// rollout wave and holds what `dependsOn` it; with `rollbackOnFailure` the release is rolled
    /// back (a first install uninstalled). The Helm executor only: the `helm` binary executor
    /// refuses a release that asks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable: bool,

    /// How long the tests may take, all of them: a duration such as "30s" or "5m", from 1s to 1h.
    /// Default: the operator's `--helm-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(ms|s|m|h))+$"), length(max = 32))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('1h')")
        .message("timeout must be between 1s and 1h, for example \"5m\""))]
    pub timeout: Option<String>,

    /// Report the tests' results but never fail the release on them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_failures: bool,

    /// Which tests run, by the name of their object: with no filter, every test; a filter with
    /// `exclude` leaves its test out; when any filter does not exclude, only the tests they name
    /// run (`helm test --filter name=…,!name=…`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub filters: Vec<TestFilter>,
}

/// One test picked or left out by name (Flux's `test.filters`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TestFilter {
    /// The name of the test's object (its Pod or Job) in the chart.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Leave this test out instead of picking it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude: bool,
}

/// What Helm does with a chart's `crds/` directory (Flux's `crds`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrdPolicy {
    /// Leave the chart's CRDs out.
    Skip,
    /// Create the chart's CRDs missing from the cluster; never change one that exists.
    Create,
    /// Create missing CRDs and replace existing ones (server-side apply), unless a version still
    /// stored would go.
    CreateReplace,
}

impl std::fmt::Display for CrdPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The schema of a `crds` field: the policies as an enum, described by the field's own doc
/// comment (which the enum's would otherwise replace) so `kubectl explain` says what each does
/// for that action.
fn crd_policy(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "nullable": true,
        "enum": ["Skip", "Create", "CreateReplace"],
    })
}

/// The schema of a `strategy` field, described by the field's own doc comment.
fn strategy(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "nullable": true,
        "enum": ["rollback", "uninstall"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_of_a_crds_field_lists_every_policy_as_it_is_written() {
        let schema = crd_policy(&mut schemars::SchemaGenerator::default());
        let listed = schema.get("enum").and_then(|e| e.as_array()).unwrap();
        let every = [CrdPolicy::Skip, CrdPolicy::Create, CrdPolicy::CreateReplace];
        // A policy added to the enum must be added here, and to the schema.
        for policy in every {
            match policy {
                CrdPolicy::Skip | CrdPolicy::Create | CrdPolicy::CreateReplace => {}
            }
        }
        let written: Vec<serde_json::Value> = every
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(listed, &written);
    }

    #[test]
    fn the_schema_of_a_strategy_field_lists_every_strategy_as_it_is_written() {
        let schema = strategy(&mut schemars::SchemaGenerator::default());
        let listed = schema.get("enum").and_then(|e| e.as_array()).unwrap();
        let every = [
            RemediationStrategy::Rollback,
            RemediationStrategy::Uninstall,
        ];
        for s in every {
            match s {
                RemediationStrategy::Rollback | RemediationStrategy::Uninstall => {}
            }
        }
        let written: Vec<serde_json::Value> = every
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(listed, &written);
    }
}
