//! What keeps the fault API a developer's tool on their own machine rather
//! than something any web page they visit can drive.
//!
//! The API listens on loopback, but a browser is on loopback too: a page
//! can send a "simple" cross-origin request (a `text/plain` POST needs no
//! CORS preflight), and DNS rebinding makes the page's own name resolve to
//! 127.0.0.1, so its requests are same-origin for the browser and carry the
//! attacker's name in `Host`. So every request must:
//!
//! - name a loopback host in `Host` (or the HTTP/2 authority): `localhost`,
//!   `127.0.0.1` or `[::1]`, any port, or a name given with
//!   `--allow-host` → else 403;
//! - carry no `Origin`, or a loopback one (a page served from the machine
//!   itself) → else 403;
//! - send a body only as `application/json` → else 415 (a form or
//!   `text/plain` body is exactly what a page can send without asking);
//!
//! and a proxy created or moved through the API may listen on loopback
//! only, or on an address given with `--allow-listen` → else 400, so a page
//! can never open a port on the machine's other interfaces. Each refusal
//! happens before anything changes.
//!
//! Toxiproxy itself checks none of these; its clients send JSON with the
//! right type and talk to `localhost`, so they keep working.

use std::net::IpAddr;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::Problem;

use crate::Error;

/// The hosts, origins and listen addresses the API accepts beyond loopback.
///
/// The default accepts loopback only: what the embedded launcher and a
/// developer's machine need. Compose runs the proxy in its own container,
/// whose proxies must listen on the container's interfaces for the other
/// services to reach them (`--allow-listen 0.0.0.0`); nothing outside the
/// compose network reaches those, since only the API port is published,
/// on the host's loopback.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Extra `Host` names (no port) accepted, such as a compose service
    /// name.
    pub allow_hosts: Vec<String>,
    /// Extra listen addresses (IP, any port) a proxy may be given.
    pub allow_listen: Vec<IpAddr>,
}

/// Whether `host` (a `Host` value or an origin's host, port allowed) names
/// this machine's loopback.
fn is_loopback_host(host: &str) -> bool {
    let name = strip_port(host);
    name.eq_ignore_ascii_case("localhost")
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `host` without a trailing `:port` (`[::1]:8474` → `[::1]`).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

impl Guard {
    /// Whether the request's `Host` (or HTTP/2 authority) is acceptable.
    fn host_allowed(&self, request: &Request) -> bool {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        host.is_some_and(|h| {
            is_loopback_host(h)
                || self
                    .allow_hosts
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(strip_port(h)))
        })
    }

    /// Whether the `Origin`, if any, is this machine's.
    fn origin_allowed(headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Some(rest) = origin.to_str().ok().and_then(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
        }) else {
            return false; // `null`, another scheme, not text
        };
        !rest.contains('/') && is_loopback_host(rest)
    }

    /// Checks that a proxy may listen on `listen` (`host:port`).
    ///
    /// # Errors
    /// [`Error::ListenNotAllowed`] for any address that is neither loopback
    /// nor allowed.
    pub fn check_listen(&self, listen: &str) -> Result<(), Error> {
        let host = strip_port(listen);
        let ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let allowed = host.eq_ignore_ascii_case("localhost")
            || ip.is_some_and(|ip| ip.is_loopback() || self.allow_listen.contains(&ip));
        if allowed {
            Ok(())
        } else {
            Err(Error::ListenNotAllowed(listen.to_owned()))
        }
    }
}

/// Whether the request sends a body.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|n| n.trim() != "0")
}

/// Whether the content type is `application/json` (parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The middleware: refuses a foreign `Host` or `Origin` (403) and a body
/// that is not JSON (415) before any handler runs.
pub async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    if !guard.host_allowed(&request) {
        return refuse(
            StatusCode::FORBIDDEN,
            "foreign-host",
            "the fault API answers only requests to a loopback host (localhost, 127.0.0.1, [::1])",
        );
    }
    if !Guard::origin_allowed(request.headers()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "foreign-origin",
            "the fault API refuses requests from another origin than this machine",
        );
    }
    if has_body(request.headers()) && !is_json(request.headers()) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "send bodies as Content-Type: application/json",
        );
    }
    next.run(request).await
}

fn refuse(status: StatusCode, slug: &str, detail: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    Problem::new(status, slug, title, detail)
        .extension("error", detail)
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_with_any_port() {
        for ok in [
            "localhost",
            "LOCALHOST:8474",
            "127.0.0.1",
            "127.0.0.1:8474",
            "[::1]",
            "[::1]:8474",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8474",
            "localhost.evil.example",
            "10.0.0.1:8474",
            "0.0.0.0:8474",
            "",
        ] {
            assert!(!is_loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn origins_of_this_machine_only() {
        let origin = |o: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ORIGIN, o.parse().unwrap());
            Guard::origin_allowed(&h)
        };
        assert!(Guard::origin_allowed(&HeaderMap::new()));
        assert!(origin("http://localhost:3000"));
        assert!(origin("http://127.0.0.1:8474"));
        assert!(origin("https://[::1]"));
        assert!(!origin("null"));
        assert!(!origin("http://evil.example"));
        assert!(!origin("http://127.0.0.1.evil.example"));
        assert!(!origin("file://"));
    }

    #[test]
    fn listen_addresses_on_loopback_or_allowed() {
        let guard = Guard::default();
        for ok in ["127.0.0.1:0", "localhost:8000", "[::1]:9", "127.0.0.2:1"] {
            assert!(guard.check_listen(ok).is_ok(), "{ok}");
        }
        for refused in [
            "0.0.0.0:8000",
            "[::]:8000",
            "10.1.2.3:80",
            "example.com:80",
            ":80",
        ] {
            assert!(guard.check_listen(refused).is_err(), "{refused}");
        }
        let compose = Guard {
            allow_listen: vec!["0.0.0.0".parse().unwrap()],
            ..Guard::default()
        };
        assert!(compose.check_listen("0.0.0.0:18081").is_ok());
        assert!(compose.check_listen("10.1.2.3:80").is_err());
    }

    #[test]
    fn json_is_the_only_body_type() {
        let mut h = HeaderMap::new();
        assert!(!has_body(&h));
        h.insert(header::CONTENT_LENGTH, "0".parse().unwrap());
        assert!(!has_body(&h));
        h.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert!(has_body(&h));
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(!is_json(&h));
        h.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert!(is_json(&h));
    }
}
