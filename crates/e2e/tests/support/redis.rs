//! The Redis side of the F2-Redis, F7 and F9 cells: what the test Redis
//! holds (through the `redis` crate), and the reconnect schedule of the
//! services' Redis clients with the [`ConnectionLog`] that checks it at a
//! proxy.

use std::time::Duration;

/// The keys of the test Redis matching `pattern` (`KEYS`, straight to the
/// server, no proxy), or `None` when no test Redis is configured.
///
/// # Panics
/// When the test Redis does not answer within 5 s.
pub async fn redis_keys(pattern: &str) -> Option<Vec<String>> {
    let client = ::redis::Client::open(shopeasy_testkit::redis_url()?).expect("redis URL");
    let keys = tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        ::redis::cmd("KEYS")
            .arg(pattern)
            .query_async::<Vec<String>>(&mut conn)
            .await
    })
    .await
    .expect("redis answers within 5 s")
    .expect("KEYS");
    Some(keys)
}

/// Deletes the keys of the test Redis matching `pattern` (straight to the
/// server, no proxy): what a Redis restarted without persistence lost.
/// Returns how many it deleted, or `None` when no test Redis is
/// configured. The Redis is shared by every test process: name keys of
/// this test only (its products' UUIDs).
///
/// # Panics
/// When the test Redis does not answer within 5 s.
pub async fn redis_delete(pattern: &str) -> Option<i64> {
    let keys = redis_keys(pattern).await?;
    if keys.is_empty() {
        return Some(0);
    }
    let client = ::redis::Client::open(shopeasy_testkit::redis_url()?).expect("redis URL");
    let deleted = tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        ::redis::cmd("DEL")
            .arg(&keys)
            .query_async::<i64>(&mut conn)
            .await
    })
    .await
    .expect("redis answers within 5 s")
    .expect("DEL");
    Some(deleted)
}

/// When a proxy accepted each connection, sampled every 5 ms from its
/// `connections()` counter (several in one tick share a time).
pub struct ConnectionLog {
    started: tokio::time::Instant,
    times: std::sync::Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectionLog {
    /// Starts recording `proxy`'s new connections.
    pub fn start(proxy: shopeasy_faults::FaultProxy) -> Self {
        let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = times.clone();
        let task = tokio::spawn(async move {
            let mut seen = proxy.connections();
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            loop {
                tick.tick().await;
                let now = proxy.connections();
                if now > seen {
                    let at = tokio::time::Instant::now();
                    let mut log = log.lock().expect("connection log");
                    for _ in seen..now {
                        log.push(at);
                    }
                    seen = now;
                }
            }
        });
        Self {
            started: tokio::time::Instant::now(),
            times,
            task,
        }
    }

    /// Each connection's time since the log started, in order.
    pub fn offsets(&self) -> Vec<Duration> {
        self.times
            .lock()
            .expect("connection log")
            .iter()
            .map(|t| t.duration_since(self.started))
            .collect()
    }
}

impl Drop for ConnectionLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The delays before each retry of one reconnect sequence of the
/// services' Redis clients (`redis::aio::ConnectionManager` as
/// `crates/product/src/cache/redis.rs` and `crates/order/src/stock_cache.rs`
/// configure it: min delay 100 ms, factor 2, max delay 5 s, 6 retries),
/// without their jitter, which only adds (each delay is d × [1, 2)).
pub const REDIS_RECONNECT_DELAYS_MS: [u64; 6] = [100, 200, 400, 800, 1_600, 3_200];

/// The most connection attempts any `window` can hold if the Redis client
/// reconnects by its schedule: sequences of 1 + 6 attempts at the minimum
/// delays, each new sequence starting the instant the last one failed
/// (the densest the schedule allows; a new sequence starts only when a
/// call sees the previous one fail).
pub fn redis_reconnect_bound(window: Duration) -> usize {
    let mut attempts = Vec::new();
    let mut start = 0u64;
    while start < 4 * u64::try_from(window.as_millis()).unwrap_or(u64::MAX) + 20_000 {
        let mut at = start;
        attempts.push(at);
        for delay in REDIS_RECONNECT_DELAYS_MS {
            at += delay;
            attempts.push(at);
        }
        start = at;
    }
    let width = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    attempts
        .iter()
        .map(|&from| {
            attempts
                .iter()
                .filter(|&&t| t >= from && t < from + width)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Asserts that the connection attempts one Redis client made at `edge`
/// during `window` (`offsets`, in order, the first being the first
/// attempt after the fault) follow its reconnect schedule: at least one
/// (it keeps trying), no more than [`redis_reconnect_bound`], and each
/// retry of a sequence (7 attempts) no sooner after the previous one than
/// its backoff step (minus 10 ms for the 5 ms sampling).
pub fn assert_redis_backoff(edge: &str, offsets: &[Duration], window: Duration) {
    let bound = redis_reconnect_bound(window);
    println!(
        "{edge}: {} connection attempts in {window:?} (bound {bound}), at {offsets:?}",
        offsets.len()
    );
    assert!(!offsets.is_empty(), "{edge}: the client keeps trying");
    assert!(
        offsets.len() <= bound,
        "{edge}: {} attempts in {window:?}, more than one per backoff step ({bound}): {offsets:?}",
        offsets.len()
    );
    let steps = REDIS_RECONNECT_DELAYS_MS.len() + 1;
    for (j, pair) in offsets.windows(2).enumerate() {
        let position = (j + 1) % steps;
        if position == 0 {
            continue; // a new sequence starts: no delay before it
        }
        let step = Duration::from_millis(REDIS_RECONNECT_DELAYS_MS[position - 1]);
        let gap = pair[1] - pair[0];
        assert!(
            gap + Duration::from_millis(10) >= step,
            "{edge}: retry {position} came {gap:?} after the previous attempt, \
             sooner than its backoff step {step:?}: {offsets:?}"
        );
    }
}
