//! The Redis cache backend, shared by every replica.
//!
//! Keys: `<prefix>gen` holds the generation (missing = 0, for example after a
//! `FLUSHALL`), `<prefix><generation>:<key>` the values, with a TTL.
//!
//! Failure handling, in order of defence:
//! 1. every call has its own timeout (`cache.redis_timeout_seconds`);
//! 2. after a failed call Redis rests for `cache.redis_retry_seconds`: calls
//!    during the rest are not made at all, so a hung Redis costs one timeout,
//!    and the first call after the rest is the probe;
//! 3. the [`ConnectionManager`] reconnects in the background after a broken
//!    connection, with jittered exponential backoff, never in a tight loop;
//! 4. an invalidation (`INCR gen`) that fails is remembered, and nothing is
//!    read from Redis until a later `INCR` succeeds, so entries from before a
//!    write are never served once Redis is back. (Two writes whose bumps
//!    race, one failing and one succeeding, can clear that flag early; the
//!    entries' TTL still bounds how long a copy can outlive its write.)

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use redis::{
    Client,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use tokio::time::Instant;

use super::Unavailable;
use crate::settings::CacheSettings;

/// `KEYS[1]` = the generation key, `ARGV` = value key prefix and suffix:
/// returns `{generation, value or nil}`.
const LOOKUP: &str = "local g = redis.call('GET', KEYS[1]) or '0' \
    return {g, redis.call('GET', ARGV[1] .. g .. ARGV[2])}";

/// The cache in Redis.
pub struct RedisCache {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    prefix: String,
    ttl: Duration,
    timeout: Duration,
    rest: Duration,
    resting_until: Mutex<Option<Instant>>,
    invalidation_pending: AtomicBool,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisCache {
    /// A cache at `url`, connecting lazily (on the first call).
    ///
    /// # Errors
    /// When `url` is not a Redis URL.
    pub fn new(url: &str, settings: &CacheSettings) -> anyhow::Result<Self> {
        let client = Client::open(url)?;
        let timeout = settings.redis_timeout_seconds.get();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(timeout))
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(5))
            .set_number_of_retries(6);
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self {
            inner: Arc::new(Inner {
                conn,
                prefix: settings.key_prefix.clone(),
                ttl: settings.ttl_seconds.get(),
                timeout,
                rest: settings.redis_retry_seconds.get(),
                resting_until: Mutex::new(None),
                invalidation_pending: AtomicBool::new(false),
            }),
        })
    }

    /// The current generation and the value of `key` in it, in one round
    /// trip (a Lua script reads the generation, then the entry).
    pub(super) async fn lookup(&self, key: &str) -> Result<(u64, Option<Bytes>), Unavailable> {
        let inner = &self.inner;
        if inner.invalidation_pending.load(Ordering::Acquire) {
            // Retry the missed bump first (at most once per rest period).
            if inner.resting() {
                return Err(Unavailable::Resting);
            }
            self.invalidate().await;
            if inner.invalidation_pending.load(Ordering::Acquire) {
                return Err(Unavailable::Failed);
            }
        }
        let gen_key = inner.gen_key();
        let (prefix, suffix) = (inner.prefix.clone(), format!(":{key}"));
        let (generation, value) = inner
            .call(|mut c| async move {
                redis::cmd("EVAL")
                    .arg(LOOKUP)
                    .arg(1)
                    .arg(gen_key)
                    .arg(prefix)
                    .arg(suffix)
                    .query_async::<(u64, Option<Vec<u8>>)>(&mut c)
                    .await
            })
            .await?;
        Ok((generation, value.map(Bytes::from)))
    }

    pub(super) fn put(&self, generation: u64, key: &str, value: Bytes) {
        let inner = Arc::clone(&self.inner);
        let key = inner.value_key(generation, key);
        let ttl_ms = u64::try_from(inner.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        tokio::spawn(async move {
            let _ = inner
                .call(|mut c| async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(value.as_ref())
                        .arg("PX")
                        .arg(ttl_ms)
                        .exec_async(&mut c)
                        .await
                })
                .await;
        });
    }

    pub(super) async fn invalidate(&self) {
        let inner = &self.inner;
        let key = inner.gen_key();
        // Not subject to the rest: an invalidation is always attempted.
        let done = inner
            .call_now(|mut c| async move {
                redis::cmd("INCR").arg(key).query_async::<i64>(&mut c).await
            })
            .await;
        inner
            .invalidation_pending
            .store(done.is_err(), Ordering::Release);
        if done.is_err() {
            tracing::warn!("could not invalidate the Redis cache; not reading it until it answers");
        }
    }
}

impl Inner {
    fn gen_key(&self) -> String {
        format!("{}gen", self.prefix)
    }

    fn value_key(&self, generation: u64, key: &str) -> String {
        format!("{}{generation}:{key}", self.prefix)
    }

    fn resting(&self) -> bool {
        let mut until = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    fn rest(&self) {
        *self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + self.rest);
    }

    /// One Redis call, unless resting; bounded by the timeout.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if self.resting() {
            return Err(Unavailable::Resting);
        }
        self.call_now(f).await
    }

    /// One Redis call, bounded by the timeout; a failure starts a rest.
    async fn call_now<T, F, Fut>(&self, f: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(self.timeout, f(self.conn.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "redis call failed");
                self.rest();
                Err(Unavailable::Failed)
            }
            Err(_) => {
                tracing::debug!(timeout = ?self.timeout, "redis call timed out");
                self.rest();
                Err(Unavailable::Failed)
            }
        }
    }
}
