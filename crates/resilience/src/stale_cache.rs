//! A cache that answers stale when its source is unavailable.
//!
//! - A fresh entry (younger than `ttl`) answers directly (`hit`).
//! - An expired or missing entry triggers one [`SingleFlight`] fetch per
//!   key; concurrent callers wait for it (`miss` for the caller that
//!   started it, `coalesced` for the others). The fetch runs detached with
//!   its own `fetch_timeout` and stores its value even if every caller gave
//!   up.
//! - When the fetch fails because the source is *unavailable* (timeout, open
//!   circuit, refused, shed) or the caller's deadline passes first, the
//!   expired value answers if it is at most `max_staleness` past its `ttl`
//!   (`stale`). Only a key with no usable value gets the error (`rejected`).
//! - [`CacheError`] tells [`CacheError::Unavailable`] from
//!   [`CacheError::NotFound`] and other failures; "not found" and other
//!   failures are never papered over with a stale value.
//!
//! Every lookup is counted once in `<name>_requests_total{result}` with
//! `result` one of `hit`, `miss`, `stale`, `coalesced`, `rejected` (the
//! order service's stock cache uses `name = "shopeasy_stock_cache"`).

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::error::{BoxError, DeadlineExceeded, is_rejected, is_timeout};
use crate::single_flight::{FlightError, SingleFlight};

/// A shareable error cause.
pub type SharedError = Arc<dyn Error + Send + Sync + 'static>;

/// Why the cache has no value to give. The cause is the error's
/// [`source()`](Error::source), so [`find`](crate::error::find) sees through
/// it.
#[derive(Debug, Clone)]
pub enum CacheError {
    /// The source could not be reached (timeout, open circuit, refused,
    /// overloaded) and no usable stale value exists.
    Unavailable(SharedError),
    /// The source says the key does not exist.
    NotFound,
    /// The source failed otherwise.
    Other(SharedError),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable(_) => "source unavailable",
            Self::NotFound => "not found",
            Self::Other(_) => "source failed",
        })
    }
}

impl Error for CacheError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // The cause itself, not the `Arc` around it (whose `source()`
            // would skip a level).
            Self::Unavailable(e) | Self::Other(e) => Some(&**e as &(dyn Error + 'static)),
            Self::NotFound => None,
        }
    }
}

impl CacheError {
    /// An unavailable-source error caused by `cause`.
    pub fn unavailable(cause: impl Into<BoxError>) -> Self {
        Self::Unavailable(Arc::from(cause.into()))
    }

    /// Any other failure caused by `cause`.
    pub fn other(cause: impl Into<BoxError>) -> Self {
        Self::Other(Arc::from(cause.into()))
    }

    /// Classifies a call error from a resilience stack: timeouts, open
    /// circuits, shed calls, refused connections and gRPC `UNAVAILABLE` are
    /// [`CacheError::Unavailable`]; anything else is [`CacheError::Other`].
    /// (A "not found" answer is the source's to report as
    /// [`CacheError::NotFound`].)
    pub fn from_call_error(err: BoxError) -> Self {
        let e: &(dyn Error + 'static) = err.as_ref();
        #[cfg(feature = "grpc")]
        let grpc_unavailable = crate::error::find::<tonic::Status>(e).is_some_and(|s| {
            s.code() == tonic::Code::Unavailable || crate::error::is_grpc_timeout(s)
        });
        #[cfg(not(feature = "grpc"))]
        let grpc_unavailable = false;
        if is_timeout(e)
            || is_rejected(e)
            || crate::retry::is_connection_failure(e)
            || grpc_unavailable
        {
            Self::unavailable(err)
        } else {
            Self::other(err)
        }
    }

    /// Whether this is [`CacheError::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// A stale cache's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CacheConfig {
    /// How long an entry is fresh.
    pub ttl: Duration,
    /// How long past `ttl` an entry may still answer while the source is
    /// unavailable.
    pub max_staleness: Duration,
    /// The metric prefix: counts go to `<name>_requests_total{result}`.
    pub name: &'static str,
    /// The detached refresh's own timeout.
    pub fetch_timeout: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            max_staleness: Duration::from_secs(300),
            name: "shopeasy_cache",
            fetch_timeout: Duration::from_secs(5),
        }
    }
}

/// A value from the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached<V> {
    /// The value.
    pub value: V,
    /// Its age.
    pub age: Duration,
    /// Whether it is past its `ttl` (served because the source was
    /// unavailable).
    pub stale: bool,
}

type Fetch<K, V> =
    Arc<dyn Fn(K) -> Pin<Box<dyn Future<Output = Result<V, CacheError>> + Send>> + Send + Sync>;

/// The lookup results, in metric-label order.
const RESULTS: [&str; 5] = ["hit", "miss", "stale", "coalesced", "rejected"];

#[derive(Clone, Copy)]
enum Counted {
    Hit = 0,
    Miss = 1,
    Stale = 2,
    Coalesced = 3,
    Rejected = 4,
}

/// A read-through cache over a fetch function that serves stale values when
/// the source is unavailable (see the module docs). Cloning shares it.
pub struct StaleCache<K, V> {
    inner: Arc<Inner<K, V>>,
}

struct Inner<K, V> {
    config: CacheConfig,
    metric: String,
    entries: Mutex<HashMap<K, (V, Instant)>>,
    flights: SingleFlight<K, V, CacheError>,
    fetch: Fetch<K, V>,
    counts: [AtomicU64; 5],
    /// The oldest age (ms) a stale answer had, since start; 0: none yet.
    oldest_stale_ms: AtomicU64,
    /// The age (ms) of the latest stale answer; 0: none yet.
    last_stale_ms: AtomicU64,
}

impl<K, V> Clone for StaleCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K, V> fmt::Debug for StaleCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaleCache")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<K, V> StaleCache<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache reading through `fetch`.
    pub fn new<F, Fut>(config: CacheConfig, fetch: F) -> Self
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V, CacheError>> + Send + 'static,
    {
        let fetch: Fetch<K, V> = Arc::new(move |k| Box::pin(fetch(k)));
        let metric = format!("{}_requests_total", config.name);
        // Every result at 0 from the start: a hit ratio panel has a series
        // before the first lookup, and "0 stale" is shown, not no data.
        for result in RESULTS {
            metrics::counter!(metric.clone(), "result" => result).increment(0);
        }
        Self {
            inner: Arc::new(Inner {
                config,
                metric,
                entries: Mutex::new(HashMap::new()),
                flights: SingleFlight::new(config.fetch_timeout),
                fetch,
                counts: Default::default(),
                oldest_stale_ms: AtomicU64::new(0),
                last_stale_ms: AtomicU64::new(0),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<K, (V, Instant)>> {
        self.inner.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, what: Counted) {
        self.inner.counts[what as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(self.inner.metric.clone(), "result" => RESULTS[what as usize])
            .increment(1);
    }

    /// Stores a value fetched elsewhere (fresh from now).
    pub fn insert(&self, key: K, value: V) {
        self.entries().insert(key, (value, Instant::now()));
    }

    /// Forgets `key`.
    pub fn invalidate(&self, key: &K) {
        self.entries().remove(key);
    }

    /// The value for `key`: fresh, refreshed through one shared fetch, or
    /// stale when the source is unavailable. The caller waits at most until
    /// `deadline`.
    ///
    /// # Errors
    /// [`CacheError::NotFound`] when the source says so;
    /// [`CacheError::Unavailable`] when the source is unavailable and no
    /// value is usable; [`CacheError::Other`] for other source failures.
    pub async fn get(&self, key: K, deadline: Option<Deadline>) -> Result<Cached<V>, CacheError> {
        let cfg = self.inner.config;
        let existing = self.entries().get(&key).cloned();
        if let Some((value, at)) = &existing {
            let age = at.elapsed();
            if age < cfg.ttl {
                self.count(Counted::Hit);
                return Ok(Cached {
                    value: value.clone(),
                    age,
                    stale: false,
                });
            }
        }
        let this = self.clone();
        let fetch_key = key.clone();
        let waiter = self.inner.flights.join(key.clone(), move || {
            let fut = (this.inner.fetch)(fetch_key.clone());
            async move {
                let result = fut.await;
                match &result {
                    Ok(v) => this.insert(fetch_key, v.clone()),
                    Err(CacheError::NotFound) => this.invalidate(&fetch_key),
                    Err(_) => {}
                }
                result
            }
        });
        let coalesced = waiter.coalesced();
        let unavailable = match waiter.wait(deadline).await {
            Ok(value) => {
                self.count(if coalesced {
                    Counted::Coalesced
                } else {
                    Counted::Miss
                });
                return Ok(Cached {
                    value,
                    age: Duration::ZERO,
                    stale: false,
                });
            }
            Err(FlightError::Failed(CacheError::Unavailable(cause))) => {
                CacheError::Unavailable(cause)
            }
            Err(FlightError::Failed(other)) => {
                self.count(Counted::Rejected);
                return Err(other);
            }
            Err(FlightError::FetchTimedOut | FlightError::WaitExpired | FlightError::Lost) => {
                CacheError::unavailable(DeadlineExceeded)
            }
        };
        if let Some((value, at)) = existing {
            let age = at.elapsed();
            if age <= cfg.ttl + cfg.max_staleness {
                self.count(Counted::Stale);
                self.served_stale(age);
                return Ok(Cached {
                    value,
                    age,
                    stale: true,
                });
            }
        }
        self.count(Counted::Rejected);
        Err(unavailable)
    }

    /// Notes a stale answer `age` old: the panel shows how stale answers
    /// really were, beside how stale they may be.
    fn served_stale(&self, age: Duration) {
        // At least 1 ms, so 0 keeps meaning "none yet".
        let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX).max(1);
        self.inner.last_stale_ms.store(ms, Ordering::Relaxed);
        self.inner.oldest_stale_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Live counts for `/admin/resilience`, with how stale the stale
    /// answers really were (`oldest_stale_served_seconds` since start,
    /// `last_stale_served_seconds`; `null` before the first).
    pub fn snapshot(&self) -> serde_json::Value {
        let c = &self.inner.counts;
        let cfg = self.inner.config;
        let mut counts = serde_json::Map::new();
        for (i, name) in RESULTS.iter().enumerate() {
            counts.insert((*name).to_owned(), c[i].load(Ordering::Relaxed).into());
        }
        serde_json::json!({
            "entries": self.entries().len(),
            "refreshing": self.inner.flights.in_flight(),
            "requests": counts,
            "ttl_seconds": cfg.ttl.as_secs_f64(),
            "max_staleness_seconds": cfg.max_staleness.as_secs_f64(),
            "oldest_stale_served_seconds": seconds(&self.inner.oldest_stale_ms),
            "last_stale_served_seconds": seconds(&self.inner.last_stale_ms),
        })
    }
}

/// A stale age kept in ms as seconds; `None` (null) when none was served.
#[allow(clippy::cast_precision_loss)]
fn seconds(ms: &AtomicU64) -> Option<f64> {
    match ms.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(ms as f64 / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_oldest_staleness_served_is_reported() {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let config = CacheConfig {
            ttl: Duration::from_secs(1),
            max_staleness: Duration::from_secs(60),
            ..CacheConfig::default()
        };
        let source = down.clone();
        let cache: StaleCache<u32, u32> = StaleCache::new(config, move |k| {
            let down = source.load(Ordering::Relaxed);
            async move {
                if down {
                    Err(CacheError::unavailable("down"))
                } else {
                    Ok(k)
                }
            }
        });
        cache.get(1, None).await.unwrap();
        assert_eq!(
            cache.snapshot()["oldest_stale_served_seconds"],
            serde_json::Value::Null
        );
        down.store(true, Ordering::Relaxed);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(cache.get(1, None).await.unwrap().stale);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(cache.get(1, None).await.unwrap().stale);
        let s = cache.snapshot();
        let oldest = s["oldest_stale_served_seconds"].as_f64().unwrap();
        assert!((7.0..7.1).contains(&oldest), "{s}");
        assert!(
            (7.0..7.1).contains(&s["last_stale_served_seconds"].as_f64().unwrap()),
            "{s}"
        );
    }

    #[test]
    fn a_new_cache_registers_every_result_before_any_lookup() {
        let rec = crate::test_recorder::Registered::default();
        let _guard = metrics::set_default_local_recorder(&rec);
        let config = CacheConfig {
            name: "shopeasy_stock_cache",
            ..CacheConfig::default()
        };
        let _cache: StaleCache<u32, u32> = StaleCache::new(config, |k| async move { Ok(k) });
        let want: Vec<String> = RESULTS
            .iter()
            .map(|r| format!(r#"counter shopeasy_stock_cache_requests_total{{result="{r}"}}"#))
            .collect();
        assert_eq!(rec.series(), want);
    }
}
