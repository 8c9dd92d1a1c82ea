//! Which requests may be sent again, and whether this one will be (SPEC §6).
//!
//! Only a *connection failure* (refused, reset or closed before any response
//! byte) is retried, and only for a request that is safe to repeat: GET or
//! HEAD without a body, or a POST carrying `Idempotency-Key` (its body is
//! buffered, capped, so it can be sent again). PUT, PATCH, DELETE and plain
//! POST are never repeated, and no response of any status is retried: a 5xx
//! goes back to the caller unchanged. Each retry is jittered and taken from
//! the route's [`RetryBudget`], so retries can add at most the budget's
//! ratio of the route's traffic however many callers fail at once.

use std::time::Duration;

use http::{HeaderMap, Method};
use rand::Rng;
use shopeasy_resilience::{backoff::Backoff, budget::RetryBudget};

use crate::error::ProxyError;

/// The header that makes a POST safe to repeat.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How a request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// GET or HEAD without a body.
    Bodiless,
    /// POST with `Idempotency-Key`: buffer the body so it can be re-sent.
    Buffered,
    /// Never repeated; the body is streamed.
    Never,
}

impl Replay {
    /// Classifies a request by method, headers and whether it has a body.
    pub fn of(method: &Method, headers: &HeaderMap, has_body: bool) -> Self {
        if (method == Method::GET || method == Method::HEAD) && !has_body {
            Self::Bodiless
        } else if method == Method::POST && headers.contains_key(IDEMPOTENCY_KEY) {
            Self::Buffered
        } else {
            Self::Never
        }
    }

    /// Whether a failed attempt may be re-sent at all.
    pub fn allowed(self) -> bool {
        self != Self::Never
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Wait this long, then send again (already taken from the budget).
    Retry(Duration),
    /// Give up. `Some(outcome)` when a retry was wanted but refused
    /// (`budget_exhausted`, `exhausted`, `deadline`), for the metrics.
    GiveUp(Option<&'static str>),
}

/// One route's retry policy.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_retries: u32,
    backoff: Backoff,
    budget: RetryBudget,
}

impl RetryPolicy {
    /// Up to `max_retries` retries, spaced by `backoff`, from `budget`.
    pub fn new(max_retries: u32, backoff: Backoff, budget: RetryBudget) -> Self {
        Self {
            max_retries,
            backoff,
            budget,
        }
    }

    /// The route's budget (for `/admin/resilience`).
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Counts one caller request in the budget.
    pub fn deposit(&self) {
        self.budget.deposit();
    }

    /// Decides after attempt number `retries_so_far + 1` failed with
    /// `error`. `remaining` is the caller's time left, if it sent a deadline:
    /// a retry whose backoff would outlive it is not started.
    pub fn decide(
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
        if retries_so_far >= self.max_retries {
            return Decision::GiveUp(Some("exhausted"));
        }
        let delay = self.backoff.delay(retries_so_far, previous_delay, rng);
        if remaining.is_some_and(|left| left <= delay) {
            return Decision::GiveUp(Some("deadline"));
        }
        if !self.budget.try_withdraw() {
            return Decision::GiveUp(Some("budget_exhausted"));
        }
        Decision::Retry(delay)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use rand::{SeedableRng, rngs::SmallRng};
    use shopeasy_resilience::{backoff::Jitter, budget::BudgetConfig};

    use super::*;

    fn policy(min_retries: u32) -> RetryPolicy {
        RetryPolicy::new(
            2,
            Backoff::new(
                Duration::from_millis(10),
                Duration::from_secs(1),
                Jitter::Full,
            ),
            RetryBudget::new(BudgetConfig {
                ratio: 0.0,
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
        let p = policy(3);
        let refused = ProxyError::ConnectionRefused;
        let d = |p: &RetryPolicy, n, rng: &mut SmallRng| {
            p.decide(Replay::Bodiless, refused, n, Duration::ZERO, None, rng)
        };
        assert!(matches!(d(&p, 0, &mut rng), Decision::Retry(x) if x <= Duration::from_millis(10)));
        assert!(matches!(d(&p, 1, &mut rng), Decision::Retry(x) if x <= Duration::from_millis(20)));
        assert_eq!(d(&p, 2, &mut rng), Decision::GiveUp(Some("exhausted")));
        assert!(matches!(d(&p, 0, &mut rng), Decision::Retry(_)));
        assert_eq!(
            d(&p, 0, &mut rng),
            Decision::GiveUp(Some("budget_exhausted")),
            "3 retries per window and no traffic to earn more"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_and_unsafe_requests_are_never_retried() {
        let mut rng = SmallRng::seed_from_u64(1);
        let p = policy(10);
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
            Decision::GiveUp(Some("deadline"))
        );
    }
}
