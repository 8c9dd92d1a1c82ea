//! A fault-injecting TCP proxy with Toxiproxy's model and HTTP API.
//!
//! ShopEasy proves its resilience under real network faults (SPEC §7,
//! FAULTS.md). This crate puts a TCP proxy on an edge (for example
//! `order-inventory`) and breaks it on demand, with nothing to install:
//! tests drive it in-process, and people drive it with `curl` through the
//! Toxiproxy-compatible API the launcher serves on :8474.
//!
//! How the pieces fit:
//!
//! - [`toxic`]: the [`Toxic`]s — `latency`, `timeout`, `reset_peer`,
//!   `bandwidth`, `slow_close`, `slicer`, `limit_data` — on the `upstream`
//!   (client → server) or `downstream` stream, with a `toxicity`; their
//!   Toxiproxy JSON.
//! - [`proxy`]: one [`FaultProxy`]: a listener, an upstream and a toxic set.
//!   Disabling it (`down`) refuses new connections and closes open ones.
//!   Every random choice comes from the proxy's seed.
//! - `link` (private): one connection's two pumps. Each watches the proxy's
//!   toxic set, so toxics apply to connections already open (gRPC and pooled
//!   HTTP keep theirs for minutes).
//! - [`registry`]: [`Proxies`], the named set a process runs.
//! - [`windows`]: each proxy's bounded history of fault windows (a toxic
//!   added … removed, a proxy disabled … enabled), also a `toxic_window`
//!   tracing span each, so retries can be correlated with the faults that
//!   caused them.
//! - [`api`]: the Toxiproxy 2.x HTTP API over a [`Proxies`], plus the
//!   windows (`GET /windows`).
//! - [`Error`]: the one error type, mapped onto HTTP in [`api`].
//!
//! Choices where Toxiproxy leaves room (or where we differ):
//!
//! - `down` is not a toxic, as in Toxiproxy: it is the proxy disabled
//!   (`{"enabled": false}` or [`FaultProxy::set_enabled`]).
//! - `reset_peer` acts on the next data in its direction: on `upstream` the
//!   request is dropped and never delivered; on `downstream` the request is
//!   delivered and the answer is lost. Both sockets are reset (`SO_LINGER` 0).
//! - Several toxics of one type on one stream combine: latencies add, the
//!   lowest bandwidth and byte limit win, the first `timeout`, `reset_peer`,
//!   `slicer` and `slow_close` apply.
//! - Toxicity is rolled once per (connection, toxic) from the proxy's seed,
//!   in accept order; an updated toxic is rolled again.
//! - Creating a toxic answers 200 with the toxic, as Toxiproxy does (its own
//!   clients check for 200); creating a proxy answers 201.
//! - Attributes parsed from JSON are bounded (durations at most 24 h,
//!   bandwidth at most 10^9 KB/s: [`toxic::MAX_WAIT_MS`],
//!   [`toxic::MAX_RATE`]), and request bodies at most [`api::BODY_LIMIT`].
//! - A toxic change, or enabling or disabling, through the handle of a
//!   proxy since removed or restarted is refused ([`Error::ProxyNotFound`];
//!   [`FaultProxy::set_enabled`] ignores it, [`FaultProxy::try_set_enabled`]
//!   says so) rather than lost or recorded against its successor.
//! - A new connection waits for its upstream to accept at most the proxy's
//!   `connect_timeout_ms` (default [`proxy::DEFAULT_CONNECT_TIMEOUT`], 5 s),
//!   then the client is closed as when the upstream refuses; Toxiproxy
//!   waits out the kernel's SYN retries (about 2 min for a black-holed
//!   host).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use shopeasy_faults::{Proxies, ProxyConfig, Stream, Toxic, ToxicKind, api};
//! let proxies = Proxies::with_seed(42);
//! let edge = proxies.create(ProxyConfig::new("order-inventory", "127.0.0.1:50051")).await?;
//! edge.add_toxic(Toxic::new(ToxicKind::Latency { latency: 250, jitter: 50 }, Stream::Downstream))?;
//! let listener = tokio::net::TcpListener::bind(("127.0.0.1", api::DEFAULT_PORT)).await?;
//! api::serve(listener, proxies, tokio_util::sync::CancellationToken::new()).await?;
//! # Ok(()) }
//! ```

pub mod api;
pub mod cli;
mod error;
pub mod guard;
mod link;
pub mod proxy;
pub mod registry;
pub mod toxic;
pub mod windows;

pub use error::Error;
pub use proxy::{FaultProxy, ProxyConfig, ProxyView};
pub use registry::{Proxies, ProxyUpdate};
pub use toxic::{Stream, Toxic, ToxicKind};
pub use windows::{ToxicWindow, WindowEnd, WindowHistory};
