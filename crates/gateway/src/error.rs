//! The gateway's one error enum, and the one place it becomes a response
//! (the "rescue"): an RFC 9457 problem body plus an RFC 9209 `Proxy-Status`
//! header saying which side failed. Nothing internal is ever sent.

use axum::response::IntoResponse;
use http::{HeaderValue, StatusCode};
use shopeasy_resilience::admission::{Outcome, Refusal};
use shopeasy_runtime::problem::Problem;

use crate::ratelimit::Verdict;
use shopeasy_identity::AuthError;

/// The name the gateway gives itself in `Proxy-Status`.
pub(crate) const PROXY_NAME: &str = "shopeasy-gateway";
/// draft-ietf-httpapi-ratelimit-headers' quota policy field.
pub(crate) const RATELIMIT_POLICY: http::HeaderName =
    http::HeaderName::from_static("ratelimit-policy");
/// draft-ietf-httpapi-ratelimit-headers' current-limit field.
pub(crate) const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");
/// `Allow` of a 405: RFC 9110's methods, the ones the gateway forwards.
const ALLOWED: &str = "GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH";

/// Everything that makes the gateway answer instead of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProxyError {
    /// No route serves the path.
    #[error("no route for this path")]
    NoRoute,
    /// The path has `.` or `..` segments.
    #[error("the path has dot segments")]
    DotSegment,
    /// Both `Content-Length` and `Transfer-Encoding` (request smuggling).
    #[error("both Content-Length and Transfer-Encoding were sent")]
    AmbiguousFraming,
    /// Request line and headers over the cap.
    #[error("the request headers are over {0} bytes")]
    HeadersTooLarge(u64),
    /// Request body over the cap.
    #[error("the request body is over {0} bytes")]
    BodyTooLarge(u64),
    /// The client stopped sending its body for the activity timeout.
    #[error("the client sent no body bytes for the activity timeout")]
    ClientStalled,
    /// The client's body ended abnormally (it went away mid-body).
    #[error("the request body ended abnormally")]
    ClientBody,
    /// No TCP connection within the connect timeout.
    #[error("connecting to the service timed out")]
    ConnectTimeout,
    /// The service refused the connection.
    #[error("the service refused the connection")]
    ConnectionRefused,
    /// Connecting failed otherwise (reset during connect, unreachable).
    #[error("the service could not be reached")]
    ConnectionFailed,
    /// The connection was reset or closed before a response arrived.
    #[error("the connection to the service closed before a response")]
    ConnectionTerminated,
    /// The service sent no response headers for the activity timeout.
    #[error("the service sent no response within the activity timeout")]
    ResponseTimeout,
    /// The caller's deadline passed before the service answered.
    #[error("the caller's deadline passed")]
    DeadlineExceeded,
    /// The service answered with something that is not HTTP.
    #[error("the service's response was malformed")]
    Protocol,
    /// A method outside RFC 9110's set (never forwarded, never a label).
    #[error("the method is not one of RFC 9110's")]
    MethodNotAllowed,
    /// A method the route does not serve (sign-in takes only `POST`, a
    /// product's stock only `GET` and `HEAD`).
    #[error("this route accepts only {allow}")]
    WrongMethod {
        /// The `Allow` field: the methods the route serves.
        allow: &'static str,
    },
    /// The route needs a customer and the bearer token is missing or bad
    /// (401), or the keys to check it cannot be had (503).
    #[error("{0}")]
    Unauthenticated(AuthError),
    /// The client's whole body took longer than the body deadline.
    #[error("the request body took longer than {0} ms in all")]
    BodyTimeout(u64),
    /// The client is over its rate limit.
    #[error("too many requests from this client: retry after {} s", .0.retry_after)]
    RateLimited(Verdict),
    /// The route already has its cap of requests in flight.
    #[error("the {route} route has {limit} requests in flight; retry shortly")]
    Overloaded {
        /// The route's name.
        route: &'static str,
        /// Its in-flight cap.
        limit: u32,
    },
    /// The gateway's own admission control refused it (its adaptive limit
    /// and queue are full, or the caller's deadline cannot be met).
    #[error("{0}")]
    Shed(Refusal),
    /// No connection to the service came free within the connect timeout
    /// (the per-origin cap is reached).
    #[error("every connection to the service ({0} at most) stayed busy; retry shortly")]
    UpstreamBusy(u32),
    /// A bug in the gateway (logged; sent as a bare 500).
    #[error("internal error")]
    Internal,
}

/// What a caller is told to wait after a 503 refusal, in seconds.
const OVERLOAD_RETRY_AFTER: u64 = 1;

impl ProxyError {
    /// The status the caller gets.
    pub(crate) fn status(self) -> StatusCode {
        use ProxyError as E;
        match self {
            E::NoRoute => StatusCode::NOT_FOUND,
            E::DotSegment | E::AmbiguousFraming | E::ClientBody => StatusCode::BAD_REQUEST,
            E::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            E::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            E::ClientStalled | E::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            E::MethodNotAllowed | E::WrongMethod { .. } => StatusCode::METHOD_NOT_ALLOWED,
            E::Unauthenticated(a) => a.status(),
            E::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            E::Overloaded { .. } | E::UpstreamBusy(_) | E::Shed(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            E::ConnectTimeout | E::ResponseTimeout | E::DeadlineExceeded => {
                StatusCode::GATEWAY_TIMEOUT
            }
            E::ConnectionRefused | E::ConnectionFailed | E::ConnectionTerminated | E::Protocol => {
                StatusCode::BAD_GATEWAY
            }
            E::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The RFC 9209 §2.3 error type for `Proxy-Status`.
    pub(crate) fn proxy_status(self) -> &'static str {
        use ProxyError as E;
        match self {
            E::NoRoute => "destination_not_found",
            E::DotSegment
            | E::AmbiguousFraming
            | E::HeadersTooLarge(_)
            | E::BodyTooLarge(_)
            | E::ClientStalled
            | E::BodyTimeout(_)
            | E::ClientBody => "http_request_error",
            E::MethodNotAllowed | E::WrongMethod { .. } | E::RateLimited(_) => {
                "http_request_denied"
            }
            E::Unauthenticated(AuthError::KeysUnavailable) => "proxy_internal_error",
            E::Unauthenticated(_) => "http_request_denied",
            // The gateway's own limit on what it sends the next hop.
            E::Overloaded { .. } | E::UpstreamBusy(_) | E::Shed(_) => "connection_limit_reached",
            E::ConnectTimeout => "connection_timeout",
            E::ConnectionRefused => "connection_refused",
            E::ConnectionFailed => "destination_unavailable",
            E::ConnectionTerminated => "connection_terminated",
            E::ResponseTimeout | E::DeadlineExceeded => "http_response_timeout",
            E::Protocol => "http_protocol_error",
            E::Internal => "proxy_internal_error",
        }
    }

    /// The `outcome` label of the request metrics.
    pub(crate) fn outcome(self) -> &'static str {
        use ProxyError as E;
        match self {
            E::NoRoute => "no_route",
            E::DotSegment | E::AmbiguousFraming | E::ClientBody => "bad_request",
            E::HeadersTooLarge(_) | E::BodyTooLarge(_) => "too_large",
            E::ClientStalled => "client_timeout",
            E::BodyTimeout(_) => "client_body_timeout",
            E::MethodNotAllowed | E::WrongMethod { .. } => "method_not_allowed",
            E::Unauthenticated(AuthError::KeysUnavailable) => "identity_unavailable",
            E::Unauthenticated(_) => "unauthenticated",
            E::RateLimited(_) => "rate_limited",
            E::Overloaded { .. } => "overloaded",
            E::UpstreamBusy(_) => "upstream_busy",
            E::Shed(r) if r.reason == Outcome::RefusedDeadline => "shed_deadline",
            E::Shed(_) => "shed",
            E::ConnectTimeout => "connect_timeout",
            E::ConnectionRefused => "connection_refused",
            E::ConnectionFailed => "connection_failed",
            E::ConnectionTerminated => "connection_terminated",
            E::ResponseTimeout => "response_timeout",
            E::DeadlineExceeded => "deadline_exceeded",
            E::Protocol => "protocol_error",
            E::Internal => "internal",
        }
    }

    /// A connection failure before any response byte: the request may be
    /// re-sent if it is safe to repeat (SPEC §6). Timeouts are not: a slow
    /// service is not helped by more load.
    /// Whether the request may have reached the service before this
    /// failure (the connection closed after it was sent), so that the
    /// service may have acted on it.
    pub(crate) fn may_have_reached_the_service(self) -> bool {
        self == Self::ConnectionTerminated
    }

    pub(crate) fn is_connection_failure(self) -> bool {
        matches!(
            self,
            Self::ConnectionRefused | Self::ConnectionFailed | Self::ConnectionTerminated
        )
    }

    fn problem(self) -> Problem {
        use ProxyError as E;
        let status = self.status();
        let detail = self.to_string();
        match self {
            E::NoRoute => Problem::not_found("no route serves this path"),
            E::DotSegment | E::AmbiguousFraming | E::ClientBody => Problem::bad_request(detail),
            E::BodyTooLarge(limit) => {
                Problem::payload_too_large(usize::try_from(limit).unwrap_or(usize::MAX))
            }
            E::HeadersTooLarge(_) => Problem::new(
                status,
                "header-fields-too-large",
                "Request headers too large",
                detail,
            ),
            E::ClientStalled | E::BodyTimeout(_) => {
                Problem::new(status, "request-timeout", "Request timeout", detail)
            }
            E::MethodNotAllowed => Problem::new(
                status,
                "method-not-allowed",
                "Method not allowed",
                "the gateway forwards only RFC 9110's methods",
            ),
            E::WrongMethod { .. } => {
                Problem::new(status, "method-not-allowed", "Method not allowed", detail)
            }
            E::Unauthenticated(a) => a.problem(),
            E::RateLimited(v) => Problem::new(status, "rate-limited", "Too many requests", detail)
                .retry_after(u64::from(v.retry_after)),
            E::Overloaded { .. } | E::UpstreamBusy(_) => {
                Problem::overloaded(detail, OVERLOAD_RETRY_AFTER)
            }
            E::Shed(r) => Problem::overloaded(detail, r.retry_after_seconds())
                .extension("reason", r.reason.as_str()),
            E::ConnectTimeout | E::ResponseTimeout | E::DeadlineExceeded => {
                Problem::new(status, "gateway-timeout", "Gateway timeout", detail)
            }
            E::ConnectionRefused | E::ConnectionFailed | E::ConnectionTerminated | E::Protocol => {
                Problem::new(status, "bad-gateway", "Bad gateway", detail)
            }
            E::Internal => Problem::internal(),
        }
    }
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> axum::response::Response {
        // A credential failure is the identity crate's own answer, with its
        // RFC 6750 challenge; everything else is the problem below.
        let mut response = match self {
            Self::Unauthenticated(a) => a.to_response(),
            _ => self.problem().into_response(),
        };
        let value = match self {
            Self::Unauthenticated(AuthError::KeysUnavailable) => format!(
                "{PROXY_NAME}; error={}; details=\"identity provider keys unavailable\"",
                self.proxy_status()
            ),
            Self::Overloaded { route, .. } => format!(
                "{PROXY_NAME}; error={}; details=\"{route} route in-flight cap\"",
                self.proxy_status()
            ),
            Self::UpstreamBusy(_) => format!(
                "{PROXY_NAME}; error={}; details=\"upstream connection cap\"",
                self.proxy_status()
            ),
            Self::Shed(_) => format!(
                "{PROXY_NAME}; error={}; details=\"gateway admission limit\"",
                self.proxy_status()
            ),
            _ => format!("{PROXY_NAME}; error={}", self.proxy_status()),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert("proxy-status", value);
        }
        match self {
            Self::RateLimited(v) => {
                let headers = response.headers_mut();
                headers.insert(RATELIMIT_POLICY, v.policy());
                headers.insert(RATELIMIT, v.header());
            }
            Self::MethodNotAllowed => {
                response
                    .headers_mut()
                    .insert(http::header::ALLOW, HeaderValue::from_static(ALLOWED));
            }
            Self::WrongMethod { allow } => {
                response
                    .headers_mut()
                    .insert(http::header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        if self.status() == StatusCode::REQUEST_TIMEOUT || self == Self::AmbiguousFraming {
            // The rest of the request cannot be trusted or will never come.
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gateway_error_says_who_failed() {
        let r = ProxyError::ConnectTimeout.into_response();
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            r.headers()["proxy-status"],
            "shopeasy-gateway; error=connection_timeout"
        );
        assert_eq!(
            r.headers()[http::header::CONTENT_TYPE],
            shopeasy_runtime::problem::CONTENT_TYPE
        );
        let r = ProxyError::ConnectionRefused.into_response();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            r.headers()["proxy-status"],
            "shopeasy-gateway; error=connection_refused"
        );
    }

    #[test]
    fn a_bad_token_is_the_identity_crates_401_with_its_challenge() {
        use shopeasy_identity::AuthError;
        let r = ProxyError::Unauthenticated(AuthError::Missing).into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers()[http::header::WWW_AUTHENTICATE],
            "Bearer realm=\"shopeasy\""
        );
        assert_eq!(
            r.headers()["proxy-status"],
            "shopeasy-gateway; error=http_request_denied"
        );
        let e = ProxyError::Unauthenticated(AuthError::Expired);
        assert_eq!(e.outcome(), "unauthenticated");
        let r = e.into_response();
        assert!(
            r.headers()[http::header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap()
                .contains("error=\"invalid_token\""),
            "{r:?}"
        );
        let e = ProxyError::Unauthenticated(AuthError::KeysUnavailable);
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.outcome(), "identity_unavailable");
        let r = ProxyError::WrongMethod { allow: "POST" }.into_response();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[http::header::ALLOW], "POST");
    }

    #[test]
    fn only_connection_failures_are_retryable() {
        assert!(ProxyError::ConnectionRefused.is_connection_failure());
        assert!(ProxyError::ConnectionTerminated.is_connection_failure());
        assert!(!ProxyError::ConnectTimeout.is_connection_failure());
        assert!(!ProxyError::ResponseTimeout.is_connection_failure());
        assert!(!ProxyError::Protocol.is_connection_failure());
    }
}
