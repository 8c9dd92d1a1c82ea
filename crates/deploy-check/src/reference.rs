//! The settings reference: every key of a service with its variable, its
//! default and what values are allowed, generated from the code so the
//! documentation cannot drift either.
//!
//! The allowed values are found by asking the service's own validation:
//! each key is loaded with values out of any sane range, and the error the
//! loader reports names the range.

use shopeasy_runtime::settings::{Loader, Settings, SettingsError, default_keys, env_name};

use crate::catalogue::display;

/// One row of the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Dotted key (`resilience.inventory.timeout_seconds`).
    pub key: String,
    /// Its environment variable.
    pub env: String,
    /// The default in code, as a deployment file writes it.
    pub default: String,
    /// What the service accepts.
    pub allowed: String,
}

/// Values no sane setting accepts, tried in turn.
const PROBES: &[&str] = &["4294967295", "-1", "\u{1}not-valid"];

/// Every key of `S`, in key order.
pub fn rows<S: Settings>() -> Vec<Row> {
    default_keys::<S>()
        .into_iter()
        .map(|(key, default)| {
            let env = env_name(&key);
            let allowed = PROBES
                .iter()
                .find_map(
                    |probe| match Loader::new().env([(env.as_str(), *probe)]).load::<S>() {
                        Err(SettingsError::Invalid(errors)) => errors
                            .into_iter()
                            .find(|e| e.key == key)
                            .map(|e| e.allowed.trim_start_matches("must be ").to_owned()),
                        _ => None,
                    },
                )
                .unwrap_or_else(|| unchecked(&default).to_owned());
            Row {
                default: display(&default),
                key,
                env,
                allowed,
            }
        })
        .collect()
}

/// What a key that validation does not restrict accepts, by its default.
fn unchecked(default: &serde_json::Value) -> &'static str {
    match default.as_str() {
        Some(s) if s.parse::<std::net::SocketAddr>().is_ok() => "an IP address and port",
        Some(_) => "any text",
        None => "any value of its type",
    }
}

/// A Markdown table of `rows` under a heading for `service`.
pub fn markdown(service: &str, rows: &[Row]) -> String {
    let mut out =
        format!("### {service}\n\n| key | variable | default | allowed |\n|---|---|---|---|\n");
    for row in rows {
        let default = if row.default.is_empty() {
            "(empty)".to_owned()
        } else {
            format!("`{}`", row.default)
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            row.key,
            row.env,
            default,
            row.allowed.replace('|', "\\|")
        ));
    }
    out
}
