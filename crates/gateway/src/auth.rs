//! The authentication phase's failure, in the shape [`ProxyError`] needs.
//!
//! [`ProxyError`](crate::error::ProxyError) is `Copy` (the retry decision
//! and the metrics pass it by value), and
//! [`shopeasy_identity::AuthError`] is not, although every one of its
//! variants holds only `&'static str`s. [`AuthFailure`] is the same value,
//! `Copy`, converted both ways without loss, so the gateway answers with
//! exactly the identity crate's 401 (its `WWW-Authenticate` challenge and
//! problem body) and never writes one of its own. If `AuthError` ever
//! derives `Copy`, this module can go.

use std::fmt;

use shopeasy_identity::AuthError;

/// Why the caller of a route that needs a customer was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AuthFailure(Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    Malformed,
    UnsupportedAlgorithm,
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    MissingClaim(&'static str),
    InvalidClaim(&'static str),
    KeysUnavailable,
}

impl From<AuthError> for AuthFailure {
    fn from(error: AuthError) -> Self {
        use AuthError as E;
        Self(match error {
            E::Missing => Kind::Missing,
            E::Malformed => Kind::Malformed,
            E::UnsupportedAlgorithm => Kind::UnsupportedAlgorithm,
            E::UnknownKey => Kind::UnknownKey,
            E::BadSignature => Kind::BadSignature,
            E::Expired => Kind::Expired,
            E::NotYetValid => Kind::NotYetValid,
            E::WrongIssuer => Kind::WrongIssuer,
            E::WrongAudience => Kind::WrongAudience,
            E::MissingClaim(c) => Kind::MissingClaim(c),
            E::InvalidClaim(c) => Kind::InvalidClaim(c),
            E::KeysUnavailable => Kind::KeysUnavailable,
        })
    }
}

impl AuthFailure {
    /// The identity crate's error again, for its status and response.
    pub(crate) fn error(self) -> AuthError {
        use AuthError as E;
        match self.0 {
            Kind::Missing => E::Missing,
            Kind::Malformed => E::Malformed,
            Kind::UnsupportedAlgorithm => E::UnsupportedAlgorithm,
            Kind::UnknownKey => E::UnknownKey,
            Kind::BadSignature => E::BadSignature,
            Kind::Expired => E::Expired,
            Kind::NotYetValid => E::NotYetValid,
            Kind::WrongIssuer => E::WrongIssuer,
            Kind::WrongAudience => E::WrongAudience,
            Kind::MissingClaim(c) => E::MissingClaim(c),
            Kind::InvalidClaim(c) => E::InvalidClaim(c),
            Kind::KeysUnavailable => E::KeysUnavailable,
        }
    }

    /// Whether the keys could not be had at all (a 503, the gateway's
    /// failure), rather than a bad or missing credential (401).
    pub(crate) fn is_unavailable(self) -> bool {
        self.0 == Kind::KeysUnavailable
    }
}

impl fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_auth_error_survives_the_round_trip() {
        for e in [
            AuthError::Missing,
            AuthError::Malformed,
            AuthError::UnsupportedAlgorithm,
            AuthError::UnknownKey,
            AuthError::BadSignature,
            AuthError::Expired,
            AuthError::NotYetValid,
            AuthError::WrongIssuer,
            AuthError::WrongAudience,
            AuthError::MissingClaim("sub"),
            AuthError::InvalidClaim("aud"),
            AuthError::KeysUnavailable,
        ] {
            let f = AuthFailure::from(e.clone());
            assert_eq!(f.error(), e);
            assert_eq!(f.to_string(), e.to_string());
            assert_eq!(f.is_unavailable(), e == AuthError::KeysUnavailable);
        }
    }
}
