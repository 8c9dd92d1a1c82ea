//! YAML as the checks read it: anchors and merge keys (`<<`) resolved, then
//! held as JSON values, which index conveniently (`object["spec"]["template"]`).

use serde::Deserialize;
use serde_json::Value as Json;

use crate::Error;

/// Parses YAML text (with anchors and merge keys) into JSON.
///
/// # Errors
/// [`Error::Parse`] when the text is not YAML.
pub fn to_json(text: &str) -> Result<Json, Error> {
    let mut value: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| Error::parse("YAML", e))?;
    value.apply_merge().map_err(|e| Error::parse("YAML", e))?;
    serde_json::to_value(value).map_err(|e| Error::parse("YAML", e))
}

/// Parses a multi-document YAML stream into objects (empty documents
/// skipped).
///
/// # Errors
/// [`Error::Parse`] when a document is not YAML.
pub fn documents(text: &str) -> Result<Vec<Json>, Error> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let mut value =
            serde_yaml::Value::deserialize(document).map_err(|e| Error::parse("YAML", e))?;
        value.apply_merge().map_err(|e| Error::parse("YAML", e))?;
        let json: Json = serde_json::to_value(value).map_err(|e| Error::parse("YAML", e))?;
        match json {
            Json::Null => {}
            Json::Object(ref map) if map.get("kind").and_then(Json::as_str) == Some("List") => {
                out.extend(
                    map.get("items")
                        .and_then(Json::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// A scalar as text, as compose and Kubernetes read it (`3` and `"3"` are
/// both `3`).
pub fn scalar(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        other => other.to_string(),
    }
}
