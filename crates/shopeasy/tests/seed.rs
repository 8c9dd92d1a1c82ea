//! One seed: the embedded launcher and full mode (each service on its own,
//! as compose and Kubernetes run them, with `DEMO_SEED=true`) start with the
//! same demo catalogue: the same products with the same ids, and the same
//! stock. Neither needs an admin token or a gRPC client to get there.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use shopeasy::system::{Options, System};
use shopeasy_product_api::{Product, ProductPage, demo};
use shopeasy_proto::inventory::v1::{
    GetStockRequest, inventory_service_client::InventoryServiceClient,
};
use shopeasy_runtime::{
    lifecycle::{self, Running},
    settings::Loader,
};

/// The catalogue as the HTTP API lists it, and the stock of each product as
/// Inventory's gRPC API answers it.
async fn observe(products_at: &str, inventory_at: &str) -> (Vec<Product>, Vec<(String, i64)>) {
    let page: ProductPage = reqwest::get(format!("{products_at}/api/products?limit=100"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(page.next_cursor.is_none(), "one page holds the demo");
    let mut inventory = InventoryServiceClient::connect(inventory_at.to_owned())
        .await
        .unwrap();
    let mut stock = Vec::new();
    for product in &page.items {
        let answer = inventory
            .get_stock(GetStockRequest {
                product_id: product.id.to_string(),
            })
            .await
            .unwrap()
            .into_inner();
        stock.push((product.sku.clone(), answer.available));
    }
    (page.items, stock)
}

/// Full mode: Product and Inventory each on their own SQLite database,
/// configured through the environment only, as compose configures them.
async fn full_mode(dir: &std::path::Path) -> (Running, Running) {
    let env = |db: &str| {
        vec![
            (
                "DATABASE_URL".to_owned(),
                format!("sqlite:{}", dir.join(db).display()),
            ),
            ("LISTEN_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
            ("ADMIN_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
            ("DEMO_SEED".to_owned(), "true".to_owned()),
        ]
    };
    let product = Loader::new()
        .env(env("product.db"))
        .load::<shopeasy_product::ProductSettings>()
        .unwrap();
    let inventory = Loader::new()
        .env(env("inventory.db"))
        .load::<shopeasy_inventory::InventorySettings>()
        .unwrap();
    (
        lifecycle::spawn::<shopeasy_product::App>(product)
            .await
            .unwrap(),
        lifecycle::spawn::<shopeasy_inventory::App>(inventory)
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_and_full_mode_seed_the_same_catalogue_and_stock() {
    let dir = tempfile::tempdir().unwrap();
    let system = System::start(Options::for_tests(&dir.path().join("embedded")))
        .await
        .unwrap();
    let embedded = observe(
        &format!("http://{}", system.addresses.gateway),
        &format!("http://{}", system.addresses.inventory),
    )
    .await;

    std::fs::create_dir_all(dir.path().join("full")).unwrap();
    let (product, inventory) = full_mode(&dir.path().join("full")).await;
    let full = observe(
        &format!("http://{}", product.local_addr()),
        &format!("http://{}", inventory.local_addr()),
    )
    .await;
    product.stop().await.unwrap();
    inventory.stop().await.unwrap();
    system.stop().await.unwrap();

    assert_eq!(embedded.0, full.0, "the same products, with the same ids");
    assert_eq!(embedded.1, full.1, "the same stock");
    // And that is the one demo catalogue, ids derived from the SKUs.
    let mut expected: Vec<Product> = demo::CATALOGUE
        .iter()
        .map(demo::DemoItem::product)
        .collect();
    expected.sort_by_key(|p| p.id);
    assert_eq!(full.0, expected);
    for item in &demo::CATALOGUE {
        assert!(
            full.1.contains(&(item.sku.to_owned(), item.stock)),
            "{} starts with {} in stock",
            item.sku,
            item.stock
        );
    }
}
