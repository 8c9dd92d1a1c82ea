//! The Inventory service's settings (SPEC §8): defaults in code, then an
//! optional file, then the environment (`DATABASE_URL`, `LISTEN_ADDR`, …).
//!
//! Inventory calls no other service and uses no Redis, so it has no
//! `resilience.*` groups and no `redis_url`: a setting it would not use is
//! not offered.

use serde::{Deserialize, Serialize};
use shopeasy_runtime::{
    settings::{DatabaseSettings, ProcessSettings, Seconds, Secret, Settings, Validator},
    topology,
};

/// Everything `shopeasy-inventory` can be configured with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct InventorySettings {
    /// The gRPC listener (`LISTEN_ADDR`), the admin listener (`ADMIN_ADDR`),
    /// logging and trace export.
    #[serde(flatten)]
    pub process: ProcessSettings,
    /// `DATABASE_URL` and the `database.*` pool.
    #[serde(flatten)]
    pub storage: DatabaseSettings,
    /// Bearer token that `SetStock` requires (`ADMIN_TOKEN`). Empty: no
    /// caller is an admin, and `SetStock` always answers UNAUTHENTICATED.
    pub admin_token: Secret,
    /// Bearer token that `ReserveStock` and `ReleaseStock` require
    /// (`SERVICE_TOKEN`): the order service's credential
    /// (`inventory.service_token` there). Empty: nobody may reserve or
    /// release, so a forgotten setting is a closed door, not an open one.
    /// In production a mesh's mTLS can carry the caller's identity instead
    /// (deploy/README.md); this token still keeps pods outside the mesh out.
    pub service_token: Secret,
    /// The server's own cap on one call's work. A call runs for the shorter
    /// of this and the caller's `grpc-timeout`.
    pub request_timeout_seconds: Seconds,
    /// Seed the demo stock on an empty database (`DEMO_SEED`): compose, the
    /// Kubernetes demo and the launcher turn it on (see `seed`).
    pub demo_seed: bool,
}

impl Default for InventorySettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&topology::INVENTORY),
            storage: DatabaseSettings::sqlite("inventory"),
            admin_token: Secret::default(),
            service_token: Secret::default(),
            request_timeout_seconds: Seconds::new(5.0),
            demo_seed: false,
        }
    }
}

/// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for InventorySettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for InventorySettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        self.storage.validate(v);
        v.seconds(
            "request_timeout_seconds",
            self.request_timeout_seconds,
            0.01..=300.0,
        );
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
        assert_eq!(s.process.listen_addr.port(), 50051);
        assert_eq!(s.process.admin_addr.port(), 9083);
        assert_eq!(
            s.storage.database_url.expose(),
            "sqlite:.shopeasy/inventory.db"
        );
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
                "database.acquire_timeout_seconds",
                "request_timeout_seconds",
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
