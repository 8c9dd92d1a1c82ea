//! The per-client rate limit (SPEC §11): one token bucket per [`ClientKey`],
//! in a table with a hard cap on how many clients it remembers, and the
//! `RateLimit-Policy` / `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers that describe it.
//!
//! **Why not `governor`.** Its keyed limiter (`DefaultKeyedRateLimiter`, a
//! `DashMap` of GCRA cells) has no cap on the number of keys: it grows with
//! every address seen until `retain_recent` is called, and a client spraying
//! source addresses (IPv6 gives it 2^64 of them) grows it without bound in
//! between. Wrapping it would mean a second table of keys to bound the
//! first; the bucket itself is a few lines, so the table here is the bound:
//! when it is full, buckets that have refilled (the same as not being
//! tracked at all) are dropped, then the idlest quarter — so every insert
//! costs amortised O(1) and the table never exceeds `max_clients`.
//!
//! **Keys.** Anonymous traffic is keyed by the client's address; a request
//! whose bearer token the gateway verified (`/api/orders*`) by its customer
//! (`sub`), so customers behind one NAT do not share a budget and one
//! customer gains nothing by changing address. The customer is kept as a
//! 64-bit keyed hash of `sub` (SipHash with a per-process random key), so a
//! key is the same few bytes whatever a token's `sub` holds, and nobody can
//! pick a `sub` that collides with another customer's key.
//!
//! **Policies.** There are two limiters, each with its own table and
//! policy name: `default` (every request, by address or customer) and
//! `orders` (a customer's placements, `limits.customer_orders_per_minute`
//! with a burst of `limits.customer_order_burst`). A placement takes from
//! both; a 429 names the policy that refused.
//!
//! The bucket holds `burst` tokens and refills `rate` per second; a request
//! takes one. The draft's quota policy describes it as `q` = `burst` units
//! per `w` = the seconds an empty bucket takes to refill, and `RateLimit`
//! says what is left (`r`) and when the bucket is full again (`t`).

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    net::IpAddr,
    sync::{LazyLock, Mutex, PoisonError},
};

use http::HeaderValue;
use tokio::time::Instant;

/// The name of the per-client policy in the headers.
pub(crate) const DEFAULT_POLICY: &str = "default";
/// The name of the per-customer placement policy.
pub(crate) const ORDERS_POLICY: &str = "orders";

/// The key of the customer hash, drawn once per process.
static CUSTOMER_HASH: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// Who a rate limit is kept for: the client's address (an IPv6 client by
/// its /64, the smallest block one subscriber usually gets, so one host
/// cannot hop addresses to dodge the limit), or a verified customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    /// A client known only by its network address.
    Address(IpAddr),
    /// A customer whose token was verified: the keyed hash of its `sub`
    /// (bounded in size whatever the token says).
    Customer(u64),
}

impl ClientKey {
    /// The key of a client connecting from `ip`.
    pub(crate) fn of_address(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::Address(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Address(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Self::Address(IpAddr::V6(prefix.into()))
                }
            },
        }
    }

    /// The key of the verified customer `sub`.
    pub(crate) fn of_customer(sub: &str) -> Self {
        Self::Customer(CUSTOMER_HASH.hash_one(sub))
    }
}

/// What the limiter said about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Whether the request may go on.
    pub(crate) allowed: bool,
    /// Whole tokens left after it (the draft's `r`).
    pub(crate) remaining: u32,
    /// Seconds until the bucket is full again (`t`).
    pub(crate) reset: u32,
    /// Seconds until one token is back: the 429's `Retry-After`.
    pub(crate) retry_after: u32,
    /// The policy's quota and window (`q`, `w`), for a 429's
    /// `RateLimit-Policy`.
    pub(crate) quota: u32,
    pub(crate) window: u32,
    /// The policy's name ([`DEFAULT_POLICY`] or [`ORDERS_POLICY`]).
    pub(crate) name: &'static str,
}

impl Verdict {
    /// The `RateLimit` field: `"default";r=42;t=1`.
    pub(crate) fn header(self) -> HeaderValue {
        field(&self.item())
    }

    /// This verdict as one item of a `RateLimit` list.
    fn item(self) -> String {
        format!("\"{}\";r={};t={}", self.name, self.remaining, self.reset)
    }

    /// The `RateLimit-Policy` field it was measured against.
    pub(crate) fn policy(self) -> HeaderValue {
        field(&policy_item(self.name, self.quota, self.window))
    }

    /// `RateLimit-Policy` and `RateLimit` for a request that passed
    /// `self` and then `also` (a placement: the client's policy and the
    /// customer's placement policy), as the draft's lists.
    pub(crate) fn fields(self, also: Option<Self>) -> (HeaderValue, HeaderValue) {
        match also {
            None => (self.policy(), self.header()),
            Some(o) => (
                field(&format!(
                    "{}, {}",
                    policy_item(self.name, self.quota, self.window),
                    policy_item(o.name, o.quota, o.window)
                )),
                field(&format!("{}, {}", self.item(), o.item())),
            ),
        }
    }
}

/// `"default";q=2000;w=2`.
fn policy_item(name: &str, quota: u32, window: u32) -> String {
    format!("\"{name}\";q={quota};w={window}")
}

fn field(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The bucket table, bounded by `max_clients`.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    name: &'static str,
    rate: f64,
    burst: f64,
    max_clients: usize,
    quota: u32,
    window: u32,
    /// `RateLimit-Policy`, formatted once.
    policy: HeaderValue,
    // One lock: the critical section is a hash look-up and a few float
    // operations, far below the cost of the exchange around it.
    buckets: Mutex<HashMap<ClientKey, Bucket>>,
}

impl RateLimiter {
    /// The `default` policy: `rate` tokens per second into buckets of
    /// `burst` (at least `rate`), for at most `max_clients` clients at once.
    pub(crate) fn new(rate: u32, burst: u32, max_clients: u32) -> Self {
        let quota = burst.max(rate).max(1);
        Self::with(DEFAULT_POLICY, f64::from(rate.max(1)), quota, max_clients)
    }

    /// The `orders` policy: `per_minute` tokens a minute into buckets of
    /// `burst`, for at most `max_clients` customers at once.
    pub(crate) fn per_minute(per_minute: u32, burst: u32, max_clients: u32) -> Self {
        let rate = f64::from(per_minute.max(1)) / 60.0;
        Self::with(ORDERS_POLICY, rate, burst.max(1), max_clients)
    }

    fn with(name: &'static str, rate: f64, quota: u32, max_clients: u32) -> Self {
        let burst = f64::from(quota);
        let window = whole((burst / rate).ceil()).max(1);
        Self {
            name,
            rate,
            burst,
            max_clients: usize::try_from(max_clients.max(1)).unwrap_or(usize::MAX),
            quota,
            window,
            policy: field(&policy_item(name, quota, window)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The `RateLimit-Policy` field: `"default";q=2000;w=2`.
    pub(crate) fn policy(&self) -> &HeaderValue {
        &self.policy
    }

    /// How many clients are tracked now.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, Bucket>> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a token from `key`'s bucket if there is one.
    pub(crate) fn check(&self, key: ClientKey) -> Verdict {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: ClientKey, now: Instant) -> Verdict {
        let mut buckets = self.lock();
        if !buckets.contains_key(&key) && buckets.len() >= self.max_clients {
            self.evict(&mut buckets, now);
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: self.burst,
            updated: now,
        });
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.updated = now;
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        let tokens = bucket.tokens;
        drop(buckets);
        Verdict {
            allowed,
            remaining: whole(tokens.floor()),
            reset: whole(((self.burst - tokens) / self.rate).ceil()),
            retry_after: whole(((1.0 - tokens) / self.rate).ceil()).max(1),
            quota: self.quota,
            window: self.window,
            name: self.name,
        }
    }

    /// Makes room: drops every bucket that has refilled (tracking it
    /// changes nothing), and if that frees less than a quarter of the
    /// table, the idlest quarter too. Each eviction frees at least a quarter
    /// of the table, so its O(n) is paid once per n/4 new clients.
    fn evict(&self, buckets: &mut HashMap<ClientKey, Bucket>, now: Instant) {
        let (rate, burst) = (self.rate, self.burst);
        buckets.retain(|_, b| {
            b.tokens + now.saturating_duration_since(b.updated).as_secs_f64() * rate < burst
        });
        let quarter = (self.max_clients / 4).max(1);
        if buckets.len() + quarter <= self.max_clients {
            return;
        }
        let mut ages: Vec<Instant> = buckets.values().map(|b| b.updated).collect();
        let cut = quarter.min(ages.len()) - 1;
        let (_, threshold, _) = ages.select_nth_unstable(cut);
        let threshold = *threshold;
        buckets.retain(|_, b| b.updated > threshold);
    }
}

/// A non-negative float as a whole `u32` (saturating).
fn whole(x: f64) -> u32 {
    if x <= 0.0 {
        0
    } else if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        // In range and non-negative: the cast is exact for whole numbers.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = x as u32;
        n
    }
}

#[cfg(test)]
mod tests {
    use std::{net::Ipv6Addr, time::Duration};

    use super::*;

    fn v4(n: u32) -> ClientKey {
        ClientKey::of_address(IpAddr::V4(n.into()))
    }

    #[test]
    fn a_burst_then_the_rate_then_a_refusal_with_when_to_retry() {
        let limiter = RateLimiter::new(10, 20, 100);
        let t0 = Instant::now();
        for i in 0..20 {
            let v = limiter.check_at(v4(1), t0);
            assert!(v.allowed, "request {i}");
            assert_eq!(v.remaining, 19 - i);
        }
        let refused = limiter.check_at(v4(1), t0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, 1);
        assert_eq!(refused.reset, 2);
        // Another client is untouched.
        assert!(limiter.check_at(v4(2), t0).allowed);
        // 100 ms later one token is back.
        assert!(
            limiter
                .check_at(v4(1), t0 + Duration::from_millis(100))
                .allowed
        );
        assert!(
            !limiter
                .check_at(v4(1), t0 + Duration::from_millis(100))
                .allowed
        );
        assert_eq!(limiter.policy(), "\"default\";q=20;w=2");
        assert_eq!(refused.header(), "\"default\";r=0;t=2");
    }

    #[test]
    fn a_client_spraying_addresses_cannot_grow_the_table() {
        let limiter = RateLimiter::new(1, 1, 64);
        let t0 = Instant::now();
        for n in 0..100_000 {
            limiter.check_at(v4(n), t0 + Duration::from_micros(u64::from(n)));
            assert!(limiter.tracked() <= 64);
        }
        // The most recent client keeps its (empty) bucket across evictions.
        let last = t0 + Duration::from_micros(99_999);
        assert!(!limiter.check_at(v4(99_999), last).allowed);
    }

    #[test]
    fn customers_are_keyed_apart_and_the_orders_policy_counts_per_minute() {
        let (alice, bob) = (
            ClientKey::of_customer("alice"),
            ClientKey::of_customer("bob"),
        );
        assert_eq!(alice, ClientKey::of_customer("alice"));
        assert_ne!(alice, bob);
        assert_ne!(
            ClientKey::of_customer(&"x".repeat(255)),
            ClientKey::of_customer(&"x".repeat(254))
        );
        // 120 a minute = 2 a second, burst 20: an empty bucket refills in 10 s.
        let limiter = RateLimiter::per_minute(120, 20, 100);
        assert_eq!(limiter.policy(), "\"orders\";q=20;w=10");
        let t0 = Instant::now();
        for _ in 0..20 {
            assert!(limiter.check_at(alice, t0).allowed);
        }
        let refused = limiter.check_at(alice, t0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, 1);
        assert_eq!(refused.header(), "\"orders\";r=0;t=10");
        assert!(limiter.check_at(bob, t0).allowed, "bob has his own bucket");
        assert!(
            limiter
                .check_at(alice, t0 + Duration::from_millis(500))
                .allowed,
            "one placement back after half a second"
        );
        let general = RateLimiter::new(10, 20, 100).check_at(alice, t0);
        let (policy, current) = general.fields(Some(refused));
        assert_eq!(policy, "\"default\";q=20;w=2, \"orders\";q=20;w=10");
        assert_eq!(current, "\"default\";r=19;t=1, \"orders\";r=0;t=10");
    }

    #[test]
    fn an_ipv6_client_is_keyed_by_its_64_prefix() {
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        let key = |ip: Ipv6Addr| ClientKey::of_address(IpAddr::V6(ip));
        assert_eq!(key(a), key(b));
        assert_ne!(key(a), key(c));
        let mapped: Ipv6Addr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            key(mapped),
            ClientKey::of_address(IpAddr::V4([127, 0, 0, 1].into()))
        );
    }
}
