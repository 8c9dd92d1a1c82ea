//! The end-to-end resilience proof (FAULTS.md, issue 10).
//!
//! Anyone can claim a service is resilient; this crate shows it, every CI
//! run, against the real services, real Postgres and Redis and real TCP
//! faults. The library is the harness; the tests under `tests/` are the
//! proof, one file per fault (`f1_refused.rs`, …), plus the chaos run
//! (`chaos.rs`) and the bulkhead test.
//!
//! How the pieces fit:
//!
//! - [`cluster`]: [`Cluster::start`] starts the four services in full mode
//!   (a fresh Postgres database each, Redis by key prefix) with a fault
//!   proxy on every edge, storage edges included; kill and respawn a
//!   service; read the databases.
//! - [`client`]: a customer's HTTP client keeping each [`Answer`] whole
//!   (`/metrics` pages and bounded polls come from `shopeasy-testkit`),
//!   signed in with a bearer token of its customer.
//! - [`identity`]: the cluster's signing key and the tokens its clients
//!   carry (the services trust its public key: `auth.public_key_pem`).
//! - [`history`]: the recorded requests of a run and their FAULTS.md class.
//! - [`invariants`]: the C1–C9 checker over the databases and the history.
//! - [`chaos`]: the seeded fault schedule and the concurrent customers.
//! - [`stub`]: canned and scripted upstreams for F7 (503 bursts,
//!   `Retry-After`, gRPC pushback), put behind an edge's proxy with
//!   [`Cluster::redirect`].
//! - [`pgwire`]: a Postgres wire stub for F7 on the storage edges (`53300`,
//!   `57P03` at connect; `40001` on every statement).
//! - [`resp`]: a Redis (RESP) stub for F7 (`LOADING`, `BUSY`, `OOM` errors).
//! - [`listen`]: the accept loop those stubs share.

pub mod chaos;
pub mod client;
pub mod cluster;
pub mod history;
pub mod identity;
pub mod invariants;
pub mod listen;
pub mod pgwire;
pub mod resp;
pub mod stub;

pub use client::{Answer, Client};
pub use cluster::{Cluster, Options, Service, edges};
