//! The ShopEasy Product service: the catalogue over HTTP (SPEC §3), with a
//! read cache that never fails a request.
//!
//! How the pieces fit, from the wire inwards:
//!
//! - [`http`]: the axum router — handlers are adapters that parse input into
//!   [`domain`] types, call the [`catalogue::Catalogue`] and map its
//!   [`Error`] onto problem+json in one place; the OpenAPI document is
//!   generated from the same annotated handlers.
//! - [`catalogue`]: the use cases. Reads go through the [`cache`]
//!   (cache-aside, invalidated by a generation bump on every write), and
//!   concurrent misses for one key share one database read (the resilience
//!   crate's single flight). Writes go to the [`store`].
//! - [`store`]: SQL over `shopeasy_runtime::db::Database` (Postgres or
//!   SQLite), keyset pagination by [`cursor::Cursor`].
//! - [`settings`]: [`ProductSettings`], the service's typed settings.
//!
//! [`App`] ties them to two listeners (public and admin) and implements
//! `shopeasy_runtime::lifecycle::Service`, so `main` is a few lines.

pub mod cache;
pub mod catalogue;
mod currency;
pub mod cursor;
pub mod domain;
mod error;
pub mod http;
pub mod settings;
pub mod store;

use std::net::SocketAddr;

use axum::Router;
use shopeasy_runtime::{
    admin::Admin,
    db::Database,
    lifecycle::{self, Service},
    settings::common::LogSettings,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::Error;
pub use settings::ProductSettings;

use crate::{cache::ReadCache, catalogue::Catalogue};

/// The binary's name.
pub const NAME: &str = "shopeasy-product";

/// The embedded migrations of `migrations/product/`.
pub fn migrator() -> sqlx::migrate::Migrator {
    shopeasy_runtime::db::migrator(&[(
        1,
        "init",
        include_str!("../../../migrations/product/0001_init.sql"),
    )])
}

/// The running service: both listeners bound, the database migrated.
#[derive(Debug)]
pub struct App {
    public: TcpListener,
    admin_listener: TcpListener,
    router: Router,
    admin: Admin,
    catalogue: Catalogue,
}

impl App {
    /// Connects the database (running migrations), sets up the cache and
    /// binds both listeners (port 0 allowed).
    ///
    /// # Errors
    /// When the database does not answer within
    /// `database.startup_timeout_seconds`, a migration fails, a URL is
    /// invalid or an address cannot be bound.
    pub async fn build(settings: ProductSettings) -> anyhow::Result<Self> {
        let db = Database::connect_and_migrate(
            settings.database_url.expose(),
            &settings.database,
            &migrator(),
        )
        .await?;
        let cache = if settings.cache.enabled {
            Some(ReadCache::new(
                &settings.cache,
                settings.redis_url.expose(),
            )?)
        } else {
            None
        };
        let catalogue = Catalogue::new(
            store::ProductStore::new(db.clone()),
            cache.clone(),
            // A shared read is bounded by the pool's own limits.
            settings.database.acquire_timeout_seconds.get()
                + settings.database.statement_timeout_seconds.get(),
        );

        let admin = Admin::default();
        admin.readiness("database", move || {
            let db = db.clone();
            async move { db.ping().await.map_err(|e| e.to_string()) }
        });
        if let Some(cache) = cache {
            admin.report("product_cache", move || cache.report());
        }

        let router = http::router(http::AppState {
            catalogue: catalogue.clone(),
            admin_token: settings.admin_token.clone(),
        });
        let public = lifecycle::bind(settings.listen_addr, "listen_addr").await?;
        let admin_listener = lifecycle::bind(settings.admin_addr, "admin_addr").await?;
        tracing::info!(
            listen = %public.local_addr()?,
            admin = %admin_listener.local_addr()?,
            "shopeasy-product ready to serve"
        );
        Ok(Self {
            public,
            admin_listener,
            router,
            admin,
            catalogue,
        })
    }

    /// The public listener's address.
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.public.local_addr()
    }

    /// The admin listener's address.
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn admin_addr(&self) -> std::io::Result<SocketAddr> {
        self.admin_listener.local_addr()
    }

    /// The catalogue (tests seed through it).
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }
}

impl Service for App {
    type Settings = ProductSettings;
    const NAME: &'static str = NAME;

    fn log(settings: &ProductSettings) -> &LogSettings {
        &settings.log
    }

    fn otlp_endpoint(settings: &ProductSettings) -> &str {
        &settings.otel_exporter_otlp_endpoint
    }

    async fn build(settings: ProductSettings) -> anyhow::Result<Self> {
        App::build(settings).await
    }

    async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let drain = lifecycle::DEFAULT_DRAIN;
        let public = lifecycle::serve(self.public, self.router, shutdown.clone(), drain);
        let admin = lifecycle::serve(self.admin_listener, self.admin.router(), shutdown, drain);
        tokio::try_join!(public, admin)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_migrations_match_the_folder() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/product");
        let files = shopeasy_runtime::db::migration_files(&dir).unwrap();
        let embedded: Vec<(i64, String)> = super::migrator()
            .iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect();
        assert_eq!(files, embedded);
    }
}
