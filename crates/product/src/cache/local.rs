//! The in-process cache backend (no Redis configured): a bounded LRU map
//! with a TTL per entry and a generation counter.
//!
//! Bounded because clients choose the keys (a list page's cursor and
//! limit): at `capacity` entries, a fill first drops expired entries and
//! then the least recently used one, so 10,000 made-up page keys cannot
//! grow the process, and cannot flush the hot entries either (each
//! look-up of those moves it to the front).

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

/// One cached value, with its expiry and its place in the recency order.
#[derive(Debug)]
struct Entry {
    value: Bytes,
    expires: Instant,
    tick: u64,
}

/// The map and its recency order (`tick` → key, oldest first): a plain
/// LRU, written here because it is twenty lines and keeps the TTL and the
/// generation in one lock.
#[derive(Debug, Default)]
struct Lru {
    map: HashMap<Key, Entry>,
    order: BTreeMap<u64, Key>,
    next_tick: u64,
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
        }
    }

    fn insert(&mut self, key: Key, value: Bytes, expires: Instant, capacity: usize, now: Instant) {
        self.remove(&key);
        if self.map.len() >= capacity {
            self.map.retain(|_, e| e.expires > now);
            let map = &self.map;
            self.order.retain(|_, k| map.contains_key(k));
        }
        while self.map.len() >= capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        let tick = self.next_tick;
        self.next_tick += 1;
        self.order.insert(tick, key.clone());
        self.map.insert(
            key,
            Entry {
                value,
                expires,
                tick,
            },
        );
    }
}

/// In-process entries of one generation.
#[derive(Debug)]
pub struct LocalCache {
    ttl: Duration,
    capacity: usize,
    generation: AtomicU64,
    entries: Mutex<Lru>,
}

impl LocalCache {
    /// An empty cache of at most `capacity` entries, each kept for `ttl`.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity: capacity.max(1),
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
        self.capacity
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
            self.capacity,
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
        let c = LocalCache::new(Duration::from_secs(10), 2);
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
        let c = LocalCache::new(Duration::from_secs(10), 2);
        for k in ["a", "b", "c", "d"] {
            c.put(0, k, Bytes::from_static(b"x"));
        }
        assert_eq!(c.len(), 2);
        assert!(c.get(0, "d").is_some());
        assert!(c.get(0, "c").is_some());
        assert!(c.get(0, "a").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_entry_goes_first() {
        let c = LocalCache::new(Duration::from_secs(10), 2);
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
