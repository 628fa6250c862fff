//! What an install or upgrade did with its chart's CRDs, as the Helm executor reports it, and its bounded summary for a release's status.

use serde::{Deserialize, Serialize};

/// CRD names listed per kind of change in a summary; the rest are counted.
const NAMED: usize = 5;

/// What became of a chart's CRDs in one install or upgrade, by name: created, replaced (their
/// spec changed), left unchanged (kept as they were, or the same spec applied).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrdReport {
    /// Created, missing before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
    /// Replaced by the chart's definition, whose spec changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<String>,
    /// Left as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchanged: Vec<String>,
}

impl CrdReport {
    /// The report in words for a release's status, bounded whatever the chart holds: each kind
    /// of change with its count and its first few names, `created 1 (a.example.com); replaced 0;
    /// unchanged 50 (b.example.com, …, and 45 more)`.
    pub(crate) fn summary(&self) -> String {
        [
            ("created", &self.created),
            ("replaced", &self.replaced),
            ("unchanged", &self.unchanged),
        ]
        .into_iter()
        .map(|(what, names)| {
            if names.is_empty() {
                return format!("{what} 0");
            }
            let mut shown: Vec<&str> = names.iter().take(NAMED).map(|n| bounded(n)).collect();
            let more = names.len().saturating_sub(NAMED);
            let rest = format!("and {more} more");
            if more > 0 {
                shown.push(&rest);
            }
            format!("{what} {} ({})", names.len(), shown.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// A CRD name as the executor sent it, cut to the longest a Kubernetes name may be.
fn bounded(name: &str) -> &str {
    let mut end = name.len().min(253);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_names_each_kind_of_change_with_its_count() {
        let report = CrdReport {
            created: vec!["a.example.com".into()],
            replaced: vec![],
            unchanged: vec!["b.example.com".into(), "c.example.com".into()],
        };
        assert_eq!(
            report.summary(),
            "created 1 (a.example.com); replaced 0; unchanged 2 (b.example.com, c.example.com)"
        );
    }

    #[test]
    fn a_chart_with_fifty_crds_is_summarised_in_a_few_names_and_a_count() {
        let report = CrdReport {
            replaced: (0..50).map(|i| format!("kind{i}.example.com")).collect(),
            unchanged: vec!["x".repeat(10_000)],
            ..CrdReport::default()
        };
        let summary = report.summary();
        assert!(
            summary.contains("replaced 50 (kind0.example.com"),
            "{summary}"
        );
        assert!(summary.contains("and 45 more"), "{summary}");
        assert!(!summary.contains("kind5.example.com"), "{summary}");
        assert!(summary.len() < 700, "{} bytes", summary.len());
    }
}
