//! The demo seed: with `demo_seed` on, an empty catalogue gets the products
//! of `shopeasy_product_api::demo` at start, with their SKU-derived ids.
//!
//! It is how full mode (compose, the Kubernetes demo) and the embedded
//! launcher get the same demo without an admin token or a client: Inventory
//! seeds the stock of the same ids on its own. A catalogue that has any
//! product is left alone, so a restart never brings back a product an
//! operator deleted; two replicas starting at once both insert with
//! `ON CONFLICT DO NOTHING`, so the seed lands once.

use anyhow::Context as _;
use shopeasy_product_api::demo;

use crate::catalogue::Catalogue;

/// Seeds the demo catalogue when `enabled` and the catalogue is empty.
///
/// # Errors
/// When the database refuses the reads or writes.
pub async fn demo_if_empty(enabled: bool, catalogue: &Catalogue) -> anyhow::Result<()> {
    if !enabled {
        return Ok(());
    }
    let db = catalogue.store().database();
    let products: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM products")
        .fetch_one(db.pool())
        .await
        .context("demo seed: counting products")?;
    if products > 0 {
        tracing::info!(
            products,
            "demo seed: the catalogue has products; left as it is"
        );
        return Ok(());
    }
    let mut tx = db.begin_write().await.context("demo seed")?;
    for item in &demo::CATALOGUE {
        sqlx::query(
            "INSERT INTO products (id, sku, name, description, price_cents, currency, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING",
        )
        .bind(item.id().to_string())
        .bind(item.sku)
        .bind(item.name)
        .bind(item.description)
        .bind(item.price_cents)
        .bind(demo::CURRENCY)
        .bind(demo::SEEDED_AT_MS)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("demo seed: {}", item.sku))?;
    }
    tx.commit().await.context("demo seed")?;
    // A shared cache may still hold the empty catalogue of a previous life.
    if let Some(cache) = catalogue.cache() {
        cache.invalidate().await;
    }
    tracing::info!(
        products = demo::CATALOGUE.len(),
        "demo seed: seeded the demo catalogue"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use shopeasy_product_api::{Product, demo};
    use shopeasy_runtime::lifecycle::Bound;
    use uuid::Uuid;

    use crate::{App, ProductSettings};

    async fn products(app: &Bound<App>) -> Vec<Product> {
        let page = app
            .service()
            .catalogue()
            .store()
            .list(None, 100)
            .await
            .expect("list");
        page.items
    }

    #[tokio::test]
    async fn an_empty_catalogue_gets_the_demo_once_and_a_deletion_stays_deleted() {
        for db in shopeasy_testkit::all_backends().await {
            let app = start(db.url(), "true").await;
            let mut expected: Vec<Product> = demo::CATALOGUE
                .iter()
                .map(demo::DemoItem::product)
                .collect();
            expected.sort_by_key(|p| p.id);
            assert_eq!(products(&app).await, expected, "{}", db.name());

            // An operator removes one; a restart must not bring it back.
            let mug = demo::product_id("MUG-001");
            app.service().catalogue().delete(mug).await.expect("delete");
            drop(app);
            let again = start(db.url(), "true").await;
            let ids: Vec<Uuid> = products(&again).await.iter().map(|p| p.id).collect();
            assert_eq!(ids.len(), demo::CATALOGUE.len() - 1, "{}", db.name());
            assert!(!ids.contains(&mug), "{}", db.name());
        }
    }

    #[tokio::test]
    async fn without_the_setting_nothing_is_seeded() {
        let db = shopeasy_testkit::sqlite();
        let app = start(db.url(), "false").await;
        assert!(products(&app).await.is_empty());
        assert!(!ProductSettings::default().demo_seed, "off unless asked");
    }

    /// The service as full mode starts it: settings from the environment.
    async fn start(database_url: &str, seed: &str) -> Bound<App> {
        Bound::<App>::from_env(&[("DATABASE_URL", database_url), ("DEMO_SEED", seed)])
            .await
            .expect("the service starts")
    }
}
