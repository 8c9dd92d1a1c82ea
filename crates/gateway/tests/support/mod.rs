//! Shared by the gateway's tests: the one signing key every test trusts,
//! the `auth` settings that trust it, and tokens signed with it locally (no
//! issuer process needed).

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use shopeasy_identity::{AuthSettings, DemoIssuer, DemoIssuerConfig, DemoKey};

/// The test signing key (a fixed seed, so every run signs alike).
pub fn key() -> DemoKey {
    DemoKey::from_seed([42; 32]).unwrap()
}

/// An issuer with [`key`] and the default issuer, audience and lifetime,
/// which the default `auth` settings expect.
pub fn issuer() -> DemoIssuer {
    DemoIssuer::new(key(), DemoIssuerConfig::default())
}

/// `auth` settings trusting [`key`] through a configured public key.
pub fn auth() -> AuthSettings {
    AuthSettings {
        public_key_pem: key().public_key_pem(),
        ..AuthSettings::default()
    }
}

/// A valid access token for `customer`.
pub fn token(customer: &str) -> String {
    issuer().issue(customer).unwrap().access_token
}

/// `Authorization` for `customer`: `Bearer <token>`.
pub fn bearer(customer: &str) -> String {
    format!("Bearer {}", token(customer))
}
