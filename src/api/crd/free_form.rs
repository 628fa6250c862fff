//! Free-form values of a spec (`values`, `overrides[].values`) decoded with a bound on their depth, so one deep object never fails the decoding of a list of Controllers.
//!
//! The JSON parser refuses documents nested deeper than 128 levels, and the API server stores
//! deeper ones; one such Controller would fail every list and watch of Controllers, for every
//! tenant. Free-form values are therefore taken as raw text first (skipped without recursion),
//! their depth counted, and parsed only when within [`MAX_VALUES_DEPTH`]; deeper values decode as
//! a marker that planning refuses with [`too_deep`], on that Controller alone. The API server
//! refuses such values first, with the generated admission policy (`tenancy-hub
//! admission-policy`); this is the backstop for a Controller stored without it.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// Levels of objects and arrays free-form values may nest, at most.
pub const MAX_VALUES_DEPTH: usize = 64;

/// The name under which the JSON parser hands a value over as raw text.
const RAW_TEXT: &str = "$serde_json::private::RawValue";
/// What values nested too deep decode as. No stored spec holds it: the schema makes values an object.
const TOO_DEEP: &str = "values nested too deep";

/// Decodes optional free-form values within [`MAX_VALUES_DEPTH`] levels; deeper ones decode
/// as a marker that [`too_deep`] recognises.
///
/// # Errors
/// When the input is not JSON (or YAML) at all.
pub fn bounded<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    deserializer.deserialize_option(Optional)
}

/// Why `values`, as decoded by [`bounded`], cannot be used: they nest too deep.
pub fn too_deep(values: &Value) -> Option<String> {
    (values.as_str() == Some(TOO_DEEP)).then(|| {
        format!(
            "values nest deeper than {MAX_VALUES_DEPTH} levels of objects and arrays; flatten them"
        )
    })
}

/// How deep the JSON text `raw` nests its objects and arrays, counted without recursion.
pub(crate) fn depth_of(raw: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for byte in raw.bytes() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') | (false, _, b'"') => in_string = !in_string,
            (false, _, b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// How deep an already decoded value nests (its decoder bounded it already).
fn depth_of_value(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth_of_value).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth_of_value).max().unwrap_or(0),
        _ => 0,
    }
}

fn bounded_value(value: Value) -> Value {
    if depth_of_value(&value) > MAX_VALUES_DEPTH {
        Value::String(TOO_DEEP.into())
    } else {
        value
    }
}

struct Optional;

impl<'de> Visitor<'de> for Optional {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("free-form values")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer
            .deserialize_newtype_struct(RAW_TEXT, Raw)
            .map(Some)
    }
}

/// Takes the JSON parser's raw text when it gives one; any other decoder's value as it comes.
struct Raw;

impl<'de> Visitor<'de> for Raw {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("free-form values")
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::Deserialize::deserialize(d).map(bounded_value)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Ok(Value::Object(serde_json::Map::new()));
        };
        if key == RAW_TEXT {
            let raw: String = map.next_value()?;
            if depth_of(&raw) > MAX_VALUES_DEPTH {
                return Ok(Value::String(TOO_DEEP.into()));
            }
            return serde_json::from_str(&raw).map_err(de::Error::custom);
        }
        // A decoder that does not know the raw name hands over the object itself.
        let mut object = serde_json::Map::new();
        object.insert(key, map.next_value()?);
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            object.insert(k, v);
        }
        Ok(bounded_value(Value::Object(object)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Holder {
        #[serde(default, deserialize_with = "bounded")]
        values: Option<Value>,
    }

    fn nested(depth: usize) -> String {
        format!(
            r#"{{"values": {}1{}}}"#,
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        )
    }

    #[test]
    fn values_within_the_bound_decode_as_they_are_from_json_and_yaml() {
        let json: Holder = serde_json::from_str(&nested(MAX_VALUES_DEPTH)).unwrap();
        let yaml: Holder = serde_yaml::from_str(&nested(MAX_VALUES_DEPTH)).unwrap();
        let value = json.values.unwrap();
        assert_eq!(depth_of_value(&value), MAX_VALUES_DEPTH);
        assert_eq!(too_deep(&value), None);
        assert_eq!(Some(value), yaml.values);
        let absent: Holder = serde_json::from_str("{}").unwrap();
        let null: Holder = serde_json::from_str(r#"{"values": null}"#).unwrap();
        assert_eq!((absent.values, null.values), (None, None));
    }

    #[test]
    fn values_past_the_parsers_own_limit_decode_as_too_deep_and_the_rest_decodes() {
        for depth in [MAX_VALUES_DEPTH + 1, 200, 100_000] {
            let list = format!(
                r#"[{}, {{"values": {{"ok": [1, {{"b": "}}]["}}]}}}}]"#,
                nested(depth)
            );
            let decoded: Vec<Holder> = serde_json::from_str(&list).unwrap();
            let why = too_deep(decoded[0].values.as_ref().unwrap()).unwrap();
            assert!(why.contains(&MAX_VALUES_DEPTH.to_string()), "{why}");
            assert_eq!(
                decoded[1].values,
                Some(serde_json::json!({"ok": [1, {"b": "}]["}]}))
            );
        }
    }

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert_eq!(depth_of(r#"{"a": "[[[{{{\"", "b": [[1], {"c": {}}]}"#), 4);
        assert_eq!(depth_of("1"), 0);
    }
}
