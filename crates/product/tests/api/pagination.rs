//! Walking a 250-product catalogue page by page sees each product exactly
//! once, in order.

use std::collections::HashSet;

use serde_json::{Value, json};
use shopeasy_product::domain::ProductDraft;

use crate::helpers::spawn;

#[tokio::test]
async fn walking_250_products_sees_each_once_in_order() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let app = spawn(db).await;
    // Seed through the store (250 HTTP round trips would only slow the test).
    let store = app.catalogue.store().clone();
    let mut created = Vec::new();
    for i in 0..250 {
        let draft = ProductDraft::parse(&json!({
            "sku": format!("PAGE-{i:04}"), "name": format!("Item {i}"),
            "price_cents": i, "currency": "GBP"
        }))
        .unwrap();
        created.push(store.create(&draft).await.unwrap().id.to_string());
    }

    for limit in [1, 7, 20, 100] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let path = match &cursor {
                Some(c) => format!("/api/products?limit={limit}&cursor={c}"),
                None => format!("/api/products?limit={limit}"),
            };
            let page: Value = app.get(&path).await.json().await.unwrap();
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= limit);
            seen.extend(items.iter().map(|p| p["id"].as_str().unwrap().to_owned()));
            pages += 1;
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
            assert!(pages <= 250, "pagination does not end");
        }
        assert_eq!(seen.len(), 250, "limit {limit}");
        assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 250, "no repeats");
        assert_eq!(seen, created, "creation order, limit {limit}");
        assert_eq!(pages, 250_usize.div_ceil(limit));
    }
}
