//! The ShopEasy gateway: the one public entrance, a reverse proxy that
//! routes `/api/products*` to the product service and `/api/orders*` to the
//! order service (SPEC §6), and never hangs its callers.
//!
//! How the pieces fit, from the socket inwards:
//!
//! - [`App`] binds the public and admin listeners. The admin listener is
//!   `shopeasy_runtime`'s; the public one is [`server`]'s HTTP/1.1 accept
//!   loop, which hands every request to the [`proxy::Proxy`] tower service
//!   and watches request framing ([`framing`]). Nothing else is served
//!   there, so `/metrics`, `/health/*` and `/admin*` exist only on the
//!   admin listener.
//! - [`proxy`] runs one exchange: [`routes`] picks the service,
//!   [`headers`] rewrites and checks headers, [`retry`] decides whether a
//!   failed attempt is sent again, [`activity`] cuts off silence in either
//!   direction, [`upstream`] is the pooled client with its connect timeout
//!   and connection lifetime.
//! - [`error::ProxyError`] is every way the gateway itself answers; its
//!   `IntoResponse` is the one place those become problem+json responses
//!   with a `Proxy-Status` header.
//! - [`observe`] names the metrics; [`settings`] is the configuration.

pub mod activity;
pub mod error;
pub mod framing;
pub mod headers;
pub mod observe;
pub mod proxy;
pub mod retry;
pub mod routes;
pub mod server;
pub mod settings;
pub mod upstream;

use std::net::SocketAddr;

use shopeasy_resilience::registry::Registry;
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, DEFAULT_DRAIN},
    settings::common::LogSettings,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use settings::GatewaySettings;

/// The gateway, bound and ready to serve.
#[derive(Debug)]
pub struct App {
    public: TcpListener,
    admin_listener: TcpListener,
    local_addr: SocketAddr,
    admin_addr: SocketAddr,
    proxy: proxy::Proxy,
    admin: Admin,
    header_timeout: std::time::Duration,
}

impl App {
    /// Binds both listeners (port 0 allowed) and builds the proxy.
    ///
    /// # Errors
    /// When a listener cannot be bound or a route URL is invalid.
    pub async fn build(settings: GatewaySettings) -> anyhow::Result<Self> {
        let proxy = proxy::Proxy::new(&settings)?;
        let public = lifecycle::bind(settings.listen_addr, "public listener").await?;
        let admin_listener = lifecycle::bind(settings.admin_addr, "admin listener").await?;
        let admin = Admin::default();
        let registry = Registry::new();
        proxy.register(&registry);
        admin.report("resilience", move || registry.snapshot());
        Ok(Self {
            local_addr: public.local_addr()?,
            admin_addr: admin_listener.local_addr()?,
            public,
            admin_listener,
            proxy,
            admin,
            header_timeout: settings.resilience.gateway.activity_timeout_seconds.get(),
        })
    }

    /// The public listener's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Serves both listeners until `shutdown` is cancelled, then drains.
    ///
    /// # Errors
    /// When accepting connections fails.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(
            public = %self.local_addr,
            admin = %self.admin_addr,
            "shopeasy-gateway listening"
        );
        let ((), admin) = tokio::join!(
            server::serve(
                self.public,
                self.proxy,
                self.header_timeout,
                shutdown.clone(),
                DEFAULT_DRAIN
            ),
            lifecycle::serve(
                self.admin_listener,
                self.admin.router(),
                shutdown,
                DEFAULT_DRAIN
            ),
        );
        admin?;
        Ok(())
    }
}

impl lifecycle::Service for App {
    type Settings = GatewaySettings;
    const NAME: &'static str = "shopeasy-gateway";

    fn log(settings: &GatewaySettings) -> &LogSettings {
        &settings.log
    }

    fn otlp_endpoint(settings: &GatewaySettings) -> &str {
        &settings.otel_exporter_otlp_endpoint
    }

    async fn build(settings: GatewaySettings) -> anyhow::Result<Self> {
        App::build(settings).await
    }

    async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        App::run_until_stopped(self, shutdown).await
    }
}
