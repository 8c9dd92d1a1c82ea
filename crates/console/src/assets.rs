//! The page: HTML, one ES module and one stylesheet, embedded in the
//! binary (no build step, nothing fetched from a CDN). The topology graph
//! and the breaker step charts are plain SVG drawn by `console.js`.
//!
//! Every asset is sent with a strict Content-Security-Policy (this origin
//! only, no inline script), `nosniff`, and `no-cache` (the console is a
//! development tool: a rebuilt binary's page shows at once).

use axum::{
    http::{HeaderName, HeaderValue, header},
    response::{IntoResponse, Response},
};

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");

/// What every asset's response carries.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'none'";

pub(crate) fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    res
}

/// `GET /`.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /console.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
