//! Restocking before each sweep step, so every order is a real placement
//! (not a 409 for want of stock): Inventory's admin `SetStock`.

use anyhow::Context as _;
use shopeasy_proto::inventory::v1::{
    SetStockRequest, inventory_service_client::InventoryServiceClient,
};

/// Units every product gets: more than any step can order.
pub const UNITS: i64 = 100_000_000;

/// Sets each of `products` to [`UNITS`] at the Inventory at `url`
/// (`http://host:port`), with the admin `token`.
///
/// # Errors
/// When Inventory cannot be reached or refuses.
pub async fn restock(url: &str, token: &str, products: &[String]) -> anyhow::Result<()> {
    let mut client = InventoryServiceClient::connect(url.to_owned())
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}")
        .parse()
        .context("the admin token is not a header value")?;
    for id in products {
        let mut request = tonic::Request::new(SetStockRequest {
            product_id: id.clone(),
            available: UNITS,
        });
        request
            .metadata_mut()
            .insert("authorization", bearer.clone());
        client
            .set_stock(request)
            .await
            .with_context(|| format!("SetStock {id}"))?;
    }
    Ok(())
}
