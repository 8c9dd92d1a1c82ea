//! The stock cache over a real Inventory client (SPEC §5): single flight,
//! stale answers, the Redis layer and Redis trouble.

use std::{sync::Arc, time::Duration};

use shopeasy_order::{
    clients::inventory::InventoryClient,
    settings::{EdgeSettings, StockCacheSettings},
    stock::{StockError, StockSource},
    stock_cache::StockCache,
};
use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
use shopeasy_runtime::settings::Seconds;
use tokio::time::Instant;
use uuid::Uuid;

use crate::fakes::{FakeInventory, Mode};

fn client(url: &str) -> Arc<dyn StockSource> {
    let edge = EdgeSettings {
        timeout_seconds: Seconds::new(0.5),
        max_retries: 0,
        ..EdgeSettings::default()
    };
    Arc::new(InventoryClient::new(url, &edge, RetryBudget::new(BudgetConfig::default())).unwrap())
}

fn settings(ttl: f64, prefix: &str) -> StockCacheSettings {
    StockCacheSettings {
        ttl_seconds: Seconds::new(ttl),
        key_prefix: prefix.to_owned(),
        ..StockCacheSettings::default()
    }
}

#[tokio::test]
async fn a_thousand_concurrent_lookups_of_an_expired_entry_make_one_call() {
    let fake = FakeInventory::default();
    let p = Uuid::new_v4();
    fake.set_stock(p, 9);
    fake.set_get_delay(Duration::from_millis(100));
    let server = fake.serve().await;
    let cache = StockCache::new(client(&server.url()), &settings(0.05, ""), "").unwrap();
    assert_eq!(cache.available(p, None).await, Ok(Some(9)));
    tokio::time::sleep(Duration::from_millis(60)).await; // expired
    let before = fake.get_calls();
    let results = futures::future::join_all((0..1000).map(|_| cache.available(p, None))).await;
    assert!(results.iter().all(|r| *r == Ok(Some(9))));
    assert_eq!(fake.get_calls() - before, 1, "single flight");
    let snapshot = cache.layer().snapshot();
    assert!(
        snapshot["requests"]["coalesced"].as_u64().unwrap() >= 999,
        "{snapshot}"
    );
}

#[tokio::test]
async fn stale_stock_answers_while_inventory_is_down_and_unknown_is_rejected() {
    let fake = FakeInventory::default();
    let (p, q) = (Uuid::new_v4(), Uuid::new_v4());
    fake.set_stock(p, 4);
    fake.set_stock(q, 4);
    let server = fake.serve().await;
    let cache = StockCache::new(client(&server.url()), &settings(0.05, ""), "").unwrap();
    assert_eq!(cache.available(p, None).await, Ok(Some(4)));
    fake.set_mode(Mode::Unavailable);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cache.available(p, None).await, Ok(Some(4)), "stale");
    assert!(matches!(
        cache.available(q, None).await,
        Err(StockError::Unavailable(_))
    ));
    let snapshot = cache.layer().snapshot();
    assert_eq!(snapshot["requests"]["stale"], 1, "{snapshot}");
    assert_eq!(snapshot["requests"]["rejected"], 1, "{snapshot}");
}

#[tokio::test]
async fn redis_shares_values_between_replicas_and_serves_stale_after_a_restart() {
    let Some(redis) = shopeasy_testkit::redis_url() else {
        return;
    };
    let prefix = shopeasy_testkit::key_prefix();
    let fake = FakeInventory::default();
    let p = Uuid::new_v4();
    fake.set_stock(p, 6);
    let server = fake.serve().await;
    let one = StockCache::new(client(&server.url()), &settings(0.5, &prefix), &redis).unwrap();
    assert_eq!(one.available(p, None).await, Ok(Some(6)));
    // The write-back is detached: wait for it (bounded).
    let two = StockCache::new(client(&server.url()), &settings(0.5, &prefix), &redis).unwrap();
    let calls = fake.get_calls();
    let shared = crate::helpers::eventually(Duration::from_secs(2), || async {
        two.layer().invalidate(&p);
        two.available(p, None).await == Ok(Some(6)) && fake.get_calls() == calls
    })
    .await;
    assert!(shared, "a second replica read Redis, not Inventory");

    // A "restarted" replica with nothing in process, Inventory down: the
    // stale Redis copy answers.
    fake.set_mode(Mode::Unavailable);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let three = StockCache::new(client(&server.url()), &settings(0.5, &prefix), &redis).unwrap();
    assert_eq!(three.available(p, None).await, Ok(Some(6)));
}

#[tokio::test]
async fn redis_down_degrades_to_the_in_process_layer() {
    let fake = FakeInventory::default();
    let p = Uuid::new_v4();
    fake.set_stock(p, 2);
    let server = fake.serve().await;
    // Nothing listens on this port: every Redis call fails fast and rests.
    let dead = format!("redis://127.0.0.1:{}", shopeasy_testkit::free_port());
    let cache = StockCache::new(client(&server.url()), &settings(0.05, "x:"), &dead).unwrap();
    for _ in 0..5 {
        let started = Instant::now();
        assert_eq!(cache.available(p, None).await, Ok(Some(2)));
        assert!(started.elapsed() < Duration::from_millis(700));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
}
