//! Single flight: concurrent requests for the same key share one fetch.
//!
//! When a hot cache entry expires, a thousand requests must not become a
//! thousand calls to the source (a cache stampede). [`SingleFlight`] runs
//! one fetch per key at a time and hands its result — value or error — to
//! every caller that asked while it ran.
//!
//! The fetch runs detached (`tokio::spawn`) with its own timeout
//! (`fetch_timeout`), not under any caller's deadline: a caller that gives
//! up (its deadline passes, or its future is dropped) only stops waiting,
//! and the fetch carries on for the others. Once a fetch completes, the next
//! caller starts a new one.
//!
//! ```
//! use shopeasy_resilience::single_flight::SingleFlight;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let flights: SingleFlight<&str, u32, String> = SingleFlight::new(Duration::from_secs(2));
//! let v = flights.get_or_fetch("sku-1", None, || async { Ok(7) }).await;
//! assert_eq!(v.ok(), Some(7));
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use crate::deadline::Deadline;

/// Why a caller got no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlightError<E> {
    /// The fetch failed; every waiter gets a copy of its error.
    #[error("fetch failed: {0}")]
    Failed(E),
    /// The fetch ran past its own timeout.
    #[error("fetch timed out")]
    FetchTimedOut,
    /// This caller's deadline passed first (the fetch goes on).
    #[error("gave up waiting: deadline passed")]
    WaitExpired,
    /// The fetch task ended without a result (it panicked or the runtime
    /// shut down).
    #[error("fetch lost")]
    Lost,
}

type Outcome<V, E> = Option<Result<V, FlightError<E>>>;
type Flights<K, V, E> = HashMap<K, (u64, watch::Receiver<Outcome<V, E>>)>;

/// Shares one fetch per key among concurrent callers. Cloning shares it.
pub struct SingleFlight<K, V, E> {
    inner: Arc<Inner<K, V, E>>,
}

struct Inner<K, V, E> {
    fetch_timeout: Duration,
    next_id: std::sync::atomic::AtomicU64,
    flights: Mutex<Flights<K, V, E>>,
}

impl<K, V, E> Clone for SingleFlight<K, V, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K, V, E> fmt::Debug for SingleFlight<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingleFlight")
            .field("fetch_timeout", &self.inner.fetch_timeout)
            .field(
                "in_flight",
                &self.inner.flights.lock().map(|f| f.len()).unwrap_or(0),
            )
            .finish()
    }
}

/// One caller's place in a flight, from [`SingleFlight::join`].
pub struct Waiter<V, E> {
    rx: watch::Receiver<Outcome<V, E>>,
    leader: bool,
}

impl<V, E> fmt::Debug for Waiter<V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("leader", &self.leader)
            .finish()
    }
}

impl<K, V, E> SingleFlight<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Flights whose fetches each get at most `fetch_timeout`.
    pub fn new(fetch_timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                fetch_timeout,
                next_id: std::sync::atomic::AtomicU64::new(0),
                flights: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Fetches currently running.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Flights<K, V, E>> {
        self.inner.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the running fetch for `key`, or starts `fetch` detached if none
    /// runs. Must be called inside a tokio runtime.
    pub fn join<F, Fut>(&self, key: K, fetch: F) -> Waiter<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let mut flights = self.lock();
        if let Some((_, rx)) = flights.get(&key) {
            return Waiter {
                rx: rx.clone(),
                leader: false,
            };
        }
        let (tx, rx) = watch::channel(None);
        let id = self
            .inner
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        flights.insert(key.clone(), (id, rx.clone()));
        drop(flights);

        // Removes the entry however the fetch ends (even by panic), before
        // the result is published, so the next caller starts a new fetch.
        // Made before `fetch()` is called: a `fetch` that panics while
        // building its future unwinds through here, and the guard removes
        // the entry (its sender is gone: left behind, every later caller
        // for the key would wait on it and get `Lost`). After the lock is
        // released, since its drop takes the lock.
        let done = Done {
            flights: self.clone(),
            key: Some(key),
            id,
        };
        let fut = fetch();
        let timeout = self.inner.fetch_timeout;
        // The fetch's span is a child of the leader's, so the detached
        // work (and its attempts) shows in the trace of the request that
        // started it.
        let span = tracing::info_span!("single_flight.fetch");
        tokio::spawn(
            async move {
                let result = match tokio::time::timeout(timeout, fut).await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(e)) => Err(FlightError::Failed(e)),
                    Err(_) => Err(FlightError::FetchTimedOut),
                };
                drop(done);
                let _ = tx.send(Some(result));
            }
            .instrument(span),
        );
        Waiter { rx, leader: true }
    }

    /// Waits for the value of `key`, fetching it with `fetch` unless a fetch
    /// is already running; gives up at `deadline` (the fetch goes on).
    ///
    /// # Errors
    /// The fetch's error (a copy per waiter), or [`FlightError`]'s timeouts.
    pub async fn get_or_fetch<F, Fut>(
        &self,
        key: K,
        deadline: Option<Deadline>,
        fetch: F,
    ) -> Result<V, FlightError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        self.join(key, fetch).wait(deadline).await
    }
}

struct Done<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    flights: SingleFlight<K, V, E>,
    key: Option<K>,
    id: u64,
}

impl<K, V, E> Drop for Done<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut flights = self.flights.lock();
            if flights.get(&key).is_some_and(|(id, _)| *id == self.id) {
                flights.remove(&key);
            }
        }
    }
}

impl<V: Clone, E: Clone> Waiter<V, E> {
    /// Whether this caller joined a fetch someone else started.
    pub fn coalesced(&self) -> bool {
        !self.leader
    }

    /// Waits for the fetch's result, giving up at `deadline`.
    ///
    /// # Errors
    /// See [`SingleFlight::get_or_fetch`].
    pub async fn wait(mut self, deadline: Option<Deadline>) -> Result<V, FlightError<E>> {
        let rx = &mut self.rx;
        let wait = async move {
            match rx.wait_for(Option::is_some).await {
                Ok(v) => v.clone().unwrap_or(Err(FlightError::Lost)),
                Err(_) => Err(FlightError::Lost),
            }
        };
        match deadline {
            None => wait.await,
            Some(d) => tokio::time::timeout_at(d.instant(), wait)
                .await
                .unwrap_or(Err(FlightError::WaitExpired)),
        }
    }
}
