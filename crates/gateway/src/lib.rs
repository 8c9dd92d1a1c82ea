//! The ShopEasy gateway: the one public entrance, a reverse proxy that
//! routes `/api/products*` to the product service, `/api/orders*` to the
//! order service (SPEC §6) once the caller's bearer token is verified
//! (SPEC §11), and `POST /api/session` to the identity issuer when one is
//! configured — and never hangs its callers.
//!
//! What other crates use is re-exported here and nothing more: [`App`] (the
//! service, bound and run by `shopeasy_runtime::lifecycle`) and its
//! [`settings`] ([`GatewaySettings`]). Everything else is private to the
//! crate; how the pieces fit, from the socket inwards:
//!
//! - [`App`] is the `shopeasy_runtime::lifecycle::Service`; the lifecycle
//!   binds the public and admin listeners and serves the admin one. The
//!   public one is served by `server`'s HTTP/1.1 accept
//!   loop, which hands every request to the `proxy` and watches request
//!   framing (`framing`). Nothing else is served there, so `/metrics`,
//!   `/health/*` and `/admin*` exist only on the admin listener.
//! - `proxy` runs one exchange as named phases (admit, prepare the head and
//!   the body, send with retries, relay the response): `routes` picks the
//!   service, `headers` rewrites and checks headers, `retry` decides whether
//!   a failed attempt is sent again (through `shopeasy_resilience::decide`,
//!   the retry decision every ShopEasy client makes), `activity` cuts off
//!   silence in either direction, `upstream` is the pooled client with its
//!   connect timeout, connection lifetime and per-origin connection cap,
//!   `ratelimit` is the per-client (address or customer) token bucket
//!   table; `auth` carries a failed token check through the phases (the
//!   check itself is `shopeasy_identity::Verifier`'s, the one the order
//!   service runs too).
//! - `error::ProxyError` is every way the gateway itself answers; its
//!   `IntoResponse` is the one place those become problem+json responses
//!   with a `Proxy-Status` header.
//! - `storefront` serves the embedded static pages at `/` and `/assets/*`
//!   (paths no route serves; GET and HEAD only, never rate-limited).
//! - `observe` names the metrics; [`settings`] is the configuration.

mod activity;
mod error;
mod framing;
mod headers;
mod observe;
mod proxy;
mod ratelimit;
mod retry;
mod routes;
mod server;
pub mod settings;
mod stall;
mod storefront;
mod upstream;

use shopeasy_resilience::registry::Registry;
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{DEFAULT_DRAIN, Service},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use settings::GatewaySettings;

/// The binary's name.
pub const NAME: &str = shopeasy_runtime::topology::GATEWAY.binary;

/// The gateway, built, ready to be bound and run by
/// `shopeasy_runtime::lifecycle`.
#[derive(Debug)]
pub struct App {
    proxy: proxy::Proxy,
    listening: server::Listening,
}

impl Service for App {
    type Settings = GatewaySettings;
    const NAME: &'static str = NAME;

    /// Builds the proxy and its token verifier, and reports its breakers
    /// and budgets. The verifier's keys are fetched in the background: a
    /// provider that is down at start-up is a warning, not a failure (the
    /// first token fetches again), so the gateway still serves products.
    ///
    /// # Errors
    /// When a route URL or the `auth` settings are invalid.
    async fn build(settings: GatewaySettings, admin: &Admin) -> anyhow::Result<Self> {
        let proxy = proxy::Proxy::new(&settings)?;
        proxy.warm_up();
        let registry = Registry::new();
        proxy.register(&registry);
        admin.report("resilience", move || registry.snapshot());
        Ok(Self {
            proxy,
            listening: server::Listening {
                header_timeout: settings.resilience.gateway.activity_timeout_seconds.get(),
                write_stall: settings.resilience.gateway.activity_timeout_seconds.get(),
                max_buf: server::read_buffer(settings.limits.max_header_bytes),
                max_connections: settings.limits.max_connections,
            },
        })
    }

    /// The gateway's own HTTP/1.1 accept loop (not axum's: it watches
    /// request framing), with its own bounded drain.
    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        // Lent by the lifecycle to this task (read before anything spawns).
        self.proxy
            .admit_with(shopeasy_runtime::lifecycle::admission());
        server::serve(public, self.proxy, self.listening, shutdown, DEFAULT_DRAIN).await;
        Ok(())
    }
}
