//! The order service against the real Inventory service (its gRPC server
//! and Postgres store), under concurrency: C4–C7 of FAULTS.md.

use std::time::Duration;

use shopeasy_inventory::domain::ProductId;
use shopeasy_runtime::settings::Seconds;
use tokio::time::Instant;

use crate::{
    fakes::FakeProduct,
    helpers::{TestApp, eventually, order_body, orders_of, real_inventory, test_settings},
};

#[tokio::test]
async fn a_hundred_concurrent_orders_against_real_inventory_on_stock_ten() {
    let (Some(inventory_db), Some(order_db)) = (
        shopeasy_testkit::postgres().await,
        shopeasy_testkit::postgres().await,
    ) else {
        return;
    };
    let (inventory, store) = real_inventory(inventory_db.url()).await;
    let inventory_url = format!("http://{}", inventory.local_addr());

    let product = uuid::Uuid::new_v4();
    let pid = ProductId::parse("product_id", &product.to_string()).unwrap();
    let far = || Instant::now() + Duration::from_secs(5);
    store.set_stock(&pid, 10, far()).await.unwrap();
    let catalogue = FakeProduct::default();
    catalogue.add(product, 100);
    let catalogue_server = catalogue.serve().await;
    let mut settings = test_settings(order_db.url(), &inventory_url, &catalogue_server.url());
    // Generous bounds: this test is about correctness under concurrency on
    // a loaded machine, not latency. A 503 would still be a correct answer.
    settings.resilience.inventory.timeout_seconds = Seconds::new(3.0);
    settings.resilience.product.timeout_seconds = Seconds::new(3.0);
    settings.storage.database.acquire_timeout_seconds = Seconds::new(10.0);
    // One customer places all hundred: the open-order limit would refuse
    // those beyond 20 pending (429), which is not what this test is about.
    settings.orders.max_open_per_customer = 1000;
    let app = TestApp::spawn(settings).await;

    let statuses = futures::future::join_all((0..100).map(|i| {
        let app = &app;
        async move {
            app.post_order(
                Some(&format!("real-{i}")),
                &order_body("c-real", &[(product, 1)]),
            )
            .await
            .status()
            .as_u16()
        }
    }))
    .await;
    assert!(
        // 503 `overloaded`: the inbound admission limit shed it before any work.
        statuses.iter().all(|s| [201, 202, 409, 503].contains(s)),
        "{statuses:?}"
    );
    let orders = || orders_of(&app, "c-real");
    let resolved = eventually(Duration::from_secs(10), || async {
        orders().await.iter().all(|o| o["status"] != "pending")
    })
    .await;
    assert!(resolved, "pending orders resolve (C8)");
    let confirmed = orders()
        .await
        .iter()
        .filter(|o| o["status"] == "confirmed")
        .count() as i64;
    let available = store.get_stock(&pid, far()).await.unwrap();
    let reserved = store.reserved(&pid, far()).await.unwrap();
    assert!(confirmed <= 10, "no oversell (C5): {confirmed}");
    assert_eq!(available + reserved, 10, "stock conserved (C4)");
    assert_eq!(
        reserved, confirmed,
        "each confirmed order reserved once (C6, C7)"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count() as i64,
        confirmed
    );

    app.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(15), inventory.stop()).await;
}
