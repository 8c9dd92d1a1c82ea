//! Per-process plumbing that every ShopEasy service binary shares.
//!
//! **Charter.** This crate holds what any one of the four service processes
//! needs to exist as a well-behaved process, and nothing about the shop itself:
//! no products, orders or stock live here, and no resilience policy either
//! (that is `shopeasy-resilience`). Its module list is fixed:
//!
//! - [`settings`]: layered, validated, typed settings (defaults in code → an
//!   optional file → the environment), and the `--check-config` /
//!   `--print-defaults` command line every binary shares.
//! - [`telemetry`]: `tracing` (human or JSON), OpenTelemetry export when
//!   configured, the W3C trace-context propagator, and the Prometheus recorder.
//! - [`admin`]: the admin listener of SPEC §1 — `/metrics`, `/health/live`,
//!   `/health/ready` and `/admin/resilience`.
//! - [`lifecycle`]: shutdown signals and serving with a bounded graceful drain.
//! - [`db`]: connecting to Postgres or SQLite by URL and running embedded
//!   migrations.
//! - [`problem`]: RFC 9457 problem details, the only error body ShopEasy's HTTP
//!   services send.
//!
//! A service's `main` is a few lines: a `clap` parser that flattens
//! [`settings::ConfigArgs`], then [`lifecycle::run`], which loads the
//! settings, initialises [`telemetry`], builds the service (its
//! [`lifecycle::Service`] impl) and runs it until SIGINT or SIGTERM.

pub mod admin;
pub mod db;
pub mod lifecycle;
pub mod problem;
pub mod settings;
pub mod telemetry;
