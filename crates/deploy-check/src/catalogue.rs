//! What SPEC §1 says about each service (read from the runtime's
//! `topology`), and the defaults its code has.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use shopeasy_runtime::{
    settings::{Settings, default_keys, env_name},
    topology,
};

/// A service's settings defaults keyed by environment variable
/// (`RESILIENCE__INVENTORY__TIMEOUT_SECONDS` → `3.0`).
pub type Defaults = BTreeMap<String, Json>;

/// The defaults of settings type `S`, by environment variable.
pub fn defaults_of<S: Settings>() -> Defaults {
    default_keys::<S>()
        .into_iter()
        .map(|(key, value)| (env_name(&key), value))
        .collect()
}

/// One service as SPEC §1 describes it.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Short name: the compose service, the Kubernetes Deployment and Service.
    pub name: &'static str,
    /// The binary the image runs.
    pub binary: &'static str,
    /// The public listener's port.
    pub public_port: u16,
    /// `http` or `grpc`: the public listener's protocol (and port name).
    pub protocol: &'static str,
    /// The admin listener's port (`/metrics`, `/health/*`).
    pub admin_port: u16,
    /// Services and stores it calls, so must start after (compose) and may
    /// reach (NetworkPolicy).
    pub calls: &'static [&'static str],
    /// The defaults in code; `None` while the service crate is not there
    /// yet (then only ports, probes and wiring are checked).
    pub defaults: Option<Defaults>,
}

impl ServiceSpec {
    /// The same service with the defaults of its settings type.
    pub fn with_defaults(mut self, defaults: Defaults) -> Self {
        self.defaults = Some(defaults);
        self
    }
}

/// The four services of SPEC §1, without defaults: the runtime's topology,
/// so the deployment files are checked against the same ports and edges the
/// settings defaults, the launcher and the end-to-end cluster use.
pub fn services() -> Vec<ServiceSpec> {
    topology::SERVICES
        .iter()
        .map(|node| ServiceSpec {
            name: node.name,
            binary: node.binary,
            public_port: node.public_port,
            protocol: node.protocol,
            admin_port: node.admin_port,
            calls: node.calls,
            defaults: None,
        })
        .collect()
}

/// The demo issuer ([`topology::IDENTITY`]) as a compose service, without
/// defaults: compose runs it (not published), the Kubernetes demo overlay
/// runs it, the base never does. It is not one of [`services`], so the
/// checks that walk the four services (edges, PodDisruptionBudgets, two
/// replicas) do not apply to it.
pub fn identity() -> ServiceSpec {
    let node = &topology::IDENTITY;
    ServiceSpec {
        name: node.name,
        binary: node.binary,
        public_port: node.public_port,
        protocol: node.protocol,
        admin_port: node.admin_port,
        calls: node.calls,
        defaults: None,
    }
}

/// The services that verify customers' bearer tokens and so must be given
/// a key source (`auth.jwks_url`): without one they refuse to start.
pub const VERIFIERS: [&str; 2] = ["gateway", "order"];

/// The variable naming the JWKS a verifier trusts (`auth.jwks_url`).
pub const JWKS_VAR: &str = "AUTH__JWKS_URL";

/// The variable of the one fixed public key a verifier may trust instead
/// (`auth.public_key_pem`).
pub const PUBLIC_KEY_VAR: &str = "AUTH__PUBLIC_KEY_PEM";

/// The gateway's route to the demo issuer's sign-in (`routes.identity_url`;
/// optional: empty is not routed).
pub const IDENTITY_ROUTE_VAR: &str = "ROUTES__IDENTITY_URL";

/// The host of an `http(s)://host[:port]/…` URL and its port (the scheme's
/// default when none is written); `None` for anything else.
pub fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    if authority.is_empty() {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    Some((host.to_owned(), port))
}

/// The port each backing store listens on.
pub fn store_port(name: &str) -> Option<u16> {
    topology::store(name).map(|s| s.port)
}

/// Whether a variable wires the service into one deployment (addresses,
/// URLs, tokens, endpoints, folders in the container, keys, log format) rather than tuning its behaviour. Wiring may
/// be given any value; a tunable setting must repeat the code's default
/// (compose writes it `${VAR:-default}`) so the code stays the one source.
pub fn is_wiring(var: &str) -> bool {
    ["_ADDR", "_URL", "_TOKEN", "_ENDPOINT", "_DIR", "_PEM"]
        .iter()
        .any(|suffix| var.ends_with(suffix))
        || var == "LOG__FORMAT"
}

/// Whether `text` (as written in a deployment file) equals `default`:
/// numbers compare as numbers (`3` equals `3.0`), anything else as text.
pub fn same_value(default: &Json, text: &str) -> bool {
    match default {
        Json::Number(n) => text
            .trim()
            .parse::<f64>()
            .is_ok_and(|t| n.as_f64() == Some(t)),
        Json::Bool(b) => text.trim() == b.to_string(),
        Json::String(s) => s == text,
        Json::Null => text.is_empty(),
        Json::Array(_) | Json::Object(_) => false,
    }
}

/// How a default is written in a deployment file (`3.0` → `3`).
pub fn display(default: &Json) -> String {
    match default {
        Json::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_numbers_and_text_as_text() {
        assert!(same_value(&serde_json::json!(3.0), "3"));
        assert!(same_value(&serde_json::json!(0.2), "0.2"));
        assert!(!same_value(&serde_json::json!(0.2), "0.25"));
        assert!(same_value(&serde_json::json!(true), "true"));
        assert!(same_value(&serde_json::json!(""), ""));
        assert!(!same_value(&serde_json::json!("auto"), "json"));
        assert_eq!(display(&serde_json::json!(30.0)), "30");
        assert_eq!(display(&serde_json::json!(0.05)), "0.05");
    }

    #[test]
    fn wiring_is_addresses_urls_secrets_and_log_format() {
        for var in [
            "DATABASE_URL",
            "LISTEN_ADDR",
            "ROUTES__PRODUCT_URL",
            "INVENTORY__URL",
            "LOG__FORMAT",
            "ADMIN_TOKEN",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "AUTH__JWKS_URL",
            "AUTH__PUBLIC_KEY_PEM",
            "DATA_DIR",
        ] {
            assert!(is_wiring(var), "{var}");
        }
        for var in [
            "RESILIENCE__INVENTORY__TIMEOUT_SECONDS",
            "LOG__LEVEL",
            "DATABASE__MAX_CONNECTIONS",
            "REQUEST_TIMEOUT_SECONDS",
            "AUTH__ISSUER",
        ] {
            assert!(!is_wiring(var), "{var}");
        }
    }

    #[test]
    fn urls_give_their_host_and_port() {
        let hp = |u: &str| url_host_port(u).map(|(h, p)| format!("{h}:{p}"));
        assert_eq!(
            hp("http://identity:8085/.well-known/jwks.json").as_deref(),
            Some("identity:8085")
        );
        assert_eq!(
            hp("https://sso.example.com/realms/shop/protocol/openid-connect/certs").as_deref(),
            Some("sso.example.com:443")
        );
        assert_eq!(hp("http://dex").as_deref(), Some("dex:80"));
        assert_eq!(hp("").as_deref(), None);
        assert_eq!(hp("ftp://x/y").as_deref(), None);
    }
}
