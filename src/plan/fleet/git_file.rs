//! One `valuesFiles` entry for one cluster: its path rendered for the cluster, admitted by the policies' Git rules, its content looked up (pure).

use serde_json::Value;

use crate::{
    api::crd::GitValuesFile,
    plan::release::{GitFileLookup, GitFileSource},
    plan::values,
    policy::git::clean_path,
};

use super::{At, Rendered};

/// Largest values file taken, in bytes.
pub(crate) const MAX_FILE_BYTES: usize = 1 << 20;

/// Merges the values file `file` (named `what` in messages) for the cluster of `at` into
/// `merged`; returns whether it was there (false: optional and missing). The source read is
/// noted in `out` whether or not it is found, so it is loaded and planned with again.
pub(crate) fn merge(
    at: &At<'_>,
    file: &GitValuesFile,
    what: &str,
    out: &mut Rendered,
    merged: &mut Value,
) -> Result<bool, String> {
    let cluster = at.scope.cluster;
    let rendered =
        values::render_text(&file.path, &at.scope).map_err(|e| format!("{what}: path: {e}"))?;
    let path = clean_path(&rendered).map_err(|why| format!("{what}: {why}"))?;
    let (credentials, trust) = at
        .admission
        .values_file(&at.owner.namespace, file, &path)
        .map_err(|why| format!("{what}: {why}"))?;
    let source = GitFileSource {
        url: file.git.url.clone(),
        reference: file
            .git
            .reference
            .kind()
            .map_err(|why| format!("{what}: {why}"))?,
        path,
        interval_secs: file.git.interval_secs(),
        credentials,
        trust,
    };
    out.git_files.insert(source.clone());
    match (at.fleet.git_files)(&source) {
        GitFileLookup::Found { content, commit } => {
            if content.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "{what}: {source} (commit {commit}) is larger than {} KiB",
                    MAX_FILE_BYTES >> 10
                ));
            }
            let document = match serde_yaml::from_str::<Value>(&content) {
                Ok(Value::Object(map)) => Value::Object(map),
                Ok(Value::Null) => Value::Object(serde_json::Map::new()),
                Ok(_) => {
                    return Err(format!(
                        "{what}: {source} (commit {commit}) is not a YAML map of values"
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "{what}: {source} (commit {commit}) is not YAML ({})",
                        e.location().map_or_else(
                            || "no location".to_owned(),
                            |l| format!("line {}, column {}", l.line(), l.column())
                        )
                    ));
                }
            };
            if let Some(why) = crate::api::crd::free_form::too_deep(&document) {
                return Err(format!("{what}: {source}: {why}"));
            }
            values::merge(merged, &document);
            Ok(true)
        }
        GitFileLookup::Missing { .. } if file.optional => Ok(false),
        GitFileLookup::Missing { commit } => Err(format!(
            "{what}: {source} does not exist at commit {commit} for cluster {cluster}; the release waits for it (add the file, or mark the entry optional: true)"
        )),
        GitFileLookup::Unreadable(why) => Err(format!(
            "{what}: {source} cannot be read for cluster {cluster}: {why}"
        )),
    }
}

#[cfg(test)]
mod tests;
