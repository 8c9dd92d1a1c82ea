//! What the gateway does to headers on the way through (SPEC §6):
//! hop-by-hop headers and those named in `Connection` are removed in both
//! directions (RFC 9110 §7.6.1), `X-Forwarded-*` are set, ambiguous framing
//! and oversized headers are rejected before anything is sent.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::error::ProxyError;

/// `X-Forwarded-For`.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1,
/// plus the obsolete `Proxy-Connection` and the proxy credentials of RFC 9110
/// §11.7, which are meant for this hop only).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes the hop-by-hop headers and every header named in `Connection`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none of them: one pass comparing names, and no
    // hashing of nine absent names. (`Connection` is itself hop-by-hop, so
    // without one there are no named headers either.)
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    // An empty Vec does not allocate: the common case costs nothing. The
    // raw bytes are split, not the value as text: one byte that is not
    // UTF-8 (`obs-text`, which a value may carry) must not hide the names
    // next to it, or a header meant for this hop only would be forwarded.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|name| HeaderName::from_bytes(name.trim_ascii()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Rejects a request whose framing two parsers could read differently, or
/// whose headers are over `max_header_bytes`.
///
/// # Errors
/// [`ProxyError::AmbiguousFraming`] for `Content-Length` with
/// `Transfer-Encoding`; [`ProxyError::HeadersTooLarge`].
pub(crate) fn check_request(
    headers: &HeaderMap,
    target_len: usize,
    max_header_bytes: u64,
) -> Result<(), ProxyError> {
    if headers.contains_key(header::CONTENT_LENGTH)
        && headers.contains_key(header::TRANSFER_ENCODING)
    {
        return Err(ProxyError::AmbiguousFraming);
    }
    // As on the wire: "name: value\r\n" per field, plus the request line.
    let size = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + target_len;
    if u64::try_from(size).unwrap_or(u64::MAX) > max_header_bytes {
        return Err(ProxyError::HeadersTooLarge(max_header_bytes));
    }
    Ok(())
}

/// The declared body length, if any.
///
/// # Errors
/// [`ProxyError::AmbiguousFraming`] when it is not a number.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ProxyError> {
    headers
        .get(header::CONTENT_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or(ProxyError::AmbiguousFraming)
        })
        .transpose()
}

/// The `X-Forwarded-For` value for a peer (made once per client
/// connection, then cloned per request without formatting).
pub(crate) fn forwarded_for(peer: IpAddr) -> Option<HeaderValue> {
    HeaderValue::from_str(&peer.to_string()).ok()
}

/// Sets `X-Forwarded-For` (the peer's [`forwarded_for`] value; the gateway is
/// the edge and trusts no earlier value), `X-Forwarded-Proto` and
/// `X-Forwarded-Host` (the host the client asked for), and drops `Host` so
/// the client sets the service's.
pub(crate) fn set_forwarded(
    headers: &mut HeaderMap,
    peer: Option<HeaderValue>,
    host: Option<HeaderValue>,
) {
    headers.remove(X_FORWARDED_FOR);
    headers.remove(X_FORWARDED_HOST);
    if let Some(value) = peer {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST, host);
    }
    headers.remove(header::HOST);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_removed() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret-Hop"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("x-other", "2"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("accept", "application/json"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["traceparent", "accept"]);
    }

    #[test]
    fn names_beside_a_byte_that_is_not_utf8_are_still_removed() {
        let mut h = map(&[("x-internal", "1"), ("accept", "application/json")]);
        h.append(
            header::CONNECTION,
            HeaderValue::from_bytes(b"x-internal, \xff").unwrap(),
        );
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn content_length_with_transfer_encoding_is_ambiguous() {
        let h = map(&[("content-length", "3"), ("transfer-encoding", "chunked")]);
        assert_eq!(
            check_request(&h, 10, 1024),
            Err(ProxyError::AmbiguousFraming)
        );
        let h = map(&[("content-length", "3")]);
        assert_eq!(check_request(&h, 10, 1024), Ok(()));
        assert_eq!(content_length(&h), Ok(Some(3)));
    }

    #[test]
    fn oversized_headers_are_refused() {
        let big = "x".repeat(2000);
        let h = map(&[("x-big", &big)]);
        assert_eq!(
            check_request(&h, 10, 1024),
            Err(ProxyError::HeadersTooLarge(1024))
        );
    }

    #[test]
    fn forwarded_headers_replace_what_the_client_claimed() {
        let mut h = map(&[("x-forwarded-for", "6.6.6.6"), ("host", "shop.example")]);
        let host = h.get(header::HOST).cloned();
        set_forwarded(&mut h, forwarded_for([10, 0, 0, 7].into()), host);
        assert_eq!(h[X_FORWARDED_FOR], "10.0.0.7");
        assert_eq!(h[X_FORWARDED_PROTO], "http");
        assert_eq!(h[X_FORWARDED_HOST], "shop.example");
        assert!(!h.contains_key(header::HOST));
    }
}
