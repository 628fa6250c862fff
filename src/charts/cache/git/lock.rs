//! A chart's `Chart.lock` as `helm dependency build` reads it (pure): the versions it pins, taken only when its digest still matches `Chart.yaml`'s dependencies, computed as helm computes it.
//!
//! Helm's digest is the sha256 of Go's `json.Marshal` of `[Chart.yaml's dependencies,
//! Chart.lock's dependencies]`, each entry in the field order and with the `omitempty` rules of
//! helm's `chart.Dependency` (`name`, `version`, `repository`, `condition`, `tags`, `enabled`,
//! `import-values`, `alias`), strings escaped as Go escapes them (`<`, `>`, `&` included), maps
//! with their keys sorted.

use serde::Deserialize;
use serde_yaml::Value;
use sha2::{Digest, Sha256};

/// The largest `Chart.lock` read.
pub(crate) const MAX_LOCK: usize = 256 << 10;

/// A `Chart.lock`, as far as a build reads it.
#[derive(Deserialize)]
struct LockFile {
    #[serde(default)]
    digest: String,
    #[serde(default)]
    dependencies: Vec<Value>,
}

/// One dependency a lock pins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pinned {
    pub(crate) name: String,
    pub(crate) repository: String,
    pub(crate) version: String,
}

/// The pins of `lock` (a `Chart.lock`'s text) for the dependencies `wanted` (Chart.yaml's
/// `dependencies`, as written), refused as helm refuses it when its digest does not match
/// them. `dir` names the chart in messages.
pub(crate) fn pins(dir: &str, wanted: &[Value], lock: &[u8]) -> Result<Vec<Pinned>, String> {
    if lock.len() > MAX_LOCK {
        return Err(format!("{dir}/Chart.lock is larger than {MAX_LOCK} bytes"));
    }
    let parsed: LockFile = serde_yaml::from_slice(lock)
        .map_err(|e| format!("{dir}/Chart.lock: {}", crate::charts::index::yaml_error(&e)))?;
    if hash_req(wanted, &parsed.dependencies) != parsed.digest {
        return Err(format!(
            "{dir}/Chart.lock is out of sync with the dependencies of {dir}/Chart.yaml: run helm dependency update in {dir} and commit Chart.lock (or delete Chart.lock to take the newest versions the ranges allow)"
        ));
    }
    Ok(parsed
        .dependencies
        .iter()
        .map(|d| Pinned {
            name: text(d, "name"),
            repository: text(d, "repository"),
            version: text(d, "version"),
        })
        .collect())
}

/// A scalar field of a mapping as text ("" when absent).
pub(crate) fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// Helm's `resolver.HashReq(req, lock)`: `sha256:` and the hex sha256 of the JSON of both lists.
pub(crate) fn hash_req(req: &[Value], lock: &[Value]) -> String {
    let mut json = String::from("[");
    for (i, list) in [req, lock].iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push('[');
        for (j, dependency) in list.iter().enumerate() {
            if j > 0 {
                json.push(',');
            }
            dependency_json(dependency, &mut json);
        }
        json.push(']');
    }
    json.push(']');
    format!(
        "sha256:{}",
        crate::charts::store::hex(&Sha256::digest(json.as_bytes()))
    )
}

/// One `chart.Dependency` as Go marshals it.
fn dependency_json(d: &Value, out: &mut String) {
    let field = |out: &mut String, key: &str, value: &dyn Fn(&mut String)| {
        if !out.ends_with('{') {
            out.push(',');
        }
        go_string(key, out);
        out.push(':');
        value(out);
    };
    out.push('{');
    field(out, "name", &|o| go_string(&text(d, "name"), o));
    let version = text(d, "version");
    if !version.is_empty() {
        field(out, "version", &|o| go_string(&version, o));
    }
    field(out, "repository", &|o| go_string(&text(d, "repository"), o));
    let condition = text(d, "condition");
    if !condition.is_empty() {
        field(out, "condition", &|o| go_string(&condition, o));
    }
    if let Some(Value::Sequence(tags)) = d.get("tags")
        && !tags.is_empty()
    {
        field(out, "tags", &|o| {
            let texts: Vec<Value> = tags.iter().map(|t| Value::String(scalar_text(t))).collect();
            value_json(&Value::Sequence(texts), o)
        });
    }
    if d.get("enabled") == Some(&Value::Bool(true)) {
        field(out, "enabled", &|o| o.push_str("true"));
    }
    if let Some(Value::Sequence(imports)) = d.get("import-values")
        && !imports.is_empty()
    {
        field(out, "import-values", &|o| {
            value_json(&Value::Sequence(imports.clone()), o)
        });
    }
    let alias = text(d, "alias");
    if !alias.is_empty() {
        field(out, "alias", &|o| go_string(&alias, o));
    }
    out.push('}');
}

/// A scalar as text.
pub(crate) fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// Any YAML value as Go marshals the `interface{}` helm read it into: maps with sorted keys.
fn value_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => go_string(s, out),
        Value::Sequence(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value_json(item, out);
            }
            out.push(']');
        }
        Value::Mapping(map) => {
            let mut entries: Vec<(String, &Value)> =
                map.iter().map(|(k, v)| (scalar_text(k), v)).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_string(&k, out);
                out.push(':');
                value_json(v, out);
            }
            out.push('}');
        }
        Value::Tagged(tagged) => value_json(&tagged.value, out),
    }
}

/// A string as Go's `encoding/json` writes it (HTML-safe).
fn go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chart's `dependencies:` and the Chart.lock `helm dependency update` (helm 4.3.1)
    /// wrote for it.
    const CHART: &str = r#"
dependencies:
  - name: sub
    version: ">=0.1.0 <1.0.0"
    repository: "file://../sub"
    condition: sub.enabled
    tags: [a, "b&c"]
    alias: other
    import-values:
      - data
      - child: x.y
        parent: z
"#;
    const LOCK: &str = r#"dependencies:
- name: sub
  repository: file://../sub
  version: 0.3.1
digest: sha256:e07a793953758203f7fe523a0841e2d46db33d90e2b9fb637b0b75c8f4c7388a
generated: "2026-11-29T08:38:09.487232009Z"
"#;

    fn wanted(text: &str) -> Vec<Value> {
        #[derive(Deserialize)]
        struct Deps {
            dependencies: Vec<Value>,
        }
        serde_yaml::from_str::<Deps>(text).unwrap().dependencies
    }

    #[test]
    fn the_digest_is_the_one_helm_writes() {
        let pinned = pins("web", &wanted(CHART), LOCK.as_bytes()).unwrap();
        assert_eq!(
            pinned,
            vec![Pinned {
                name: "sub".into(),
                repository: "file://../sub".into(),
                version: "0.3.1".into()
            }]
        );
    }

    #[test]
    fn a_lock_out_of_sync_with_chart_yaml_is_refused_saying_to_update_it() {
        let changed = CHART.replace("<1.0.0", "<2.0.0");
        let refused = pins("charts/web", &wanted(&changed), LOCK.as_bytes()).unwrap_err();
        assert!(
            refused.contains("charts/web/Chart.lock is out of sync")
                && refused.contains("helm dependency update"),
            "{refused}"
        );
        let tampered = LOCK.replace("0.3.1", "0.9.9");
        assert!(pins("web", &wanted(CHART), tampered.as_bytes()).is_err());
    }

    #[test]
    fn a_huge_or_broken_lock_is_refused() {
        let huge = vec![b'#'; MAX_LOCK + 1];
        assert!(pins("web", &[], &huge).unwrap_err().contains("larger"));
        assert!(pins("web", &[], b"dependencies: {").is_err());
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        go_string("a<b>&\"\\\n\u{1}\u{2028}é", &mut out);
        assert_eq!(out, r#""a\u003cb\u003e\u0026\"\\\n\u0001\u2028é""#);
    }
}
