//! The demo catalogue, written on first start (when the catalogue is empty)
//! through the services' own admin APIs, as an operator would.

use anyhow::Context;
use shopeasy_product_api::{NewProduct, Product, ProductPage};
use shopeasy_proto::inventory::v1::{
    SetStockRequest, inventory_service_client::InventoryServiceClient,
};

use crate::system::System;

/// `(sku, name, description, price in cents, stock)`. Two items have little
/// stock so "out of stock" is easy to see.
pub const CATALOGUE: [(&str, &str, &str, i64, i64); 12] = [
    (
        "MUG-001",
        "Enamel mug",
        "A camp mug that survives drops.",
        1_200,
        100,
    ),
    (
        "TEE-002",
        "Plain tee",
        "Organic cotton, one colour, every size.",
        1_900,
        100,
    ),
    (
        "CAP-003",
        "Canvas cap",
        "Keeps the sun off a tired engineer.",
        1_500,
        100,
    ),
    (
        "BAG-004",
        "Tote bag",
        "Carries a laptop and a lunch.",
        2_200,
        100,
    ),
    (
        "PEN-005",
        "Gel pen",
        "Writes on whiteboards' margins.",
        300,
        500,
    ),
    (
        "BOT-006",
        "Steel bottle",
        "Cold for a day, hot for half.",
        2_800,
        100,
    ),
    (
        "NOT-007",
        "Notebook",
        "Dotted pages for diagrams of retries.",
        900,
        200,
    ),
    (
        "STK-008",
        "Sticker pack",
        "Circuit breakers, half-open.",
        500,
        1_000,
    ),
    (
        "HOD-009",
        "Hoodie",
        "Warm enough for an on-call night.",
        4_900,
        50,
    ),
    ("SOC-010", "Socks", "Two pairs, no holes.", 1_100, 100),
    (
        "LMP-011",
        "Desk lamp",
        "Limited edition: only three made.",
        7_500,
        3,
    ),
    (
        "KEY-012",
        "Keyboard",
        "Quiet switches. One left.",
        12_900,
        1,
    ),
];

/// Seeds the catalogue and its stock when the product service has no
/// products; does nothing otherwise (a restart keeps what is there).
///
/// # Errors
/// When a service refuses a write.
pub async fn seed_if_empty(system: &System) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let base = format!("http://{}", system.addresses.product);
    let page: ProductPage = http
        .get(format!("{base}/api/products?limit=1"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await
        .context("listing products")?;
    if !page.items.is_empty() {
        return Ok(());
    }
    let mut inventory =
        InventoryServiceClient::connect(format!("http://{}", system.addresses.inventory))
            .await
            .context("connecting to inventory")?;
    for (sku, name, description, price_cents, stock) in CATALOGUE {
        let product: Product = http
            .post(format!("{base}/api/products"))
            .bearer_auth(&system.admin_token)
            .json(&NewProduct {
                sku: sku.to_owned(),
                name: name.to_owned(),
                description: description.to_owned(),
                price_cents,
                currency: "EUR".to_owned(),
            })
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("creating {sku}"))?
            .json()
            .await?;
        let mut request = tonic::Request::new(SetStockRequest {
            product_id: product.id.to_string(),
            available: stock,
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", system.admin_token)
                .parse()
                .context("admin token is not a valid header value")?,
        );
        inventory
            .set_stock(request)
            .await
            .with_context(|| format!("setting stock of {sku}"))?;
    }
    tracing::info!(products = CATALOGUE.len(), "seeded the demo catalogue");
    Ok(())
}
