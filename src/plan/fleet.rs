//! One chart's values for one cluster: `valuesFrom` hub objects, the chart's `values`, the
//! overrides selecting the cluster, in that order, then its settings; references rendered for
//! the cluster; what came from Secrets noted for masking (pure).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::{
    api::crd::{Chart, ValuesKind, ValuesReference, free_form::too_deep},
    api::key::{ClusterName, ReleaseKey},
    plan::post_render::{self, PostRender},
    plan::release::{GitFileLookup, GitFileSource, Masked, OwnerId, ValuesLookup, ValuesSource},
    plan::values::{self, MAX_RENDERED_BYTES, Scope, TemplateError},
    policy::Admission,
};

/// Where per-cluster values come from beyond the spec (parameters, so planning stays pure).
pub struct Fleet<'a> {
    /// Each registered cluster's variables.
    pub variables: &'a BTreeMap<ClusterName, BTreeMap<String, Value>>,
    /// What is known of a hub object `valuesFrom` names.
    pub lookup: &'a (dyn Fn(&ValuesSource) -> ValuesLookup + Sync),
    /// What is known of a Git values file `valuesFiles` names.
    pub git_files: &'a (dyn Fn(&GitFileSource) -> GitFileLookup + Sync),
}

impl Fleet<'_> {
    /// No variables, and no hub object found: for planning that reads nothing from the hub.
    pub fn none() -> Fleet<'static> {
        static NO_VARIABLES: BTreeMap<ClusterName, BTreeMap<String, Value>> = BTreeMap::new();
        Fleet {
            variables: &NO_VARIABLES,
            lookup: &|_| ValuesLookup::Missing,
            git_files: &|_| GitFileLookup::Unreadable("Git values files are not read here".into()),
        }
    }
}

/// A chart's values and settings as made for one cluster.
#[derive(Debug, Default)]
pub(crate) struct Rendered {
    /// `--set` pairs: the chart's, then those of the overrides selecting the cluster.
    pub(crate) settings: Vec<(String, String)>,
    /// The values file's content; None when nothing sets any value.
    pub(crate) values: Option<Value>,
    /// What came from Secrets.
    pub(crate) masked: Masked,
    /// The hub objects read, found or not.
    pub(crate) sources: BTreeSet<ValuesSource>,
    /// The Git values files read, found or not.
    pub(crate) git_files: BTreeSet<GitFileSource>,
    /// Its post-render patches and common metadata for the cluster.
    pub(crate) post_render: Option<PostRender>,
}

/// Why a chart's values cannot be made for a cluster (never a Secret's content), and the hub
/// objects it read on the way (still watched, so fixing them plans again).
#[derive(Debug)]
pub(crate) struct Unrendered {
    /// What is wrong and what to do.
    pub(crate) why: String,
    /// The hub objects read.
    pub(crate) sources: BTreeSet<ValuesSource>,
    /// The Git values files read.
    pub(crate) git_files: BTreeSet<GitFileSource>,
}

/// True when a selector's labels all hold on the cluster.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Makes `chart`'s values for the release `key` of `owner`.
pub(crate) fn render(
    owner: &OwnerId,
    key: &ReleaseKey,
    chart: &Chart,
    labels: &BTreeMap<String, String>,
    fleet: &Fleet<'_>,
    admission: &Admission,
) -> Result<Rendered, Unrendered> {
    static NO_VARIABLES: BTreeMap<String, Value> = BTreeMap::new();
    let scope = Scope {
        cluster: &key.scope.cluster,
        labels,
        variables: fleet
            .variables
            .get(&key.scope.cluster)
            .unwrap_or(&NO_VARIABLES),
        namespace: &key.scope.namespace,
        controller_namespace: &owner.namespace,
        controller_name: &owner.name,
    };
    let mut out = Rendered::default();
    let mut masked = Vec::new();
    let at = At {
        owner,
        scope,
        fleet,
        admission,
    };
    let result = build(&at, chart, &mut out, &mut masked).and_then(|()| {
        let selected = chart
            .overrides
            .iter()
            .enumerate()
            .filter(|(_, o)| selects(&o.cluster_selector.match_labels, at.scope.labels));
        out.post_render = post_render::render(chart, selected, &at.scope)?;
        Ok(())
    });
    out.masked = Masked::new(masked);
    match result {
        Ok(()) => Ok(out),
        Err(why) => Err(Unrendered {
            why,
            sources: out.sources,
            git_files: out.git_files,
        }),
    }
}

/// What one rendering reads: whose release, for which cluster, from where, under which policies.
pub(crate) struct At<'a> {
    pub(crate) owner: &'a OwnerId,
    pub(crate) scope: Scope<'a>,
    pub(crate) fleet: &'a Fleet<'a>,
    pub(crate) admission: &'a Admission,
}

/// The steps of [`render`], filling `out`.
fn build(
    at: &At<'_>,
    chart: &Chart,
    out: &mut Rendered,
    masked: &mut Vec<String>,
) -> Result<(), String> {
    let scope = &at.scope;
    let in_spec = |what: &str, e: TemplateError| format!("{what}: {e}");
    let mut merged = Value::Object(serde_json::Map::new());
    let mut any = false;
    for (i, reference) in chart.values_from.iter().enumerate() {
        let read = read(at, reference, out).map_err(|why| format!("valuesFrom[{i}]: {why}"))?;
        let Some((content, secret)) = read else {
            continue; // optional and missing
        };
        let document = match &reference.target_path {
            Some(path) => {
                if secret && content.len() >= values::MIN_MASKED {
                    masked.push(content.clone());
                }
                let mut at = Value::Object(serde_json::Map::new());
                values::set_path(&mut at, path, Value::String(content))
                    .map_err(|e| format!("valuesFrom[{i}]: {e}"))?;
                at
            }
            None => parse_document(&content, reference, secret)
                .map_err(|why| format!("valuesFrom[{i}]: {why}"))?,
        };
        if secret {
            values::leaves(&document, masked);
        }
        values::merge(&mut merged, &document);
        any = true;
    }
    for (i, file) in chart.values_files.iter().enumerate() {
        let what = format!("valuesFiles[{i}]");
        any |= git_file::merge(at, file, &what, out, &mut merged)?;
    }
    if let Some(own) = &chart.values {
        if let Some(why) = too_deep(own) {
            return Err(why);
        }
        let own = values::render_value(own, scope).map_err(|e| in_spec("values", e))?;
        values::merge(&mut merged, &own);
        any = true;
    }
    out.settings = setting_pairs(&chart.settings, scope, "settings")?;
    for (i, over) in chart.overrides.iter().enumerate() {
        if !selects(&over.cluster_selector.match_labels, scope.labels) {
            continue;
        }
        for (j, file) in over.values_files.iter().enumerate() {
            let what = format!("overrides[{i}].valuesFiles[{j}]");
            any |= git_file::merge(at, file, &what, out, &mut merged)?;
        }
        if let Some(values) = &over.values {
            if let Some(why) = too_deep(values) {
                return Err(format!("overrides[{i}].{why}"));
            }
            let values = values::render_value(values, scope)
                .map_err(|e| in_spec(&format!("overrides[{i}].values"), e))?;
            values::merge(&mut merged, &values);
            any = true;
        }
        let what = format!("overrides[{i}].settings");
        out.settings
            .extend(setting_pairs(&over.settings, scope, &what)?);
    }
    let size = values::size_of(&merged)
        + out
            .settings
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    if size > MAX_RENDERED_BYTES {
        return Err(format!(
            "the values made are {size} bytes, more than the {MAX_RENDERED_BYTES} one release may have"
        ));
    }
    out.values = any.then_some(merged);
    Ok(())
}

/// Settings with their values rendered.
fn setting_pairs(
    settings: &[crate::api::crd::Setting],
    scope: &Scope<'_>,
    what: &str,
) -> Result<Vec<(String, String)>, String> {
    settings
        .iter()
        .map(|s| {
            let value = values::render_text(&s.value, scope)
                .map_err(|e| format!("{what} {:?}: {e}", s.key))?;
            Ok((s.key.clone(), value))
        })
        .collect()
}

/// The content one `valuesFrom` entry reads and whether it is a Secret's; None when an optional
/// object or key is missing. Only the Controller's own hub namespace, only what a policy allows.
fn read(
    at: &At<'_>,
    reference: &ValuesReference,
    out: &mut Rendered,
) -> Result<Option<(String, bool)>, String> {
    let (owner, scope, fleet, admission) = (at.owner, &at.scope, at.fleet, at.admission);
    let name = values::render_text(&reference.name, scope).map_err(|e| format!("name: {e}"))?;
    if !valid_name(&name) {
        return Err(format!(
            "name {name:?} is not a valid object name (lowercase letters, digits, '-' and '.')"
        ));
    }
    let source = ValuesSource {
        kind: reference.kind,
        namespace: owner.namespace.clone(),
        name,
    };
    // Admission before any read: a name no rule could allow is never looked up, so its
    // refusal is the same whether the object exists, is large or is absent.
    admission.values_access(&source.namespace, source.kind, &source.name)?;
    out.sources.insert(source.clone());
    let key = reference.values_key.as_deref().unwrap_or("values.yaml");
    let missing = |what: String| {
        if reference.optional {
            Ok(None)
        } else {
            Err(format!(
                "{what}; the release waits for it (or mark the entry optional: true)"
            ))
        }
    };
    match (fleet.lookup)(&source) {
        ValuesLookup::Missing => {
            // Refused as an unlabelled one that exists would be: whether a Secret no rule lets
            // this namespace read exists is never told, optional or not.
            admission.may_read_values(
                &source.namespace,
                source.kind,
                &source.name,
                &BTreeMap::new(),
            )?;
            missing(format!("{source} does not exist"))
        }
        ValuesLookup::Unreadable(why) => Err(format!("{source} cannot be read: {why}")),
        ValuesLookup::Found { data, labels } => {
            admission.may_read_values(&source.namespace, source.kind, &source.name, &labels)?;
            match data.get(key) {
                Some(content) => Ok(Some((content.clone(), source.kind == ValuesKind::Secret))),
                None => missing(format!("{source} has no key {key:?}")),
            }
        }
    }
}

/// A DNS-1123 subdomain, as Secret and ConfigMap names are.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
}

/// A key's content read as a YAML map of values. A Secret's parse error says only where it is,
/// never what it read.
fn parse_document(
    content: &str,
    reference: &ValuesReference,
    secret: bool,
) -> Result<Value, String> {
    let key = reference.values_key.as_deref().unwrap_or("values.yaml");
    match serde_yaml::from_str::<Value>(content) {
        Ok(Value::Object(map)) => Ok(Value::Object(map)),
        Ok(Value::Null) => Ok(Value::Object(serde_json::Map::new())),
        Ok(_) => Err(format!(
            "key {key:?} is not a YAML map of values; give a targetPath to use it as one value"
        )),
        Err(e) if secret => Err(format!(
            "key {key:?} is not YAML ({}); give a targetPath to use it as one value",
            e.location().map_or_else(
                || "no location".to_owned(),
                |l| format!("line {}, column {}", l.line(), l.column())
            )
        )),
        Err(e) => Err(format!("key {key:?} is not YAML: {e}")),
    }
}

mod git_file;

#[cfg(test)]
mod tests;
