//! The settings every service process has, written once and embedded in
//! each service's settings type with `#[serde(flatten)]`, so the flat
//! environment contract (`LISTEN_ADDR`, `ADMIN_ADDR`, `DATABASE_URL`,
//! `REDIS_URL`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `LOG__LEVEL`, …) stays as SPEC
//! §8 names it.
//!
//! Three pieces, because not every service has every store, and a setting a
//! service does not use must not be offered:
//!
//! - [`ProcessSettings`]: both listeners, logging and trace export (all four);
//! - [`DatabaseSettings`]: `database_url` and the `database.*` pool (product,
//!   order, inventory; the gateway has no storage);
//! - [`RedisSettings`]: `redis_url` (product and order; inventory has no
//!   cache).
//!
//! `admin_token` is not here: the gateway has no admin routes, and what the
//! token guards differs per service, so each service that takes one says so
//! on its own field.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{Seconds, SecretUrl, Validator, common::LogSettings, common::PoolSettings};
use crate::topology::Node;

/// Listeners, logging and trace export: what makes any ShopEasy binary a
/// well-behaved process. Embed with `#[serde(flatten)]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessSettings {
    /// The public listener (`LISTEN_ADDR`); port 0 picks a free port.
    pub listen_addr: SocketAddr,
    /// The admin listener (`ADMIN_ADDR`): `/metrics`, `/health/*`,
    /// `/admin/resilience`.
    pub admin_addr: SocketAddr,
    /// OTLP/gRPC endpoint for traces (`OTEL_EXPORTER_OTLP_ENDPOINT`); empty
    /// exports nothing.
    pub otel_exporter_otlp_endpoint: String,
    /// Logging (`LOG__FORMAT`, `LOG__LEVEL`).
    pub log: LogSettings,
    /// Admission control of the public listener (`ADMISSION__*`): the
    /// adaptive concurrency limit, its short queue and the refusal's hint.
    pub admission: AdmissionSettings,
}

/// Admission control of a service's public listener (SPEC §11): an adaptive
/// concurrency limit between `min_limit` and `max_limit`, a queue of at most
/// `queue_size` requests waiting at most `queue_timeout_seconds`, and a 503
/// `overloaded` (gRPC `RESOURCE_EXHAUSTED`) telling callers to come back
/// after `retry_after_seconds`. The admin listener is never
/// admission-controlled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AdmissionSettings {
    /// `false` serves every request (for a benchmark of the bare service).
    pub enabled: bool,
    /// The limit at start, and what it recovers to under light load.
    pub initial_limit: u32,
    /// The limit never falls below this; also the concurrency at which
    /// the minimum RTT is measured. 16 rather than Envoy's 3 (Netflix's
    /// Gradient2 floors at 20): under overload the refusals' own CPU
    /// stretches every admitted request's service time, the gradient reads
    /// that as queueing and, with a floor of 4, pushed the gateway's limit
    /// to 5–15 — too few orders in flight for SQLite's group commit to
    /// batch. With 16, in three interleaved pairs at 3× / 5× of capacity,
    /// goodput rose 21–55 % / 18–38 % with admitted p99 alike (60–93 ms
    /// against 58–77) and admitted p50 about doubled (21–25 ms against
    /// 10–14).
    pub min_limit: u32,
    /// The limit never grows above this.
    pub max_limit: u32,
    /// How often the limit is held at `min_limit` for a few dozen requests
    /// under load, to measure the unqueued service time it compares latency
    /// with (each time delayed by up to a quarter more, at random). Shorter
    /// follows a faster service sooner, at the cost of more such pauses.
    pub min_rtt_interval_seconds: Seconds,
    /// How much slower than that unqueued service time (per cent) requests
    /// may get before the limit shrinks: Envoy's `buffer` (its default 25;
    /// ours 0: the figures are in the resilience crate's
    /// `LimitConfig::DEFAULT_BUFFER_PERCENT`).
    pub latency_buffer_percent: u32,
    /// Requests that may wait for a slot at once (0: none wait).
    pub queue_size: u32,
    /// The longest a request waits for a slot while the queue empties now
    /// and then (a burst); kept short, so a queue never holds what the
    /// service cannot serve.
    pub queue_timeout_seconds: Seconds,
    /// The longest a request waits once the queue has not been empty for a
    /// whole `queue_timeout_seconds` (a standing queue: overload). CoDel's
    /// target: admitted requests and refusals both stay fast. Half a
    /// millisecond rather than Facebook's 5: the queue is LIFO, so under
    /// lasting overload its oldest waiters are seldom served — each is a
    /// refusal held until the target. The overload sweep at 3×: refusals'
    /// p99 8.4 ms with 5 ms, 5.6 with 2 ms; then, in two interleaved pairs
    /// on the embedded system, 4.8 / 4.9 ms with 0.5 ms against 6.8 / 6.6
    /// with 2 ms, admitted p99 49 / 46 against 65 / 66 ms, goodput alike.
    /// Below tokio's 1 ms timer tick: under overload each arrival cuts the
    /// waiters older than the target, the timer is only the backstop.
    pub standing_queue_timeout_seconds: Seconds,
    /// The service's own deadline for a request whose caller sent none
    /// (`shopeasy-deadline-ms`, `grpc-timeout`), and the cap on one that did.
    pub default_deadline_seconds: Seconds,
    /// `Retry-After` (and `grpc-retry-pushback-ms`) of a refusal.
    pub retry_after_seconds: u32,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_limit: 64,
            min_limit: 16,
            max_limit: 1000,
            min_rtt_interval_seconds: Seconds::new(5.0),
            latency_buffer_percent:
                shopeasy_resilience::admission::LimitConfig::DEFAULT_BUFFER_PERCENT,
            queue_size: 64,
            queue_timeout_seconds: Seconds::new(1.0),
            standing_queue_timeout_seconds: Seconds::new(0.0005),
            default_deadline_seconds: Seconds::new(10.0),
            retry_after_seconds: 1,
        }
    }
}

impl AdmissionSettings {
    /// Validates under `prefix` (`admission`): each value in range, and
    /// `min_limit ≤ initial_limit ≤ max_limit`.
    pub fn validate(&self, prefix: &str, v: &mut Validator) {
        v.within(prefix, |v| {
            v.number("initial_limit", self.initial_limit, 1..=100_000);
            v.number("min_limit", self.min_limit, 1..=100_000);
            v.number("max_limit", self.max_limit, 1..=100_000);
            if self.min_limit > self.max_limit {
                v.fail(
                    "min_limit",
                    self.min_limit,
                    format!("must not exceed max_limit ({})", self.max_limit),
                );
            }
            if self.initial_limit < self.min_limit || self.initial_limit > self.max_limit {
                v.fail(
                    "initial_limit",
                    self.initial_limit,
                    format!(
                        "must be between min_limit ({}) and max_limit ({})",
                        self.min_limit, self.max_limit
                    ),
                );
            }
            v.seconds(
                "min_rtt_interval_seconds",
                self.min_rtt_interval_seconds,
                0.1..=3600.0,
            );
            v.number(
                "latency_buffer_percent",
                self.latency_buffer_percent,
                0..=100,
            );
            v.number("queue_size", self.queue_size, 0..=100_000);
            v.seconds(
                "queue_timeout_seconds",
                self.queue_timeout_seconds,
                0.0..=10.0,
            );
            v.seconds(
                "standing_queue_timeout_seconds",
                self.standing_queue_timeout_seconds,
                0.0..=10.0,
            );
            v.seconds(
                "default_deadline_seconds",
                self.default_deadline_seconds,
                0.01..=3600.0,
            );
            v.number("retry_after_seconds", self.retry_after_seconds, 1..=3600);
        });
    }

    /// The resilience crate's configuration of these settings.
    pub fn config(&self) -> shopeasy_resilience::admission::AdmissionConfig {
        use shopeasy_resilience::admission::{AdmissionConfig, LimitConfig};
        let n = |x: u32| usize::try_from(x).unwrap_or(usize::MAX);
        AdmissionConfig {
            limit: LimitConfig {
                initial: n(self.initial_limit),
                min: n(self.min_limit),
                max: n(self.max_limit),
                min_rtt_interval: self.min_rtt_interval_seconds.get(),
                buffer_percent: self.latency_buffer_percent,
            },
            queue_size: n(self.queue_size),
            queue_timeout: self.queue_timeout_seconds.get(),
            standing_queue_timeout: self.standing_queue_timeout_seconds.get(),
            default_deadline: self.default_deadline_seconds.get(),
            retry_after: std::time::Duration::from_secs(u64::from(self.retry_after_seconds)),
        }
    }
}

impl ProcessSettings {
    /// The defaults of `node`: its ports from the topology on every
    /// interface, human-or-JSON logs, no trace export.
    pub fn new(node: &Node) -> Self {
        Self {
            listen_addr: node.listen_addr(),
            admin_addr: node.admin_addr(),
            otel_exporter_otlp_endpoint: String::new(),
            log: LogSettings::default(),
            admission: AdmissionSettings::default(),
        }
    }

    /// Both listeners on 127.0.0.1 port 0: what tests and the embedded
    /// launcher use when they must not collide with anything.
    pub fn ephemeral(&mut self) -> &mut Self {
        self.listen_addr = SocketAddr::from(([127, 0, 0, 1], 0));
        self.admin_addr = self.listen_addr;
        self
    }

    /// The listeners must not share a fixed port; the OTLP endpoint, when
    /// given, must be an http(s) URL; the log format must be known.
    pub fn validate(&self, v: &mut Validator) {
        if self.listen_addr.port() != 0 && self.listen_addr.port() == self.admin_addr.port() {
            v.fail(
                "admin_addr",
                self.admin_addr,
                "must differ from listen_addr",
            );
        }
        v.url(
            "otel_exporter_otlp_endpoint",
            &self.otel_exporter_otlp_endpoint,
            &self.otel_exporter_otlp_endpoint,
            &["http", "https"],
            true,
        );
        self.log.validate("log", v);
        self.admission.validate("admission", v);
    }
}

/// A service's own database (SPEC §1: one per service). Embed with
/// `#[serde(flatten)]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DatabaseSettings {
    /// `postgres://…` or `sqlite:path` (`DATABASE_URL`).
    pub database_url: SecretUrl,
    /// The pool (`DATABASE__MAX_CONNECTIONS`, …).
    pub database: PoolSettings,
}

impl DatabaseSettings {
    /// `sqlite:.shopeasy/{service}.db`: a file next to where the binary runs,
    /// so a first start needs no server; deployments set `DATABASE_URL`.
    pub fn sqlite(service: &str) -> Self {
        Self {
            database_url: SecretUrl::new(format!("sqlite:.shopeasy/{service}.db")),
            database: PoolSettings::default(),
        }
    }

    /// The URL must be Postgres or SQLite; the pool's values in range.
    pub fn validate(&self, v: &mut Validator) {
        v.url(
            "database_url",
            &self.database_url.masked(),
            self.database_url.expose(),
            &["postgres", "postgresql", "sqlite"],
            false,
        );
        self.database.validate("database", v);
    }
}

/// A service's Redis, a second cache layer that is never required. Embed with
/// `#[serde(flatten)]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RedisSettings {
    /// `redis://…` (`REDIS_URL`); empty keeps the cache in-process only.
    pub redis_url: SecretUrl,
}

impl RedisSettings {
    /// Empty, or a `redis`/`rediss` URL.
    pub fn validate(&self, v: &mut Validator) {
        v.url(
            "redis_url",
            &self.redis_url.masked(),
            self.redis_url.expose(),
            &["redis", "rediss"],
            true,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        settings::{Loader, Seconds, Settings, SettingsError, keys},
        topology,
    };

    /// A service's settings as every service writes them: the shared parts
    /// flattened, its own sections beside them.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Flat {
        #[serde(flatten)]
        process: ProcessSettings,
        #[serde(flatten)]
        storage: DatabaseSettings,
        #[serde(flatten)]
        redis: RedisSettings,
        own: Own,
        request_timeout_seconds: Seconds,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Own {
        enabled: bool,
        limit: u32,
    }

    impl Default for Own {
        fn default() -> Self {
            Self {
                enabled: true,
                limit: 7,
            }
        }
    }

    impl Default for Flat {
        fn default() -> Self {
            Self {
                process: ProcessSettings::new(&topology::PRODUCT),
                storage: DatabaseSettings::sqlite("flat"),
                redis: RedisSettings::default(),
                own: Own::default(),
                request_timeout_seconds: Seconds::new(5.0),
            }
        }
    }

    impl Settings for Flat {
        fn validate(&self, v: &mut Validator) {
            self.process.validate(v);
            self.storage.validate(v);
            self.redis.validate(v);
        }
    }

    /// Only the gateway's shape: no database, no Redis.
    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    #[serde(default)]
    struct Bare {
        #[serde(flatten)]
        process: ProcessSettings,
    }

    impl Default for Bare {
        fn default() -> Self {
            Self {
                process: ProcessSettings::new(&topology::GATEWAY),
            }
        }
    }

    impl Settings for Bare {
        fn validate(&self, v: &mut Validator) {
            self.process.validate(v);
        }
    }

    fn error_keys<S: Settings + std::fmt::Debug>(result: Result<S, SettingsError>) -> Vec<String> {
        match result {
            Err(SettingsError::Invalid(e)) => e.into_iter().map(|e| e.key).collect(),
            other => panic!("expected invalid settings, got {other:?}"),
        }
    }

    #[test]
    fn flattened_keys_stay_top_level_and_defaults_load() {
        let keys = keys::<Flat>();
        for key in [
            "listen_addr",
            "admin_addr",
            "otel_exporter_otlp_endpoint",
            "log.level",
            "log.format",
            "database_url",
            "database.max_connections",
            "redis_url",
            "own.limit",
        ] {
            assert!(keys.contains(&key.to_owned()), "{key} in {keys:?}");
        }
        assert!(
            !keys
                .iter()
                .any(|k| k.starts_with("process") || k.starts_with("storage"))
        );
        let s: Flat = Loader::new().load().unwrap();
        assert_eq!(s, Flat::default());
        assert_eq!(s.process.listen_addr.port(), topology::PRODUCT.public_port);
    }

    #[test]
    fn environment_values_of_every_type_still_parse() {
        let s: Flat = Loader::new()
            .env([
                ("LISTEN_ADDR", "127.0.0.1:1"),
                ("ADMIN_ADDR", "127.0.0.1:2"),
                ("DATABASE_URL", "postgres://app:pw@db/x"),
                ("DATABASE__MAX_CONNECTIONS", "3"),
                ("DATABASE__ACQUIRE_TIMEOUT_SECONDS", "1"),
                ("REDIS_URL", "redis://cache:6379"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("LOG__LEVEL", "debug"),
                ("OWN__ENABLED", "false"),
                ("OWN__LIMIT", "9"),
                ("REQUEST_TIMEOUT_SECONDS", "2"),
            ])
            .load()
            .unwrap();
        assert_eq!(s.process.listen_addr, "127.0.0.1:1".parse().unwrap());
        assert_eq!(s.process.admin_addr, "127.0.0.1:2".parse().unwrap());
        assert_eq!(s.storage.database_url.expose(), "postgres://app:pw@db/x");
        assert_eq!(s.storage.database.max_connections, 3);
        assert_eq!(
            s.storage.database.acquire_timeout_seconds,
            Seconds::new(1.0)
        );
        assert_eq!(s.redis.redis_url.expose(), "redis://cache:6379");
        assert_eq!(
            s.process.otel_exporter_otlp_endpoint,
            "http://collector:4317"
        );
        assert_eq!(s.process.log.level, "debug");
        assert!(!s.own.enabled);
        assert_eq!(s.own.limit, 9);
        assert_eq!(s.request_timeout_seconds, Seconds::new(2.0));
    }

    #[test]
    fn file_values_reach_flattened_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "listen_addr = \"127.0.0.1:5\"\n[database]\nmax_connections = 4\n[log]\nformat = \"json\"\n",
        )
        .unwrap();
        let s: Flat = Loader::new().file(&path).load().unwrap();
        assert_eq!(s.process.listen_addr.port(), 5);
        assert_eq!(s.storage.database.max_connections, 4);
        assert_eq!(s.process.log.format, "json");
    }

    #[test]
    fn unknown_keys_are_still_refused() {
        let keys = error_keys(
            Loader::new()
                .env([("DATABASE__MAX_CONNECTION", "3"), ("LOG__LEVELS", "x")])
                .load::<Flat>(),
        );
        assert_eq!(keys, ["database.max_connection", "log.levels"]);

        // A service without storage is not offered its keys: a file naming
        // them is refused, and the environment's `DATABASE__*` is checked
        // only by services that have a `database` section.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "database_url = \"sqlite:x.db\"\nredis_url = \"\"\n").unwrap();
        let keys = error_keys(Loader::new().file(&path).load::<Bare>());
        assert_eq!(keys, ["database_url", "redis_url"]);
        let bare = crate::settings::keys::<Bare>();
        assert!(
            !bare
                .iter()
                .any(|k| k.starts_with("database") || k == "redis_url")
        );
    }

    #[test]
    fn one_validation_for_every_service() {
        let keys = error_keys(
            Loader::new()
                .env([
                    ("LISTEN_ADDR", "0.0.0.0:7000"),
                    ("ADMIN_ADDR", "0.0.0.0:7000"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector"),
                    ("LOG__FORMAT", "xml"),
                    ("DATABASE_URL", "mysql://db"),
                    ("DATABASE__MAX_CONNECTIONS", "0"),
                    ("REDIS_URL", "http://cache"),
                ])
                .load::<Flat>(),
        );
        assert_eq!(
            keys,
            [
                "admin_addr",
                "otel_exporter_otlp_endpoint",
                "log.format",
                "database_url",
                "database.max_connections",
                "redis_url"
            ]
        );
        // The limit's latency buffer is a share of the minimum RTT: within
        // 0–100 %, and what is loaded is what the limit gets.
        let keys = error_keys(
            Loader::new()
                .env([("ADMISSION__LATENCY_BUFFER_PERCENT", "101")])
                .load::<Flat>(),
        );
        assert_eq!(keys, ["admission.latency_buffer_percent"]);
        let loaded = Loader::new()
            .env([("ADMISSION__LATENCY_BUFFER_PERCENT", "40")])
            .load::<Flat>()
            .unwrap();
        assert_eq!(loaded.process.admission.config().limit.buffer_percent, 40);
        // Port 0 twice is two free ports, not a clash.
        let mut s = Bare::default();
        s.process.ephemeral();
        let mut v = Validator::new();
        s.validate(&mut v);
        assert!(v.into_errors().is_empty());
    }
}
