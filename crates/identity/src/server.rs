//! `shopeasy-identity`: the [`DemoIssuer`] as a process of its own, for
//! compose and the Kubernetes demo overlay (the embedded launcher serves the
//! same router itself).
//!
//! It is a [`Service`] like the four others, so it gets what every ShopEasy
//! process has without writing it again: the admin listener
//! (`/health/live`, `/health/ready`, `/metrics`), logging and trace export,
//! admission control, `--print-defaults`, `--check-config` and settings from
//! the environment (`DATA_DIR`, `ISSUER`, …). Its ports are
//! [`topology::IDENTITY`]'s.
//!
//! **A demo issuer, not an identity provider**: it signs a token for any
//! plausible customer name, with no password. It says so in its start-up
//! banner, in every answer (`ShopEasy-Demo-Issuer: true`) and in its
//! `/admin/resilience` report; a real deployment points `auth.jwks_url` at
//! its own OIDC provider (deploy/README.md) and does not run this.

use std::{path::PathBuf, time::Duration};

use axum::Router;
use serde::{Deserialize, Serialize};
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Service},
    settings::{ProcessSettings, Settings, Validator},
    topology,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{DemoIssuer, DemoIssuerConfig};

/// The binary's name, in logs and traces.
pub const NAME: &str = "shopeasy-identity";

/// Longest token lifetime the demo issuer may be configured with: a day, so
/// a demo token that leaks does not stay valid for long.
pub const MAX_TOKEN_TTL_SECONDS: u64 = 86_400;

/// Everything `shopeasy-identity` can be configured with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct IdentitySettings {
    /// The public listener (`LISTEN_ADDR`, default `0.0.0.0:8085`), the
    /// admin listener (`ADMIN_ADDR`, `0.0.0.0:9085`), logging, trace export
    /// and admission control.
    #[serde(flatten)]
    pub process: ProcessSettings,
    /// The folder of the signing key (`DATA_DIR`): the key file is created
    /// there (0600, folder 0700) on the first start and reused afterwards,
    /// so tokens keep verifying across restarts. Deployments put it on a
    /// volume.
    pub data_dir: PathBuf,
    /// The `iss` of its tokens (`ISSUER`): what the services' `auth.issuer`
    /// expects.
    pub issuer: String,
    /// The `aud` of its tokens (`AUDIENCE`): what the services'
    /// `auth.audience` expects.
    pub audience: String,
    /// Lifetime of a token in seconds (`TOKEN_TTL_SECONDS`), at most
    /// [`MAX_TOKEN_TTL_SECONDS`].
    pub token_ttl_seconds: u64,
}

impl Default for IdentitySettings {
    /// [`topology::IDENTITY`]'s ports, a key folder next to where the binary
    /// runs (as the services' default SQLite files are), and the token
    /// contents of [`DemoIssuerConfig::default`].
    fn default() -> Self {
        let tokens = DemoIssuerConfig::default();
        Self {
            process: ProcessSettings::new(&topology::IDENTITY),
            data_dir: PathBuf::from(".shopeasy/identity"),
            issuer: tokens.issuer,
            audience: tokens.audience,
            token_ttl_seconds: tokens.token_ttl.as_secs(),
        }
    }
}

impl IdentitySettings {
    /// What the issuer puts in its tokens (the scopes are the defaults').
    pub fn issuer_config(&self) -> DemoIssuerConfig {
        DemoIssuerConfig {
            issuer: self.issuer.clone(),
            audience: self.audience.clone(),
            token_ttl: Duration::from_secs(self.token_ttl_seconds),
            ..DemoIssuerConfig::default()
        }
    }
}

/// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for IdentitySettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for IdentitySettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        if self.data_dir.as_os_str().is_empty() {
            v.fail(
                "data_dir",
                "\"\"",
                "required: the folder of the signing key",
            );
        }
        if self.issuer.trim().is_empty() {
            v.fail("issuer", "\"\"", "required: the iss of the tokens");
        }
        if self.audience.trim().is_empty() {
            v.fail("audience", "\"\"", "required: the aud of the tokens");
        }
        v.number(
            "token_ttl_seconds",
            self.token_ttl_seconds,
            1..=MAX_TOKEN_TTL_SECONDS,
        );
    }
}

/// The demo issuer process: its router, built around the key of
/// [`IdentitySettings::data_dir`].
#[derive(Debug)]
pub struct App {
    issuer: DemoIssuer,
    router: Router,
}

impl App {
    /// The issuer it serves (tests sign with it directly).
    pub fn issuer(&self) -> &DemoIssuer {
        &self.issuer
    }
}

impl Service for App {
    type Settings = IdentitySettings;
    const NAME: &'static str = NAME;
    /// Token requests are tiny: a short drain is plenty.
    const DRAIN: Duration = Duration::from_secs(5);

    /// Loads the signing key (creating it on the first start) and reports
    /// `demo: true` with its `kid` on `/admin/resilience`.
    ///
    /// # Errors
    /// When the key folder cannot be created or read, or the key file holds
    /// no Ed25519 key.
    async fn build(settings: IdentitySettings, admin: &Admin) -> anyhow::Result<Self> {
        let dir = settings.data_dir.clone();
        let config = settings.issuer_config();
        let issuer = tokio::task::spawn_blocking(move || DemoIssuer::open(&dir, config)).await??;
        tracing::warn!(
            kid = issuer.key().kid(),
            issuer = %issuer.config().issuer,
            audience = %issuer.config().audience,
            data_dir = %settings.data_dir.display(),
            "DEMO ISSUER, NOT FOR PRODUCTION: signs a token for any customer name without a \
             password; point auth.jwks_url at a real OIDC provider instead (deploy/README.md)"
        );
        let report = serde_json::json!({
            "demo": true,
            "kid": issuer.key().kid(),
            "issuer": issuer.config().issuer,
            "audience": issuer.config().audience,
            "token_ttl_seconds": settings.token_ttl_seconds,
        });
        admin.report("demo_issuer", move || report.clone());
        let router = issuer.router();
        Ok(Self { issuer, router })
    }

    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        lifecycle::serve_admitted(public, self.router, shutdown, Self::DRAIN).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use shopeasy_runtime::settings::{Loader, SettingsError};

    use super::*;

    #[test]
    fn defaults_are_valid_and_use_the_topology_ports() {
        let s: IdentitySettings = Loader::new().load().expect("defaults");
        assert_eq!(s, IdentitySettings::default());
        assert_eq!(s.process.listen_addr.port(), topology::IDENTITY.public_port);
        assert_eq!(s.process.admin_addr.port(), topology::IDENTITY.admin_port);
        assert_eq!(s.issuer_config(), DemoIssuerConfig::default());
    }

    #[test]
    fn bad_values_are_named() {
        let err = Loader::new()
            .env([
                ("DATA_DIR", ""),
                ("ISSUER", " "),
                ("AUDIENCE", ""),
                ("TOKEN_TTL_SECONDS", "0"),
            ])
            .load::<IdentitySettings>()
            .expect_err("invalid");
        let SettingsError::Invalid(errors) = err else {
            panic!("expected invalid settings, got {err:?}");
        };
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["data_dir", "issuer", "audience", "token_ttl_seconds"]
        );
    }
}
