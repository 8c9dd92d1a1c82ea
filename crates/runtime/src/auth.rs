//! The bearer-token check of every admin operation: product's admin routes
//! (an HTTP `Authorization` header) and inventory's `SetStock` (gRPC
//! `authorization` metadata) read the same `Bearer <token>` value and decide
//! the same way, here.
//!
//! Every failure (no value, another scheme, a wrong token, no token
//! configured) is one `false`: the caller answers the same 401 (or
//! `UNAUTHENTICATED`) for each, so a client learns nothing about which part
//! was wrong (SPEC §3).

use crate::settings::Secret;

/// The token of an `Authorization` value `Bearer <token>`: the scheme in any
/// case (RFC 9110 §11.1), the token without surrounding spaces. `None` for
/// any other scheme or shape.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `authorization` (the header or metadata value, `None` when
/// absent) carries `expected` as a bearer token.
///
/// The token is compared in constant time ([`Secret::matches`]), so the
/// time taken does not tell where a guess went wrong; an empty `expected`
/// admits nobody, so a service without a configured token refuses every
/// admin call.
pub fn is_authorized(expected: &Secret, authorization: Option<&str>) -> bool {
    authorization
        .and_then(bearer_token)
        .is_some_and(|token| expected.matches(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_scheme_with_the_right_token_is_admitted() {
        let token = Secret::new("s3cret");
        assert!(is_authorized(&token, Some("Bearer s3cret")));
        assert!(is_authorized(&token, Some("bearer  s3cret ")));
        assert!(is_authorized(&token, Some("BEARER s3cret")));
        for refused in [
            None,
            Some(""),
            Some("s3cret"),
            Some("Bearer"),
            Some("Bearer "),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Basic s3cret"),
        ] {
            assert!(!is_authorized(&token, refused), "{refused:?}");
        }
    }

    #[test]
    fn no_configured_token_admits_nobody() {
        let none = Secret::default();
        assert!(!is_authorized(&none, Some("Bearer ")));
        assert!(!is_authorized(&none, Some("Bearer anything")));
        assert!(!is_authorized(&none, None));
    }

    #[test]
    fn the_token_is_read_from_the_value() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("Token abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
