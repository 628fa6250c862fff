//! The messages on the long-lived executor's pipe: its hello, the requests and the answers, and the protocol version they follow.

use serde::{Deserialize, Serialize};

use crate::{
    api::{crd::RemediationStrategy, key::ReleaseKey},
    helm::args::{self as helm, HelmOptions},
    helm::settings::{self, Applying, Removing, Testing},
    plan::{
        MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, Release,
        SPEC_HASH_LABEL, remediation::Remediate,
    },
    queue::TestResult,
};

/// The version of the messages on the executor's pipe: [`Hello`], [`Request`] and [`Answer`].
/// Bump it when a message changes, with the executor's `protocolVersion` (`helm-sdk/main.go`) and
/// the shared fixtures in `helm-sdk/testdata/protocol`, which the tests of both sides check.
pub(crate) const PROTOCOL_VERSION: u32 = 4;
/// The version of Helm's Go SDK the executor is built with: the one `helm-sdk/go.mod` requires
/// (a unit test keeps them in step).
pub(crate) const HELM_SDK: &str = "v4.3.1";

/// The executor's first line, written before it reads any request. Fields the operator does not
/// know are ignored, so an executor of any version can say which protocol it speaks.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Its [`PROTOCOL_VERSION`].
    pub(crate) protocol: u32,
    /// The version of Helm's Go SDK it is built with (`v4.3.1`).
    pub(crate) helm: String,
}

#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct ClusterRef {
    /// Kubeconfig file (empty with `context`: the in-cluster configuration).
    pub(crate) kubeconfig: String,
    /// Context in it.
    pub(crate) context: String,
    /// Changes with the file's content, so the executor builds new clients for new credentials.
    pub(crate) digest: String,
    /// Impersonated user; empty: the context's own credentials.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) user: String,
    /// Impersonated groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<String>,
    /// The registered cluster name, bound into every record's seal.
    pub(crate) name: String,
}

/// One request line.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    /// Matches the answer.
    pub(crate) id: u64,
    /// `upgrade` (install when missing), `uninstall` or `rollback`.
    pub(crate) op: &'static str,
    /// Where.
    pub(crate) cluster: ClusterRef,
    /// The release's namespace.
    pub(crate) namespace: String,
    /// The release's name.
    pub(crate) release: String,
    /// A chart directory or archive on disk.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) chart: String,
    /// The spec's values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) values: Option<serde_json::Value>,
    /// `--set` expressions, escaped as for the CLI, applied over the values in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) set: Vec<String>,
    /// Labels of the release records.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) labels: std::collections::BTreeMap<&'static str, String>,
    /// Revisions kept.
    pub(crate) history_max: u32,
    /// Helm's timeout: for an `upgrade`, the longer of its install's and upgrade's, which the
    /// executor's deadline follows.
    pub(crate) timeout_seconds: u64,
    /// How an `upgrade` installs a release that is not there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) install: Option<Phase>,
    /// How an `upgrade` upgrades a release that is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) upgrade: Option<Phase>,
    /// An `uninstall` skips the delete hooks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) disable_hooks: bool,
    /// An `uninstall` keeps the release's records, marked uninstalled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) keep_history: bool,
    /// An `uninstall` waits until the release's objects are gone.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) wait: bool,
    /// Server-side apply forcing conflicts.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) force_conflicts: bool,
    /// The revision's description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) description: String,
    /// The revision a rollback goes to.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) revision: i64,
    /// The chart's tests, run after an `upgrade` installs or upgrades.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) test: Option<TestRun>,
    /// The operator's sealing key (hex on the pipe; `Debug` shows nothing of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seal: Option<crate::helm::seal::SealKey>,
    /// An `upgrade` may take over the release when no record of it is sealed: its newest
    /// record, once its every object is checked as the request's identity (`helm-sdk/adopt.go`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) adopt: bool,
    /// An `upgrade`'s post-render patches and common metadata, run as Helm's post-renderer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) post_render: Option<crate::plan::post_render::PostRender>,
}

/// How one action of an `upgrade` request goes: its install or its upgrade.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Phase {
    /// Helm's timeout for it.
    pub(crate) timeout_seconds: u64,
    /// Wait for the release's workloads to be ready.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) wait: bool,
    /// Wait for its Jobs to complete too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) wait_for_jobs: bool,
    /// Skip its hooks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) disable_hooks: bool,
    /// `Skip`, `Create` (create the chart's missing CRDs) or `CreateReplace` (and replace the
    /// others, unless a version still stored would go).
    pub(crate) crds: &'static str,
    /// Replace what cannot be patched, applying client-side (upgrades only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) force: bool,
    /// Delete what a failed upgrade created (upgrades only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) cleanup_on_fail: bool,
    /// What is done when this action fails (its tests included): `uninstall`, `rollback`
    /// (upgrades only), or nothing (empty: the failed revision stays).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) remediate: &'static str,
}

impl From<Applying> for Phase {
    fn from(a: Applying) -> Self {
        Self {
            timeout_seconds: a.timeout.as_secs(),
            wait: a.wait,
            wait_for_jobs: a.wait_for_jobs,
            disable_hooks: a.disable_hooks,
            crds: match (a.create_crds, a.replace_crds) {
                (_, true) => "CreateReplace",
                (true, false) => "Create",
                (false, false) => "Skip",
            },
            force: a.force,
            cleanup_on_fail: a.cleanup_on_fail,
            remediate: "",
        }
    }
}

/// How the chart's tests run after an install or upgrade.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestRun {
    /// `helm test --timeout`, for all of them.
    pub(crate) timeout_seconds: u64,
    /// Report the results, never fail the release on them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) ignore_failures: bool,
    /// Only these tests run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) include: Vec<String>,
    /// These never run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) exclude: Vec<String>,
}

impl From<Testing> for TestRun {
    fn from(t: Testing) -> Self {
        Self {
            timeout_seconds: t.timeout.as_secs(),
            ignore_failures: t.ignore_failures,
            include: t.include,
            exclude: t.exclude,
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One answer line. A field the operator does not know makes it garbage (the executor is then
/// stopped): it would be a message of another protocol version.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Answer {
    /// The request's id.
    pub(crate) id: u64,
    /// Helm's error, as its CLI prints it after `Error: `; None on success.
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// The revision written.
    #[serde(default)]
    pub(crate) revision: i64,
    /// The chart version deployed.
    #[serde(default)]
    pub(crate) chart_version: String,
    /// The tests run after the install or upgrade and how each ended, failed ones included.
    #[serde(default)]
    pub(crate) tests: Vec<TestResult>,
    /// What became of the chart's CRDs; None when it brings none.
    #[serde(default)]
    pub(crate) crds: Option<crate::queue::crds::CrdReport>,
    /// After an adoption: the labels of the record taken over, Helm's own left out (bounded).
    #[serde(default)]
    pub(crate) adopted: std::collections::BTreeMap<String, String>,
}

/// The request of an install or upgrade of `release` from `chart`, as `helm::upgrade_args` asks
/// the CLI for it, with the chart entry's settings of both actions (the executor knows which it
/// does) and what this try does when it fails (`remediate`); with `repair`, a drift repair
/// forcing the conflicts (and never replacing).
pub(crate) fn upgrade_request(
    id: u64,
    release: &Release,
    cluster: ClusterRef,
    chart: String,
    repair: Option<&str>,
    remediate: Remediate,
    options: &HelmOptions,
) -> Request {
    let upgrade = settings::upgrade(&release.helm, options);
    let labels = [
        (MANAGED_BY_LABEL, MANAGED_BY.to_owned()),
        (OWNER_NAMESPACE_LABEL, release.owner.namespace.clone()),
        (OWNER_NAME_LABEL, release.owner.name.clone()),
        (SPEC_HASH_LABEL, release.spec_hash.clone()),
    ]
    .into_iter()
    .collect();
    Request {
        id,
        op: "upgrade",
        cluster,
        namespace: release.key.scope.namespace.clone(),
        release: release.key.release.clone(),
        chart,
        values: release.values.clone(),
        set: release
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={}", helm::escape_set_value(v)))
            .collect(),
        labels,
        history_max: settings::history_max(&release.helm, options),
        timeout_seconds: settings::apply_timeout(&release.helm, options).as_secs(),
        install: Some(Phase {
            remediate: if remediate.install { "uninstall" } else { "" },
            ..settings::install(&release.helm, options).into()
        }),
        upgrade: Some(Phase {
            remediate: match remediate.upgrade {
                Some(RemediationStrategy::Rollback) => "rollback",
                Some(RemediationStrategy::Uninstall) => "uninstall",
                None => "",
            },
            ..Applying {
                force: upgrade.force && repair.is_none(),
                ..upgrade
            }
            .into()
        }),
        disable_hooks: false,
        keep_history: false,
        wait: false,
        force_conflicts: repair.is_some(),
        description: repair.map(helm::repair_description).unwrap_or_default(),
        revision: 0,
        // A drift repair puts back what the tests already passed on: they are not run again.
        test: settings::test(&release.helm, options)
            .filter(|_| repair.is_none())
            .map(TestRun::from),
        seal: options.seal.clone(),
        adopt: false,
        post_render: release.post_render.clone(),
    }
}

/// The request of an uninstall of `key` as `asked`, as the CLI path asks for it.
pub(crate) fn uninstall_request(
    id: u64,
    key: &ReleaseKey,
    cluster: ClusterRef,
    asked: &Removing,
    options: &HelmOptions,
) -> Request {
    Request {
        timeout_seconds: asked.timeout.as_secs(),
        disable_hooks: asked.disable_hooks,
        keep_history: asked.keep_history,
        wait: asked.wait,
        ..release_request(id, key, cluster, None, options)
    }
}

/// The request of a rollback of `key` to revision `to`, with the chart entry's upgrade timeout
/// and `maxHistory` (`helm`), as the CLI path asks for it.
pub(crate) fn rollback_request(
    id: u64,
    key: &ReleaseKey,
    cluster: ClusterRef,
    to: i64,
    helm: &crate::plan::HelmSettings,
    options: &HelmOptions,
) -> Request {
    Request {
        timeout_seconds: settings::upgrade(helm, options).timeout.as_secs(),
        history_max: settings::history_max(helm, options),
        ..release_request(id, key, cluster, Some(to), options)
    }
}

/// The request of an uninstall (with the executor's defaults) or (with `to`) a rollback of
/// `key`, as the CLI path asks for them.
pub(crate) fn release_request(
    id: u64,
    key: &ReleaseKey,
    cluster: ClusterRef,
    to: Option<i64>,
    options: &HelmOptions,
) -> Request {
    Request {
        id,
        op: if to.is_some() {
            "rollback"
        } else {
            "uninstall"
        },
        cluster,
        namespace: key.scope.namespace.clone(),
        release: key.release.clone(),
        chart: String::new(),
        values: None,
        set: Vec::new(),
        labels: Default::default(),
        history_max: options.history_max,
        timeout_seconds: options.timeout.as_secs(),
        install: None,
        upgrade: None,
        disable_hooks: to.is_none(),
        keep_history: false,
        wait: false,
        force_conflicts: to.is_some(),
        description: if to.is_some() {
            helm::ROLLBACK_DESCRIPTION.to_owned()
        } else {
            String::new()
        },
        revision: to.unwrap_or(0),
        test: None,
        seal: options.seal.clone(),
        adopt: false,
        post_render: None,
    }
}

#[cfg(test)]
mod sdk_version_tests {
    #[test]
    fn the_helm_sdk_version_is_the_one_the_executor_is_built_with() {
        let go_mod = include_str!("helm-sdk/go.mod");
        let required = go_mod
            .lines()
            .find_map(|l| l.trim().strip_prefix("helm.sh/helm/v4 "))
            .expect("go.mod requires helm.sh/helm/v4");
        assert_eq!(required.trim(), super::HELM_SDK);
    }
}
