//! The in-process cache backend (no Redis configured): a bounded map with a
//! TTL per entry and a generation counter.

use std::{
    collections::HashMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use tokio::time::Instant;

/// In-process entries of one generation.
#[derive(Debug)]
pub struct LocalCache {
    ttl: Duration,
    capacity: usize,
    generation: AtomicU64,
    entries: Mutex<HashMap<(u64, String), (Bytes, Instant)>>,
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

    fn get(&self, generation: u64, key: &str) -> Option<Bytes> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(&(generation, key.to_owned()))
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(value, _)| value.clone())
    }

    pub(super) fn put(&self, generation: u64, key: &str, value: Bytes) {
        if generation != self.generation() {
            return; // Filled by a read that raced a write: nobody will ask.
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= self.capacity {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= self.capacity {
                // Still full of live entries: start over rather than track
                // recency (a catalogue's hot set is small).
                entries.clear();
            }
        }
        entries.insert((generation, key.to_owned()), (value, now + self.ttl));
    }

    pub(super) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
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
        let len = c.entries.lock().unwrap().len();
        assert!(len <= 2, "{len}");
        assert!(c.get(0, "d").is_some());
    }
}
