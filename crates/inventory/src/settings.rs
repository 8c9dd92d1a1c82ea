//! The Inventory service's settings (SPEC §8): defaults in code, then an
//! optional file, then the environment (`DATABASE_URL`, `LISTEN_ADDR`, …).
//!
//! Inventory calls no other service and uses no Redis, so it has no
//! `resilience.*` groups and no `redis_url`: a setting it would not use is
//! not offered.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shopeasy_runtime::settings::{
    Seconds, Secret, SecretUrl, Settings, Validator,
    common::{LogSettings, PoolSettings},
};

/// Everything `shopeasy-inventory` can be configured with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct InventorySettings {
    /// The gRPC listener (`LISTEN_ADDR`).
    pub listen_addr: SocketAddr,
    /// The admin listener: metrics and health (`ADMIN_ADDR`).
    pub admin_addr: SocketAddr,
    /// `postgres://…` or `sqlite:path` (`DATABASE_URL`).
    pub database_url: SecretUrl,
    /// Bearer token that `SetStock` requires (`ADMIN_TOKEN`). Empty: no
    /// caller is an admin, and `SetStock` always answers UNAUTHENTICATED.
    pub admin_token: Secret,
    /// OTLP/gRPC endpoint for traces; empty exports nothing.
    pub otel_exporter_otlp_endpoint: String,
    /// The server's own cap on one call's work. A call runs for the shorter
    /// of this and the caller's `grpc-timeout`.
    pub request_timeout_seconds: Seconds,
    /// Logging.
    pub log: LogSettings,
    /// The database pool.
    pub database: PoolSettings,
}

impl Default for InventorySettings {
    fn default() -> Self {
        Self {
            listen_addr: ([0, 0, 0, 0], 50051).into(),
            admin_addr: ([0, 0, 0, 0], 9083).into(),
            database_url: SecretUrl::new("sqlite:.shopeasy/inventory.db"),
            admin_token: Secret::default(),
            otel_exporter_otlp_endpoint: String::new(),
            request_timeout_seconds: Seconds::new(5.0),
            log: LogSettings::default(),
            database: PoolSettings::default(),
        }
    }
}

impl Settings for InventorySettings {
    fn validate(&self, v: &mut Validator) {
        v.url(
            "database_url",
            &self.database_url.masked(),
            self.database_url.expose(),
            &["postgres", "postgresql", "sqlite"],
            false,
        );
        v.url(
            "otel_exporter_otlp_endpoint",
            &self.otel_exporter_otlp_endpoint,
            &self.otel_exporter_otlp_endpoint,
            &["http", "https"],
            true,
        );
        v.seconds(
            "request_timeout_seconds",
            self.request_timeout_seconds,
            0.01..=300.0,
        );
        if self.listen_addr.port() != 0 && self.listen_addr.port() == self.admin_addr.port() {
            v.fail(
                "admin_addr",
                self.admin_addr,
                "must differ from listen_addr",
            );
        }
        self.log.validate("log", v);
        self.database.validate("database", v);
    }
}

#[cfg(test)]
mod tests {
    use shopeasy_runtime::settings::{Loader, SettingsError};

    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let s: InventorySettings = Loader::new().load().unwrap();
        assert_eq!(s, InventorySettings::default());
        assert_eq!(s.listen_addr.port(), 50051);
        assert_eq!(s.admin_addr.port(), 9083);
        assert_eq!(s.database_url.expose(), "sqlite:.shopeasy/inventory.db");
    }

    #[test]
    fn bad_values_are_named() {
        let err = Loader::new()
            .env([
                ("REQUEST_TIMEOUT_SECONDS", "0"),
                ("DATABASE_URL", "mysql://x"),
                ("DATABASE__ACQUIRE_TIMEOUT_SECONDS", "0"),
            ])
            .load::<InventorySettings>()
            .unwrap_err();
        let SettingsError::Invalid(errors) = err else {
            panic!("expected invalid settings, got {err:?}");
        };
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "database_url",
                "request_timeout_seconds",
                "database.acquire_timeout_seconds"
            ]
        );
    }

    #[test]
    fn settings_it_does_not_use_are_rejected() {
        let err = Loader::new()
            .env([("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "3")])
            .load::<InventorySettings>();
        // `resilience` is not one of inventory's sections, so the variable
        // is not its business; a key under one of its sections is checked.
        assert!(err.is_ok());
        let err = Loader::new()
            .env([("DATABASE__MAX_CONNECTION", "3")])
            .load::<InventorySettings>();
        assert!(matches!(err, Err(SettingsError::Invalid(_))));
    }
}
