//! The `auth.*` settings a service embeds to verify its callers' tokens.
//!
//! A service adds `pub auth: AuthSettings` to its settings type (the keys
//! are then `auth.jwks_url`, `AUTH__JWKS_URL`, …) and calls
//! [`AuthSettings::validate`] from its own `validate` with the prefix
//! `"auth"`. The defaults here are the single source of truth; the deploy
//! copies repeat them.

use serde::{Deserialize, Serialize};
use shopeasy_runtime::settings::{Seconds, Validator};

/// The `typ` of an RFC 9068 access token, the only one accepted by default.
pub const DEFAULT_TOKEN_TYPE: &str = "at+jwt";

/// Shortest `min_refresh_interval_seconds` accepted: below a second the
/// interval no longer protects the provider from made-up `kid`s (at zero,
/// every one of them is a request to it).
const MIN_REFRESH_FLOOR_SECONDS: f64 = 1.0;

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
    /// The JWT `typ` header values accepted, comma-separated (`at+jwt`,
    /// `at+jwt,JWT`). RFC 9068 access tokens say `at+jwt`; without this
    /// check any token the issuer signs for our audience — an OpenID
    /// Connect ID token, say — would pass as an access token. Compared as
    /// RFC 7515 §4.1.9 says: case-insensitively, `application/at+jwt`
    /// equal to `at+jwt`. A token without `typ` is always refused. Keycloak
    /// and Dex sign with `JWT` (Dex's tokens *are* ID tokens): set `JWT`
    /// for them. A text setting rather than a list, because lists cannot
    /// be given as one environment variable.
    pub token_types: String,
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
            token_types: DEFAULT_TOKEN_TYPE.into(),
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
            if self.accepted_token_types().is_none() {
                v.fail(
                    "token_types",
                    format!("{:?}", self.token_types),
                    "must be a comma-separated list of JWT typ values, e.g. at+jwt or at+jwt,JWT",
                );
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
                MIN_REFRESH_FLOOR_SECONDS..=3600.0,
            );
            v.seconds(
                "refresh_interval_seconds",
                self.refresh_interval_seconds,
                1.0..=86_400.0,
            );
            // A background refresh is due after refresh_interval and may
            // start only min_refresh_interval after the last attempt: a
            // minimum above the interval would silently stretch it.
            if self.min_refresh_interval_seconds.as_f64() > self.refresh_interval_seconds.as_f64() {
                v.fail(
                    "min_refresh_interval_seconds",
                    self.min_refresh_interval_seconds.as_f64(),
                    "must be at most refresh_interval_seconds",
                );
            }
        });
    }

    /// The `typ` values of [`AuthSettings::token_types`], each as
    /// [`normalize_token_type`] compares it; `None` when the list is empty
    /// or an entry is not a media type name.
    pub fn accepted_token_types(&self) -> Option<Vec<String>> {
        let mut types = Vec::new();
        for entry in self.token_types.split(',').map(str::trim) {
            let plausible = !entry.is_empty()
                && entry
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+/".contains(c));
            if !plausible {
                return None;
            }
            types.push(normalize_token_type(entry));
        }
        Some(types)
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

/// A `typ` value as it is compared (RFC 7515 §4.1.9): media type names
/// are case-insensitive, and a value without `/` stands for
/// `application/<value>`, so `application/at+jwt`, `AT+JWT` and `at+jwt`
/// are one type.
pub fn normalize_token_type(typ: &str) -> String {
    let lower = typ.trim().to_ascii_lowercase();
    match lower.strip_prefix("application/") {
        Some(rest) if !rest.contains('/') => rest.to_owned(),
        _ => lower,
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
            token_types: " , ".into(),
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
                "auth.token_types",
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

    /// RFC 7515 §4.1.9: `typ` is a media type, compared case-insensitively,
    /// with `application/` implied when the value has no `/`.
    #[test]
    fn token_types_are_a_list_of_media_types_compared_as_rfc_7515_says() {
        let with = |types: &str| AuthSettings {
            token_types: types.into(),
            ..AuthSettings::for_jwks("http://127.0.0.1:1/jwks.json")
        };
        assert_eq!(
            AuthSettings::default().accepted_token_types(),
            Some(vec!["at+jwt".to_owned()])
        );
        assert_eq!(
            with(" application/AT+JWT , JWT").accepted_token_types(),
            Some(vec!["at+jwt".to_owned(), "jwt".to_owned()])
        );
        assert_eq!(normalize_token_type("Application/JWT"), "jwt");
        assert_eq!(normalize_token_type("application/x/y"), "application/x/y");
        for bad in ["", " ", "at+jwt,", "at jwt", "at+jwt;q=1", "\u{1}jwt"] {
            assert_eq!(keys(&with(bad)), ["auth.token_types"], "{bad:?}");
        }
    }

    /// Without a floor, `min_refresh_interval_seconds = 0` let every
    /// made-up `kid` reach the provider; above `refresh_interval_seconds`
    /// it stretched the background refresh unnoticed. Fails without the
    /// checks: both settings were accepted.
    #[test]
    fn the_minimum_refresh_interval_is_at_least_a_second_and_at_most_the_interval() {
        let with = |min: f64, every: f64| AuthSettings {
            min_refresh_interval_seconds: Seconds::new(min),
            refresh_interval_seconds: Seconds::new(every),
            ..AuthSettings::for_jwks("http://127.0.0.1:1/jwks.json")
        };
        assert!(keys(&with(1.0, 1.0)).is_empty());
        assert!(keys(&with(10.0, 300.0)).is_empty());
        assert_eq!(
            keys(&with(0.0, 300.0)),
            ["auth.min_refresh_interval_seconds"]
        );
        assert_eq!(
            keys(&with(0.5, 300.0)),
            ["auth.min_refresh_interval_seconds"]
        );
        let above = with(600.0, 300.0).problems();
        assert_eq!(above.len(), 1);
        assert_eq!(above[0].key, "auth.min_refresh_interval_seconds");
        assert!(
            above[0].allowed.contains("refresh_interval_seconds"),
            "names the other setting: {}",
            above[0].allowed
        );
    }

    /// What deploy/README.md tells Keycloak and Dex users to set: one
    /// environment variable, read as text (the loader has no lists).
    #[test]
    fn token_types_come_from_one_environment_variable() {
        #[derive(Debug, Default, Serialize, Deserialize)]
        #[serde(default)]
        struct Service {
            auth: AuthSettings,
        }
        impl shopeasy_runtime::settings::Settings for Service {
            fn validate(&self, v: &mut Validator) {
                self.auth.validate("auth", v);
            }
        }
        let load = |types: &str| {
            shopeasy_runtime::settings::Loader::new()
                .env([
                    ("AUTH__JWKS_URL", "http://127.0.0.1:1/jwks.json"),
                    ("AUTH__TOKEN_TYPES", types),
                ])
                .load::<Service>()
        };
        let s = load("JWT").expect("valid");
        assert_eq!(s.auth.accepted_token_types(), Some(vec!["jwt".to_owned()]));
        let s = load("at+jwt,JWT").expect("valid");
        assert_eq!(
            s.auth.accepted_token_types(),
            Some(vec!["at+jwt".to_owned(), "jwt".to_owned()])
        );
        assert!(load("").is_err(), "an empty list accepts nothing");
    }
}
