//! The order service's settings (SPEC §8). [`Default`] is the single source
//! of truth for every default; [`Settings::validate`] checks every key.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shopeasy_runtime::settings::{
    Seconds, Secret, SecretUrl, Settings, Validator,
    common::{LogSettings, PoolSettings, RetryBudgetSettings},
};

/// Everything the order service can be told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OrderSettings {
    /// Public HTTP listener (`/api/orders…`).
    pub listen_addr: SocketAddr,
    /// Admin listener (`/metrics`, `/health/*`, `/admin/resilience`).
    pub admin_addr: SocketAddr,
    /// The order database: `postgres://…` or `sqlite:FILE`.
    pub database_url: SecretUrl,
    /// Redis for the stock cache's second layer; empty = in-process only.
    pub redis_url: SecretUrl,
    /// Bearer token of the admin surface.
    pub admin_token: Secret,
    /// OTLP/gRPC endpoint for traces; empty = no export.
    pub otel_exporter_otlp_endpoint: String,
    /// Logging.
    pub log: LogSettings,
    /// The database pool.
    pub database: PoolSettings,
    /// Where Inventory listens (gRPC).
    pub inventory: UpstreamSettings,
    /// Where Product listens (HTTP).
    pub product: UpstreamSettings,
    /// Timeouts, retries, breakers, bulkheads and the stock cache.
    pub resilience: ResilienceSettings,
    /// The transactional outbox's relay worker.
    pub outbox: OutboxSettings,
    /// Idempotency keys of `POST /api/orders`.
    pub idempotency: IdempotencySettings,
}

impl Default for OrderSettings {
    fn default() -> Self {
        Self {
            listen_addr: SocketAddr::from(([0, 0, 0, 0], 8082)),
            admin_addr: SocketAddr::from(([0, 0, 0, 0], 9082)),
            database_url: SecretUrl::new("sqlite:.shopeasy/order.db"),
            redis_url: SecretUrl::default(),
            admin_token: Secret::default(),
            otel_exporter_otlp_endpoint: String::new(),
            log: LogSettings::default(),
            database: PoolSettings::default(),
            inventory: UpstreamSettings {
                url: "http://127.0.0.1:50051".into(),
            },
            product: UpstreamSettings {
                url: "http://127.0.0.1:8081".into(),
            },
            resilience: ResilienceSettings::default(),
            outbox: OutboxSettings::default(),
            idempotency: IdempotencySettings::default(),
        }
    }
}

/// One downstream service's address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default)]
pub struct UpstreamSettings {
    /// Base URL (`http://host:port`).
    pub url: String,
}

/// `resilience.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ResilienceSettings {
    /// The Inventory edge (gRPC).
    pub inventory: EdgeSettings,
    /// The Product edge (HTTP).
    pub product: EdgeSettings,
    /// The retry budget, one per downstream target.
    pub retry_budget: RetryBudgetSettings,
    /// The stale-serving stock cache.
    pub stock_cache: StockCacheSettings,
}

/// The resilience of one outbound edge (SPEC §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EdgeSettings {
    /// Deadline of one attempt (never beyond the caller's remaining time).
    pub timeout_seconds: Seconds,
    /// Retries after a connection failure (so `max_retries + 1` attempts).
    pub max_retries: u32,
    /// How long the breaker stays open before letting one trial through.
    pub break_duration_seconds: Seconds,
    /// The breaker opens when at least this share of recent calls failed…
    pub failure_ratio: f64,
    /// …among at least this many calls…
    pub minimum_calls: u32,
    /// …seen in this sliding window.
    pub sampling_window_seconds: Seconds,
    /// Most calls in flight at once (the bulkhead).
    pub max_concurrency: u32,
    /// Connecting gives up after this long.
    pub connect_timeout_seconds: Seconds,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        Self {
            timeout_seconds: Seconds::new(3.0),
            max_retries: 2,
            break_duration_seconds: Seconds::new(15.0),
            failure_ratio: 0.5,
            minimum_calls: 5,
            sampling_window_seconds: Seconds::new(30.0),
            max_concurrency: 64,
            connect_timeout_seconds: Seconds::new(3.0),
        }
    }
}

impl EdgeSettings {
    fn validate(&self, prefix: &str, v: &mut Validator) {
        v.seconds(
            &format!("{prefix}.timeout_seconds"),
            self.timeout_seconds,
            0.001..=60.0,
        );
        v.number(&format!("{prefix}.max_retries"), self.max_retries, 0..=10);
        v.seconds(
            &format!("{prefix}.break_duration_seconds"),
            self.break_duration_seconds,
            0.01..=3600.0,
        );
        v.ratio(
            &format!("{prefix}.failure_ratio"),
            self.failure_ratio,
            0.01..=1.0,
        );
        v.number(
            &format!("{prefix}.minimum_calls"),
            self.minimum_calls,
            1..=10_000,
        );
        v.seconds(
            &format!("{prefix}.sampling_window_seconds"),
            self.sampling_window_seconds,
            0.1..=3600.0,
        );
        v.number(
            &format!("{prefix}.max_concurrency"),
            self.max_concurrency,
            1..=10_000,
        );
        v.seconds(
            &format!("{prefix}.connect_timeout_seconds"),
            self.connect_timeout_seconds,
            0.01..=60.0,
        );
    }
}

/// `resilience.stock_cache.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StockCacheSettings {
    /// How long an entry answers without asking Inventory.
    pub ttl_seconds: Seconds,
    /// How long an expired entry may still answer while Inventory is
    /// unavailable.
    pub max_stale_seconds: Seconds,
    /// Bound of every Redis call (Redis trouble degrades to in-process).
    pub redis_timeout_seconds: Seconds,
    /// Deadline of a shared (single-flight) fetch from Inventory.
    pub fetch_timeout_seconds: Seconds,
    /// Prefix of the Redis keys.
    pub key_prefix: String,
}

impl Default for StockCacheSettings {
    fn default() -> Self {
        Self {
            ttl_seconds: Seconds::new(2.0),
            max_stale_seconds: Seconds::new(3600.0),
            redis_timeout_seconds: Seconds::new(0.05),
            fetch_timeout_seconds: Seconds::new(3.0),
            key_prefix: "shopeasy:order:".into(),
        }
    }
}

/// `outbox.*`: the relay that reserves stock for `pending` orders.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OutboxSettings {
    /// How often the worker looks for due rows.
    pub poll_interval_seconds: Seconds,
    /// Most rows one worker claims at a time.
    pub batch_size: u32,
    /// How long a claimed row is reserved for its claimer (a crashed
    /// claimer's rows are taken over after this). Keep it above the longest
    /// Inventory call (`timeout_seconds × (max_retries + 1)` plus backoff),
    /// or a worker may repeat a call still running (harmless: reservations
    /// are idempotent, but wasted).
    pub lease_seconds: Seconds,
    /// First delay before a failed row is tried again (doubles, jittered).
    pub initial_backoff_seconds: Seconds,
    /// Longest delay between two tries of one row.
    pub max_backoff_seconds: Seconds,
}

impl Default for OutboxSettings {
    fn default() -> Self {
        Self {
            poll_interval_seconds: Seconds::new(0.5),
            batch_size: 32,
            lease_seconds: Seconds::new(30.0),
            initial_backoff_seconds: Seconds::new(0.5),
            max_backoff_seconds: Seconds::new(30.0),
        }
    }
}

/// `idempotency.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct IdempotencySettings {
    /// How long a key (and its stored response) is kept; at least 24 h.
    pub retention_seconds: Seconds,
    /// How long a request holds its key; a crashed holder's key is resumed
    /// by a retry after this.
    pub lock_seconds: Seconds,
    /// How often expired keys are deleted.
    pub cleanup_interval_seconds: Seconds,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        Self {
            retention_seconds: Seconds::new(86_400.0),
            lock_seconds: Seconds::new(30.0),
            cleanup_interval_seconds: Seconds::new(3600.0),
        }
    }
}

impl Settings for OrderSettings {
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
        v.url(
            "otel_exporter_otlp_endpoint",
            &self.otel_exporter_otlp_endpoint,
            &self.otel_exporter_otlp_endpoint,
            &["http", "https"],
            true,
        );
        v.url(
            "inventory.url",
            &self.inventory.url,
            &self.inventory.url,
            &["http"],
            false,
        );
        v.url(
            "product.url",
            &self.product.url,
            &self.product.url,
            &["http", "https"],
            false,
        );
        self.log.validate("log", v);
        self.database.validate("database", v);
        self.resilience
            .inventory
            .validate("resilience.inventory", v);
        self.resilience.product.validate("resilience.product", v);
        self.resilience
            .retry_budget
            .validate("resilience.retry_budget", v);
        let c = &self.resilience.stock_cache;
        v.seconds(
            "resilience.stock_cache.ttl_seconds",
            c.ttl_seconds,
            0.001..=3600.0,
        );
        v.seconds(
            "resilience.stock_cache.max_stale_seconds",
            c.max_stale_seconds,
            0.0..=604_800.0,
        );
        v.seconds(
            "resilience.stock_cache.redis_timeout_seconds",
            c.redis_timeout_seconds,
            0.001..=5.0,
        );
        v.seconds(
            "resilience.stock_cache.fetch_timeout_seconds",
            c.fetch_timeout_seconds,
            0.001..=60.0,
        );
        let o = &self.outbox;
        v.seconds(
            "outbox.poll_interval_seconds",
            o.poll_interval_seconds,
            0.01..=60.0,
        );
        v.number("outbox.batch_size", o.batch_size, 1..=1000);
        v.seconds("outbox.lease_seconds", o.lease_seconds, 0.1..=3600.0);
        v.seconds(
            "outbox.initial_backoff_seconds",
            o.initial_backoff_seconds,
            0.001..=60.0,
        );
        v.seconds(
            "outbox.max_backoff_seconds",
            o.max_backoff_seconds,
            0.01..=3600.0,
        );
        let i = &self.idempotency;
        v.seconds(
            "idempotency.retention_seconds",
            i.retention_seconds,
            86_400.0..=31_536_000.0,
        );
        v.seconds("idempotency.lock_seconds", i.lock_seconds, 0.1..=3600.0);
        v.seconds(
            "idempotency.cleanup_interval_seconds",
            i.cleanup_interval_seconds,
            1.0..=86_400.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shopeasy_runtime::settings::{Loader, SettingsError};

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let s: OrderSettings = Loader::new().load().unwrap();
        assert_eq!(s, OrderSettings::default());
        assert_eq!(s.listen_addr.port(), 8082);
        assert_eq!(s.admin_addr.port(), 9082);
        assert_eq!(s.inventory.url, "http://127.0.0.1:50051");
        assert_eq!(s.product.url, "http://127.0.0.1:8081");
        let inv = &s.resilience.inventory;
        assert_eq!(inv.timeout_seconds, Seconds::new(3.0));
        assert_eq!(inv.max_retries, 2);
        assert_eq!(inv.break_duration_seconds, Seconds::new(15.0));
        assert_eq!(s.resilience.retry_budget.ratio, 0.2);
    }

    #[test]
    fn environment_keys_follow_spec_names() {
        let s: OrderSettings = Loader::new()
            .env([
                ("INVENTORY__URL", "http://inventory:50051"),
                ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.inventory.url, "http://inventory:50051");
        assert_eq!(s.resilience.inventory.timeout_seconds, Seconds::new(0.3));
    }

    #[test]
    fn bad_values_are_named() {
        let err = Loader::new()
            .env([
                ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0"),
                ("IDEMPOTENCY__RETENTION_SECONDS", "60"),
            ])
            .load::<OrderSettings>()
            .unwrap_err();
        let SettingsError::Invalid(errors) = err else {
            panic!("{err}")
        };
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "resilience.inventory.timeout_seconds",
                "idempotency.retention_seconds"
            ]
        );
    }
}
