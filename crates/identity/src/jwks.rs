//! The issuer's keys, fetched as a resilient call and cached.
//!
//! Fetching the JWKS is a call to another service like any other, so it
//! gets the same treatment (`shopeasy-resilience`):
//!
//! - **deadline**: one refresh — every attempt and backoff — ends within
//!   `fetch_deadline`, each attempt within `fetch_timeout`;
//! - **budgeted, jittered retries**: a failed attempt (connection refused,
//!   timeout, 5xx, 429) is retried as [`RetryGate`] decides — at most
//!   `fetch_retries`, full-jitter backoff, and only while the retry budget
//!   has room;
//! - **stale keys keep working**: a failed refresh never empties the
//!   cache; tokens signed by keys we already have verify while the provider
//!   is down;
//! - **single flight**: a token with an unknown `kid` triggers a refresh,
//!   and however many such tokens arrive together they share one fetch
//!   ([`SingleFlight`]);
//! - **a minimum interval between refreshes**: after a refresh started, no
//!   other starts for `min_refresh_interval`, so tokens with made-up `kid`s
//!   cost us a map lookup, not a request to the provider;
//! - **background refresh**: keys older than `refresh_interval` are
//!   refreshed without making the request that noticed wait, so a key the
//!   provider has rotated out stops verifying. While the provider is down
//!   the keys stay old, so the next attempt is paced by the last *attempt*
//!   (one per `min_refresh_interval`), not by the last success: requests
//!   meanwhile start nothing and count nothing.
//!
//! Why "exactly one fetch" holds: each refresh is led by one caller of
//! [`SingleFlight::join`]; the leader's closure first compares the cache's
//! *generation* (bumped by every finished refresh) with the one the caller
//! saw when its lookup missed. A caller whose miss predates a refresh that
//! has finished meanwhile gets the new keys without a fetch.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rand::{SeedableRng, rngs::SmallRng};
use shopeasy_resilience::{
    backoff::Backoff,
    budget::{BudgetConfig, RetryBudget},
    deadline::Deadline,
    decide::RetryGate,
    single_flight::{FlightError, SingleFlight},
};
use tokio::time::Instant;

use crate::keys::{KeyError, KeySet, MAX_JWKS_BYTES};

/// How a [`JwksCache`] fetches and refreshes.
#[derive(Debug, Clone)]
pub struct JwksConfig {
    /// The JWKS URL.
    pub url: String,
    /// Timeout of one attempt.
    pub fetch_timeout: Duration,
    /// Bound of one refresh, retries included.
    pub fetch_deadline: Duration,
    /// Retries within one refresh.
    pub fetch_retries: u32,
    /// Shortest time between the starts of two refreshes, successful or
    /// not.
    pub min_refresh_interval: Duration,
    /// Age after which keys are refreshed in the background (retried
    /// every `min_refresh_interval` while refreshes fail).
    pub refresh_interval: Duration,
}

/// Why a refresh gave no keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The provider could not be reached (refused, reset, DNS).
    #[error("cannot reach the JWKS: {0}")]
    Connect(String),
    /// An attempt ran past its timeout, or the refresh past its deadline.
    #[error("the JWKS request timed out")]
    Timeout,
    /// The provider answered with a status other than 200 (a redirect
    /// included: it is not followed).
    #[error("the JWKS answered HTTP {0}")]
    Status(u16),
    /// The document is over [`MAX_JWKS_BYTES`].
    #[error("the JWKS document is over {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    /// The document has no usable key, or is not a JWKS.
    #[error(transparent)]
    Keys(#[from] KeyError),
    /// A refresh ran less than `min_refresh_interval` ago.
    #[error("refreshed too recently")]
    Throttled,
}

impl FetchError {
    /// Whether another attempt may succeed: network failures, timeouts,
    /// 5xx and 429. A 404 or a bad document will be the same next time.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect(_) | Self::Timeout => true,
            Self::Status(code) => *code >= 500 || *code == 429,
            Self::TooLarge | Self::Keys(_) | Self::Throttled => false,
        }
    }
}

/// The keys from one JWKS URL, refreshed as the module docs say. Cloning
/// shares the cache.
#[derive(Clone)]
pub struct JwksCache {
    inner: Arc<Inner>,
}

struct Inner {
    config: JwksConfig,
    client: reqwest::Client,
    gate: RetryGate,
    state: RwLock<State>,
    last_start: Mutex<Option<Instant>>,
    flights: SingleFlight<(), Arc<KeySet>, FetchError>,
    requests: AtomicU64,
}

#[derive(Default)]
struct State {
    keys: Arc<KeySet>,
    generation: u64,
    fetched_at: Option<Instant>,
}

/// A snapshot of the cache: its keys and the generation they belong to.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The keys in force.
    pub keys: Arc<KeySet>,
    /// Finished refreshes so far (successful or not).
    pub generation: u64,
}

type BoxFetch = Pin<Box<dyn Future<Output = Result<Arc<KeySet>, FetchError>> + Send>>;

impl fmt::Debug for JwksCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snap = self.snapshot();
        f.debug_struct("JwksCache")
            .field("url", &self.inner.config.url)
            .field("keys", &snap.keys.len())
            .field("generation", &snap.generation)
            .field("requests", &self.requests())
            .finish()
    }
}

impl JwksCache {
    /// An empty cache for `config`; nothing is fetched until a token needs
    /// a key (or [`JwksCache::refresh`] is called).
    ///
    /// # Errors
    /// When the HTTP client cannot be built (its TLS roots, say).
    pub fn new(config: JwksConfig) -> Result<Self, reqwest::Error> {
        // No redirects: the keys come from the URL configured, nowhere
        // else. A redirect followed could move the fetch to plain HTTP or to
        // a host nobody chose; a 3xx is a refresh that failed (not retried:
        // it answers the same next time) and the cached keys stay.
        let client = reqwest::Client::builder()
            .connect_timeout(config.fetch_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("shopeasy-identity/", env!("CARGO_PKG_VERSION")))
            .build()?;
        // Retries of the JWKS fetch come from a budget of their own: a quiet
        // verifier may still retry (10 per window), a busy one stays within
        // 20 % of its refreshes.
        let gate = RetryGate::new(
            config.fetch_retries,
            Backoff::default(),
            RetryBudget::for_target("jwks", BudgetConfig::default()),
        );
        // The flight's own timeout is a backstop: the refresh enforces the
        // deadline itself so that it always records its outcome.
        let flights = SingleFlight::new(config.fetch_deadline + Duration::from_secs(1));
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                client,
                gate,
                state: RwLock::new(State::default()),
                last_start: Mutex::new(None),
                flights,
                requests: AtomicU64::new(0),
            }),
        })
    }

    /// The keys in force now and their generation.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.snapshot()
    }

    /// HTTP requests sent to the JWKS URL so far (attempts, not refreshes).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// The settings.
    pub fn config(&self) -> &JwksConfig {
        &self.inner.config
    }

    /// Refreshes after a lookup in generation `seen` missed, and waits for
    /// the result: joins the refresh in flight, or starts one unless a
    /// refresh finished since `seen` (then the current keys are returned)
    /// or one started less than `min_refresh_interval` ago.
    ///
    /// # Errors
    /// The refresh's [`FetchError`]; [`FetchError::Throttled`] when none
    /// could start; [`FetchError::Timeout`] when it outlived its deadline.
    pub async fn refresh_after_miss(&self, seen: u64) -> Result<Arc<KeySet>, FetchError> {
        let waiter = self.start(seen);
        waiter.wait(None).await.map_err(|e| match e {
            FlightError::Failed(e) => e,
            FlightError::FetchTimedOut | FlightError::WaitExpired | FlightError::Lost => {
                FetchError::Timeout
            }
        })
    }

    /// Refreshes now unless one ran within `min_refresh_interval` (for
    /// start-up: fetch the keys before the first request needs them).
    ///
    /// # Errors
    /// As [`JwksCache::refresh_after_miss`].
    pub async fn refresh(&self) -> Result<Arc<KeySet>, FetchError> {
        let seen = self.snapshot().generation;
        self.refresh_after_miss(seen).await
    }

    /// Starts a refresh in the background when the keys are older than
    /// `refresh_interval` and no refresh started within
    /// `min_refresh_interval` (the caller does not wait; the old keys serve
    /// meanwhile). Cheap when nothing is due.
    ///
    /// Both conditions matter: a failed refresh leaves the keys as old as
    /// they were, so by age alone every request while the provider is down
    /// would start a refresh, be throttled, and count
    /// `outcome="throttled"`. Pacing by the last attempt makes that one
    /// attempt per `min_refresh_interval`.
    pub fn refresh_if_stale(&self) {
        let stale = {
            let state = self.inner.read();
            state
                .fetched_at
                .is_some_and(|at| at.elapsed() >= self.inner.config.refresh_interval)
        };
        if stale && self.inner.may_start() {
            let seen = self.snapshot().generation;
            drop(self.start(seen));
        }
    }

    fn start(
        &self,
        seen: u64,
    ) -> shopeasy_resilience::single_flight::Waiter<Arc<KeySet>, FetchError> {
        let inner = self.inner.clone();
        self.inner.flights.join((), move || -> BoxFetch {
            // Runs only in the leader of a new flight.
            let now = inner.snapshot();
            if now.generation != seen {
                return Box::pin(std::future::ready(Ok(now.keys)));
            }
            if !inner.claim_start() {
                metrics::counter!("shopeasy_identity_jwks_refreshes_total", "outcome" => "throttled")
                    .increment(1);
                return Box::pin(std::future::ready(Err(FetchError::Throttled)));
            }
            Box::pin(async move {
                let deadline = Deadline::after(inner.config.fetch_deadline);
                let result = tokio::time::timeout_at(deadline.instant(), inner.fetch(deadline))
                    .await
                    .unwrap_or(Err(FetchError::Timeout));
                inner.record(result)
            })
        })
    }
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn snapshot(&self) -> Snapshot {
        let state = self.read();
        Snapshot {
            keys: state.keys.clone(),
            generation: state.generation,
        }
    }

    /// Takes the right to start a refresh now, if `min_refresh_interval`
    /// has passed since the last start.
    fn claim_start(&self) -> bool {
        let mut last = self.last_start.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if !self.interval_passed(*last, now) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Whether [`Inner::claim_start`] would succeed now, without taking
    /// the right (the background check asks before starting a flight).
    fn may_start(&self) -> bool {
        let last = *self.last_start.lock().unwrap_or_else(|p| p.into_inner());
        self.interval_passed(last, Instant::now())
    }

    /// Whether `min_refresh_interval` has passed between the start of the
    /// last refresh (successful or not) and `now`.
    fn interval_passed(&self, last: Option<Instant>, now: Instant) -> bool {
        last.is_none_or(|t| now.duration_since(t) >= self.config.min_refresh_interval)
    }

    /// Publishes a finished refresh: new keys replace the old on success;
    /// on failure the old keys stay. Either way the generation moves on.
    fn record(&self, result: Result<KeySet, FetchError>) -> Result<Arc<KeySet>, FetchError> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        state.generation += 1;
        match result {
            Ok(keys) => {
                let keys = Arc::new(keys);
                state.keys = keys.clone();
                state.fetched_at = Some(Instant::now());
                metrics::counter!("shopeasy_identity_jwks_refreshes_total", "outcome" => "ok")
                    .increment(1);
                tracing::info!(url = %self.config.url, keys = keys.len(), "JWKS refreshed");
                Ok(keys)
            }
            Err(e) => {
                metrics::counter!("shopeasy_identity_jwks_refreshes_total", "outcome" => "error")
                    .increment(1);
                tracing::warn!(
                    url = %self.config.url,
                    error = %e,
                    cached_keys = state.keys.len(),
                    "JWKS refresh failed; cached keys stay in force"
                );
                Err(e)
            }
        }
    }

    /// One refresh: attempts with per-attempt timeouts, retried as the
    /// gate decides, within `deadline`.
    async fn fetch(&self, deadline: Deadline) -> Result<KeySet, FetchError> {
        self.gate.deposit();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let mut retries = 0;
        let mut previous = Duration::ZERO;
        loop {
            let timeout = self.config.fetch_timeout.min(deadline.remaining());
            let result = tokio::time::timeout(timeout, self.attempt())
                .await
                .unwrap_or(Err(FetchError::Timeout));
            let error = match result {
                Ok(keys) => return Ok(keys),
                Err(e) if e.is_transient() => e,
                Err(e) => return Err(e),
            };
            match self.gate.decide(
                retries,
                previous,
                Duration::ZERO,
                Some(deadline.remaining()),
                &mut rng,
            ) {
                Ok(delay) => {
                    tracing::debug!(error = %error, ?delay, "JWKS attempt failed; retrying");
                    tokio::time::sleep(delay).await;
                    previous = delay;
                    retries += 1;
                }
                Err(_) => return Err(error),
            }
        }
    }

    async fn attempt(&self) -> Result<KeySet, FetchError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut response = self
            .client
            .get(&self.config.url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    FetchError::Timeout
                } else {
                    FetchError::Connect(without_url(&e))
                }
            })?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(FetchError::Status(response.status().as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(FetchError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FetchError::Connect(without_url(&e)))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(KeySet::from_jwks(&body)?)
    }
}

/// The error's text without the URL (it is logged beside it anyway).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<jwks>");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
