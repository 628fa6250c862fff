//! What `diff` reports: one entry per release (the action, its manifests' unified diff with Secret values masked), as text or JSON, and its exit code (pure).

use std::collections::{BTreeSet, HashMap};

use clap::ValueEnum;
use serde::Serialize;

pub(crate) use crate::status::next::Action;
use crate::{
    api::crd::HUB_CLUSTER,
    api::key::ReleaseKey,
    plan::{Applied, Job, Plan, Problem},
};

/// How `diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DiffOutput {
    /// A header per release, then a unified diff of its manifests.
    Text,
    /// A JSON array of {cluster, namespace, release, action, reason?, diff?, failed?}.
    Json,
}

/// A remote chart as the preview shows it: where from, which version and digest, and who signed
/// it when a policy asks signatures (never credentials).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChartShown {
    /// Its repository and name, or its `oci://` reference.
    pub(crate) source: String,
    /// The version planned.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) version: String,
    /// Its digest, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) digest: String,
    /// Who signed it, per signature rule.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) verified_by: String,
}

impl ChartShown {
    /// What of `release`'s chart is shown; None for a chart of the chart home.
    fn of(release: &crate::plan::Release) -> Option<Self> {
        let source =
            crate::status::report::shown_source(&release.source, release.commit.as_deref());
        (!source.is_empty()).then(|| Self {
            source,
            version: release.version.clone().unwrap_or_default(),
            digest: release.chart_digest.clone().unwrap_or_default(),
            verified_by: release
                .verified
                .as_ref()
                .map(|v| v.by.clone())
                .unwrap_or_default(),
        })
    }

    /// In words, for the text preview.
    fn text(&self) -> String {
        let mut out = self.source.clone();
        for (label, value) in [
            ("version", &self.version),
            ("digest", &self.digest),
            ("verified by", &self.verified_by),
        ] {
            if !value.is_empty() {
                out.push_str(&format!(", {label} {value}"));
            }
        }
        out
    }
}

/// One release of the preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Entry {
    /// Registered cluster name.
    pub(crate) cluster: String,
    /// Namespace on that cluster.
    pub(crate) namespace: String,
    /// Helm release name; empty for a problem of a whole tenancy.
    pub(crate) release: String,
    /// What would happen.
    pub(crate) action: Action,
    /// Why, when it is refused, unknown, held back or could not be rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// Unified diff of the deployed manifest against the rendered one, Secrets' values masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) diff: Option<String>,
    /// The values the release would be given on its cluster (JSON, what came from Secrets
    /// masked); none when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) values: Option<String>,
    /// The chart it would be given, when it comes from a repository or registry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chart: Option<ChartShown>,
    /// Revision deployed now.
    #[serde(skip)]
    pub(crate) revision: Option<i64>,
    /// Whether its diff could not be made (the chart does not render here, the deployed manifest
    /// cannot be read): the preview is incomplete, whatever the action.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) failed: bool,
}

impl Entry {
    pub(crate) fn of(key: &ReleaseKey, action: Action, revision: Option<i64>) -> Self {
        Self {
            cluster: key.scope.cluster.to_string(),
            namespace: key.scope.namespace.clone(),
            release: key.release.clone(),
            action,
            reason: None,
            diff: None,
            values: None,
            chart: None,
            revision,
            failed: false,
        }
    }

    /// `cluster/namespace/release`.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}/{}", self.cluster, self.namespace, self.release)
    }
}

/// What a plan would do, release by release, sorted by cluster, namespace and release.
pub(crate) fn entries(
    plan: &Plan,
    held: &[Job],
    applied: &HashMap<ReleaseKey, Applied>,
) -> Vec<Entry> {
    let revision = |k: &ReleaseKey| applied.get(k).map(|a| a.revision);
    let mut out: Vec<Entry> = Vec::new();
    for step in crate::status::next::next(plan, held, applied) {
        let mut entry = Entry::of(&step.key, step.action, revision(&step.key));
        entry.reason = step.held;
        out.push(entry);
    }
    let jobs: BTreeSet<&ReleaseKey> = plan.jobs.iter().chain(held).map(Job::key).collect();
    for release in plan.desired.iter().filter(|r| !jobs.contains(&r.key)) {
        let key = &release.key;
        let mut entry = Entry::of(key, Action::Unchanged, revision(key));
        if plan.waiting.contains(key) {
            entry.action = Action::Unknown;
            entry.reason = Some(format!(
                "the releases of cluster {} could not be read",
                key.scope.cluster
            ));
        } else if plan.suspended.contains(key) {
            entry.reason = Some("suspended: this change is held back until resumed".into());
        }
        out.push(entry);
    }
    let desired: BTreeSet<&ReleaseKey> = plan.desired.iter().map(|r| &r.key).collect();
    let made: HashMap<String, String> = plan
        .desired
        .iter()
        .map(|r| (r.key.to_string(), crate::status::report::shown_values(r)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let charts: HashMap<String, ChartShown> = plan
        .desired
        .iter()
        .filter_map(|r| Some((r.key.to_string(), ChartShown::of(r)?)))
        .collect();
    for entry in &mut out {
        entry.values = made.get(&entry.name()).cloned();
        entry.chart = charts.get(&entry.name()).cloned();
    }
    for key in plan.suspended.iter().filter(|k| !desired.contains(k)) {
        let mut entry = Entry::of(key, Action::Unchanged, revision(key));
        entry.reason = Some("suspended: its uninstall is held back until resumed".into());
        out.push(entry);
    }
    for problem in &plan.problems {
        let mut entry = match (problem.release(), problem) {
            (Some(key), _) => Entry::of(key, Action::Refused, revision(key)),
            (
                None,
                Problem::UnknownCluster {
                    namespace, cluster, ..
                },
            ) => Entry {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                ..Entry::of(&placeholder(), Action::Refused, None)
            },
            (None, Problem::NoClusterSelected { namespace }) => Entry {
                cluster: String::new(),
                namespace: namespace.clone(),
                ..Entry::of(&placeholder(), Action::Refused, None)
            },
            (None, _) => Entry::of(&placeholder(), Action::Refused, None),
        };
        entry.reason = Some(problem.to_string());
        out.push(entry);
    }
    out.sort_by(|a, b| {
        (&a.cluster, &a.namespace, &a.release, a.action).cmp(&(
            &b.cluster,
            &b.namespace,
            &b.release,
            b.action,
        ))
    });
    out
}

pub(crate) fn placeholder() -> ReleaseKey {
    ReleaseKey {
        scope: crate::api::key::ClusterNamespace::new(
            HUB_CLUSTER.parse().expect("the hub's name is valid"),
            "default",
        )
        .expect("a valid namespace"),
        release: String::new(),
    }
}

/// The exit code, as `kubectl diff`: 0 when nothing would change, 1 when a release would be
/// installed, upgraded or uninstalled or is refused (the file asks for something that would not
/// be delivered), 2 when a cluster could not be read or a diff could not be made.
pub(crate) fn exit_code(entries: &[Entry]) -> u8 {
    if entries
        .iter()
        .any(|e| e.action == Action::Unknown || e.failed)
    {
        2
    } else if entries.iter().any(|e| e.action != Action::Unchanged) {
        1
    } else {
        0
    }
}

/// The header line of an entry, as `member-1/team-a/web: upgrade (revision 3 -> 4)`.
pub(crate) fn header(entry: &Entry) -> String {
    let name = entry.name();
    let what = match (entry.action, entry.revision) {
        (Action::Install, _) => "install (revision 1)".to_owned(),
        (Action::Upgrade, Some(r)) => format!("upgrade (revision {r} -> {})", r + 1),
        (Action::Uninstall, Some(r)) => format!("uninstall (revision {r})"),
        (Action::Unchanged, Some(r)) => format!("unchanged (revision {r})"),
        (action, _) => action.word().to_owned(),
    };
    match &entry.reason {
        Some(reason) => format!("{name}: {what}: {reason}"),
        None => format!("{name}: {what}"),
    }
}

/// The preview as text: a header per release, each followed by its diff.
pub(crate) fn render_text(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(&header(entry));
        out.push('\n');
        if let Some(chart) = &entry.chart {
            out.push_str("  chart: ");
            out.push_str(&chart.text());
            out.push('\n');
        }
        if let Some(values) = &entry.values {
            out.push_str("  values: ");
            out.push_str(values);
            out.push('\n');
        }
        if let Some(diff) = &entry.diff {
            out.push_str(diff);
            if !diff.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// The preview as a JSON array.
pub(crate) fn render_json(entries: &[Entry]) -> String {
    serde_json::to_string_pretty(entries).expect("plain data serializes") + "\n"
}
