//! Load shapes: a seeded catalogue. (Latency quantiles are
//! `shopeasy_testkit::quantile`, the generator's rank rule.)

/// Inserts `count` products with `description_chars`-character
/// descriptions straight into the product database (ids in creation
/// order, as the service's UUIDv7 ids are); returns their ids.
pub async fn seed_catalogue(
    cluster: &shopeasy_e2e::Cluster,
    prefix: &str,
    count: usize,
    description_chars: usize,
) -> Vec<uuid::Uuid> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let id = uuid::Uuid::now_v7();
        sqlx::query(
            "INSERT INTO products (id, sku, name, description, price_cents, currency, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 500, 'EUR', 0, 0)",
        )
        .bind(id.to_string())
        .bind(format!("{prefix}-{i}"))
        .bind(format!("e2e {prefix} {i}"))
        .bind("d".repeat(description_chars))
        .execute(cluster.product_db())
        .await
        .expect("seed product");
        ids.push(id);
    }
    ids
}
