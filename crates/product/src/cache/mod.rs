//! The read cache: cache-aside storage of serialized products and list pages
//! that never fails a request.
//!
//! **Invalidation by generation.** Every key carries a generation number;
//! every write to the catalogue bumps it, so every entry written before is
//! unreachable at once (and expires by its TTL). A reader takes the
//! generation *before* it reads the database, so a read that raced a write
//! can only fill an entry under the old generation, which no later request
//! looks up: the cached copy from before an update is never served. Writes
//! are rare in a catalogue; one bump for all keys keeps list pages (which any
//! write may change) correct without tracking which page holds what.
//!
//! **Backends.** [`redis::RedisCache`] when `redis_url` is set (shared by
//! every replica), else [`local::LocalCache`] (in-process). Every Redis call
//! has its own short timeout; any failure makes that call a miss, and Redis
//! is then skipped for `cache.redis_retry_seconds` so a dead or hung Redis
//! costs one timeout rather than one per request. An invalidation that could
//! not reach Redis is remembered: Redis is not read again until a bump has
//! succeeded.
//!
//! **Bounded, because clients choose the page keys** (a cursor, a limit):
//! the in-process backend is an LRU of at most `cache.local_capacity`
//! entries and `cache.local_max_bytes` of values (a flood of made-up keys
//! evicts the coldest entries, never grows the process); the Redis backend stores products and first pages only
//! (pages after a cursor are not stored: keyset reads are cheap, and the
//! shared Redis would otherwise hold every cursor any client sent).
//!
//! Metrics: `shopeasy_product_cache_requests_total{kind,result}` with
//! `kind` = `item|page` and `result` = `hit|miss|coalesced|error|bypass`
//! (bypass: Redis was skipped after a recent error); the same counts are
//! under `product_cache` in `/admin/resilience`.

pub mod local;
pub mod redis;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::settings::CacheSettings;

/// What a cached value is, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One product.
    Item,
    /// One list page.
    Page,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Item => "item",
            Self::Page => "page",
        }
    }
}

/// How one cache look-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the cache.
    Hit,
    /// Not cached: this request read the database.
    Miss,
    /// Not cached: this request shared another request's database read.
    Coalesced,
    /// The cache failed (timeout, error); the database answered.
    Error,
    /// The cache was skipped after a recent failure; the database answered.
    Bypass,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Coalesced => "coalesced",
            Self::Error => "error",
            Self::Bypass => "bypass",
        }
    }
}

/// A cache call that did not answer: the Redis guard's, which the local
/// backend never returns.
pub use shopeasy_runtime::redis_guard::Unavailable;

impl From<Unavailable> for Outcome {
    fn from(u: Unavailable) -> Self {
        match u {
            Unavailable::Failed => Self::Error,
            Unavailable::Resting => Self::Bypass,
        }
    }
}

/// Whether `key` is a list page after a cursor: the catalogue's page keys
/// are `l:<cursor>:<limit>`, a first page's cursor empty.
pub(crate) fn is_later_page(key: &str) -> bool {
    key.strip_prefix("l:")
        .and_then(|rest| rest.rsplit_once(':'))
        .is_some_and(|(cursor, _limit)| !cursor.is_empty())
}

enum Backend {
    Local(local::LocalCache),
    Redis(redis::RedisCache),
}

/// The read cache. Cheap to clone.
#[derive(Clone)]
pub struct ReadCache {
    backend: Arc<Backend>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache")
            .field("backend", &self.backend_name())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Stats {
    hit: AtomicU64,
    miss: AtomicU64,
    coalesced: AtomicU64,
    error: AtomicU64,
    bypass: AtomicU64,
}

impl ReadCache {
    /// A cache in Redis at `redis_url`, or in-process when it is empty.
    ///
    /// Never connects here: Redis may be down at start-up, and the service
    /// still starts (reads go to the database until Redis answers).
    ///
    /// # Errors
    /// When `redis_url` is not a Redis URL.
    pub fn new(settings: &CacheSettings, redis_url: &str) -> anyhow::Result<Self> {
        let ttl = settings.ttl_seconds.get();
        let backend = if redis_url.is_empty() {
            Backend::Local(local::LocalCache::new(
                ttl,
                settings.local_capacity as usize,
                usize::try_from(settings.local_max_bytes).unwrap_or(usize::MAX),
            ))
        } else {
            Backend::Redis(redis::RedisCache::new(redis_url, settings)?)
        };
        Ok(Self {
            backend: Arc::new(backend),
            stats: Arc::default(),
        })
    }

    /// An in-process cache (tests, embedded mode), its bytes bounded as
    /// `cache.local_max_bytes`'s default.
    pub fn local(ttl: Duration, capacity: usize) -> Self {
        let max_bytes =
            usize::try_from(CacheSettings::default().local_max_bytes).unwrap_or(usize::MAX);
        Self {
            backend: Arc::new(Backend::Local(local::LocalCache::new(
                ttl, capacity, max_bytes,
            ))),
            stats: Arc::default(),
        }
    }

    /// The Redis guard, when the cache is in Redis (for the `redis` member
    /// of `/admin/resilience`).
    pub fn redis_guard(&self) -> Option<&shopeasy_runtime::redis_guard::RedisGuard> {
        match &*self.backend {
            Backend::Local(_) => None,
            Backend::Redis(r) => Some(r.guard()),
        }
    }

    /// `redis` or `local`.
    pub fn backend_name(&self) -> &'static str {
        match *self.backend {
            Backend::Local(_) => "local",
            Backend::Redis(_) => "redis",
        }
    }

    /// The current generation (to fill entries under) and the value of
    /// `key` in it.
    ///
    /// # Errors
    /// When the backend did not answer (then the request reads the database
    /// and fills nothing).
    pub async fn lookup(&self, key: &str) -> Result<(u64, Option<Bytes>), Unavailable> {
        match &*self.backend {
            Backend::Local(c) => Ok(c.lookup(key)),
            Backend::Redis(c) => c.lookup(key).await,
        }
    }

    /// Stores `value` under `key` in `generation`, without making the
    /// caller wait (a Redis write runs in the background, bounded by its
    /// timeout).
    pub fn put(&self, generation: u64, key: &str, value: Bytes) {
        match &*self.backend {
            Backend::Local(c) => c.put(generation, key, value),
            Backend::Redis(c) => c.put(generation, key, value),
        }
    }

    /// Makes every entry unreachable (after a write to the catalogue).
    pub async fn invalidate(&self) {
        match &*self.backend {
            Backend::Local(c) => c.invalidate(),
            Backend::Redis(c) => c.invalidate().await,
        }
    }

    /// Counts one look-up's outcome.
    pub fn record(&self, kind: Kind, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Hit => &self.stats.hit,
            Outcome::Miss => &self.stats.miss,
            Outcome::Coalesced => &self.stats.coalesced,
            Outcome::Error => &self.stats.error,
            Outcome::Bypass => &self.stats.bypass,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(
            "shopeasy_product_cache_requests_total",
            "kind" => kind.label(),
            "result" => outcome.label(),
        )
        .increment(1);
    }

    /// Entries held and the most held, for the in-process backend
    /// (`None` for Redis, bounded by its `maxmemory`).
    pub fn occupancy(&self) -> Option<(usize, usize)> {
        match &*self.backend {
            Backend::Local(c) => Some((c.len(), c.capacity())),
            Backend::Redis(_) => None,
        }
    }

    /// The counts, for `/admin/resilience`.
    pub fn report(&self) -> Value {
        let s = &self.stats;
        let (entries, capacity) = self.occupancy().unzip();
        let bytes = match &*self.backend {
            Backend::Local(c) => Some(c.bytes()),
            Backend::Redis(_) => None,
        };
        json!({
            "backend": self.backend_name(),
            "entries": entries,
            "capacity": capacity,
            "bytes": bytes,
            "hit": s.hit.load(Ordering::Relaxed),
            "miss": s.miss.load(Ordering::Relaxed),
            "coalesced": s.coalesced.load(Ordering::Relaxed),
            "error": s.error.load(Ordering::Relaxed),
            "bypass": s.bypass.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_pages_are_told_from_first_pages_and_items() {
        assert!(!is_later_page("l::20"));
        assert!(is_later_page("l:abc:20"));
        assert!(!is_later_page("p:0d6c"));
    }
}
