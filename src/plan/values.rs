//! Values that differ per cluster: references to the target cluster's registration and the
//! tenancy rendered into values, settings and `valuesFrom` names, and values merged in order
//! (pure).
//!
//! The syntax is Flux's variable substitution: `${cluster.name}`, `${cluster.labels.region}`,
//! `${cluster.variables.replicas}`, `${tenancy.namespace}`, `${controller.name}`,
//! `${controller.namespace}`; `${name:=default}` gives a default when the name is missing, and
//! `$${` writes a literal `${`. Nothing is executed. A string that is exactly one reference takes
//! the referenced value's type (a number variable stays a number); a reference inside a longer
//! string must be a string, number or boolean. An unknown reference or a type mismatch is an
//! error naming the expression, for that cluster only.

use std::{collections::BTreeMap, fmt};

use serde_json::Value;

use crate::api::key::ClusterName;

/// Bytes of rendered text one release may hold at most (values, settings and names together).
pub(crate) const MAX_RENDERED_BYTES: usize = 1 << 20;

/// What references may name, for one release on one cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scope<'a> {
    /// The target cluster's registered name.
    pub(crate) cluster: &'a ClusterName,
    /// Its registration's labels.
    pub(crate) labels: &'a BTreeMap<String, String>,
    /// Its registration's variables.
    pub(crate) variables: &'a BTreeMap<String, Value>,
    /// The tenancy's namespace in the cluster.
    pub(crate) namespace: &'a str,
    /// The Controller's hub namespace.
    pub(crate) controller_namespace: &'a str,
    /// The Controller's name.
    pub(crate) controller_name: &'a str,
}

/// Why a template cannot be rendered for a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// The expression, as written (`${cluster.labels.region}`), or the start of the text.
    pub(crate) expression: String,
    /// What is wrong and what to do.
    pub(crate) why: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.expression, self.why)
    }
}

/// The names a reference may use, for messages.
const KNOWN: &str = "cluster.name, cluster.labels.KEY, cluster.variables.KEY, tenancy.namespace, \
                     controller.name, controller.namespace";

impl Scope<'_> {
    /// The value `name` refers to; None when the scope has no such value.
    fn lookup(&self, name: &str) -> Result<Option<Value>, String> {
        let text = |s: &str| Some(Value::String(s.to_owned()));
        Ok(match name {
            "cluster.name" => text(self.cluster.as_str()),
            "tenancy.namespace" => text(self.namespace),
            "controller.name" => text(self.controller_name),
            "controller.namespace" => text(self.controller_namespace),
            "cluster.labels" => Some(Value::Object(
                self.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )),
            "cluster.variables" => Some(Value::Object(
                self.variables
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )),
            _ => {
                if let Some(key) = name.strip_prefix("cluster.labels.") {
                    self.labels.get(key).and_then(|v| text(v))
                } else if let Some(key) = name.strip_prefix("cluster.variables.") {
                    self.variables.get(key).cloned()
                } else {
                    return Err(format!("unknown reference {name:?}; known: {KNOWN}"));
                }
            }
        })
    }

    /// What a missing `name` means, in words.
    fn missing(&self, name: &str) -> String {
        let cluster = self.cluster;
        let add = "add it to the cluster's registration, or give a default: ${NAME:=VALUE}";
        if let Some(key) = name.strip_prefix("cluster.labels.") {
            format!("cluster {cluster} has no label {key:?}; {add}")
        } else if let Some(key) = name.strip_prefix("cluster.variables.") {
            format!("cluster {cluster} has no variable {key:?}; {add}")
        } else {
            format!("{name} has no value; {add}")
        }
    }
}

/// One piece of a template: text as is, or a reference with its default.
enum Piece<'t> {
    Text(std::borrow::Cow<'t, str>),
    Reference {
        written: &'t str,
        name: &'t str,
        default: Option<&'t str>,
    },
}

/// The pieces of `text`; an unclosed `${` is an error.
fn pieces(text: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut literal = String::new();
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            // `$${` writes `${`.
            literal.push_str(&rest[..at - 1]);
            literal.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        literal.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            return Err(TemplateError {
                expression: rest[at..].chars().take(40).collect(),
                why: "a reference opened with ${ is not closed with }".into(),
            });
        };
        if !literal.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut literal).into()));
        }
        let written = &rest[at..at + end + 1];
        let inner = &written[2..written.len() - 1];
        let (name, default) = match inner.split_once(":=") {
            Some((name, default)) => (name.trim(), Some(default)),
            None => (inner.trim(), None),
        };
        out.push(Piece::Reference {
            written,
            name,
            default,
        });
        rest = &rest[at + end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Piece::Text(literal.into()));
    }
    Ok(out)
}

/// True when `text` holds a reference (or an escaped `$${`) to render.
pub(crate) fn has_references(text: &str) -> bool {
    text.contains("${")
}

/// The value a reference stands for, its default when the scope has none.
fn resolve(
    scope: &Scope<'_>,
    written: &str,
    name: &str,
    default: Option<&str>,
) -> Result<Value, TemplateError> {
    let error = |why: String| TemplateError {
        expression: written.to_owned(),
        why,
    };
    match scope.lookup(name).map_err(error)? {
        Some(value) => Ok(value),
        None => match default {
            Some(default) => Ok(Value::String(default.to_owned())),
            None => Err(error(scope.missing(name))),
        },
    }
}

/// A scalar as text inside a longer string; anything else is a type mismatch.
fn as_text(value: &Value, written: &str) -> Result<String, TemplateError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(TemplateError {
            expression: written.to_owned(),
            why: format!(
                "is {} and cannot be part of a longer string; refer to a string, number or \
                 boolean, or make the whole value this one reference",
                kind_of(other)
            ),
        }),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Renders a string: exactly one reference keeps the referenced value's type, anything else is
/// a string with every reference replaced by its text.
pub(crate) fn render_str(text: &str, scope: &Scope<'_>) -> Result<Value, TemplateError> {
    if !has_references(text) {
        return Ok(Value::String(text.to_owned()));
    }
    let pieces = pieces(text)?;
    if let [
        Piece::Reference {
            written,
            name,
            default,
        },
    ] = pieces.as_slice()
    {
        return resolve(scope, written, name, *default);
    }
    let mut out = String::with_capacity(text.len());
    for piece in &pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Reference {
                written,
                name,
                default,
            } => out.push_str(&as_text(
                &resolve(scope, written, name, *default)?,
                written,
            )?),
        }
    }
    Ok(Value::String(out))
}

/// Renders a string that must stay text (a setting's value, an object's name).
pub(crate) fn render_text(text: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
    let rendered = render_str(text, scope)?;
    as_text(&rendered, text)
}

/// Renders every string in `value` (map keys stay as written).
pub(crate) fn render_value(value: &Value, scope: &Scope<'_>) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => render_str(s, scope)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_value(v, scope))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_value(v, scope)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Merges `over` into `base` as Helm merges values files: maps key by key, recursively;
/// anything else replaced by `over`.
pub(crate) fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

/// Puts `value` at the dotted `path` of `values` (a map), making the maps on the way; a part of
/// the path that holds something other than a map is replaced by one.
pub(crate) fn set_path(values: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "target path {path:?} has an empty part; write dotted keys such as a.b.c"
        ));
    }
    let mut at = values;
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = Value::Object(serde_json::Map::new());
        }
        let map = at.as_object_mut().expect("made a map above");
        if i + 1 == parts.len() {
            map.insert((*part).to_owned(), value);
            return Ok(());
        }
        at = map
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    Ok(())
}

/// Every string leaf of `value` (for masking what came from a Secret), the short ones left out:
/// masking a one-letter value would hide every such letter of a message.
pub(crate) fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.len() >= MIN_MASKED => out.push(s.clone()),
        Value::Number(n) if n.to_string().len() >= MIN_MASKED => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        _ => {}
    }
}

/// Values shorter than this are not masked in text (see [`leaves`]).
pub(crate) const MIN_MASKED: usize = 4;

/// The size of a value as JSON text, in bytes.
pub(crate) fn size_of(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

#[cfg(test)]
mod tests;
