//! The Redis cache backend, shared by every replica.
//!
//! Keys: `<prefix>gen` holds the generation (missing = 0, for example after a
//! `FLUSHALL`), `<prefix><generation>:<key>` the values, with a TTL.
//!
//! Bounded: products and *first* list pages only (one per `limit`), so the
//! keys of a generation are at most the catalogue plus the allowed limits;
//! a page after a cursor (a key the client makes up) is read from the
//! database and not stored (`is_later_page` in the cache module). Redis itself runs
//! with `maxmemory` and `allkeys-lru` in the deployments, so even a TTL
//! storm of product keys evicts rather than grows.
//!
//! Failure handling, in order of defence:
//! 1. every call goes through the runtime's [`RedisGuard`]: its own timeout
//!    (`cache.redis_timeout_seconds`), and after a failed call Redis rests
//!    for `cache.redis_retry_seconds` (calls during the rest are not made at
//!    all, so a hung Redis costs one timeout, and the first call after the
//!    rest is the probe); the connection reconnects in the background with
//!    jittered exponential backoff, never in a tight loop;
//! 2. an invalidation (`INCR gen`) is attempted even while resting, and one
//!    that fails is remembered: nothing is read from Redis until a later
//!    `INCR` succeeds, so entries from before a write are never served once
//!    Redis is back. (Two writes whose bumps race, one failing and one
//!    succeeding, can clear that flag early; the entries' TTL still bounds
//!    how long a copy can outlive its write.)

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use shopeasy_runtime::redis_guard::RedisGuard;

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
    redis: RedisGuard,
    prefix: String,
    ttl: Duration,
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
        Ok(Self {
            inner: Arc::new(Inner {
                redis: RedisGuard::new("product cache", url, &settings.redis)?,
                prefix: settings.key_prefix.clone(),
                ttl: settings.ttl_seconds.get(),
                invalidation_pending: AtomicBool::new(false),
            }),
        })
    }

    /// Its Redis guard, whose report `/admin/resilience` shows as `redis`.
    pub fn guard(&self) -> &RedisGuard {
        &self.inner.redis
    }

    /// The current generation and the value of `key` in it, in one round
    /// trip (a Lua script reads the generation, then the entry).
    pub(super) async fn lookup(&self, key: &str) -> Result<(u64, Option<Bytes>), Unavailable> {
        let inner = &self.inner;
        if inner.invalidation_pending.load(Ordering::Acquire) {
            // Retry the missed bump first (at most once per rest period).
            if inner.redis.is_resting() {
                return Err(Unavailable::Resting);
            }
            self.invalidate().await;
            if inner.invalidation_pending.load(Ordering::Acquire) {
                return Err(Unavailable::Failed);
            }
        }
        let mut eval = redis::cmd("EVAL");
        eval.arg(LOOKUP)
            .arg(1)
            .arg(inner.gen_key())
            .arg(&inner.prefix)
            .arg(format!(":{key}"));
        let (generation, value) = inner.redis.query::<(u64, Option<Vec<u8>>)>(&eval).await?;
        Ok((generation, value.map(Bytes::from)))
    }

    pub(super) fn put(&self, generation: u64, key: &str, value: Bytes) {
        if super::is_later_page(key) {
            return;
        }
        let inner = Arc::clone(&self.inner);
        let ttl_ms = u64::try_from(inner.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut set = redis::cmd("SET");
        set.arg(inner.value_key(generation, key))
            .arg(value.as_ref())
            .arg("PX")
            .arg(ttl_ms);
        tokio::spawn(async move {
            let _ = inner.redis.query::<()>(&set).await;
        });
    }

    pub(super) async fn invalidate(&self) {
        let inner = &self.inner;
        let mut incr = redis::cmd("INCR");
        incr.arg(inner.gen_key());
        // Not subject to the rest: an invalidation is always attempted.
        let done = inner.redis.query_now::<i64>(&incr).await;
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
}
