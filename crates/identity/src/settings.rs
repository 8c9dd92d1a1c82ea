//! The `auth.*` settings a service embeds to verify its callers' tokens.
//!
//! A service adds `pub auth: AuthSettings` to its settings type (the keys
//! are then `auth.jwks_url`, `AUTH__JWKS_URL`, …) and calls
//! [`AuthSettings::validate`] from its own `validate` with the prefix
//! `"auth"`. The defaults here are the single source of truth; the deploy
//! copies repeat them.

use serde::{Deserialize, Serialize};
use shopeasy_runtime::settings::{Seconds, Validator};

/// Where the verification keys come from and what a token must say.
///
/// Exactly one key source is used: `jwks_url` (any OIDC provider's JWKS, or
/// the demo issuer's) or `public_key_pem` (one fixed key, for a setup
/// without a JWKS endpoint).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AuthSettings {
    /// The issuer's JWKS (RFC 7517) URL, `http` or `https`. Empty when
    /// `public_key_pem` is used instead.
    pub jwks_url: String,
    /// One public key (PEM: `PUBLIC KEY` for Ed25519 or P-256/P-384,
    /// `RSA PUBLIC KEY` or `PUBLIC KEY` for RSA). Empty when `jwks_url` is
    /// used instead.
    pub public_key_pem: String,
    /// The `iss` every token must carry (exact match).
    pub issuer: String,
    /// The `aud` every token must carry (one of its values must match).
    pub audience: String,
    /// Clock skew allowed on `exp` and `nbf`, so a few seconds of drift
    /// between the issuer and us does not reject fresh tokens.
    pub leeway_seconds: u64,
    /// Timeout of one JWKS request (connect, headers and body).
    pub fetch_timeout_seconds: Seconds,
    /// Upper bound of one JWKS refresh, retries and backoff included; a
    /// request waiting for a refresh waits at most this long.
    pub fetch_deadline_seconds: Seconds,
    /// Retries of a failed JWKS request within one refresh (each also taken
    /// from the retry budget).
    pub fetch_retries: u32,
    /// Shortest time between two refreshes, so a flood of tokens with
    /// made-up `kid`s cannot hammer the provider.
    pub min_refresh_interval_seconds: Seconds,
    /// Age after which the keys are refreshed in the background (the old
    /// keys keep verifying meanwhile), so a rotated-out key stops working
    /// within about this long.
    pub refresh_interval_seconds: Seconds,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            jwks_url: String::new(),
            public_key_pem: String::new(),
            issuer: "shopeasy-demo".into(),
            audience: "shopeasy".into(),
            leeway_seconds: 30,
            fetch_timeout_seconds: Seconds::new(2.0),
            fetch_deadline_seconds: Seconds::new(5.0),
            fetch_retries: 2,
            min_refresh_interval_seconds: Seconds::new(10.0),
            refresh_interval_seconds: Seconds::new(300.0),
        }
    }
}

impl AuthSettings {
    /// Checks every key under `prefix` (normally `auth`): exactly one key
    /// source, non-empty issuer and audience, every duration in range and
    /// the deadline no shorter than one attempt.
    pub fn validate(&self, prefix: &str, v: &mut Validator) {
        v.within(prefix, |v| {
            match (
                self.jwks_url.is_empty(),
                self.public_key_pem.trim().is_empty(),
            ) {
                (true, true) => v.fail(
                    "jwks_url",
                    "\"\"",
                    "one of jwks_url or public_key_pem is required",
                ),
                (false, false) => v.fail(
                    "public_key_pem",
                    "(set)",
                    "set either jwks_url or public_key_pem, not both",
                ),
                (false, true) => {
                    v.url(
                        "jwks_url",
                        &self.jwks_url,
                        &self.jwks_url,
                        &["http", "https"],
                        false,
                    );
                }
                (true, false) => {
                    if crate::keys::KeySet::from_pem(&self.public_key_pem).is_err() {
                        v.fail(
                            "public_key_pem",
                            "(unreadable)",
                            "must be an Ed25519, P-256/P-384 or RSA public key in PEM",
                        );
                    }
                }
            }
            if self.issuer.trim().is_empty() {
                v.fail("issuer", "\"\"", "required: the iss tokens must carry");
            }
            if self.audience.trim().is_empty() {
                v.fail("audience", "\"\"", "required: the aud tokens must carry");
            }
            v.number("leeway_seconds", self.leeway_seconds, 0..=300);
            v.seconds(
                "fetch_timeout_seconds",
                self.fetch_timeout_seconds,
                0.01..=60.0,
            );
            v.seconds(
                "fetch_deadline_seconds",
                self.fetch_deadline_seconds,
                0.01..=300.0,
            );
            if self.fetch_deadline_seconds.as_f64() < self.fetch_timeout_seconds.as_f64() {
                v.fail(
                    "fetch_deadline_seconds",
                    self.fetch_deadline_seconds.as_f64(),
                    "must be at least fetch_timeout_seconds",
                );
            }
            v.number("fetch_retries", self.fetch_retries, 0..=10);
            v.seconds(
                "min_refresh_interval_seconds",
                self.min_refresh_interval_seconds,
                0.0..=3600.0,
            );
            v.seconds(
                "refresh_interval_seconds",
                self.refresh_interval_seconds,
                1.0..=86_400.0,
            );
        });
    }

    /// The settings for a JWKS at `url` with everything else as default.
    pub fn for_jwks(url: impl Into<String>) -> Self {
        Self {
            jwks_url: url.into(),
            ..Self::default()
        }
    }

    /// Every problem [`AuthSettings::validate`] finds under `auth`, for a
    /// caller that builds a verifier without a whole settings type.
    pub fn problems(&self) -> Vec<shopeasy_runtime::settings::SettingError> {
        let mut v = Validator::new();
        self.validate("auth", &mut v);
        v.into_errors()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &AuthSettings) -> Vec<String> {
        s.problems().into_iter().map(|e| e.key).collect()
    }

    #[test]
    fn the_defaults_need_only_a_key_source() {
        assert_eq!(keys(&AuthSettings::default()), ["auth.jwks_url"]);
        assert!(keys(&AuthSettings::for_jwks("http://127.0.0.1:1/jwks.json")).is_empty());
    }

    #[test]
    fn every_bad_key_is_named() {
        let s = AuthSettings {
            jwks_url: "ftp://x".into(),
            issuer: " ".into(),
            audience: String::new(),
            leeway_seconds: 301,
            fetch_timeout_seconds: Seconds::new(3.0),
            fetch_deadline_seconds: Seconds::new(1.0),
            fetch_retries: 11,
            min_refresh_interval_seconds: Seconds::new(-1.0),
            refresh_interval_seconds: Seconds::new(0.0),
            ..AuthSettings::default()
        };
        assert_eq!(
            keys(&s),
            [
                "auth.jwks_url",
                "auth.issuer",
                "auth.audience",
                "auth.leeway_seconds",
                "auth.fetch_deadline_seconds",
                "auth.fetch_retries",
                "auth.min_refresh_interval_seconds",
                "auth.refresh_interval_seconds",
            ]
        );
    }

    #[test]
    fn two_key_sources_or_an_unreadable_pem_are_refused() {
        let both = AuthSettings {
            public_key_pem: "-----BEGIN PUBLIC KEY-----".into(),
            ..AuthSettings::for_jwks("http://127.0.0.1:1/jwks.json")
        };
        assert_eq!(keys(&both), ["auth.public_key_pem"]);
        let bad_pem = AuthSettings {
            public_key_pem: "not a key".into(),
            ..AuthSettings::default()
        };
        assert_eq!(keys(&bad_pem), ["auth.public_key_pem"]);
    }
}
