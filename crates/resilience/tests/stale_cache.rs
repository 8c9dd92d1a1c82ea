//! Stale cache: fresh hits, one shared refresh, stale answers while the
//! source is unavailable, errors only for keys with no usable value.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shopeasy_resilience::CircuitOpen;
use shopeasy_resilience::deadline::Deadline;
use shopeasy_resilience::stale_cache::{CacheConfig, CacheError, StaleCache};

/// A stock source that can be switched down, counting fetches.
#[derive(Clone, Default)]
struct Source {
    stock: Arc<Mutex<HashMap<&'static str, u32>>>,
    down: Arc<Mutex<bool>>,
    fetches: Arc<AtomicU32>,
}

impl Source {
    fn cache(&self) -> StaleCache<&'static str, u32> {
        let src = self.clone();
        StaleCache::new(
            CacheConfig {
                ttl: Duration::from_secs(5),
                max_staleness: Duration::from_secs(60),
                name: "shopeasy_stock_cache",
                fetch_timeout: Duration::from_secs(2),
            },
            move |key| {
                let src = src.clone();
                async move {
                    src.fetches.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if *src.down.lock().expect("lock") {
                        return Err(CacheError::from_call_error(
                            CircuitOpen::new("inventory").into(),
                        ));
                    }
                    src.stock
                        .lock()
                        .expect("lock")
                        .get(key)
                        .copied()
                        .ok_or(CacheError::NotFound)
                }
            },
        )
    }

    fn set(&self, key: &'static str, n: u32) {
        self.stock.lock().expect("lock").insert(key, n);
    }

    fn down(&self, down: bool) {
        *self.down.lock().expect("lock") = down;
    }
}

#[tokio::test(start_paused = true)]
async fn answers_stale_when_unavailable_and_rejects_only_unknown_keys() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);
    let src = Source::default();
    src.set("a", 10);
    let cache = src.cache();

    let got = cache.get("a", None).await.unwrap();
    assert_eq!((got.value, got.stale), (10, false)); // miss
    let got = cache.get("a", None).await.unwrap();
    assert_eq!((got.value, got.stale), (10, false)); // hit
    assert_eq!(src.fetches.load(Ordering::SeqCst), 1);

    // Expired, source up: refreshed.
    src.set("a", 8);
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(cache.get("a", None).await.unwrap().value, 8);

    // Expired, source down: the stale value answers.
    src.down(true);
    tokio::time::advance(Duration::from_secs(6)).await;
    let got = cache.get("a", None).await.unwrap();
    assert_eq!((got.value, got.stale), (8, true));
    assert!(got.age >= Duration::from_secs(6));

    // A key never seen while the source is down: unavailable.
    let err = cache.get("b", None).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(shopeasy_resilience::error::find::<CircuitOpen>(&err).is_some());

    // Too stale: no longer served.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(cache.get("a", None).await.unwrap_err().is_unavailable());

    // Not found is not papered over, and is distinguishable.
    src.down(false);
    assert!(matches!(
        cache.get("zzz", None).await,
        Err(CacheError::NotFound)
    ));

    let snap = cache.snapshot();
    assert_eq!(snap["requests"]["hit"], 1);
    assert_eq!(snap["requests"]["miss"], 2);
    assert_eq!(snap["requests"]["stale"], 1);
    assert_eq!(snap["requests"]["rejected"], 3);
    assert_eq!(
        rec.counter("shopeasy_stock_cache_requests_total{result=stale}"),
        1
    );
    assert_eq!(
        rec.counter("shopeasy_stock_cache_requests_total{result=rejected}"),
        3
    );
}

/// A cache whose entry `a` (1) has expired while its source moved on to
/// 2: the next read must refresh.
async fn expired_entry() -> (Source, StaleCache<&'static str, u32>) {
    let src = Source::default();
    src.set("a", 1);
    let cache = src.cache();
    cache
        .get("a", None)
        .await
        .expect("the first read fills the entry");
    tokio::time::advance(Duration::from_secs(6)).await;
    src.set("a", 2);
    (src, cache)
}

#[tokio::test(start_paused = true)]
async fn an_expired_entry_triggers_one_shared_refresh() {
    let (src, cache) = expired_entry().await;
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get("a", None).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap().value, 2);
    }
    assert_eq!(
        src.fetches.load(Ordering::SeqCst),
        2,
        "one initial, one refresh"
    );
    let snap = cache.snapshot();
    assert_eq!(snap["requests"]["miss"], 2);
    assert_eq!(snap["requests"]["coalesced"], 49);
}

#[tokio::test(start_paused = true)]
async fn a_caller_out_of_time_gets_stale_and_the_refresh_still_lands() {
    let (_src, cache) = expired_entry().await;
    // The refresh takes 10 ms; this caller only has 1 ms.
    let got = cache
        .get("a", Some(Deadline::after(Duration::from_millis(1))))
        .await
        .unwrap();
    assert_eq!((got.value, got.stale), (1, true));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = cache.get("a", None).await.unwrap();
    assert_eq!(
        (got.value, got.stale),
        (2, false),
        "the detached refresh stored its value"
    );
}
