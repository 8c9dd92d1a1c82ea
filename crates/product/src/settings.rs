//! The Product service's settings (SPEC §8). [`ProductSettings::default`] is
//! the single source of truth for every default.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shopeasy_runtime::settings::{
    Seconds, Secret, SecretUrl, Settings, Validator,
    common::{LogSettings, PoolSettings},
};

/// Everything `shopeasy-product` can be told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProductSettings {
    /// The public HTTP listener.
    pub listen_addr: SocketAddr,
    /// The admin listener (`/metrics`, `/health/*`, `/admin/resilience`).
    pub admin_addr: SocketAddr,
    /// Postgres or SQLite URL of the catalogue.
    pub database_url: SecretUrl,
    /// Redis for the read cache; empty = an in-process cache.
    pub redis_url: SecretUrl,
    /// Bearer token of the admin routes (create, update, delete); empty =
    /// those routes always answer 401.
    pub admin_token: Secret,
    /// OTLP/gRPC endpoint for traces; empty = none exported.
    pub otel_exporter_otlp_endpoint: String,
    /// Logs.
    pub log: LogSettings,
    /// The database pool.
    pub database: PoolSettings,
    /// The read cache.
    pub cache: CacheSettings,
}

impl Default for ProductSettings {
    fn default() -> Self {
        Self {
            listen_addr: ([0, 0, 0, 0], 8081).into(),
            admin_addr: ([0, 0, 0, 0], 9081).into(),
            database_url: SecretUrl::new("sqlite:.shopeasy/product.db"),
            redis_url: SecretUrl::default(),
            admin_token: Secret::default(),
            otel_exporter_otlp_endpoint: String::new(),
            log: LogSettings::default(),
            database: PoolSettings::default(),
            cache: CacheSettings::default(),
        }
    }
}

/// The cache-aside read cache of single products and list pages.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CacheSettings {
    /// `false` reads every request from the database (benchmarks, debugging).
    pub enabled: bool,
    /// How long an entry lives. Writes invalidate at once; this bounds how
    /// long another replica's write can go unseen when Redis missed the
    /// invalidation.
    pub ttl_seconds: Seconds,
    /// The bound of each single Redis call; past it the call counts as an
    /// error and the request reads the database.
    pub redis_timeout_seconds: Seconds,
    /// After a Redis error, Redis is skipped for this long (then one call
    /// probes it again), so a dead or hung Redis costs one timeout, not one
    /// per request.
    pub redis_retry_seconds: Seconds,
    /// Prefix of every Redis key (several deployments can share a Redis).
    pub key_prefix: String,
    /// Most entries of the in-process cache.
    pub local_capacity: u32,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl_seconds: Seconds::new(60.0),
            redis_timeout_seconds: Seconds::new(0.05),
            redis_retry_seconds: Seconds::new(1.0),
            key_prefix: "shopeasy:product:".into(),
            local_capacity: 10_000,
        }
    }
}

impl Settings for ProductSettings {
    fn validate(&self, v: &mut Validator) {
        v.url(
            "database_url",
            &self.database_url.masked(),
            self.database_url.expose(),
            &["postgres", "postgresql", "sqlite"],
            false,
        );
        v.url(
            "redis_url",
            &self.redis_url.masked(),
            self.redis_url.expose(),
            &["redis", "rediss"],
            true,
        );
        self.log.validate("log", v);
        self.database.validate("database", v);
        v.seconds("cache.ttl_seconds", self.cache.ttl_seconds, 0.1..=86_400.0);
        v.seconds(
            "cache.redis_timeout_seconds",
            self.cache.redis_timeout_seconds,
            0.001..=5.0,
        );
        v.seconds(
            "cache.redis_retry_seconds",
            self.cache.redis_retry_seconds,
            0.01..=300.0,
        );
        v.number(
            "cache.local_capacity",
            self.cache.local_capacity,
            1..=10_000_000,
        );
        if self.cache.key_prefix.len() > 100 {
            v.fail(
                "cache.key_prefix",
                &self.cache.key_prefix,
                "must be at most 100 bytes",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use shopeasy_runtime::settings::Loader;

    use super::*;

    #[test]
    fn defaults_are_valid() {
        let s: ProductSettings = Loader::new().load().unwrap();
        assert_eq!(s, ProductSettings::default());
        assert_eq!(s.listen_addr.port(), 8081);
        assert_eq!(s.admin_addr.port(), 9081);
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = Loader::new()
            .env([
                ("CACHE__REDIS_TIMEOUT_SECONDS", "0"),
                ("REDIS_URL", "http://x"),
            ])
            .load::<ProductSettings>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("cache.redis_timeout_seconds"), "{err}");
        assert!(err.contains("redis_url"), "{err}");
    }
}
