//! Why a caller was not authenticated, and the one place that becomes an
//! HTTP answer (RFC 6750 §3 with an RFC 9457 body).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::Problem;

/// The `realm` of every `WWW-Authenticate` challenge.
pub const REALM: &str = "shopeasy";

/// Seconds a client is told to wait when the keys cannot be had at all.
const KEYS_RETRY_AFTER: u64 = 5;

/// Why a request's bearer token was not accepted.
///
/// Every variant but [`AuthError::KeysUnavailable`] is the caller's doing
/// and answers 401; the detail says what was wrong with the token (RFC 6750
/// `error_description`), never anything about our keys or configuration.
///
/// `Copy`: every variant holds only `&'static str`s, so a caller that passes
/// its own errors by value (the gateway's proxy error) can carry this one as
/// it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` at all (another scheme counts as none).
    /// RFC 6750 §3.1: the challenge carries no error code.
    #[error("no bearer token")]
    Missing,
    /// The credential is not a JWT (wrong shape, bad base64 or JSON, too
    /// long, several `Authorization` headers).
    #[error("the token is malformed")]
    Malformed,
    /// The header names an algorithm we never accept (`none`, a shared
    /// secret `HS*`) or do not know.
    #[error("the token's algorithm is not accepted")]
    UnsupportedAlgorithm,
    /// The header's `typ` is absent or not one of `auth.token_types`
    /// (RFC 9068 §4: an access token says `at+jwt`), so the token is not
    /// an access token — an OpenID Connect ID token, say — even if the
    /// issuer signed it for our audience.
    #[error("the token is not an access token (its typ is not accepted)")]
    WrongTokenType,
    /// No key of the issuer has the token's `kid` (after one refresh).
    #[error("the token's signing key is unknown")]
    UnknownKey,
    /// The signature does not verify with the issuer's key.
    #[error("the token's signature is invalid")]
    BadSignature,
    /// `exp` has passed (beyond the leeway).
    #[error("the token has expired")]
    Expired,
    /// `nbf` is still ahead (beyond the leeway).
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not our issuer.
    #[error("the token was issued by another issuer")]
    WrongIssuer,
    /// `aud` does not name us.
    #[error("the token is meant for another audience")]
    WrongAudience,
    /// A required claim (`exp`, `iss`, `aud` or `sub`) is absent.
    #[error("the token has no {0} claim")]
    MissingClaim(&'static str),
    /// A claim has the wrong type or an unusable value (an empty `sub`, say).
    #[error("the token's {0} claim is invalid")]
    InvalidClaim(&'static str),
    /// No key has ever been fetched and the issuer's JWKS cannot be reached
    /// now: nobody can be verified, so this is our failure (503), not the
    /// caller's.
    #[error("the identity provider's keys are unavailable")]
    KeysUnavailable,
}

impl AuthError {
    /// The HTTP status: 401, or 503 for [`AuthError::KeysUnavailable`].
    pub fn status(&self) -> StatusCode {
        match self {
            Self::KeysUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750 §3): the realm alone when
    /// no token was sent, `error="invalid_token"` with the description
    /// otherwise; `None` for [`AuthError::KeysUnavailable`], which is not
    /// the credential's fault.
    pub fn challenge(&self) -> Option<String> {
        match self {
            Self::KeysUnavailable => None,
            Self::Missing => Some(format!("Bearer realm=\"{REALM}\"")),
            other => Some(format!(
                "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{other}\""
            )),
        }
    }

    /// The RFC 9457 problem: `unauthorized` for a missing token,
    /// `invalid-token` for a bad one, `identity-unavailable` (with
    /// `Retry-After`) when no key can be had.
    pub fn problem(&self) -> Problem {
        match self {
            Self::Missing => Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Authentication required",
                "this operation requires Authorization: Bearer <access token>",
            ),
            Self::KeysUnavailable => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "identity-unavailable",
                "Identity provider unavailable",
                self.to_string(),
            )
            .retry_after(KEYS_RETRY_AFTER),
            other => Problem::new(
                StatusCode::UNAUTHORIZED,
                "invalid-token",
                "Invalid access token",
                other.to_string(),
            ),
        }
    }

    /// The whole answer: the problem body, its status, `WWW-Authenticate`
    /// and (for 503) `Retry-After`.
    pub fn to_response(&self) -> Response {
        let mut response = self.problem().into_response();
        if let Some(value) = self
            .challenge()
            .and_then(|c| HeaderValue::from_str(&c).ok())
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        self.to_response()
    }
}

/// Why a [`Verifier`](crate::Verifier) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Settings out of range (every bad key listed).
    #[error("invalid auth settings: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Settings(Vec<shopeasy_runtime::settings::SettingError>),
    /// The HTTP client for the JWKS could not be built.
    #[error("cannot build the JWKS client: {0}")]
    Client(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_token_is_challenged_without_an_error_code() {
        assert_eq!(
            AuthError::Missing.challenge().as_deref(),
            Some("Bearer realm=\"shopeasy\"")
        );
        assert_eq!(
            AuthError::Expired.challenge().as_deref(),
            Some(
                "Bearer realm=\"shopeasy\", error=\"invalid_token\", error_description=\"the token has expired\""
            )
        );
        assert_eq!(AuthError::KeysUnavailable.challenge(), None);
    }

    #[test]
    fn every_error_is_a_complete_problem() {
        for e in [
            AuthError::Missing,
            AuthError::Malformed,
            AuthError::UnsupportedAlgorithm,
            AuthError::WrongTokenType,
            AuthError::UnknownKey,
            AuthError::BadSignature,
            AuthError::Expired,
            AuthError::NotYetValid,
            AuthError::WrongIssuer,
            AuthError::WrongAudience,
            AuthError::MissingClaim("sub"),
            AuthError::InvalidClaim("sub"),
            AuthError::KeysUnavailable,
        ] {
            let p = e.problem();
            assert_eq!(p.status(), e.status());
            assert!(!p.detail.is_empty());
            // Every description is a valid quoted-string (no `"` or `\`).
            assert!(!e.to_string().contains(['"', '\\']), "{e}");
            let r = e.to_response();
            assert_eq!(r.status(), e.status());
            assert_eq!(
                r.headers().contains_key(header::WWW_AUTHENTICATE),
                e != AuthError::KeysUnavailable
            );
        }
    }
}
