//! What a manifest diff shows of Secrets (pure): every value of a Secret's `data` and `stringData` masked with a short keyed hash, and the unified diff of two masked manifests.

use sha2::{Digest, Sha256};

/// A Secret's value as shown in a preview: `***` and a short keyed hash, so a changed value
/// shows as a change while the value itself (even a short one) cannot be guessed from it.
pub(crate) fn masked(value: &str, salt: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(value.as_bytes());
    let digest = hasher.finalize();
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("*** ({short})")
}

/// One YAML document with every value of a Secret's `data` and `stringData` masked; other
/// documents unchanged.
pub(crate) fn mask_document(doc: &str, salt: &[u8]) -> String {
    if !doc.contains("Secret") {
        return doc.to_owned();
    }
    let Ok(mut value) = serde_yaml::from_str::<serde_yaml::Value>(doc) else {
        return "# a document that does not parse as YAML is hidden: it may hold a Secret\n".into();
    };
    if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("Secret") {
        return doc.to_owned();
    }
    for field in ["data", "stringData"] {
        if let Some(serde_yaml::Value::Mapping(values)) = value.get_mut(field) {
            for (_, v) in values.iter_mut() {
                let text = match &*v {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default(),
                };
                *v = serde_yaml::Value::String(masked(&text, salt));
            }
        }
    }
    let comments: String = doc
        .lines()
        .take_while(|l| l.trim_start().starts_with('#') || l.trim().is_empty())
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    comments + &serde_yaml::to_string(&value).unwrap_or_default()
}

/// A manifest (YAML documents separated by `---` lines) with every Secret's values masked.
pub(crate) fn mask_secrets(manifest: &str, salt: &[u8]) -> String {
    let mut out = String::new();
    let mut doc = String::new();
    for line in manifest.lines() {
        if line.trim_end() == "---" {
            out.push_str(&mask_document(&doc, salt));
            out.push_str("---\n");
            doc.clear();
        } else {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    out.push_str(&mask_document(&doc, salt));
    out
}

/// A unified diff of two manifests, empty when they are the same.
pub(crate) fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}
