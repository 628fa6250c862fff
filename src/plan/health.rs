//! Health of a release's objects (pure): a chart's CEL expressions per kind (`healthCheckExprs`), kstatus's rules for any other object with conditions, and the bounded report of those not current.
//!
//! Cost is bounded before anything runs: an expression has at most
//! [`MAX_EXPRESSION_LENGTH`] characters and nests at most [`MAX_COMPREHENSION_DEPTH`]
//! comprehensions (`all`, `exists`, `map`, `filter`), and it sees the object trimmed
//! ([`trimmed`]: no `managedFields`, lists cut at [`MAX_LIST_ITEMS`], strings at
//! [`MAX_STRING_BYTES`], nesting at [`MAX_DEPTH`]), so one evaluation visits at most
//! `MAX_LIST_ITEMS ^ MAX_COMPREHENSION_DEPTH` elements times its length. The interpreter has no
//! cost counter of its own; these bounds stand in for one.

use std::{
    collections::HashMap,
    fmt,
    hash::{Hash as _, Hasher as _},
    sync::{Arc, Mutex},
};

use cel::{Context, Env, Program, Value as Cel, common::ast::Expr};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{api::crd::HealthCheckExpr, api::crd::health::MAX_EXPRESSION_LENGTH};

/// Comprehensions an expression may nest.
pub(crate) const MAX_COMPREHENSION_DEPTH: usize = 2;
/// Items of a list an expression sees; the rest are cut.
pub(crate) const MAX_LIST_ITEMS: usize = 64;
/// Bytes of a string an expression sees; the rest are cut.
pub(crate) const MAX_STRING_BYTES: usize = 4096;
/// Levels of nesting an expression sees; deeper values are null.
pub(crate) const MAX_DEPTH: usize = 16;
/// Bytes of a verdict's reason.
pub(crate) const MAX_REASON: usize = 256;
/// Objects not current listed per release; the rest are counted.
pub(crate) const MAX_LISTED: usize = 10;
/// Sets of expressions kept compiled per process; past it the cache starts again.
const CACHED_RULES: usize = 256;

/// How an object is judged, in kstatus's words (worst first, so the least is the worst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) enum Health {
    /// Failed: it will not become ready without a change.
    Failed,
    /// Still being worked on.
    InProgress,
    /// Ready.
    Current,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A judgement of one object: how it is, and why in a few words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Verdict {
    /// How it is.
    pub(crate) health: Health,
    /// Why, at most [`MAX_REASON`] bytes.
    pub(crate) reason: String,
}

impl Verdict {
    fn new(health: Health, reason: impl Into<String>) -> Self {
        Self {
            health,
            reason: cut(reason.into(), MAX_REASON),
        }
    }
}

/// One object of a release judged not current.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjectHealth {
    /// The object.
    pub(crate) id: ObjectId,
    /// How it is, and why.
    pub(crate) verdict: Verdict,
}

/// One object of a manifest: its kind, name and namespace.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub(crate) struct ObjectId {
    /// `apiVersion`, for example `apps/v1`.
    pub(crate) api_version: String,
    /// Kind.
    pub(crate) kind: String,
    /// Namespace the manifest gives; None when it gives none.
    pub(crate) namespace: Option<String>,
    /// Name.
    pub(crate) name: String,
}

impl ObjectId {
    /// The kind, name and namespace of a manifest object, when it has them.
    pub(crate) fn of(object: &Value) -> Option<Self> {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            api_version: text(object.get("apiVersion"))?,
            kind: text(object.get("kind"))?,
            namespace: text(object.pointer("/metadata/namespace")).filter(|n| !n.is_empty()),
            name: text(object.pointer("/metadata/name"))?,
        })
    }
}

/// What judging a release's objects found: those not current (worst first, at most
/// [`MAX_LISTED`]), how many more, and how many were judged in all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Judged {
    /// Objects not current, failed ones first.
    pub(crate) objects: Vec<ObjectHealth>,
    /// Objects not current beyond those listed.
    pub(crate) more: usize,
    /// Objects judged.
    pub(crate) judged: usize,
}

impl Judged {
    /// Adds one verdict; a current object is only counted.
    pub(crate) fn add(&mut self, id: ObjectId, verdict: Verdict) {
        self.judged += 1;
        if verdict.health != Health::Current {
            self.objects.push(ObjectHealth { id, verdict });
        }
    }

    /// Sorts worst first and keeps [`MAX_LISTED`], counting the rest.
    pub(crate) fn finish(mut self) -> Self {
        self.objects
            .sort_by(|a, b| (a.verdict.health, &a.id).cmp(&(b.verdict.health, &b.id)));
        self.more = self
            .more
            .saturating_add(self.objects.len().saturating_sub(MAX_LISTED));
        self.objects.truncate(MAX_LISTED);
        self
    }

    /// The same, bounded as if it came from a hostile member: at most [`MAX_LISTED`] objects,
    /// each name and reason cut to size.
    pub(crate) fn bounded(mut self) -> Self {
        for o in &mut self.objects {
            o.verdict.reason = cut(std::mem::take(&mut o.verdict.reason), MAX_REASON);
            for text in [&mut o.id.api_version, &mut o.id.kind, &mut o.id.name] {
                *text = cut(std::mem::take(text), 253);
            }
            o.id.namespace = o.id.namespace.take().map(|n| cut(n, 63));
        }
        self.finish()
    }

    /// The worst health found: `Current` when nothing is listed.
    pub(crate) fn worst(&self) -> Health {
        self.objects
            .iter()
            .map(|o| o.verdict.health)
            .min()
            .unwrap_or(Health::Current)
    }
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Why a chart's expressions cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Error {
    /// An expression does not compile, or breaks a bound.
    #[error("healthCheckExprs[{index}] ({api_version} {kind}) {field}: {reason}")]
    Expression {
        /// Its entry.
        index: usize,
        /// The entry's API version.
        api_version: String,
        /// The entry's kind.
        kind: String,
        /// `current`, `inProgress` or `failed`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Two entries name the same kind.
    #[error("healthCheckExprs[{index}] names {api_version} {kind} again; give each kind one entry")]
    Duplicate {
        /// The second entry.
        index: usize,
        /// Its API version.
        api_version: String,
        /// Its kind.
        kind: String,
    },
}

/// One entry's expressions, compiled.
struct KindRule {
    api_version: String,
    kind: String,
    in_progress: Option<Program>,
    failed: Option<Program>,
    current: Program,
}

/// A chart's `healthCheckExprs`, compiled once.
pub(crate) struct Rules {
    env: Arc<Env>,
    kinds: Vec<KindRule>,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<String> = self
            .kinds
            .iter()
            .map(|k| format!("{} {}", k.api_version, k.kind))
            .collect();
        f.debug_struct("Rules").field("kinds", &kinds).finish()
    }
}

/// The expressions a map or struct literal holds.
fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> Vec<&Expr> {
    use cel::common::ast::EntryExpr;
    entries
        .iter()
        .flat_map(|e| match &e.expr {
            EntryExpr::MapEntry(m) => vec![&m.key.expr, &m.value.expr],
            EntryExpr::StructField(s) => vec![&s.value.expr],
        })
        .collect()
}

/// The deepest nesting of comprehensions in an expression.
fn comprehension_depth(expr: &Expr) -> usize {
    let deepest = |exprs: Vec<&Expr>| exprs.into_iter().map(comprehension_depth).max();
    match expr {
        Expr::Comprehension(c) => {
            let inner = vec![
                &c.iter_range.expr,
                &c.accu_init.expr,
                &c.loop_cond.expr,
                &c.loop_step.expr,
                &c.result.expr,
            ];
            1 + deepest(inner).unwrap_or(0)
        }
        Expr::Call(call) => deepest(
            call.target
                .iter()
                .map(|t| &t.expr)
                .chain(call.args.iter().map(|a| &a.expr))
                .collect(),
        )
        .unwrap_or(0),
        Expr::List(list) => deepest(list.elements.iter().map(|e| &e.expr).collect()).unwrap_or(0),
        Expr::Select(select) => comprehension_depth(&select.operand.expr),
        Expr::Map(map) => deepest(entries(&map.entries)).unwrap_or(0),
        Expr::Struct(s) => deepest(entries(&s.entries)).unwrap_or(0),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

/// Compiles one expression of entry `index`, refusing one too long or nesting too deep.
fn compile_one(
    env: &Env,
    (index, entry): (usize, &HealthCheckExpr),
    field: &'static str,
    source: &str,
) -> Result<Program, Error> {
    let refuse = |reason: String| Error::Expression {
        index,
        api_version: entry.api_version.clone(),
        kind: entry.kind.clone(),
        field,
        reason,
    };
    if source.len() > MAX_EXPRESSION_LENGTH {
        return Err(refuse(format!(
            "has {} characters, more than {MAX_EXPRESSION_LENGTH}",
            source.len()
        )));
    }
    let program = env
        .compile(source)
        .map_err(|e| refuse(format!("does not compile: {e}")))?;
    let depth = comprehension_depth(&program.expression().expr);
    if depth > MAX_COMPREHENSION_DEPTH {
        return Err(refuse(format!(
            "nests {depth} comprehensions, more than {MAX_COMPREHENSION_DEPTH}"
        )));
    }
    Ok(program)
}

impl Rules {
    /// Compiles a chart's expressions, refusing one that does not compile, is too long or
    /// nests too deep, and a kind named twice.
    pub(crate) fn compile(exprs: &[HealthCheckExpr]) -> Result<Self, Error> {
        let env = Arc::new(Env::stdlib());
        let mut kinds: Vec<KindRule> = Vec::with_capacity(exprs.len());
        for (index, e) in exprs.iter().enumerate() {
            if kinds
                .iter()
                .any(|k| k.api_version == e.api_version && k.kind == e.kind)
            {
                return Err(Error::Duplicate {
                    index,
                    api_version: e.api_version.clone(),
                    kind: e.kind.clone(),
                });
            }
            let optional = |field, source: &Option<String>| {
                source
                    .as_deref()
                    .map(|s| compile_one(&env, (index, e), field, s))
                    .transpose()
            };
            kinds.push(KindRule {
                api_version: e.api_version.clone(),
                kind: e.kind.clone(),
                in_progress: optional("inProgress", &e.in_progress)?,
                failed: optional("failed", &e.failed)?,
                current: compile_one(&env, (index, e), "current", &e.current)?,
            });
        }
        Ok(Self { env, kinds })
    }

    /// True when an entry names this kind.
    pub(crate) fn names(&self, api_version: &str, kind: &str) -> bool {
        self.rule(api_version, kind).is_some()
    }

    fn rule(&self, api_version: &str, kind: &str) -> Option<&KindRule> {
        self.kinds
            .iter()
            .find(|k| k.api_version == api_version && k.kind == kind)
    }

    /// Judges one live object: by its kind's expressions when an entry names it, else by
    /// kstatus's rules when it has `status.conditions`; None when neither applies (it is not
    /// judged here: workloads and pods are judged by their watchers, other objects have no
    /// health).
    pub(crate) fn judge(&self, object: &Value) -> Option<Verdict> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        match self.rule(text("/apiVersion"), text("/kind")) {
            Some(rule) => Some(self.by_expressions(rule, object)),
            None => kstatus(object),
        }
    }

    /// Flux's order: `inProgress`, `failed`, then `current`; the first that holds decides, and
    /// none holding is in progress. An expression that errs (a field not set yet) or returns no
    /// boolean is in progress, saying so.
    fn by_expressions(&self, rule: &KindRule, object: &Value) -> Verdict {
        if let Some(v) = terminating_or_unobserved(object) {
            return v;
        }
        let trimmed = trimmed(object, 0);
        let mut context = Context::with_env(self.env.clone());
        if let Value::Object(fields) = &trimmed {
            for (name, value) in fields {
                if context.add_variable(name.as_str(), value).is_err() {
                    return Verdict::new(Health::InProgress, format!("field {name} is not usable"));
                }
            }
        }
        let order = [
            (rule.in_progress.as_ref(), Health::InProgress, "inProgress"),
            (rule.failed.as_ref(), Health::Failed, "failed"),
            (Some(&rule.current), Health::Current, "current"),
        ];
        let because = |words: String| {
            let conditions = conditions_not_true(object);
            if conditions.is_empty() {
                words
            } else {
                format!("{words}; {conditions}")
            }
        };
        for (program, health, field) in order {
            let Some(program) = program else { continue };
            match program.execute(&context) {
                Ok(Cel::Bool(true)) if health == Health::Current => {
                    return Verdict::new(health, "");
                }
                Ok(Cel::Bool(true)) => {
                    return Verdict::new(health, because(format!("{field} holds")));
                }
                Ok(Cel::Bool(false)) => {}
                Ok(other) => {
                    return Verdict::new(
                        Health::InProgress,
                        format!("{field} returned {:?}, not a boolean", other.type_of()),
                    );
                }
                Err(e) => return Verdict::new(Health::InProgress, format!("{field}: {e}")),
            }
        }
        Verdict::new(
            Health::InProgress,
            because("current does not hold yet".into()),
        )
    }
}

/// Compiled expressions per set of expressions, so each is compiled once per process (bounded:
/// the cache starts again past [`CACHED_RULES`] sets).
#[derive(Default)]
pub(crate) struct Compiled {
    known: Mutex<HashMap<u64, Arc<Rules>>>,
}

impl Compiled {
    /// The rules of `exprs`, compiled now or earlier.
    pub(crate) fn rules(&self, exprs: &[HealthCheckExpr]) -> Result<Arc<Rules>, Error> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        exprs.hash(&mut hasher);
        let key = hasher.finish();
        if let Some(found) = self.known.lock().expect("never poisoned").get(&key) {
            return Ok(found.clone());
        }
        let rules = Arc::new(Rules::compile(exprs)?);
        let mut known = self.known.lock().expect("never poisoned");
        if known.len() >= CACHED_RULES {
            known.clear();
        }
        known.insert(key, rules.clone());
        Ok(rules)
    }
}

/// An object being deleted, or whose controller has not seen its newest spec, is in progress.
fn terminating_or_unobserved(object: &Value) -> Option<Verdict> {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return Some(Verdict::new(Health::InProgress, "being deleted"));
    }
    let generation = object.pointer("/metadata/generation")?.as_i64();
    let observed = object.pointer("/status/observedGeneration")?.as_i64();
    match (generation, observed) {
        (Some(g), Some(o)) if o < g => Some(Verdict::new(
            Health::InProgress,
            format!("status.observedGeneration {o} is behind metadata.generation {g}"),
        )),
        _ => None,
    }
}

/// One condition as `Type=Status Reason message`.
fn condition_words(c: &Value) -> String {
    let text = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or("");
    let mut words = format!("{}={}", text("type"), text("status"));
    for part in [text("reason"), text("message")] {
        if !part.is_empty() {
            words.push(' ');
            words.push_str(part);
        }
    }
    words
}

/// The object's conditions whose status is not `True`, in words.
fn conditions_not_true(object: &Value) -> String {
    let Some(conditions) = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
    else {
        return String::new();
    };
    conditions
        .iter()
        .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
        .map(condition_words)
        .collect::<Vec<_>>()
        .join("; ")
}

/// kstatus's rules for an object with `status.conditions`: being deleted or not observed yet is
/// in progress; `Stalled` (or `Degraded`) true is failed; `Reconciling` true is in progress;
/// `Ready` not true is in progress; anything else is current. None for an object without
/// conditions, and for pods and the workloads whose rollout their watchers judge.
pub(crate) fn kstatus(object: &Value) -> Option<Verdict> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    let watched = matches!(
        (api_version, kind),
        (Some("v1"), "Pod") | (Some("apps/v1"), "Deployment" | "StatefulSet" | "DaemonSet")
    );
    let conditions = object.pointer("/status/conditions")?.as_array()?;
    if watched {
        return None;
    }
    if let Some(v) = terminating_or_unobserved(object) {
        return Some(v);
    }
    let status = |c: &Value| c.get("status").and_then(Value::as_str) == Some("True");
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
    };
    for (t, health) in [
        ("Stalled", Health::Failed),
        ("Degraded", Health::Failed),
        ("Reconciling", Health::InProgress),
    ] {
        if let Some(c) = find(t).filter(|c| status(c)) {
            return Some(Verdict::new(health, condition_words(c)));
        }
    }
    match find("Ready") {
        Some(c) if !status(c) => Some(Verdict::new(Health::InProgress, condition_words(c))),
        _ => Some(Verdict::new(Health::Current, "")),
    }
}

/// The object as an expression sees it: no `metadata.managedFields`, lists cut at
/// [`MAX_LIST_ITEMS`], maps at 256 keys, strings at [`MAX_STRING_BYTES`], nesting at [`MAX_DEPTH`].
pub(crate) fn trimmed(value: &Value, depth: usize) -> Value {
    if depth >= MAX_DEPTH {
        return Value::Null;
    }
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !(depth == 1 && k.as_str() == "managedFields"))
                .take(256)
                .map(|(k, v)| (k.clone(), trimmed(v, depth + 1)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .take(MAX_LIST_ITEMS)
                .map(|v| trimmed(v, depth + 1))
                .collect(),
        ),
        Value::String(s) => Value::String(cut(s.clone(), MAX_STRING_BYTES)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
