//! Who may use the console: the checks in front of every route.
//!
//! - **Host** (every route): with the default loopback binding, a `Host`
//!   that is not loopback is refused (403), so a web page on another site
//!   cannot reach the console through DNS rebinding.
//! - **Same origin** (`/api/*`): a request a browser marks as coming from
//!   another site (`Sec-Fetch-Site: cross-site`/`same-site`, or an `Origin`
//!   that is not this console's) is refused (403) before anything else.
//! - **Admin token** (`/api/*` changes): `Authorization: Bearer <admin
//!   token>`, compared in constant time; missing or wrong → 401, never a
//!   hint which. A console started without a token is read-only: every
//!   change is refused (403).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use shopeasy_runtime::settings::Secret;

use crate::error::ConsoleError;

/// What the checks need.
#[derive(Debug, Clone)]
pub struct Guard {
    token: Arc<Secret>,
    allow_remote: bool,
}

impl Guard {
    /// Checks against `token`; `allow_remote` accepts any `Host`.
    pub fn new(token: Secret, allow_remote: bool) -> Self {
        Self {
            token: Arc::new(token),
            allow_remote,
        }
    }

    /// The `Host` check.
    ///
    /// # Errors
    /// [`ConsoleError::ForeignHost`] for a non-loopback host.
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), ConsoleError> {
        if self.allow_remote {
            return Ok(());
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if is_loopback_host(host) {
            Ok(())
        } else {
            Err(ConsoleError::ForeignHost(host.chars().take(100).collect()))
        }
    }

    /// The same-origin check.
    ///
    /// # Errors
    /// [`ConsoleError::CrossOrigin`] when the browser says the request comes
    /// from another site.
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), ConsoleError> {
        let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
            && !matches!(site, "same-origin" | "none")
        {
            return Err(ConsoleError::CrossOrigin(format!("Sec-Fetch-Site: {site}")));
        }
        if let Some(origin) = text(header::ORIGIN) {
            let host = text(header::HOST).unwrap_or("");
            let own = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            if own != Some(host) {
                return Err(ConsoleError::CrossOrigin(format!(
                    "Origin {} is not this console",
                    origin.chars().take(100).collect::<String>()
                )));
            }
        }
        Ok(())
    }

    /// The admin-token check.
    ///
    /// # Errors
    /// [`ConsoleError::Unauthorized`] when the bearer token is missing or
    /// wrong.
    pub fn check_token(&self, headers: &HeaderMap) -> Result<(), ConsoleError> {
        if self.token.is_empty() {
            return Err(ConsoleError::ReadOnly);
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if self.token.matches(presented.trim()) {
            Ok(())
        } else {
            Err(ConsoleError::Unauthorized)
        }
    }
}

/// The middleware: Host everywhere; origin and, for anything but a read,
/// the token under `/api/`.
pub async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let api = request.uri().path().starts_with("/api/");
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    let verdict = guard.check_host(headers).and_then(|()| {
        if api {
            guard.check_origin(headers)?;
            if !read {
                guard.check_token(headers)?;
            }
        }
        Ok(())
    });
    match verdict {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_pass_and_others_do_not() {
        for ok in ["127.0.0.1:8090", "localhost", "[::1]:8090", "127.1.2.3"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example:8090", "10.0.0.1", "", "[::2]:1"] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        let g = Guard::new(Secret::new("t"), false);
        assert!(g.check_host(&headers(&[("host", "evil.example")])).is_err());
        let g = Guard::new(Secret::new("t"), true);
        g.check_host(&headers(&[("host", "evil.example")])).unwrap();
    }

    #[test]
    fn only_same_origin_requests_pass() {
        let g = Guard::new(Secret::new("t"), false);
        g.check_origin(&headers(&[("host", "127.0.0.1:8090")]))
            .unwrap();
        g.check_origin(&headers(&[
            ("host", "127.0.0.1:8090"),
            ("origin", "http://127.0.0.1:8090"),
            ("sec-fetch-site", "same-origin"),
        ]))
        .unwrap();
        for bad in [
            vec![
                ("host", "127.0.0.1:8090"),
                ("origin", "http://evil.example"),
            ],
            vec![("host", "127.0.0.1:8090"), ("sec-fetch-site", "cross-site")],
            vec![("host", "127.0.0.1:8090"), ("origin", "null")],
        ] {
            assert!(
                matches!(
                    g.check_origin(&headers(&bad)),
                    Err(ConsoleError::CrossOrigin(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn without_a_token_every_change_is_refused() {
        let guard = Guard::new(Secret::default(), false);
        for presented in ["", "Bearer ", "Bearer x"] {
            let h = headers(&[("authorization", presented)]);
            assert!(
                matches!(guard.check_token(&h), Err(ConsoleError::ReadOnly)),
                "{presented:?}"
            );
        }
    }

    #[test]
    fn the_token_must_match_exactly() {
        let g = Guard::new(Secret::new("s3cret"), false);
        g.check_token(&headers(&[("authorization", "Bearer s3cret")]))
            .unwrap();
        for bad in ["Bearer s3cre", "Bearer ", "s3cret", "Basic s3cret"] {
            assert!(g.check_token(&headers(&[("authorization", bad)])).is_err());
        }
        assert!(g.check_token(&HeaderMap::new()).is_err());
    }
}
