//! The order service's settings (SPEC §8). [`Default`] is the single source
//! of truth for every default; [`Settings::validate`] checks every key.

use serde::{Deserialize, Serialize};
use shopeasy_identity::AuthSettings;
use shopeasy_resilience::{
    backoff::Backoff,
    breaker::BreakerConfig,
    budget::BudgetConfig,
    edge::EdgeConfig,
    plan::{HopPolicy, Plan},
    throttle::ThrottleConfig,
};
use shopeasy_runtime::redis_guard::RedisGuardSettings;
use shopeasy_runtime::settings::{
    DatabaseSettings, ProcessSettings, RedisSettings, Seconds, Secret, Settings, Validator,
    common::RetryBudgetSettings,
};
use shopeasy_runtime::topology;

/// Everything the order service can be told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OrderSettings {
    /// Public HTTP listener (`/api/orders…`), admin listener (`/metrics`,
    /// `/health/*`, `/admin/resilience`), logging and trace export.
    #[serde(flatten)]
    pub process: ProcessSettings,
    /// The order database (`postgres://…` or `sqlite:FILE`) and its pool.
    #[serde(flatten)]
    pub storage: DatabaseSettings,
    /// Redis for the stock cache's second layer; empty = in-process only.
    #[serde(flatten)]
    pub redis: RedisSettings,
    /// Bearer token of the admin surface.
    pub admin_token: Secret,
    /// Where Inventory listens (gRPC), and the service credential its
    /// `ReserveStock`/`ReleaseStock` require.
    pub inventory: InventoryUpstreamSettings,
    /// Where Product listens (HTTP).
    pub product: UpstreamSettings,
    /// Timeouts, retries, breakers, bulkheads and the stock cache.
    pub resilience: ResilienceSettings,
    /// The transactional outbox's relay worker.
    pub outbox: OutboxSettings,
    /// Idempotency keys of `POST /api/orders`.
    pub idempotency: IdempotencySettings,
    /// How customers' bearer tokens are verified (`auth.jwks_url` or
    /// `auth.public_key_pem`, one of them required): every `/api/orders*`
    /// route acts for the token's `sub`, whether or not the gateway checked
    /// it first.
    pub auth: AuthSettings,
    /// Per-customer limits on placing orders.
    pub orders: OrderLimits,
}

impl Default for OrderSettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&topology::ORDER),
            storage: DatabaseSettings::sqlite("order"),
            redis: RedisSettings::default(),
            admin_token: Secret::default(),
            inventory: InventoryUpstreamSettings {
                url: topology::INVENTORY.local_url(),
                service_token: Secret::default(),
            },
            product: UpstreamSettings {
                url: topology::PRODUCT.local_url(),
            },
            resilience: ResilienceSettings::default(),
            outbox: OutboxSettings::default(),
            idempotency: IdempotencySettings::default(),
            auth: AuthSettings::default(),
            orders: OrderLimits::default(),
        }
    }
}

/// `orders.*`: what one customer may have at once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct OrderLimits {
    /// Most `pending` orders one customer may have: a placement beyond it
    /// is refused with 429 `too-many-open-orders` (OWASP API4), so one
    /// account cannot fill the outbox while Inventory is down. Checked
    /// before each new placement, not under a lock: concurrent placements
    /// may overshoot it by a few.
    pub max_open_per_customer: u32,
}

impl Default for OrderLimits {
    fn default() -> Self {
        Self {
            max_open_per_customer: 20,
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

/// Inventory's address and the credential order calls it with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default)]
pub struct InventoryUpstreamSettings {
    /// Base URL (`http://host:port`).
    pub url: String,
    /// Bearer token sent with `ReserveStock` and `ReleaseStock`
    /// (`INVENTORY__SERVICE_TOKEN`): Inventory's `service_token`. Empty:
    /// none is sent, and Inventory refuses to move stock.
    pub service_token: Secret,
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
    /// Client-side adaptive throttling, one throttle per downstream target.
    pub throttle: ThrottleSettings,
    /// The stale-serving stock cache.
    pub stock_cache: StockCacheSettings,
}

/// `resilience.throttle.*`: the SRE book's client-side adaptive throttling
/// (`shopeasy_resilience::throttle`) of both edges, each with its own
/// counts. Shared keys, like the retry budget's: the rule is the same for
/// every callee, only its state is per target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ThrottleSettings {
    /// `K`: a callee refusing for overload still sees about `K` × what it
    /// accepts; the rest is refused locally.
    pub k: f64,
    /// How far back requests and accepts are counted.
    pub window_seconds: Seconds,
    /// Below this many requests in the window nothing is refused.
    pub min_requests: u32,
}

impl Default for ThrottleSettings {
    fn default() -> Self {
        let d = ThrottleConfig::default();
        Self {
            k: d.k,
            window_seconds: Seconds::new(d.window.as_secs_f64()),
            min_requests: u32::try_from(d.min_requests).unwrap_or(u32::MAX),
        }
    }
}

impl ThrottleSettings {
    /// The throttle of each client stack.
    pub fn config(&self) -> ThrottleConfig {
        ThrottleConfig {
            k: self.k,
            window: self.window_seconds.get(),
            min_requests: u64::from(self.min_requests),
        }
    }

    fn validate(&self, prefix: &str, v: &mut Validator) {
        v.within(prefix, |v| {
            v.ratio("k", self.k, 1.0..=100.0);
            v.seconds("window_seconds", self.window_seconds, 1.0..=3600.0);
            v.number("min_requests", self.min_requests, 0..=100_000);
        });
    }
}

/// The resilience of one outbound edge (SPEC §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EdgeSettings {
    /// Deadline of one attempt (never beyond the caller's remaining time).
    pub timeout_seconds: Seconds,
    /// Retries after a connection failure (so `max_retries + 1` attempts).
    pub max_retries: u32,
    /// The first retry's backoff before jitter: each retry waits a uniform
    /// draw from `[0, base × 2ⁿ]` (full jitter), at most 1 s.
    pub retry_backoff_seconds: Seconds,
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
            retry_backoff_seconds: Backoff::default().base.into(),
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
    /// The client stack's configuration for `target`: the one mapping of
    /// these keys onto the stack, so the clients and the start-up policy
    /// check read the same numbers. A trial call may take two attempt
    /// timeouts before the breaker gives up on it.
    pub fn config(&self, target: &'static str) -> EdgeConfig {
        let attempt_timeout = self.timeout_seconds.get();
        EdgeConfig {
            max_retries: self.max_retries,
            backoff: Backoff {
                base: self.retry_backoff_seconds.get(),
                ..Backoff::default()
            },
            breaker: BreakerConfig {
                failure_ratio: self.failure_ratio,
                minimum_throughput: self.minimum_calls,
                sampling_duration: self.sampling_window_seconds.get(),
                break_duration: self.break_duration_seconds.get(),
                trial_timeout: attempt_timeout.saturating_mul(2),
            },
            max_concurrency: usize::try_from(self.max_concurrency).unwrap_or(usize::MAX),
            ..EdgeConfig::new(target, attempt_timeout)
        }
    }

    /// Checks every key under `prefix` (`resilience.inventory`), then the
    /// combinations: a breaker window that cannot hold two attempts never
    /// sees enough calls to open (the rules of `resilience::plan`, each
    /// named by the keys that break it).
    fn validate(&self, prefix: &str, v: &mut Validator) {
        let seconds = [
            ("timeout_seconds", self.timeout_seconds, 0.001..=60.0),
            // At most the backoff's cap, so the first retry's range is the
            // one configured.
            (
                "retry_backoff_seconds",
                self.retry_backoff_seconds,
                0.001..=Backoff::default().cap.as_secs_f64(),
            ),
            (
                "break_duration_seconds",
                self.break_duration_seconds,
                0.01..=3600.0,
            ),
            (
                "sampling_window_seconds",
                self.sampling_window_seconds,
                0.1..=3600.0,
            ),
            (
                "connect_timeout_seconds",
                self.connect_timeout_seconds,
                0.01..=60.0,
            ),
        ];
        for (key, value, range) in seconds {
            v.seconds(&format!("{prefix}.{key}"), value, range);
        }
        let counts = [
            ("max_retries", self.max_retries, 0..=10),
            ("minimum_calls", self.minimum_calls, 1..=10_000),
            ("max_concurrency", self.max_concurrency, 1..=10_000),
        ];
        for (key, value, range) in counts {
            v.number(&format!("{prefix}.{key}"), value, range);
        }
        let ratio = format!("{prefix}.failure_ratio");
        v.ratio(&ratio, self.failure_ratio, 0.01..=1.0);
        if self.sampling_window_seconds.as_f64() < 2.0 * self.timeout_seconds.as_f64() {
            v.fail(
                &format!("{prefix}.sampling_window_seconds"),
                self.sampling_window_seconds.as_f64(),
                format!(
                    "must cover two attempts: at least 2 × {prefix}.timeout_seconds ({})",
                    2.0 * self.timeout_seconds.as_f64()
                ),
            );
        }
    }
}

impl ResilienceSettings {
    /// The retry budget each client's [`RetryBudget`](shopeasy_resilience::budget::RetryBudget)
    /// is made of (one per target, all of these settings).
    pub fn budget(&self) -> BudgetConfig {
        let b = &self.retry_budget;
        BudgetConfig {
            ratio: b.ratio,
            min_retries_per_window: b.min_retries_per_window,
            window: b.window_seconds.get(),
        }
    }

    /// This service's own hops, for the start-up policy check: order →
    /// inventory and order → product, as the clients are built.
    pub fn hops(&self) -> [HopPolicy; 2] {
        [
            self.inventory
                .config(crate::clients::inventory::TARGET)
                .hop("order→inventory", self.budget()),
            self.product
                .config(crate::clients::product::TARGET)
                .hop("order→product", self.budget()),
        ]
    }

    /// The start-up log line: each of this service's hops with its worst
    /// case (`max_retries + 1` attempts of `timeout_seconds`) and what the
    /// retry budget brings that down to. A hop the policy check refuses is
    /// described with its violations instead (validation names the keys).
    pub fn describe(&self) -> String {
        self.hops()
            .into_iter()
            .map(|hop| match Plan::new(vec![hop]) {
                Ok(plan) => plan.describe(),
                Err(e) => e.to_string(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Checks every `resilience.*` key, each edge's combinations included.
    /// (A stock fetch shorter than one Inventory attempt is allowed: the
    /// fetch's deadline then bounds the attempt, which is what it is for.)
    fn validate(&self, v: &mut Validator) {
        self.inventory.validate("resilience.inventory", v);
        self.product.validate("resilience.product", v);
        self.retry_budget.validate("resilience.retry_budget", v);
        self.throttle.validate("resilience.throttle", v);
        let c = &self.stock_cache;
        let seconds = [
            ("ttl_seconds", c.ttl_seconds, 0.001..=3600.0),
            ("max_stale_seconds", c.max_stale_seconds, 0.0..=604_800.0),
            (
                "fetch_timeout_seconds",
                c.fetch_timeout_seconds,
                0.001..=60.0,
            ),
        ];
        for (key, value, range) in seconds {
            v.seconds(&format!("resilience.stock_cache.{key}"), value, range);
        }
        c.redis.validate("resilience.stock_cache", v);
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
    /// `redis_timeout_seconds` (the bound of every Redis call; Redis
    /// trouble degrades to in-process) and `redis_retry_seconds` (how long
    /// Redis is skipped after an error): the runtime's Redis guard, as in
    /// product's read cache.
    #[serde(flatten)]
    pub redis: RedisGuardSettings,
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
            redis: RedisGuardSettings::default(),
            fetch_timeout_seconds: Seconds::new(3.0),
            key_prefix: "shopeasy:order:".into(),
        }
    }
}

/// `outbox.*`: the relay that reserves stock for `pending` orders.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OutboxSettings {
    /// How often the worker looks for due rows, while its last look found
    /// less than a full batch.
    pub poll_interval_seconds: Seconds,
    /// Most rows one worker claims at a time. A full batch is followed by
    /// the next claim at once, so a backlog drains as fast as Inventory
    /// answers, not one batch per poll interval.
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

/// Where the lifecycle finds the listeners, log and telemetry settings.
impl AsRef<ProcessSettings> for OrderSettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for OrderSettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
        self.storage.validate(v);
        self.redis.validate(v);
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
        self.resilience.validate(v);
        let o = &self.outbox;
        v.within("outbox", |v| {
            v.seconds(
                "poll_interval_seconds",
                o.poll_interval_seconds,
                0.01..=60.0,
            );
            v.number("batch_size", o.batch_size, 1..=1000);
            v.seconds("lease_seconds", o.lease_seconds, 0.1..=3600.0);
            v.seconds(
                "initial_backoff_seconds",
                o.initial_backoff_seconds,
                0.001..=60.0,
            );
            v.seconds("max_backoff_seconds", o.max_backoff_seconds, 0.01..=3600.0);
        });
        let i = &self.idempotency;
        v.within("idempotency", |v| {
            v.seconds(
                "retention_seconds",
                i.retention_seconds,
                86_400.0..=31_536_000.0,
            );
            v.seconds("lock_seconds", i.lock_seconds, 0.1..=3600.0);
            v.seconds(
                "cleanup_interval_seconds",
                i.cleanup_interval_seconds,
                1.0..=86_400.0,
            );
        });
        self.auth.validate("auth", v);
        v.number(
            "orders.max_open_per_customer",
            self.orders.max_open_per_customer,
            1..=10_000,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shopeasy_runtime::settings::{Loader, SettingsError};

    /// The one key without a default: where the token keys come from.
    const JWKS: (&str, &str) = (
        "AUTH__JWKS_URL",
        "http://127.0.0.1:8085/.well-known/jwks.json",
    );

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let s: OrderSettings = Loader::new().env([JWKS]).load().unwrap();
        assert_eq!(
            s,
            OrderSettings {
                auth: AuthSettings::for_jwks(JWKS.1),
                ..OrderSettings::default()
            }
        );
        assert_eq!(s.orders.max_open_per_customer, 20);
        assert_eq!(s.auth.issuer, "shopeasy-demo");
        assert_eq!(s.process.listen_addr.port(), 8082);
        assert_eq!(s.process.admin_addr.port(), 9082);
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
                JWKS,
                ("INVENTORY__URL", "http://inventory:50051"),
                ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
                ("RESILIENCE__PRODUCT__RETRY_BACKOFF_SECONDS", "0.1"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.inventory.url, "http://inventory:50051");
        assert_eq!(s.resilience.inventory.timeout_seconds, Seconds::new(0.3));
        let product = s.resilience.product.config("product");
        assert_eq!(product.backoff.base, std::time::Duration::from_millis(100));
        let inventory = s.resilience.inventory.config("inventory");
        assert_eq!(inventory.backoff.base, std::time::Duration::from_millis(25));
    }

    #[test]
    fn bad_values_are_named() {
        let err = Loader::new()
            .env([
                JWKS,
                ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0"),
                ("RESILIENCE__INVENTORY__RETRY_BACKOFF_SECONDS", "1.5"),
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
                "resilience.inventory.retry_backoff_seconds",
                "idempotency.retention_seconds"
            ]
        );
    }

    #[test]
    fn a_breaker_window_shorter_than_two_attempts_is_refused_naming_both_keys() {
        let err = Loader::new()
            .env([
                JWKS,
                ("RESILIENCE__PRODUCT__TIMEOUT_SECONDS", "10"),
                ("RESILIENCE__PRODUCT__SAMPLING_WINDOW_SECONDS", "15"),
            ])
            .load::<OrderSettings>()
            .unwrap_err();
        let SettingsError::Invalid(errors) = err else {
            panic!("{err}")
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key, "resilience.product.sampling_window_seconds");
        assert!(
            errors[0]
                .allowed
                .contains("resilience.product.timeout_seconds"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn without_a_key_source_or_with_a_bad_limit_the_service_refuses_to_start() {
        let err = Loader::new()
            .env([("ORDERS__MAX_OPEN_PER_CUSTOMER", "0")])
            .load::<OrderSettings>()
            .unwrap_err();
        let SettingsError::Invalid(errors) = err else {
            panic!("{err}")
        };
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["auth.jwks_url", "orders.max_open_per_customer"]);
    }

    #[test]
    fn an_edge_maps_once_onto_the_stack_and_the_policy_check() {
        let s = OrderSettings::default();
        let edge = s.resilience.inventory.config("inventory");
        assert_eq!(edge.target, "inventory");
        assert_eq!(edge.attempt_timeout, std::time::Duration::from_secs(3));
        assert_eq!(edge.max_retries, 2);
        assert_eq!(
            edge.backoff,
            shopeasy_resilience::backoff::Backoff::default()
        );
        assert_eq!(edge.max_concurrency, 64);
        assert_eq!(edge.breaker.minimum_throughput, 5);
        assert_eq!(
            edge.breaker.sampling_duration,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            edge.breaker.trial_timeout,
            std::time::Duration::from_secs(6)
        );
        assert_eq!(s.resilience.budget().ratio, 0.2);
        let [inventory, product] = s.resilience.hops();
        assert_eq!(inventory.name, "order→inventory");
        assert_eq!(product.name, "order→product");
        assert_eq!(inventory.deadline, Some(edge.deadline_cap()));
        let line = s.resilience.describe();
        assert!(line.contains("worst case 3 attempts"), "{line}");
        assert!(line.contains("order→product"), "{line}");
    }
}
