//! The in-process cache backend (no Redis configured): a bounded LRU map
//! with a TTL per entry and a generation counter.
//!
//! Bounded because clients choose the keys (a list page's cursor and
//! limit): a fill that would pass `capacity` entries or `max_bytes` of
//! values drops the least recently used entries first, so made-up page
//! keys cannot grow the process, and cannot flush the hot entries either
//! (each look-up of those moves it to the front). Bytes as well as entries:
//! any UUID is a valid cursor, so a client can ask for as many distinct
//! pages of 100 real products as it likes, each as large as the catalogue's
//! descriptions make it; counted in entries alone, 10,000 of them could be
//! gigabytes. A value larger than `max_bytes` is not kept. Expired entries
//! are dropped when looked up or when their turn as least recently used
//! comes, never by a scan of the whole map (a fill stays O(log n) under the
//! lock every hit also takes).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use tokio::time::Instant;

type Key = (u64, String);

/// One cached value, with its expiry and its places in the two orders.
#[derive(Debug)]
struct Entry {
    value: Bytes,
    expires: Instant,
    /// Its place in the recency order.
    tick: u64,
    /// Its place in the fill order (kept across look-ups).
    born: u64,
}

/// The map with its recency order (`tick` → key, least recently used
/// first) and its fill order (`born` → key, oldest first): a plain LRU,
/// written here because it is short and keeps the TTL, the byte count and
/// the generation in one lock. Every entry lives `ttl` from its fill, so
/// the fill order is also the expiry order: expired entries are found at
/// its front without a scan.
#[derive(Debug, Default)]
struct Lru {
    map: HashMap<Key, Entry>,
    order: BTreeMap<u64, Key>,
    filled: BTreeMap<u64, Key>,
    next_tick: u64,
    /// The values' bytes held.
    bytes: usize,
}

impl Lru {
    fn touch(&mut self, key: &Key) -> Option<&Entry> {
        let tick = self.next_tick;
        let entry = self.map.get_mut(key)?;
        self.order.remove(&entry.tick);
        entry.tick = tick;
        self.order.insert(tick, key.clone());
        self.next_tick += 1;
        Some(entry)
    }

    fn remove(&mut self, key: &Key) {
        if let Some(e) = self.map.remove(key) {
            self.order.remove(&e.tick);
            self.filled.remove(&e.born);
            self.bytes -= e.value.len();
        }
    }

    fn full(&self, bounds: Bounds, adding: usize) -> bool {
        self.map.len() >= bounds.capacity || self.bytes + adding > bounds.max_bytes
    }

    /// Keeps `value` under `key` unless it alone is over `max_bytes`,
    /// making room first: expired entries (oldest fill first), then the
    /// least recently used.
    fn insert(&mut self, key: Key, value: Bytes, expires: Instant, bounds: Bounds, now: Instant) {
        self.remove(&key);
        if value.len() > bounds.max_bytes {
            return;
        }
        while self.full(bounds, value.len()) {
            let expired = self
                .filled
                .first_key_value()
                .map(|(_, k)| k)
                .filter(|k| self.map.get(*k).is_some_and(|e| e.expires <= now))
                .cloned();
            let victim = expired.or_else(|| self.order.first_key_value().map(|(_, k)| k.clone()));
            let Some(victim) = victim else {
                break;
            };
            self.remove(&victim);
        }
        self.bytes += value.len();
        let tick = self.next_tick;
        self.next_tick += 1;
        self.order.insert(tick, key.clone());
        self.filled.insert(tick, key.clone());
        self.map.insert(
            key,
            Entry {
                value,
                expires,
                tick,
                born: tick,
            },
        );
    }
}

/// What the cache may hold at most.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    capacity: usize,
    max_bytes: usize,
}

/// In-process entries of one generation.
#[derive(Debug)]
pub struct LocalCache {
    ttl: Duration,
    bounds: Bounds,
    generation: AtomicU64,
    entries: Mutex<Lru>,
}

impl LocalCache {
    /// An empty cache of at most `capacity` entries and `max_bytes` of
    /// values, each kept for `ttl`.
    pub fn new(ttl: Duration, capacity: usize, max_bytes: usize) -> Self {
        Self {
            ttl,
            bounds: Bounds {
                capacity: capacity.max(1),
                max_bytes,
            },
            generation: AtomicU64::new(0),
            entries: Mutex::default(),
        }
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(super) fn lookup(&self, key: &str) -> (u64, Option<Bytes>) {
        let generation = self.generation();
        (generation, self.get(generation, key))
    }

    /// Entries held now (expired ones included until a fill drops them).
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries held.
    pub fn capacity(&self) -> usize {
        self.bounds.capacity
    }

    /// The values' bytes held now.
    pub fn bytes(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }

    fn get(&self, generation: u64, key: &str) -> Option<Bytes> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (generation, key.to_owned());
        match entries.touch(&key) {
            Some(e) if e.expires > Instant::now() => Some(e.value.clone()),
            Some(_) => {
                entries.remove(&key);
                None
            }
            None => None,
        }
    }

    pub(super) fn put(&self, generation: u64, key: &str, value: Bytes) {
        if generation != self.generation() {
            return; // Filled by a read that raced a write: nobody will ask.
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert(
            (generation, key.to_owned()),
            value,
            now + self.ttl,
            self.bounds,
            now,
        );
    }

    pub(super) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.entries.lock().unwrap_or_else(PoisonError::into_inner) = Lru::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_and_invalidate() {
        let c = LocalCache::new(Duration::from_secs(10), 2, 1 << 20);
        let g = c.generation();
        c.put(g, "a", Bytes::from_static(b"1"));
        assert_eq!(c.get(g, "a"), Some(Bytes::from_static(b"1")));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(c.get(g, "a"), None);

        c.put(g, "a", Bytes::from_static(b"1"));
        c.invalidate();
        let g2 = c.generation();
        assert_ne!(g, g2);
        assert_eq!(c.get(g, "a"), None);
        // A fill from before the invalidation is dropped.
        c.put(g, "b", Bytes::from_static(b"2"));
        assert_eq!(c.get(g, "b"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_is_bounded() {
        let c = LocalCache::new(Duration::from_secs(10), 2, 1 << 20);
        for k in ["a", "b", "c", "d"] {
            c.put(0, k, Bytes::from_static(b"x"));
        }
        assert_eq!(c.len(), 2);
        assert!(c.get(0, "d").is_some());
        assert!(c.get(0, "c").is_some());
        assert!(c.get(0, "a").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_are_bounded_and_a_value_over_the_bound_is_not_kept() {
        let c = LocalCache::new(Duration::from_secs(10), 100, 100);
        for k in ["a", "b", "c"] {
            c.put(0, k, Bytes::from(vec![0; 40]));
        }
        assert_eq!(c.bytes(), 80, "two of 40 fit in 100 bytes");
        assert!(c.get(0, "a").is_none(), "the least recently used went");
        assert!(c.get(0, "b").is_some() && c.get(0, "c").is_some());
        c.put(0, "big", Bytes::from(vec![0; 101]));
        assert!(c.get(0, "big").is_none(), "over the bound alone: not kept");
        assert_eq!(c.bytes(), 80, "and nothing was evicted for it");
        c.put(0, "b", Bytes::from(vec![0; 10]));
        assert_eq!(c.bytes(), 50, "a refill replaces the old value's bytes");
        c.invalidate();
        assert_eq!(c.bytes(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_entry_goes_first() {
        let c = LocalCache::new(Duration::from_secs(10), 2, 1 << 20);
        c.put(0, "hot", Bytes::from_static(b"h"));
        c.put(0, "b", Bytes::from_static(b"b"));
        assert!(c.get(0, "hot").is_some(), "used: now the most recent");
        c.put(0, "c", Bytes::from_static(b"c"));
        assert!(c.get(0, "hot").is_some());
        assert!(c.get(0, "b").is_none(), "the least recently used went");
        tokio::time::advance(Duration::from_secs(5)).await;
        c.put(0, "d", Bytes::from_static(b"d"));
        assert!(c.get(0, "c").is_none(), "c was used less recently than hot");
        assert!(c.get(0, "hot").is_some());
        // Expired entries go before live ones, however recently used.
        tokio::time::advance(Duration::from_secs(6)).await;
        c.put(0, "e", Bytes::from_static(b"e"));
        assert!(c.get(0, "d").is_some(), "hot expired and went first");
        assert!(c.get(0, "e").is_some());
        assert!(c.get(0, "hot").is_none());
        assert_eq!(c.len(), 2);
    }
}
