//! The storefront's static pages (SPEC §6, §12): `/` and `/assets/*`,
//! embedded in the binary, so the gateway needs no folder on disk and a
//! deployed gateway always serves the pages built with it.
//!
//! The pages are plain HTML, CSS and ES modules (no build step, nothing
//! from a CDN); the page talks to `/api/*` through this same gateway, so
//! everything is same-origin and the Content-Security-Policy can be
//! `'self'` only.
//!
//! Decisions, and why:
//! - **Cache: `ETag` + `Cache-Control: no-cache`**, not hashed file names.
//!   ES modules import each other by name, and renaming them per build
//!   would need the build step this project refuses. The tag is an FNV-1a
//!   hash of the asset computed at compile time, so revalidation costs one
//!   conditional request answered `304` without a body, and a new binary's
//!   pages are seen at once.
//! - **Not rate-limited, not admitted, not counted** with API calls: an
//!   asset is a constant in memory, answered without touching a service, so
//!   it costs less than the rate-limit check itself; charging the client's
//!   token bucket for the three files of a page load would eat the budget
//!   its API calls need. The listener's connection cap and head-size caps
//!   still apply (they run before any request reaches the proxy).
//! - **GET and HEAD only**; any other method on a storefront path is 405
//!   with `Allow: GET, HEAD`. Paths not listed here stay 404.

use axum::{body::Body, response::IntoResponse};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use crate::error::ProxyError;

/// The methods a storefront path serves (`Allow` of its 405).
pub(crate) const ALLOW: &str = "GET, HEAD";

/// Same-origin only: scripts, styles, fetches and images from this
/// gateway; no inline script or style, no framing, no plugins.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
#[derive(Debug)]
struct Asset {
    /// The path it is served at.
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// A strong validator, computed at compile time.
    etag: &'static str,
}

/// An asset at `$path`, from `storefront/$file`, with its tag computed at
/// compile time.
macro_rules! asset {
    ($path:literal, $file:literal, $type:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../storefront/", $file));
        const TAG: [u8; 18] = etag(fnv1a(BODY));
        Asset {
            path: $path,
            content_type: $type,
            body: BODY,
            etag: match std::str::from_utf8(&TAG) {
                Ok(tag) => tag,
                Err(_) => "\"0\"",
            },
        }
    }};
}

/// Every storefront file, by the path it is served at.
static ASSETS: [Asset; 4] = [
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!("/assets/app.js", "app.js", "text/javascript; charset=utf-8"),
    asset!("/assets/api.js", "api.js", "text/javascript; charset=utf-8"),
    asset!("/assets/style.css", "style.css", "text/css; charset=utf-8"),
];

/// The answer for `path` when it is a storefront path, `None` otherwise
/// (the caller answers 404 as for any unrouted path).
pub(crate) fn serve(method: &Method, path: &str, headers: &HeaderMap) -> Option<Response<Body>> {
    let asset = ASSETS.iter().find(|a| a.path == path)?;
    if method != Method::GET && method != Method::HEAD {
        return Some(ProxyError::WrongMethod { allow: ALLOW }.into_response());
    }
    let not_modified = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == asset.etag || tag == "*");
    let (status, body) = if not_modified {
        (StatusCode::NOT_MODIFIED, Body::empty())
    } else if method == Method::HEAD {
        (StatusCode::OK, Body::empty())
    } else {
        (StatusCode::OK, Body::from(asset.body))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if status == StatusCode::OK {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.body.len()));
    }
    Some(response)
}

/// FNV-1a, 64 bits: a stable, dependency-free content hash for `ETag`s
/// (not a security boundary: a tag only has to change with the content).
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `"<16 hex digits>"`: the hash as a quoted strong entity tag.
const fn etag(hash: u64) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_asset_has_a_distinct_strong_tag() {
        let mut tags: Vec<&str> = ASSETS.iter().map(|a| a.etag).collect();
        assert!(tags.iter().all(|t| t.len() == 18 && t.starts_with('"')));
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len());
    }

    #[test]
    fn fnv1a_matches_its_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(&etag(0x0123_4567_89ab_cdef), b"\"0123456789abcdef\"");
    }

    #[test]
    fn only_listed_paths_are_storefront_paths() {
        let h = HeaderMap::new();
        for path in [
            "/index.html",
            "/assets",
            "/assets/",
            "/assets/x.js",
            "/app.js",
        ] {
            assert!(serve(&Method::GET, path, &h).is_none(), "{path}");
        }
        let r = serve(&Method::POST, "/", &h).unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], ALLOW);
    }
}
