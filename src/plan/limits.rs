//! How much one Controller may ask for: charts and releases in all, and what its setting keys may make Helm build (pure).
//!
//! Everything in a spec is written by a tenant and paid for by the operator, on every replica:
//! planning, claims, status and Events. These bounds are checked before anything is resolved, so
//! the work for one Controller is linear in its size and the size is bounded; the schema refuses
//! what it can (`maxItems`, a CEL rule on the chart count) and the planner checks again, since only
//! the planner sees the fan-out of `clusterSelector` over the registered clusters.

use std::collections::HashMap;

use crate::api::crd::{ControllerSpec, Setting};

/// Charts one Controller may name over all its tenancies (the schema refuses more too).
pub(crate) const MAX_CHARTS: usize = 10_000;

/// Releases one Controller may ask for: each chart once per cluster its tenancy goes to.
pub(crate) const MAX_RELEASES: usize = 20_000;

/// The largest list index a setting key may hold, as in `env[1024].name`: Helm builds a list of
/// that many elements plus one.
pub(crate) const MAX_LIST_INDEX: usize = 1024;

/// List elements the setting keys of one release may make Helm build in all.
pub(crate) const MAX_LIST_ELEMENTS: usize = 10_000;

/// Entries a message names before it counts the rest.
pub(crate) const NAMED: usize = 3;

/// Charts a spec names over all its tenancies.
pub(crate) fn charts_named(spec: &ControllerSpec) -> usize {
    spec.tenancies.iter().map(|t| t.charts.len()).sum()
}

/// Names the first [`NAMED`] of `items` and counts the rest of `total`: "a, b, c and 4 more".
pub(crate) fn few<S: AsRef<str>>(items: impl IntoIterator<Item = S>, total: usize) -> String {
    let shown: Vec<S> = items.into_iter().take(NAMED).collect();
    let mut out = shown
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if total > shown.len() {
        out.push_str(&format!(" and {} more", total - shown.len()));
    }
    out
}

/// Why a release's setting keys cannot be given to Helm: the first key refused, and why.
pub(crate) fn refused_setting(settings: &[Setting]) -> Option<(String, String)> {
    // The deepest list each path of the keys asks for: `a[3].b[5]` asks for 4 elements in `a`
    // and 6 in `a[3].b`. Keys naming one list share its elements.
    let mut lists: HashMap<&str, usize> = HashMap::new();
    for setting in settings {
        let key = setting.key.as_str();
        if key.contains([',', '=']) {
            let why = "contains ',' or '=', which Helm cannot take in a key".to_owned();
            return Some((key.to_owned(), why));
        }
        for (path, index) in list_indexes(key) {
            if index > MAX_LIST_INDEX {
                let why = format!(
                    "has the list index [{index}], over the {MAX_LIST_INDEX} a setting may use (Helm would build a list of {} elements)",
                    index.saturating_add(1)
                );
                return Some((key.to_owned(), why));
            }
            let deepest = lists.entry(path).or_default();
            *deepest = (*deepest).max(index + 1);
        }
    }
    let elements: usize = lists.values().sum();
    (elements > MAX_LIST_ELEMENTS).then(|| {
        let key = settings.last().map(|s| s.key.clone()).unwrap_or_default();
        let why = format!(
            "and the other setting keys of this release make lists of {elements} elements in all, over the {MAX_LIST_ELEMENTS} one release's settings may make"
        );
        (key, why)
    })
}

/// The list indexes of a setting key, each with the path of the list it indexes (the key up to
/// its `[`), read as Helm's `--set` parser reads them: a backslash takes the next character
/// literally, inside the brackets too, and the index is a decimal number with an optional sign.
/// What Helm refuses itself (a negative or non-numeric index) is left out; an index too large to
/// count is `usize::MAX`.
fn list_indexes(key: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    let mut chars = key.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' => {
                let mut index = String::new();
                while let Some((_, c)) = chars.next() {
                    match c {
                        ']' => break,
                        '\\' => index.extend(chars.next().map(|(_, c)| c)),
                        c => index.push(c),
                    }
                }
                let digits = index.strip_prefix('+').unwrap_or(&index);
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    out.push((&key[..at], digits.parse().unwrap_or(usize::MAX)));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(keys: &[&str]) -> Vec<Setting> {
        keys.iter()
            .map(|k| Setting {
                key: (*k).to_owned(),
                value: "1".into(),
            })
            .collect()
    }

    fn refused(keys: &[&str]) -> Option<String> {
        refused_setting(&settings(keys)).map(|(key, why)| format!("{key}: {why}"))
    }

    #[test]
    fn list_indexes_are_read_as_helm_reads_them() {
        assert_eq!(list_indexes("a[3].b[5]"), [("a", 3), ("a[3].b", 5)]);
        assert_eq!(list_indexes("a[1][2]"), [("a", 1), ("a[1]", 2)]);
        assert_eq!(
            list_indexes(r"a\[7]"),
            [],
            "an escaped bracket is a plain character"
        );
        assert_eq!(list_indexes("a[x]"), [], "helm refuses it itself");
        assert_eq!(list_indexes("a[]"), []);
        assert_eq!(list_indexes("a[99999999999999999999999]")[0].1, usize::MAX);
        assert_eq!(
            list_indexes("a[+65535]"),
            [("a", 65535)],
            "a sign is allowed"
        );
        assert_eq!(
            list_indexes(r"a[\6\5535]"),
            [("a", 65535)],
            "escapes inside"
        );
        assert_eq!(list_indexes("a[-1]"), [], "helm refuses it itself");
        assert_eq!(list_indexes("plain.key"), []);
    }

    #[test]
    fn a_list_index_over_the_bound_is_refused_naming_the_key_and_the_bound() {
        let why = refused(&["replicaCount", "k[65535]"]).unwrap();
        assert!(
            why.starts_with("k[65535]: has the list index [65535], over the 1024"),
            "{why}"
        );
        assert!(refused(&["env[1024].name", "env[0].name"]).is_none());
        assert!(refused(&["a[99999999999999999999999]"]).is_some());
    }

    #[test]
    fn lists_are_counted_once_however_many_keys_name_them() {
        let env: Vec<String> = (0..1000).map(|i| format!("env[{i}].name")).collect();
        let keys: Vec<&str> = env.iter().map(String::as_str).collect();
        assert!(refused(&keys).is_none(), "one list of 1,000 elements");
    }

    #[test]
    fn many_lists_over_the_release_bound_are_refused() {
        // Each key is within the index bound; together they would make 11 lists of 1,025.
        let keys: Vec<String> = (0..11).map(|i| format!("l{i}[1024]")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let why = refused(&keys).unwrap();
        assert!(why.contains("lists of 11275 elements in all"), "{why}");
        let nested = [format!("a{}", "[1024]".repeat(10))];
        let nested: Vec<&str> = nested.iter().map(String::as_str).collect();
        assert!(refused(&nested).is_some(), "nested lists count each level");
    }

    #[test]
    fn keys_helm_would_split_are_refused_as_before() {
        let why = refused(&["a,b"]).unwrap();
        assert_eq!(
            why,
            "a,b: contains ',' or '=', which Helm cannot take in a key"
        );
    }

    #[test]
    fn the_schema_refuses_what_the_planner_refuses() {
        let crd = crate::api::crd::crd_yaml();
        assert!(
            crd.contains(&format!("sum() <= {MAX_CHARTS}")),
            "the chart count rule"
        );
        assert!(crd.contains(&format!("at most {MAX_CHARTS} charts")));
        let schema = serde_json::to_value(
            <crate::api::crd::ControllerSpec as schemars::JsonSchema>::json_schema(
                &mut schemars::SchemaGenerator::default(),
            ),
        )
        .unwrap();
        assert_eq!(schema["properties"]["tenancies"]["maxItems"], 1000);
    }

    #[test]
    fn a_message_names_a_few_and_counts_the_rest() {
        assert_eq!(few(["a", "b"], 2), "a, b");
        assert_eq!(few(["a", "b", "c", "d", "e"], 5), "a, b, c and 2 more");
        assert_eq!(few(["a", "b", "c"], 400), "a, b, c and 397 more");
    }
}
