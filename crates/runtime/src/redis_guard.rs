//! One Redis connection behind a guard, for the caches that put Redis in
//! front of a slower source (product's read cache, order's stock cache).
//!
//! Redis there is an optimisation, never a dependency: trouble with it must
//! cost a request little and must not multiply. The guard gives every call
//! two bounds, and both caches the same ones:
//!
//! 1. **a per-call timeout** (`redis_timeout_seconds`): past it the call
//!    counts as failed and the caller falls back to its source;
//! 2. **a rest after a failure** (`redis_retry_seconds`): after a
//!    failed or timed-out call, calls are not made at all for that long
//!    ([`Unavailable::Resting`], answered at once), so a dead or hung Redis
//!    costs one timeout per rest rather than one per request; the first call
//!    after the rest is the probe.
//!
//! Under both, the [`ConnectionManager`] reconnects in the background after a
//! broken connection, with jittered exponential backoff, never in a tight
//! loop. The rest is a small state machine on tokio's clock, apart from the
//! connection, so it is tested with a paused clock.

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::{
    Client, Cmd, FromRedisValue, RedisResult,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::settings::{Seconds, Validator};

/// The guard's settings, embedded with `#[serde(flatten)]` in the section
/// of each cache that uses Redis (`cache.*` in product,
/// `resilience.stock_cache.*` in order), so both caches are tuned by the same
/// two keys: `<section>.redis_timeout_seconds` and
/// `<section>.redis_retry_seconds`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RedisGuardSettings {
    /// The bound of each single Redis call; past it the call counts as a
    /// failure and the caller uses its own source.
    #[serde(rename = "redis_timeout_seconds")]
    pub timeout_seconds: Seconds,
    /// After a failed call, Redis is not called for this long (then one call
    /// probes it again), so a dead or hung Redis costs one timeout, not one
    /// per request.
    #[serde(rename = "redis_retry_seconds")]
    pub rest_seconds: Seconds,
}

impl Default for RedisGuardSettings {
    fn default() -> Self {
        Self {
            timeout_seconds: Seconds::new(0.05),
            rest_seconds: Seconds::new(1.0),
        }
    }
}

impl RedisGuardSettings {
    /// Checks the ranges, naming the keys under `section` (`cache`).
    pub fn validate(&self, section: &str, v: &mut Validator) {
        let keys = [
            ("redis_timeout_seconds", self.timeout_seconds, 0.001..=5.0),
            ("redis_retry_seconds", self.rest_seconds, 0.01..=300.0),
        ];
        for (key, value, range) in keys {
            v.seconds(&format!("{section}.{key}"), value, range);
        }
    }
}

/// A guarded call that gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The call was made and failed or timed out (the guard now rests).
    #[error("the redis call failed or timed out")]
    Failed,
    /// No call was made: the guard is resting after a recent failure.
    #[error("redis is resting after a failure")]
    Resting,
}

/// A lazily connected Redis with a per-call timeout and a rest after a
/// failure (see the module docs). Cheap to clone: clones share the
/// connection and the rest.
#[derive(Clone)]
pub struct RedisGuard {
    name: &'static str,
    conn: ConnectionManager,
    gate: RestGate,
}

impl std::fmt::Debug for RedisGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisGuard")
            .field("name", &self.name)
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl RedisGuard {
    /// A guard over the Redis at `url`, connecting on the first call;
    /// `name` says in logs which cache it serves.
    ///
    /// # Errors
    /// When `url` is not a Redis URL.
    pub fn new(
        name: &'static str,
        url: &str,
        settings: &RedisGuardSettings,
    ) -> anyhow::Result<Self> {
        let timeout = settings.timeout_seconds.get();
        // A connection attempt may take a little longer than one call (a TCP
        // and maybe a TLS handshake), but never long.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(timeout))
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(5))
            .set_number_of_retries(6);
        let conn = ConnectionManager::new_lazy_with_config(Client::open(url)?, config)?;
        Ok(Self {
            name,
            conn,
            gate: RestGate::new(timeout, settings.rest_seconds.get()),
        })
    }

    /// True while the guard rests after a failure (calls made now would
    /// answer [`Unavailable::Resting`]).
    pub fn is_resting(&self) -> bool {
        self.gate.is_resting()
    }

    /// Its live state for `/admin/resilience`'s `redis` member, so the
    /// console can show whether this service's Redis answers:
    /// `{"configured": true, "resting": bool, "failures": n}` (`failures`:
    /// calls failed or timed out since start).
    pub fn report(&self) -> serde_json::Value {
        self.gate.report()
    }

    /// Runs `cmd`, unless resting; bounded by the timeout; a failure starts
    /// a rest.
    ///
    /// # Errors
    /// [`Unavailable::Resting`] without a call while resting;
    /// [`Unavailable::Failed`] when the call fails or times out.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, Unavailable> {
        if self.gate.is_resting() {
            return Err(Unavailable::Resting);
        }
        self.query_now(cmd).await
    }

    /// Runs `cmd` even while resting (for a call whose loss costs more than
    /// its timeout, such as an invalidation); bounded by the timeout; a
    /// failure starts (or extends) a rest.
    ///
    /// # Errors
    /// [`Unavailable::Failed`] when the call fails or times out.
    pub async fn query_now<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, Unavailable> {
        let mut conn = self.conn.clone();
        self.gate
            .bounded(self.name, cmd.query_async::<T>(&mut conn))
            .await
    }
}

/// The rest state machine and the per-call bound, apart from the
/// connection.
#[derive(Debug, Clone)]
struct RestGate {
    timeout: Duration,
    rest: Duration,
    resting_until: Arc<Mutex<Option<Instant>>>,
    failures: Arc<AtomicU64>,
}

impl RestGate {
    fn new(timeout: Duration, rest: Duration) -> Self {
        Self {
            timeout,
            rest,
            resting_until: Arc::default(),
            failures: Arc::default(),
        }
    }

    fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "configured": true,
            "resting": self.is_resting(),
            "failures": self.failures.load(Ordering::Relaxed),
        })
    }

    fn is_resting(&self) -> bool {
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

    fn start_rest(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + self.rest);
    }

    /// Awaits `call` for at most the timeout; a failure starts a rest.
    async fn bounded<T>(
        &self,
        name: &str,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                tracing::debug!(redis = name, error = %e, "redis call failed; resting");
                self.start_rest();
                Err(Unavailable::Failed)
            }
            Err(_) => {
                tracing::debug!(redis = name, timeout = ?self.timeout, "redis call timed out; resting");
                self.start_rest();
                Err(Unavailable::Failed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(50);
    const REST: Duration = Duration::from_secs(1);

    fn refused() -> RedisResult<()> {
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
    }

    /// The gate's answer to a call, and whether the call was made.
    async fn guarded(gate: &RestGate, answer: RedisResult<()>) -> (Result<(), Unavailable>, bool) {
        let made = AtomicUsize::new(0);
        let result = if gate.is_resting() {
            Err(Unavailable::Resting)
        } else {
            gate.bounded("test", async {
                made.fetch_add(1, Ordering::Relaxed);
                answer
            })
            .await
        };
        (result, made.load(Ordering::Relaxed) == 1)
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_rests_the_guard_for_the_configured_time_then_it_tries_again() {
        let gate = RestGate::new(TIMEOUT, REST);
        assert_eq!(guarded(&gate, Ok(())).await, (Ok(()), true));
        assert_eq!(
            guarded(&gate, refused()).await,
            (Err(Unavailable::Failed), true)
        );

        tokio::time::advance(REST - Duration::from_millis(1)).await;
        assert!(gate.is_resting());
        assert_eq!(
            guarded(&gate, Ok(())).await,
            (Err(Unavailable::Resting), false),
            "no call is made during the rest"
        );

        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!gate.is_resting());
        assert_eq!(
            guarded(&gate, Ok(())).await,
            (Ok(()), true),
            "the first call after the rest is made"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_report_counts_failures_and_says_when_resting() {
        let gate = RestGate::new(TIMEOUT, REST);
        assert_eq!(
            gate.report(),
            serde_json::json!({"configured": true, "resting": false, "failures": 0})
        );
        let _ = gate.bounded("test", async { refused() }).await;
        assert_eq!(
            gate.report(),
            serde_json::json!({"configured": true, "resting": true, "failures": 1})
        );
        tokio::time::advance(REST).await;
        assert_eq!(
            gate.report(),
            serde_json::json!({"configured": true, "resting": false, "failures": 1}),
            "the rest ends, the count stays"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_is_bounded_by_the_timeout_and_starts_a_rest() {
        let gate = RestGate::new(TIMEOUT, REST);
        let start = Instant::now();
        let result = gate
            .bounded("test", std::future::pending::<RedisResult<()>>())
            .await;
        assert_eq!(result, Err(Unavailable::Failed));
        assert_eq!(start.elapsed(), TIMEOUT);
        assert!(gate.is_resting());
        tokio::time::advance(REST).await;
        assert!(!gate.is_resting());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_during_the_rest_extends_it() {
        let gate = RestGate::new(TIMEOUT, REST);
        let _ = gate.bounded("test", async { refused() }).await;
        tokio::time::advance(REST / 2).await;
        // A call made regardless of the rest (query_now) fails again.
        let _ = gate.bounded("test", async { refused() }).await;
        tokio::time::advance(REST / 2).await;
        assert!(
            gate.is_resting(),
            "the rest restarted at the second failure"
        );
        tokio::time::advance(REST / 2).await;
        assert!(!gate.is_resting());
    }

    #[test]
    fn settings_name_their_keys_under_the_section() {
        let mut v = Validator::new();
        RedisGuardSettings {
            timeout_seconds: Seconds::new(0.0),
            rest_seconds: Seconds::new(1000.0),
        }
        .validate("cache", &mut v);
        let keys: Vec<String> = v.into_errors().into_iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            ["cache.redis_timeout_seconds", "cache.redis_retry_seconds"]
        );
        let mut v = Validator::new();
        RedisGuardSettings::default().validate("cache", &mut v);
        assert!(v.into_errors().is_empty());
        let json = serde_json::to_value(RedisGuardSettings::default()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"redis_timeout_seconds": 0.05, "redis_retry_seconds": 1.0})
        );
    }

    #[test]
    fn a_url_that_is_not_redis_is_refused() {
        assert!(RedisGuard::new("test", "http://x", &RedisGuardSettings::default()).is_err());
    }
}
