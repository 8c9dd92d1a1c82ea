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
//! [`App`] is the `shopeasy_runtime::lifecycle::Service`: the lifecycle
//! binds the public and admin listeners and serves it, so `main` is a few
//! lines and a test starts it with `lifecycle::spawn::<App>(settings)`.

pub mod cache;
pub mod catalogue;
mod currency;
pub mod cursor;
pub mod domain;
mod error;
pub mod http;
pub mod seed;
pub mod settings;
pub mod store;

use axum::Router;
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Service},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::Error;
pub use settings::ProductSettings;

use crate::{cache::ReadCache, catalogue::Catalogue};

/// The binary's name.
pub const NAME: &str = shopeasy_runtime::topology::PRODUCT.binary;

/// The embedded migrations of `migrations/product/`.
pub fn migrator() -> sqlx::migrate::Migrator {
    shopeasy_runtime::db::migrator(&[(
        1,
        "init",
        include_str!("../../../migrations/product/0001_init.sql"),
    )])
}

/// The Product service, built, ready to be bound and run by
/// `shopeasy_runtime::lifecycle`.
#[derive(Debug)]
pub struct App {
    router: Router,
    catalogue: Catalogue,
}

impl App {
    /// The catalogue (tests seed through it).
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }
}

impl Service for App {
    type Settings = ProductSettings;
    const NAME: &'static str = NAME;

    /// Connects the database (running migrations) and sets up the cache.
    ///
    /// # Errors
    /// When the database does not answer within
    /// `database.startup_timeout_seconds`, a migration fails or a URL is
    /// invalid.
    async fn build(settings: ProductSettings, admin: &Admin) -> anyhow::Result<Self> {
        let db =
            lifecycle::connect_database("product", &settings.storage, &migrator(), admin).await?;
        let cache = if settings.cache.enabled {
            Some(ReadCache::new(
                &settings.cache,
                settings.redis.redis_url.expose(),
            )?)
        } else {
            None
        };
        let pool = &settings.storage.database;
        let catalogue = Catalogue::new(
            store::ProductStore::new(db),
            cache.clone(),
            // A shared read is bounded by the pool's own limits.
            pool.acquire_timeout_seconds.get() + pool.statement_timeout_seconds.get(),
        );
        seed::demo_if_empty(settings.demo_seed, &catalogue).await?;
        if let Some(cache) = cache {
            if let Some(redis) = cache.redis_guard().cloned() {
                admin.report("redis", move || redis.report());
            }
            admin.report("product_cache", move || cache.report());
        }
        let router = http::router(http::AppState {
            catalogue: catalogue.clone(),
            admin_token: settings.admin_token.clone(),
        });
        Ok(Self { router, catalogue })
    }

    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        lifecycle::serve_admitted(public, self.router, shutdown, Self::DRAIN).await?;
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
