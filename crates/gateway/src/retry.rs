//! Which requests may be sent again, and whether this one will be (SPEC §6).
//!
//! Only a *connection failure* (refused, reset or closed before any response
//! byte) is retried, and only for a request that is safe to repeat: GET or
//! HEAD without a body, or a POST carrying `Idempotency-Key` (its body is
//! buffered, capped, so it can be sent again). PUT, PATCH, DELETE and plain
//! POST are never repeated, and no response of any status is retried: a 5xx
//! goes back to the caller unchanged — except a refusal (503, 429) to a
//! retry after a connection that closed once the request was sent: it
//! answers for the retry only, so the caller gets the earlier attempt's
//! 502 (outcome unknown; the same key tells). Each retry is jittered and taken from
//! the route's [`RetryBudget`], so retries can add at most the budget's
//! ratio of the route's traffic however many callers fail at once.
//!
//! The decision is pure ([`Replay::of`], [`RetryPolicy::decide`]); the
//! limits in it (attempts, backoff, deadline, budget) are asked through
//! `shopeasy_resilience`'s [`RetryGate`], the same decision the services'
//! client stacks make. [`Retries`] is the thin loop around it that the proxy
//! runs per request: decide, count, sleep, send again.

use std::time::Duration;

use http::{HeaderMap, Method};
use rand::Rng;
use shopeasy_resilience::{
    backoff::Backoff,
    budget::RetryBudget,
    deadline::Deadline,
    decide::{Refusal, RetryGate},
};

use crate::{
    error::ProxyError,
    observe::{self, RetryOutcome},
};

/// Whether `status` is a refusal before any work (503 unavailable or
/// overloaded, 429 rate-limited): after a retry it cannot speak for an
/// earlier attempt that may have been acted on.
pub(crate) fn refuses(status: http::StatusCode) -> bool {
    status == http::StatusCode::SERVICE_UNAVAILABLE || status == http::StatusCode::TOO_MANY_REQUESTS
}

/// The header that makes a POST safe to repeat.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How a request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// GET or HEAD without a body.
    Bodiless,
    /// POST with `Idempotency-Key`: buffer the body so it can be re-sent.
    Buffered,
    /// Never repeated; the body is streamed.
    Never,
}

impl Replay {
    /// Classifies a request by method, headers and whether it has a body.
    pub(crate) fn of(method: &Method, headers: &HeaderMap, has_body: bool) -> Self {
        if (method == Method::GET || method == Method::HEAD) && !has_body {
            Self::Bodiless
        } else if method == Method::POST && headers.contains_key(IDEMPOTENCY_KEY) {
            Self::Buffered
        } else {
            Self::Never
        }
    }

    /// Whether a failed attempt may be re-sent at all.
    pub(crate) fn allowed(self) -> bool {
        self != Self::Never
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    /// Wait this long, then send again (already taken from the budget).
    Retry(Duration),
    /// Give up. `Some(refusal)` when a retry was wanted but refused (out of
    /// attempts, the deadline, the budget), for the metrics.
    GiveUp(Option<Refusal>),
}

/// One route's retry policy: which failures of which requests are worth
/// another attempt (the gateway's own rule, SPEC §6), and the limits every
/// ShopEasy retry lives within ([`RetryGate`]: attempts, backoff, deadline,
/// budget).
#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    gate: RetryGate,
}

impl RetryPolicy {
    /// Up to `max_retries` retries, spaced by `backoff`, from `budget`.
    /// Registers the retry counters at 0 ([`observe::register_retries`]).
    pub(crate) fn new(max_retries: u32, backoff: Backoff, budget: RetryBudget) -> Self {
        observe::register_retries();
        Self {
            gate: RetryGate::new(max_retries, backoff, budget),
        }
    }

    /// The route's budget (for `/admin/resilience`).
    pub(crate) fn budget(&self) -> &RetryBudget {
        self.gate.budget()
    }

    /// Decides after attempt number `retries_so_far + 1` failed with
    /// `error`. `remaining` is the caller's time left, if it sent a deadline:
    /// a retry whose backoff would outlive it is not started.
    pub(crate) fn decide(
        &self,
        replay: Replay,
        error: ProxyError,
        retries_so_far: u32,
        previous_delay: Duration,
        remaining: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Decision {
        if !replay.allowed() || !error.is_connection_failure() {
            return Decision::GiveUp(None);
        }
        // No server hint: the gateway retries only failures that came
        // before any response.
        match self.gate.decide(
            retries_so_far,
            previous_delay,
            Duration::ZERO,
            remaining,
            rng,
        ) {
            Ok(delay) => Decision::Retry(delay),
            Err(refusal) => Decision::GiveUp(Some(refusal)),
        }
    }
}

/// One request's way through its retries: the thin loop around
/// [`RetryPolicy::decide`]. Started once per caller request (which counts it
/// in the budget); after each failed attempt it asks the decision, counts
/// it in `shopeasy_gateway_retries_total` and sleeps the backoff.
#[derive(Debug)]
pub(crate) struct Retries<'a> {
    policy: &'a RetryPolicy,
    replay: Replay,
    made: u32,
    previous_delay: Duration,
}

impl<'a> Retries<'a> {
    /// The retries of one request that may be sent again as `replay` says.
    pub(crate) fn start(policy: &'a RetryPolicy, replay: Replay) -> Self {
        policy.gate.deposit();
        Self {
            policy,
            replay,
            made: 0,
            previous_delay: Duration::ZERO,
        }
    }

    /// How many retries were made so far.
    pub(crate) fn made(&self) -> u32 {
        self.made
    }

    /// After an attempt failed with `error`: `Ok` once the backoff has
    /// passed and the request is to be sent again, or `error` back when it
    /// is not.
    pub(crate) async fn after_failure(
        &mut self,
        error: ProxyError,
        deadline: Option<Deadline>,
    ) -> Result<(), ProxyError> {
        let decision = self.policy.decide(
            self.replay,
            error,
            self.made,
            self.previous_delay,
            deadline.map(Deadline::remaining),
            &mut rand::rng(),
        );
        match decision {
            Decision::Retry(delay) => {
                observe::retry(RetryOutcome::Retried);
                tokio::time::sleep(delay).await;
                self.made += 1;
                self.previous_delay = delay;
                Ok(())
            }
            Decision::GiveUp(refusal) => {
                if let Some(refusal) = refusal {
                    observe::retry(RetryOutcome::Refused(refusal));
                }
                Err(error)
            }
        }
    }

    /// After an attempt got its response: a success that took retries is
    /// counted, and their number recorded on the request's span.
    pub(crate) fn succeeded(&self) {
        if self.made > 0 {
            observe::retry(RetryOutcome::SuccessAfterRetry);
            tracing::Span::current().record("retries", self.made);
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use rand::{SeedableRng, rngs::SmallRng};
    use shopeasy_resilience::{backoff::Jitter, budget::BudgetConfig};

    use super::*;

    /// Up to `max_retries` retries, 10 ms doubling with `jitter`, over a
    /// budget of `ratio` and `min_retries` free retries per window.
    fn policy(max_retries: u32, jitter: Jitter, ratio: f64, min_retries: u32) -> RetryPolicy {
        RetryPolicy::new(
            max_retries,
            Backoff::new(Duration::from_millis(10), Duration::from_secs(1), jitter),
            RetryBudget::new(BudgetConfig {
                ratio,
                min_retries_per_window: min_retries,
                window: Duration::from_secs(10),
            }),
        )
    }

    #[test]
    fn only_safe_requests_may_be_repeated() {
        let none = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("k1"));
        assert_eq!(Replay::of(&Method::GET, &none, false), Replay::Bodiless);
        assert_eq!(Replay::of(&Method::HEAD, &none, false), Replay::Bodiless);
        assert_eq!(Replay::of(&Method::GET, &none, true), Replay::Never);
        assert_eq!(Replay::of(&Method::POST, &none, true), Replay::Never);
        assert_eq!(Replay::of(&Method::POST, &keyed, true), Replay::Buffered);
        for m in [Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(Replay::of(&m, &keyed, true), Replay::Never, "{m}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn connection_failures_are_retried_up_to_the_limit_then_the_budget_stops_them() {
        let mut rng = SmallRng::seed_from_u64(1);
        let p = policy(2, Jitter::Full, 0.0, 3);
        let refused = ProxyError::ConnectionRefused;
        let d = |p: &RetryPolicy, n, rng: &mut SmallRng| {
            p.decide(Replay::Bodiless, refused, n, Duration::ZERO, None, rng)
        };
        assert!(matches!(d(&p, 0, &mut rng), Decision::Retry(x) if x <= Duration::from_millis(10)));
        assert!(matches!(d(&p, 1, &mut rng), Decision::Retry(x) if x <= Duration::from_millis(20)));
        assert_eq!(
            d(&p, 2, &mut rng),
            Decision::GiveUp(Some(Refusal::AttemptsExhausted))
        );
        assert!(matches!(d(&p, 0, &mut rng), Decision::Retry(_)));
        assert_eq!(
            d(&p, 0, &mut rng),
            Decision::GiveUp(Some(Refusal::BudgetExhausted)),
            "3 retries per window and no traffic to earn more"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_and_unsafe_requests_are_never_retried() {
        let mut rng = SmallRng::seed_from_u64(1);
        let p = policy(2, Jitter::Full, 0.0, 10);
        for e in [
            ProxyError::ResponseTimeout,
            ProxyError::ConnectTimeout,
            ProxyError::Protocol,
        ] {
            assert_eq!(
                p.decide(Replay::Bodiless, e, 0, Duration::ZERO, None, &mut rng),
                Decision::GiveUp(None)
            );
        }
        assert_eq!(
            p.decide(
                Replay::Never,
                ProxyError::ConnectionRefused,
                0,
                Duration::ZERO,
                None,
                &mut rng
            ),
            Decision::GiveUp(None)
        );
        assert_eq!(
            p.decide(
                Replay::Bodiless,
                ProxyError::ConnectionRefused,
                0,
                Duration::ZERO,
                Some(Duration::ZERO),
                &mut rng
            ),
            Decision::GiveUp(Some(Refusal::DeadlineExhausted))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_sleeps_each_backoff_then_hands_the_last_error_back() {
        // No jitter: each sleep is the backoff's ceiling, to the millisecond.
        let p = policy(2, Jitter::None, 0.0, 10);
        let mut retries = Retries::start(&p, Replay::Bodiless);
        let refused = ProxyError::ConnectionRefused;
        let t0 = tokio::time::Instant::now();
        assert_eq!(retries.after_failure(refused, None).await, Ok(()));
        assert_eq!(t0.elapsed(), Duration::from_millis(10));
        assert_eq!(retries.after_failure(refused, None).await, Ok(()));
        assert_eq!(t0.elapsed(), Duration::from_millis(30));
        assert_eq!(retries.made(), 2);
        assert_eq!(
            retries.after_failure(refused, None).await,
            Err(refused),
            "out of attempts"
        );
        assert_eq!(
            t0.elapsed(),
            Duration::from_millis(30),
            "no sleep to give up"
        );
        assert_eq!(retries.made(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_gives_up_at_once_on_what_may_not_be_retried() {
        let p = policy(2, Jitter::None, 0.0, 10);
        let t0 = tokio::time::Instant::now();
        let mut get = Retries::start(&p, Replay::Bodiless);
        let timeout = ProxyError::ResponseTimeout;
        assert_eq!(get.after_failure(timeout, None).await, Err(timeout));
        let mut put = Retries::start(&p, Replay::Never);
        let refused = ProxyError::ConnectionRefused;
        assert_eq!(put.after_failure(refused, None).await, Err(refused));
        let mut late = Retries::start(&p, Replay::Bodiless);
        let deadline = Deadline::after(Duration::from_millis(5));
        assert_eq!(
            late.after_failure(refused, Some(deadline)).await,
            Err(refused),
            "a 10 ms backoff would outlive a 5 ms deadline"
        );
        assert_eq!(t0.elapsed(), Duration::ZERO);
        assert_eq!(get.made() + put.made() + late.made(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn each_request_the_loop_starts_is_counted_in_the_budget() {
        // Ratio 1, no free retries: only deposits can pay for a retry.
        let p = policy(5, Jitter::None, 1.0, 0);
        let refused = ProxyError::ConnectionRefused;
        let mut retries = Retries::start(&p, Replay::Bodiless);
        assert_eq!(retries.after_failure(refused, None).await, Ok(()));
        assert_eq!(
            retries.after_failure(refused, None).await,
            Err(refused),
            "one request paid for one retry"
        );
    }
}
