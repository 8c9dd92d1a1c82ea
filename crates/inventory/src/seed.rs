//! The demo seed: with `demo_seed` on, an Inventory without any stock record
//! gets the stock of `shopeasy_product_api::demo` at start, keyed by the
//! SKU-derived product ids the Product service seeds on its own.
//!
//! Nothing is overwritten: stock that exists is left as it is (a restart
//! must not undo reservations), and concurrent replicas insert with
//! `ON CONFLICT DO NOTHING`, so conservation holds from the first order.

use anyhow::Context as _;
use shopeasy_product_api::demo;

use crate::Store;

/// Seeds the demo stock when `enabled` and no product has stock yet.
///
/// # Errors
/// When the database refuses the reads or writes.
pub async fn demo_if_empty(enabled: bool, store: &Store) -> anyhow::Result<()> {
    if !enabled {
        return Ok(());
    }
    let db = store.database();
    let known: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM stock")
        .fetch_one(db.pool())
        .await
        .context("demo seed: counting stock records")?;
    if known == 0 {
        let mut tx = db.begin_write().await.context("demo seed")?;
        for item in &demo::CATALOGUE {
            sqlx::query(
                "INSERT INTO stock (product_id, available, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(item.id().to_string())
            .bind(item.stock)
            .bind(demo::SEEDED_AT_MS)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("demo seed: stock of {}", item.sku))?;
        }
        tx.commit().await.context("demo seed")?;
        tracing::info!(
            products = demo::CATALOGUE.len(),
            "demo seed: seeded the demo stock"
        );
    } else {
        tracing::info!(known, "demo seed: stock exists; left as it is");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shopeasy_product_api::demo;
    use shopeasy_runtime::lifecycle::Bound;
    use tokio::time::Instant;

    use crate::{App, InventorySettings, domain::ProductId};

    /// The service as full mode starts it: settings from the environment.
    async fn start(database_url: &str, seed: &str) -> Bound<App> {
        Bound::<App>::from_env(&[("DATABASE_URL", database_url), ("DEMO_SEED", seed)])
            .await
            .expect("the service starts")
    }

    async fn stock(app: &Bound<App>, sku: &str) -> Option<i64> {
        let id = ProductId::parse("product_id", &demo::product_id(sku).to_string()).expect("id");
        let deadline = Instant::now() + Duration::from_secs(5);
        app.service().store().get_stock(&id, deadline).await.ok()
    }

    #[tokio::test]
    async fn empty_stock_gets_the_demo_stock_once_and_changes_survive_a_restart() {
        for db in shopeasy_testkit::all_backends().await {
            let app = start(db.url(), "true").await;
            for item in &demo::CATALOGUE {
                assert_eq!(
                    stock(&app, item.sku).await,
                    Some(item.stock),
                    "{}",
                    db.name()
                );
            }
            // Stock moves (an order, an operator); a restart must not undo it.
            let lamp = ProductId::parse("product_id", &demo::product_id("LMP-011").to_string())
                .expect("id");
            let deadline = Instant::now() + Duration::from_secs(5);
            app.service()
                .store()
                .set_stock(&lamp, 0, deadline)
                .await
                .expect("set");
            drop(app);
            let again = start(db.url(), "true").await;
            assert_eq!(stock(&again, "LMP-011").await, Some(0), "{}", db.name());
            assert_eq!(stock(&again, "KEY-012").await, Some(1), "{}", db.name());
        }
    }

    #[tokio::test]
    async fn without_the_setting_no_stock_is_seeded() {
        let db = shopeasy_testkit::sqlite();
        let app = start(db.url(), "false").await;
        assert_eq!(stock(&app, "MUG-001").await, None);
        assert!(!InventorySettings::default().demo_seed, "off unless asked");
    }
}
