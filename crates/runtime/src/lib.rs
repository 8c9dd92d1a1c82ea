//! Per-process plumbing that every ShopEasy service binary shares.
//!
//! **Charter.** This crate holds what any one of the four service processes
//! needs to exist as a well-behaved process, and nothing about the shop itself:
//! no products, orders or stock live here, and no resilience policy either
//! (that is `shopeasy-resilience`). Its module list is fixed:
//!
//! - [`settings`]: layered, validated, typed settings (defaults in code → an
//!   optional file → the environment), the `--check-config` /
//!   `--print-defaults` command line every binary shares, and the settings
//!   every process has ([`settings::ProcessSettings`],
//!   [`settings::DatabaseSettings`], [`settings::RedisSettings`]), embedded
//!   in each service's own type with `#[serde(flatten)]`.
//! - [`topology`]: the services, their default ports, the edges between them
//!   and the order they are wired in, declared once for the settings
//!   defaults, the launcher, the end-to-end cluster and the deployment
//!   checks.
//! - [`telemetry`]: `tracing` (human or JSON), OpenTelemetry export when
//!   configured, the W3C trace-context propagator, and the Prometheus recorder.
//! - [`admin`]: the admin listener of SPEC §1 — `/metrics`, `/health/live`,
//!   `/health/ready` and `/admin/resilience`.
//! - [`lifecycle`]: what a service is ([`lifecycle::Service`]), starting any
//!   of them ([`lifecycle::spawn`] → [`lifecycle::Running`]), shutdown
//!   signals and the bounded graceful drain.
//! - [`db`]: connecting to Postgres or SQLite by URL and running embedded
//!   migrations.
//! - [`problem`]: RFC 9457 problem details, the only error body ShopEasy's HTTP
//!   services send.
//! - `openapi` (feature `openapi`): what the HTTP services' OpenAPI
//!   documents share — the problem body's schema, the bearer scheme, the
//!   document's route.
//! - [`auth`]: the bearer-token check of every admin operation, HTTP or gRPC.
//! - [`redis_guard`]: a Redis connection with a per-call timeout and a rest
//!   after a failure, for the caches that keep a copy in Redis.
//!
//! A service's `main` is a few lines: a `clap` parser that flattens
//! [`settings::ConfigArgs`], then [`lifecycle::run`], which loads the
//! settings, initialises [`telemetry`], builds the service (its
//! [`lifecycle::Service`] impl) and runs it until SIGINT or SIGTERM. The
//! recipe for adding a service is in this crate's README.

pub mod admin;
pub mod auth;
pub mod db;
pub mod lifecycle;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod problem;
pub mod redis_guard;
pub mod settings;
pub mod telemetry;
pub mod topology;
