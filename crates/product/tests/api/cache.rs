//! The read cache: hits after a miss, and after a write the cached copy is
//! never served, on Redis and in-process.

use serde_json::{Value, json};

use crate::helpers::{TOKEN, TestApp, body, settings, spawn_with};

async fn never_serves_a_stale_copy(app: &TestApp) {
    let product = app.create("FRESH-1").await;
    let id = product["id"].as_str().unwrap().to_owned();
    let path = format!("/api/products/{id}");
    let list = "/api/products?limit=100";

    for round in 0..20_i64 {
        // Fill both caches and make sure they answer.
        let before = app.hits().await;
        for _ in 0..2 {
            assert_eq!(app.get(&path).await.status(), 200);
            assert_eq!(app.get(list).await.status(), 200);
        }
        assert!(
            app.hits().await >= before + 2,
            "round {round}: the second reads hit"
        );

        let mut changed = body("FRESH-1");
        changed["price_cents"] = json!(round * 10 + 1);
        assert_eq!(app.put(&id, &changed).await.status(), 200);

        let one: Value = app.get(&path).await.json().await.unwrap();
        assert_eq!(one["price_cents"], round * 10 + 1, "round {round}: item");
        let page: Value = app.get(list).await.json().await.unwrap();
        assert_eq!(
            page["items"][0]["price_cents"],
            round * 10 + 1,
            "round {round}: page"
        );
    }

    // A delete is seen at once too.
    let res = app
        .client
        .delete(app.url(&path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(app.get(&path).await.status(), 404);
    let page: Value = app.get(list).await.json().await.unwrap();
    assert_eq!(page["items"], json!([]));
}

#[tokio::test]
async fn after_an_update_the_redis_cached_copy_is_never_served() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let Some(redis) = shopeasy_testkit::redis_url() else {
        return;
    };
    let s = settings(&db, Some(redis));
    let app = spawn_with(db, s).await;
    assert_eq!(app.cache_stats().await["backend"], "redis");
    never_serves_a_stale_copy(&app).await;
}

#[tokio::test]
async fn after_an_update_the_local_cached_copy_is_never_served() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let s = settings(&db, None);
    let app = spawn_with(db, s).await;
    assert_eq!(app.cache_stats().await["backend"], "local");
    never_serves_a_stale_copy(&app).await;
}

#[tokio::test]
async fn concurrent_misses_share_one_database_read() {
    let db = shopeasy_testkit::sqlite();
    let s = settings(&db, None);
    let app = spawn_with(db, s).await;
    let product = app.create("HOT-1").await;
    let path = format!("/api/products/{}", product["id"].as_str().unwrap());
    let calls = (0..32).map(|_| app.get(&path));
    let answers = futures::future::join_all(calls).await;
    assert!(answers.iter().all(|r| r.status() == 200));
    let s = app.cache_stats().await;
    let (hit, miss, coalesced) = (
        s["hit"].as_u64().unwrap(),
        s["miss"].as_u64().unwrap(),
        s["coalesced"].as_u64().unwrap(),
    );
    // Every request is accounted for, and at least one database read was
    // shared or answered from the cache (32 concurrent requests).
    assert_eq!(hit + miss + coalesced, 32, "{s}");
    assert!(miss < 32, "{s}");
}

#[tokio::test]
async fn ten_thousand_made_up_page_keys_leave_the_local_cache_at_its_capacity() {
    let db = shopeasy_testkit::sqlite();
    let mut s = settings(&db, None);
    s.cache.local_capacity = 100;
    let app = spawn_with(db, s).await;
    let product = app.create("HOT-2").await;
    let hot = format!("/api/products/{}", product["id"].as_str().unwrap());
    assert_eq!(app.get(&hot).await.status(), 200);
    // Every cursor is valid (a uuid): each makes a page key of its own.
    let pages = (0..10_000).map(|_| {
        let cursor = shopeasy_product::cursor::Cursor::after(uuid::Uuid::new_v4()).encode();
        format!("/api/products?limit=20&cursor={cursor}")
    });
    let pages: Vec<String> = pages.collect();
    for chunk in pages.chunks(50) {
        // The hot product stays in use all along.
        assert_eq!(app.get(&hot).await.status(), 200);
        let answers = futures::future::join_all(chunk.iter().map(|p| app.get(p))).await;
        assert!(answers.iter().all(|r| r.status() == 200));
    }
    let stats = app.cache_stats().await;
    assert_eq!(stats["capacity"], 100, "{stats}");
    assert_eq!(
        stats["entries"], 100,
        "at its capacity, not beyond: {stats}"
    );
    // The hot entry was used often enough to survive the flood.
    let before = app.hits().await;
    assert_eq!(app.get(&hot).await.status(), 200);
    assert_eq!(
        app.hits().await,
        before + 1,
        "the hot product is still cached"
    );
}

#[tokio::test]
async fn made_up_page_keys_leave_the_local_cache_within_its_bytes() {
    let db = shopeasy_testkit::sqlite();
    let mut s = settings(&db, None);
    s.cache.local_max_bytes = 2048;
    let app = spawn_with(db, s).await;
    for i in 0..5 {
        app.create(&format!("BYTES-{i}")).await;
    }
    // 200 pages of up to five products (an empty page is still ~40 bytes):
    // several kilobytes, ten thousand entries allowed.
    let pages: Vec<String> = (0..200)
        .map(|_| {
            let cursor = shopeasy_product::cursor::Cursor::after(uuid::Uuid::new_v4()).encode();
            format!("/api/products?limit=20&cursor={cursor}")
        })
        .collect();
    for chunk in pages.chunks(50) {
        let answers = futures::future::join_all(chunk.iter().map(|p| app.get(p))).await;
        assert!(answers.iter().all(|r| r.status() == 200));
    }
    let stats = app.cache_stats().await;
    let bytes = stats["bytes"].as_u64().unwrap();
    assert!(bytes > 0 && bytes <= 2048, "within its bytes: {stats}");
    assert!(
        stats["entries"].as_u64().unwrap() < 200,
        "bounded by bytes, not by the entry count: {stats}"
    );
}
