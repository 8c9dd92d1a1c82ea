//! Who is calling: customers' JWT access tokens, verified.
//!
//! Until this crate, `customer_id` was whatever a request body said (issue
//! 15, OWASP API2). Now the gateway and the order service verify an
//! `Authorization: Bearer <JWT>` (RFC 9068) and take the customer from its
//! `sub` (SPEC §3, §11). Both call the same [`Verifier`], so they agree on
//! every rule, and the order service does not have to trust the gateway.
//!
//! # The pieces
//!
//! - [`settings`]: [`AuthSettings`], the `auth.*` keys a service embeds.
//! - [`verifier`]: [`Verifier`] checks the algorithm and the `typ` (an
//!   access token, RFC 9068, unless `auth.token_types` says otherwise),
//!   finds the key, verifies the signature, then `exp`/`nbf` (with a
//!   leeway), `iss`, `aud` and `sub`, and returns typed [`Claims`];
//!   [`Authenticated`] is the same as an axum extractor. A token that
//!   passed every check is kept until it expires or the keys change
//!   (`verified`), so a customer's next request costs a look-up, not a
//!   signature check.
//! - [`jwks`]: [`JwksCache`], the issuer's keys fetched as a resilient
//!   call — deadline, budgeted jittered retries, stale keys while the
//!   provider is down, single-flight refresh on an unknown `kid`, a minimum
//!   interval between refreshes.
//! - [`keys`]: which keys we accept (asymmetric only, each with its own
//!   algorithms) from a JWKS or a PEM.
//! - [`error`]: [`AuthError`] and its one mapping onto HTTP — 401 with
//!   `WWW-Authenticate: Bearer …` (RFC 6750) and a problem+json body.
//! - [`demo`]: [`DemoIssuer`], the clearly-labelled demo issuer of the
//!   one-command system: a persistent Ed25519 key, its JWKS and discovery
//!   document, and `POST /api/session` for demo customers.
//! - [`server`]: the demo issuer as its own process (`shopeasy-identity`),
//!   a runtime `Service` like the four others.
//!
//! # In one line
//!
//! ```no_run
//! # async fn handler(verifier: shopeasy_identity::Verifier, headers: axum::http::HeaderMap)
//! # -> axum::response::Response {
//! # use axum::response::IntoResponse;
//! let claims = match verifier.authenticate(&headers).await {
//!     Ok(claims) => claims,
//!     Err(e) => return e.into_response(), // 401 + WWW-Authenticate
//! };
//! format!("hello {}", claims.customer_id()).into_response()
//! # }
//! ```

pub mod demo;
pub mod error;
pub mod jwks;
pub mod keys;
pub mod server;
pub mod settings;
mod verified;
pub mod verifier;

pub use demo::{DemoIssuer, DemoIssuerConfig, DemoKey, IssuedToken};
pub use error::{AuthError, ConfigError};
pub use jwks::{FetchError, JwksCache};
pub use settings::AuthSettings;
pub use verifier::{Authenticated, Claims, Verifier};
