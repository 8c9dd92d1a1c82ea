//! Tokens already verified: their claims, kept until they expire, so a
//! customer's next request costs a map look-up instead of a signature check.
//!
//! A client sends the same access token with every request for its whole
//! lifetime, and ShopEasy checks it twice per order (the gateway, then the
//! order service). An Ed25519 check costs about 50 µs of CPU; under overload
//! the gateway paid it for every request it then refused, and the sweep's
//! profile showed signature checks at 8 % of the embedded system's CPU at 3×
//! its capacity.
//!
//! What makes a cached verdict as good as a fresh one:
//!
//! - **The key is the whole token.** A hit needs the same bytes that were
//!   verified: a changed header, claim or signature is another key and is
//!   verified in full. Only tokens that passed every check are stored; a
//!   refused token is checked again each time (and rate-limited by the
//!   gateway like any anonymous request), so forged tokens cannot fill the
//!   map.
//! - **Time is checked again on every hit.** `exp` (with the leeway) is
//!   compared with the clock at each look-up; `nbf` needs no second look,
//!   since a token valid at its verification stays past its `nbf`.
//! - **The keys it was verified with must still be the keys in force.**
//!   Each entry remembers the key set's generation (every finished JWKS
//!   refresh moves it on); an entry of an older generation is verified
//!   again, so a key withdrawn by the issuer stops verifying at the next
//!   refresh, as without the cache.
//! - **Bounded.** At most [`CAPACITY`] entries of at most
//!   [`MAX_TOKEN_BYTES`](crate::verifier::MAX_TOKEN_BYTES) each: when full,
//!   expired entries go first, then the least recently used. Only
//!   issuer-signed tokens get in, so the bound is met by real customers
//!   within one token lifetime, and a miss costs what every request cost
//!   before.
//!
//! Written here rather than taken from a cache crate because the entry's
//! validity is the point (expiry from the token itself, the key generation,
//! the leeway) and the map is thirty lines; the recency order is the same
//! tick-ordered map as product's page cache.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use crate::verifier::Claims;

/// Most tokens kept per verifier: about 4 MB at the demo issuer's ~400-byte
/// tokens, far above the customers one gateway serves within a token's
/// lifetime (the load generator signs in 1,000).
pub(crate) const CAPACITY: usize = 8192;

/// One verified token's verdict.
#[derive(Debug, Clone)]
struct Entry {
    claims: Claims,
    /// The key set's generation it was verified with.
    generation: u64,
    /// Its place in the recency order.
    tick: u64,
}

/// Verified tokens, by their full text. Cloning shares the map.
#[derive(Debug, Clone, Default)]
pub(crate) struct VerifiedTokens {
    inner: Arc<Mutex<Lru>>,
}

#[derive(Debug, Default)]
struct Lru {
    map: HashMap<Arc<str>, Entry>,
    /// tick → token, oldest first.
    order: BTreeMap<u64, Arc<str>>,
    next_tick: u64,
}

impl VerifiedTokens {
    /// The claims of `token` if it was verified with the keys of
    /// `generation` and, at `now` (seconds since the epoch), has not
    /// expired beyond `leeway`. An entry that no longer holds is dropped.
    pub(crate) fn get(
        &self,
        token: &str,
        generation: u64,
        now: u64,
        leeway: u64,
    ) -> Option<Claims> {
        let mut lru = self.lock();
        let entry = lru.map.get(token)?;
        if entry.generation != generation || entry.claims.expires_at.saturating_add(leeway) < now {
            lru.remove(token);
            return None;
        }
        let claims = entry.claims.clone();
        lru.touch(token);
        Some(claims)
    }

    /// Keeps `claims`, the verdict of a full verification of `token` with
    /// the keys of `generation`.
    pub(crate) fn insert(
        &self,
        token: &str,
        claims: &Claims,
        generation: u64,
        now: u64,
        leeway: u64,
    ) {
        let mut lru = self.lock();
        lru.remove(token);
        if lru.map.len() >= CAPACITY {
            lru.drop_expired(now, leeway);
        }
        while lru.map.len() >= CAPACITY {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.map.remove(&oldest);
        }
        let token: Arc<str> = Arc::from(token);
        let tick = lru.tick();
        lru.order.insert(tick, token.clone());
        lru.map.insert(
            token,
            Entry {
                claims: claims.clone(),
                generation,
                tick,
            },
        );
    }

    /// How many tokens are kept.
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Lru {
    fn tick(&mut self) -> u64 {
        let t = self.next_tick;
        self.next_tick += 1;
        t
    }

    fn touch(&mut self, token: &str) {
        let tick = self.tick();
        let Some((key, entry)) = self.map.get_key_value(token) else {
            return;
        };
        let (key, old) = (key.clone(), entry.tick);
        self.order.remove(&old);
        self.order.insert(tick, key);
        if let Some(e) = self.map.get_mut(token) {
            e.tick = tick;
        }
    }

    fn remove(&mut self, token: &str) {
        if let Some(e) = self.map.remove(token) {
            self.order.remove(&e.tick);
        }
    }

    fn drop_expired(&mut self, now: u64, leeway: u64) {
        self.map
            .retain(|_, e| e.claims.expires_at.saturating_add(leeway) >= now);
        let map = &self.map;
        self.order.retain(|_, t| map.contains_key(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(sub: &str, exp: u64) -> Claims {
        Claims {
            subject: sub.to_owned(),
            scopes: Vec::new(),
            client_id: None,
            token_id: None,
            expires_at: exp,
        }
    }

    #[test]
    fn a_verified_token_answers_until_it_expires_beyond_the_leeway() {
        let cache = VerifiedTokens::default();
        cache.insert("t", &claims("alice", 100), 1, 50, 30);
        assert_eq!(cache.get("t", 1, 60, 30).unwrap().subject, "alice");
        assert!(cache.get("t", 1, 130, 30).is_some(), "inside the leeway");
        assert!(cache.get("t", 1, 131, 30).is_none(), "expired");
        assert_eq!(cache.len(), 0, "an expired entry is dropped");
    }

    #[test]
    fn only_the_same_bytes_and_the_same_keys_hit() {
        let cache = VerifiedTokens::default();
        cache.insert("a.b.c", &claims("alice", 100), 1, 50, 0);
        assert!(cache.get("a.b.d", 1, 60, 0).is_none(), "another signature");
        assert!(cache.get("a.b.c ", 1, 60, 0).is_none(), "another text");
        assert!(cache.get("a.b.c", 2, 60, 0).is_none(), "keys refreshed");
        assert!(
            cache.get("a.b.c", 1, 60, 0).is_none(),
            "an entry of old keys is dropped, not kept for later"
        );
    }

    #[test]
    fn it_is_bounded_and_evicts_expired_entries_first_then_the_coldest() {
        let cache = VerifiedTokens::default();
        // One expired entry and one hot entry among a full map.
        cache.insert("old", &claims("x", 10), 1, 0, 0);
        cache.insert("hot", &claims("h", 1000), 1, 0, 0);
        for i in 0..CAPACITY - 2 {
            cache.insert(&format!("t{i}"), &claims("c", 1000), 1, 0, 0);
        }
        assert_eq!(cache.len(), CAPACITY);
        // The hot one is used; the next insert drops the expired one.
        assert!(cache.get("hot", 1, 20, 0).is_some());
        cache.insert("new1", &claims("n", 1000), 1, 20, 0);
        assert_eq!(cache.len(), CAPACITY);
        assert!(
            cache.get("t0", 1, 20, 0).is_some(),
            "nothing live dropped yet"
        );
        // Full of live entries: the least recently used goes (t1; t0 and
        // hot were just used).
        cache.insert("new2", &claims("n", 1000), 1, 20, 0);
        assert_eq!(cache.len(), CAPACITY);
        assert!(cache.get("t1", 1, 20, 0).is_none());
        assert!(cache.get("hot", 1, 20, 0).is_some());
        assert!(cache.get("new2", 1, 20, 0).is_some());
        for i in 0..2 * CAPACITY {
            cache.insert(&format!("flood{i}"), &claims("f", 1000), 1, 20, 0);
        }
        assert_eq!(cache.len(), CAPACITY, "a flood never grows it");
    }
}
