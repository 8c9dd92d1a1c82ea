//! The Product service's settings (SPEC §8). [`ProductSettings::default`] is
//! the single source of truth for every default.

use serde::{Deserialize, Serialize};
use shopeasy_runtime::{
    redis_guard::RedisGuardSettings,
    settings::{
        DatabaseSettings, ProcessSettings, RedisSettings, Seconds, Secret, Settings, Validator,
    },
    topology,
};

/// Everything `shopeasy-product` can be told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProductSettings {
    /// The public HTTP listener, the admin listener (`/metrics`, `/health/*`,
    /// `/admin/resilience`), logs and trace export.
    #[serde(flatten)]
    pub process: ProcessSettings,
    /// The catalogue's Postgres or SQLite URL and its pool.
    #[serde(flatten)]
    pub storage: DatabaseSettings,
    /// Redis for the read cache; empty = an in-process cache.
    #[serde(flatten)]
    pub redis: RedisSettings,
    /// Bearer token of the admin routes (create, update, delete); empty =
    /// those routes always answer 401.
    pub admin_token: Secret,
    /// The read cache.
    pub cache: CacheSettings,
    /// Seed the demo catalogue on an empty database (`DEMO_SEED`): compose,
    /// the Kubernetes demo and the launcher turn it on (see `seed`).
    pub demo_seed: bool,
}

impl Default for ProductSettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&topology::PRODUCT),
            storage: DatabaseSettings::sqlite("product"),
            redis: RedisSettings::default(),
            admin_token: Secret::default(),
            cache: CacheSettings::default(),
            demo_seed: false,
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
    /// `redis_timeout_seconds` (the bound of each Redis call; past it the
    /// request reads the database) and `redis_retry_seconds` (how long Redis
    /// is skipped after an error): the runtime's Redis guard, as in order's
    /// stock cache.
    #[serde(flatten)]
    pub redis: RedisGuardSettings,
    /// Prefix of every Redis key (several deployments can share a Redis).
    pub key_prefix: String,
    /// Most entries of the in-process cache.
    pub local_capacity: u32,
    /// Most bytes of values in the in-process cache: clients choose page
    /// keys, and a page of 100 products can be large, so entries alone do
    /// not bound its memory.
    pub local_max_bytes: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl_seconds: Seconds::new(60.0),
            redis: RedisGuardSettings::default(),
            key_prefix: "shopeasy:product:".into(),
            local_capacity: 10_000,
            local_max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for ProductSettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for ProductSettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        self.storage.validate(v);
        self.redis.validate(v);
        v.seconds("cache.ttl_seconds", self.cache.ttl_seconds, 0.1..=86_400.0);
        self.cache.redis.validate("cache", v);
        v.number(
            "cache.local_capacity",
            self.cache.local_capacity,
            1..=10_000_000,
        );
        v.number(
            "cache.local_max_bytes",
            self.cache.local_max_bytes,
            1024..=1_073_741_824,
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
        assert_eq!(s.process.listen_addr.port(), 8081);
        assert_eq!(s.process.admin_addr.port(), 9081);
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
