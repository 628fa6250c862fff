//! Drift: a release's live objects compared with the fields its manifest sets (pure; `release_check` reads them from the member cluster).
//!
//! Why a "the manifest's fields are a subset of live" comparison and not a server-side apply
//! dry-run: it needs only `get` on the release's objects (a dry-run apply needs the right to patch
//! every one of them, and Helm's field manager to ask as), costs one read per object, and treats
//! what the API server adds (defaults, status, other managers' fields) as no drift by
//! construction. Where the server rewrites a value the manifest sets (quantities such as `0.5` →
//! `500m`, a Secret's `stringData` → `data`), the comparison normalises both sides first.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::Value;

use crate::{
    api::crd::{DriftIgnore, DriftStatus, DriftedObject},
    api::key::ReleaseKey,
};

/// One object of a manifest (kept with the health judge, which names objects too).
pub(crate) use crate::plan::health::ObjectId;

/// Objects listed in a release's drift status; the rest are counted.
pub(crate) const MAX_OBJECTS: usize = 10;
/// Paths listed per object in a release's drift status; the rest are counted.
pub(crate) const MAX_PATHS: usize = 5;
/// Objects of one manifest a check reads at most; a manifest naming more is not compared.
pub(crate) const MAX_MANIFEST_OBJECTS: usize = 1_000;

/// Result alias for this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when trying again cannot help until the release changes: its record cannot be
    /// compared, or its identity cannot be acted as.
    pub(crate) fn is_lasting(&self) -> bool {
        matches!(
            self,
            Error::Undecodable { .. } | Error::Identity { .. } | Error::Health { .. }
        )
    }
}

/// What kept a release from being compared with its manifest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The release record could not be read.
    #[error("release {key}: reading its record {record}: {source}")]
    Record {
        /// The release.
        key: ReleaseKey,
        /// The record's Secret name.
        record: String,
        /// The error.
        source: Box<kube::Error>,
    },
    /// The release record holds no manifest that can be read.
    #[error("release {key}: its record {record} cannot be decoded: {reason}")]
    Undecodable {
        /// The release.
        key: ReleaseKey,
        /// The record's Secret name.
        record: String,
        /// Why.
        reason: String,
    },
    /// The release's identity cannot be acted as.
    #[error("release {key}: {reason}")]
    Identity {
        /// The release.
        key: ReleaseKey,
        /// Why.
        reason: String,
    },
    /// The chart's health expressions cannot be used (refused when planned: only a hub of
    /// another version sends such a check).
    #[error("release {key}: {reason}")]
    Health {
        /// The release.
        key: ReleaseKey,
        /// Which expression, and what is wrong.
        reason: String,
    },
    /// A pull member's agent could not compare it, or did not answer.
    #[error("release {key}: {reason}")]
    Agent {
        /// The release.
        key: ReleaseKey,
        /// What the agent said, or why it said nothing.
        reason: String,
    },
    /// A live object, or its kind, could not be read.
    #[error("release {key}: reading {object}: {source}")]
    Live {
        /// The release.
        key: ReleaseKey,
        /// The object, as `Kind/name`.
        object: String,
        /// The error.
        source: Box<kube::Error>,
    },
}

/// Where one live object differs from its manifest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ObjectDrift {
    /// The object (its namespace resolved for namespaced kinds).
    pub(crate) id: ObjectId,
    /// True when the object does not exist.
    pub(crate) missing: bool,
    /// JSON pointers of the manifest's fields the live object lacks or holds otherwise.
    pub(crate) paths: Vec<String>,
    /// The impersonated user the object was read as, when that user may not read it: it was
    /// neither compared nor found missing, so whether it exists is not told either.
    pub(crate) not_readable_by: Option<String>,
}

impl ObjectDrift {
    /// An object `user` may not read.
    pub(crate) fn not_readable(id: ObjectId, user: &str) -> Self {
        Self {
            id,
            missing: false,
            paths: Vec::new(),
            not_readable_by: Some(user.to_owned()),
        }
    }
}

/// The objects of a rendered manifest: every YAML document with a kind and a name, at most
/// [`MAX_MANIFEST_OBJECTS`] (a manifest naming more is refused, so a check's reads are bounded).
pub(crate) fn manifest_objects(manifest: &str) -> Result<Vec<Value>, String> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(manifest) {
        let value = Value::deserialize(document).map_err(|e| format!("manifest YAML: {e}"))?;
        if ObjectId::of(&value).is_some() {
            if out.len() == MAX_MANIFEST_OBJECTS {
                return Err(format!(
                    "its manifest names more than {MAX_MANIFEST_OBJECTS} objects, more than a drift check reads"
                ));
            }
            out.push(value);
        }
    }
    Ok(out)
}

/// Escapes one JSON pointer segment (RFC 6901).
fn segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A Kubernetes quantity (`500m`, `1Gi`, `0.5`) as a number, when it is one.
fn quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Equal scalars, as the API server stores them: numbers by value, and a quantity the server
/// wrote in its canonical form (`0.5` and `500m`, `1` and `"1"`).
fn same_scalar(desired: &Value, live: &Value) -> bool {
    if desired == live {
        return true;
    }
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => quantity(s),
        _ => None,
    };
    matches!((number(desired), number(live)), (Some(a), Some(b)) if (a - b).abs() <= f64::EPSILON * a.abs().max(1.0))
}

/// True when a desired value says nothing: null, or an empty object or list (which the API
/// server may drop).
fn says_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(says_nothing),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// True for the zero of a scalar: 0, false, the empty string.
fn is_zero_scalar(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn walk(desired: &Value, live: Option<&Value>, path: &mut String, out: &mut Vec<String>) {
    if says_nothing(desired) {
        return;
    }
    match (desired, live) {
        (Value::Object(want), Some(Value::Object(have))) => {
            for (key, value) in want {
                let len = path.len();
                path.push('/');
                path.push_str(&segment(key));
                walk(value, have.get(key), path, out);
                path.truncate(len);
            }
        }
        (Value::Array(want), Some(Value::Array(have))) if want.len() == have.len() => {
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(w, Some(h), path, out);
                path.truncate(len);
            }
        }
        (Value::Object(_) | Value::Array(_), _) => out.push(path.clone()),
        (_, Some(have)) if same_scalar(desired, have) => {}
        // The API server drops a zero it holds in a plain field (`initialDelaySeconds: 0`,
        // `false`, `""`): absent, the field holds that zero; a field that defaults to another
        // value is stored with it, and compares as a value.
        (_, None) if is_zero_scalar(desired) => {}
        _ => out.push(path.clone()),
    }
}

/// A Secret's `stringData` as the `data` the API server stores it as (base64), so the two compare.
fn fold_string_data(object: &Value) -> Value {
    let mut object = object.clone();
    let Some(map) = object.as_object_mut() else {
        return object;
    };
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(data) = data.as_object_mut() {
            for (k, v) in strings {
                let text = v
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string());
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
    object
}

/// The JSON pointers of the fields `desired` (a manifest object) sets that `live` lacks or holds
/// otherwise. Fields only `live` has (defaults, status, other managers' fields) are no drift; of
/// the metadata only labels and annotations count; a list must keep its length and each element
/// is compared in place (the API server keeps list order).
pub(crate) fn differences(desired: &Value, live: &Value) -> Vec<String> {
    let desired = if desired.get("kind").and_then(Value::as_str) == Some("Secret") {
        fold_string_data(desired)
    } else {
        desired.clone()
    };
    let mut out = Vec::new();
    let Some(fields) = desired.as_object() else {
        return out;
    };
    for (key, value) in fields {
        let mut path = format!("/{}", segment(key));
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for part in ["labels", "annotations"] {
                    if let Some(want) = value.get(part) {
                        let mut path = format!("/metadata/{part}");
                        let have = live.pointer(&path);
                        walk(want, have, &mut path, &mut out);
                    }
                }
            }
            _ => walk(value, live.get(key), &mut path, &mut out),
        }
    }
    out
}

/// True when `path` is `rule` or lies under it.
fn covers(rule: &str, path: &str) -> bool {
    let rule = rule.trim_end_matches('/');
    path == rule
        || path
            .strip_prefix(rule)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// True when an ignore rule covers `path` of `object`: the rule names the path (or one above
/// it) and its target, if any, matches the object's kind, name and namespace.
pub(crate) fn ignored(rules: &[DriftIgnore], object: &ObjectId, path: &str) -> bool {
    rules.iter().any(|rule| {
        let targeted = rule.target.as_ref().is_none_or(|t| {
            t.kind.as_ref().is_none_or(|k| *k == object.kind)
                && t.name.as_ref().is_none_or(|n| *n == object.name)
                && t.namespace
                    .as_ref()
                    .is_none_or(|n| Some(n) == object.namespace.as_ref())
        });
        targeted && rule.paths.iter().any(|r| covers(r, path))
    })
}

/// Where one object drifted, with the ignored paths left out; None when it did not.
pub(crate) fn object_drift(
    id: ObjectId,
    desired: &Value,
    live: Option<&Value>,
    rules: &[DriftIgnore],
) -> Option<ObjectDrift> {
    let Some(live) = live else {
        return Some(ObjectDrift {
            id,
            missing: true,
            paths: Vec::new(),
            not_readable_by: None,
        });
    };
    let paths: Vec<String> = differences(desired, live)
        .into_iter()
        .filter(|p| !ignored(rules, &id, p))
        .collect();
    (!paths.is_empty()).then_some(ObjectDrift {
        id,
        missing: false,
        paths,
        not_readable_by: None,
    })
}

fn describe(object: &ObjectDrift) -> String {
    let name = format!("{}/{}", object.id.kind, object.id.name);
    if let Some(user) = &object.not_readable_by {
        format!("{name} not readable by {user}")
    } else if object.missing {
        format!("{name} missing")
    } else {
        let shown: Vec<&str> = object
            .paths
            .iter()
            .take(MAX_PATHS)
            .map(String::as_str)
            .collect();
        let more = object.paths.len().saturating_sub(MAX_PATHS);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("{name} {}{more}", shown.join(" "))
    }
}

/// Drift in a few words: "Deployment/web /spec/replicas; Service/web missing", at most
/// [`MAX_OBJECTS`] objects and [`MAX_PATHS`] paths each, with counts of the rest.
pub(crate) fn summary(objects: &[ObjectDrift]) -> String {
    let mut parts: Vec<String> = objects.iter().take(MAX_OBJECTS).map(describe).collect();
    if objects.len() > MAX_OBJECTS {
        parts.push(format!("{} more object(s)", objects.len() - MAX_OBJECTS));
    }
    parts.join("; ")
}

/// The status of a release's drift, bounded to [`MAX_OBJECTS`] × [`MAX_PATHS`] with counts.
pub(crate) fn status(
    revision: i64,
    detected_at: String,
    action: &str,
    objects: &[ObjectDrift],
) -> DriftStatus {
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    DriftStatus {
        revision,
        detected_at,
        action: action.to_owned(),
        objects: objects
            .iter()
            .take(MAX_OBJECTS)
            .map(|o| DriftedObject {
                kind: o.id.kind.clone(),
                name: o.id.name.clone(),
                namespace: o.id.namespace.clone().unwrap_or_default(),
                missing: o.missing,
                not_readable_by: o.not_readable_by.clone().unwrap_or_default(),
                paths: o.paths.iter().take(MAX_PATHS).cloned().collect(),
                more_paths: count(o.paths.len().saturating_sub(MAX_PATHS)),
            })
            .collect(),
        more_objects: count(objects.len().saturating_sub(MAX_OBJECTS)),
    }
}

/// What the repair limiter says of a repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RepairVerdict {
    /// Repair it (or it is the repair already counted for this revision).
    Allowed,
    /// Too many repairs lately; the next is allowed after this long.
    Suppressed(Duration),
}

/// At most `max` drift repairs per release within `window`, so a fight with another controller
/// over a field makes a bounded number of revisions. A repair is counted once per drifted revision,
/// however often it is planned.
#[derive(Debug)]
pub(crate) struct RepairLimiter {
    max: usize,
    window: Duration,
    repairs: HashMap<ReleaseKey, (i64, VecDeque<Instant>)>,
}

impl RepairLimiter {
    /// A limiter allowing `max` repairs per release within `window`.
    pub(crate) fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            repairs: HashMap::new(),
        }
    }

    /// Whether repairing drift of `key` found in `revision` may go ahead now; counts it if so.
    pub(crate) fn allow(&mut self, key: &ReleaseKey, revision: i64, now: Instant) -> RepairVerdict {
        let (last, times) = self
            .repairs
            .entry(key.clone())
            .or_insert_with(|| (i64::MIN, VecDeque::new()));
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            times.pop_front();
        }
        if *last == revision {
            return RepairVerdict::Allowed;
        }
        if times.len() >= self.max {
            let oldest = *times.front().expect("max is at least one");
            return RepairVerdict::Suppressed(
                (oldest + self.window).saturating_duration_since(now),
            );
        }
        times.push_back(now);
        *last = revision;
        RepairVerdict::Allowed
    }

    /// Forgets releases no longer watched for drift.
    pub(crate) fn retain(&mut self, keep: impl Fn(&ReleaseKey) -> bool) {
        self.repairs.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests;
