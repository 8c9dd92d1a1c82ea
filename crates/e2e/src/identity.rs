//! Signed-in customers (issue 15): the cluster's one signing key and the
//! tokens the suite's clients carry.
//!
//! The gateway and the order service verify `Authorization: Bearer <JWT>`
//! and take the customer from its `sub`. The suite signs its own tokens
//! with one fixed Ed25519 key ([`signing_key`]) and gives the services its
//! public key (`auth.public_key_pem`, [`auth_settings`]): no issuer process
//! and no JWKS fetch stand between a test and its faults (the JWKS-down
//! cells are the gateway's and the identity crate's own tests).
//!
//! Tokens are signed with [`DemoKey::sign`] rather than the demo issuer's
//! `issue`, because the suite's customers are not all demo names: a cell
//! that traces orders back to their idempotency keys signs a token whose
//! `sub` is the key itself (a UUID, longer than a demo name may be).

use std::{
    sync::OnceLock,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use shopeasy_identity::{AuthSettings, DemoIssuerConfig, DemoKey, demo::DemoClaims};

/// The seed of the suite's signing key: fixed, so a token printed by a
/// failing run can be replayed against a later cluster.
pub const SIGNING_SEED: [u8; 32] = [42; 32];

/// How long the suite's tokens live: longer than any run (the five-minute
/// chaos run included), so no test meets an expiry it did not ask for.
pub const TOKEN_TTL: Duration = Duration::from_secs(6 * 3600);

/// The suite's signing key (derived once).
///
/// # Panics
/// When the fixed seed yields no key (it always does).
pub fn signing_key() -> &'static DemoKey {
    static KEY: OnceLock<DemoKey> = OnceLock::new();
    KEY.get_or_init(|| {
        DemoKey::from_seed(SIGNING_SEED).unwrap_or_else(|e| panic!("the e2e signing key: {e}"))
    })
}

/// The `auth.*` settings the cluster gives the gateway and the order
/// service: trust [`signing_key`] alone, the default issuer and audience.
pub fn auth_settings() -> AuthSettings {
    AuthSettings {
        public_key_pem: signing_key().public_key_pem(),
        ..AuthSettings::default()
    }
}

/// A bearer token (the JWT alone, without `Bearer `) for `customer`,
/// valid for [`TOKEN_TTL`], with the issuer and audience the services
/// expect.
///
/// # Panics
/// When signing fails (an Ed25519 signature over a small JSON object does
/// not).
pub fn token(customer: &str) -> String {
    token_with(customer, |_| {})
}

/// A token for `customer` whose claims `edit` changed first (an expired
/// token, another audience…): for the cells that prove a bad token is
/// refused.
///
/// # Panics
/// As [`token`].
pub fn token_with(customer: &str, edit: impl FnOnce(&mut DemoClaims)) -> String {
    let mut claims = claims(customer);
    edit(&mut claims);
    signing_key()
        .sign(&claims)
        .unwrap_or_else(|e| panic!("signing a token for {customer}: {e}"))
}

/// The claims of a good token for `customer` (issued now, valid for
/// [`TOKEN_TTL`], the services' issuer and audience), for a test that
/// signs them with a key of its own.
pub fn claims(customer: &str) -> DemoClaims {
    let config = DemoIssuerConfig::default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DemoClaims {
        iss: config.issuer,
        sub: customer.to_owned(),
        aud: config.audience,
        exp: now + TOKEN_TTL.as_secs(),
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        client_id: "shopeasy-e2e".to_owned(),
        scope: config.scope,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_services_settings_verify_the_suites_tokens() {
        let verifier =
            shopeasy_identity::Verifier::from_settings(&auth_settings()).expect("a verifier");
        let mut headers = axum_headers(&token("alice"));
        let claims = verifier.authenticate(&headers).await.expect("verifies");
        assert_eq!(claims.customer_id(), "alice");
        let long = uuid::Uuid::new_v4().to_string();
        headers = axum_headers(&token(&long));
        let claims = verifier.authenticate(&headers).await.expect("verifies");
        assert_eq!(claims.customer_id(), long);
        let expired = token_with("alice", |c| c.exp = c.iat.saturating_sub(3600));
        assert!(
            verifier
                .authenticate(&axum_headers(&expired))
                .await
                .is_err()
        );
    }

    fn axum_headers(token: &str) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().expect("a header value"),
        );
        headers
    }
}
