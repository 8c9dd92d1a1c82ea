//! The one retry decision: a failed attempt that a policy called transient —
//! may it be sent again, and after how long?
//!
//! Asked in this order, the same everywhere ShopEasy retries:
//!
//! 1. `max_retries`: stop when reached ([`Refusal::AttemptsExhausted`]);
//! 2. the [`Backoff`]: the delay of this retry, at least a server's hint;
//! 3. the deadline: a retry whose delay would reach the caller's time left
//!    is not made ([`Refusal::DeadlineExhausted`]);
//! 4. the [`RetryBudget`]: stop when it refuses
//!    ([`Refusal::BudgetExhausted`]); a granted retry is withdrawn from it.
//!
//! [`RetryGate::decide`] is pure but for the budget it withdraws from: the
//! random source and the time left are passed in, so it is tested with a
//! seeded rng and a paused clock. Which failures are transient is not its
//! business (that is the policy's), and neither is sleeping: a call site
//! that cannot be a [`RetryLayer`](crate::retry::RetryLayer) — the gateway,
//! whose attempts race its own activity timer — keeps a thin loop around
//! it: classify, decide, sleep the delay, send again.

use std::time::Duration;

use rand::Rng;

use crate::{backoff::Backoff, budget::RetryBudget, outcome::Outcome};

/// Why a retry that was wanted is not made: the refusing half of
/// [`Outcome`]'s retry values, so a refusal can only be counted under a
/// label of the one vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_retries` retries were already made.
    AttemptsExhausted,
    /// The backoff would outlive the caller's deadline.
    DeadlineExhausted,
    /// The budget has no retry to give.
    BudgetExhausted,
}

impl From<Refusal> for Outcome {
    /// The `outcome` label of `shopeasy_downstream_retries_total`.
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::AttemptsExhausted => Self::AttemptsExhausted,
            Refusal::DeadlineExhausted => Self::DeadlineExhausted,
            Refusal::BudgetExhausted => Self::BudgetExhausted,
        }
    }
}

/// The limits one target's retries live within: how many, how far apart,
/// and from which budget. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct RetryGate {
    max_retries: u32,
    backoff: Backoff,
    budget: RetryBudget,
}

impl RetryGate {
    /// At most `max_retries` retries per request, spaced by `backoff`, each
    /// taken from `budget`.
    pub fn new(max_retries: u32, backoff: Backoff, budget: RetryBudget) -> Self {
        Self {
            max_retries,
            backoff,
            budget,
        }
    }

    /// The budget retries are taken from (for `/admin/resilience`).
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Counts one caller request in the budget: once per request, before its
    /// first attempt, so retries stay a ratio of real traffic.
    pub fn deposit(&self) {
        self.budget.deposit();
    }

    /// Decides on retry number `retries_so_far + 1` (see the module docs).
    /// `previous_delay` is the last retry's delay (zero before the first),
    /// `at_least` a server's hint (zero without one), `remaining` the
    /// caller's time left if it sent a deadline. `Ok` holds the delay to
    /// wait before sending again, already withdrawn from the budget.
    ///
    /// # Errors
    /// The [`Refusal`] when the retry is not made.
    pub fn decide(
        &self,
        retries_so_far: u32,
        previous_delay: Duration,
        at_least: Duration,
        remaining: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Result<Duration, Refusal> {
        if retries_so_far >= self.max_retries {
            return Err(Refusal::AttemptsExhausted);
        }
        let delay = self
            .backoff
            .delay(retries_so_far, previous_delay, rng)
            .max(at_least);
        if remaining.is_some_and(|left| delay >= left) {
            return Err(Refusal::DeadlineExhausted);
        }
        if !self.budget.try_withdraw() {
            return Err(Refusal::BudgetExhausted);
        }
        Ok(delay)
    }
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::SmallRng};

    use super::*;
    use crate::{backoff::Jitter, budget::BudgetConfig};

    const MS: Duration = Duration::from_millis(1);
    const NONE: Duration = Duration::ZERO;

    /// A gate whose delays are exactly the backoff's ceiling (10 ms
    /// doubling), over a budget that earns nothing from traffic.
    fn gate(max_retries: u32, min_retries_per_window: u32) -> RetryGate {
        RetryGate::new(
            max_retries,
            Backoff::new(10 * MS, Duration::from_secs(1), Jitter::None),
            RetryBudget::new(BudgetConfig {
                ratio: 0.0,
                min_retries_per_window,
                window: Duration::from_secs(10),
            }),
        )
    }

    /// Asks `g` about retry `retries_so_far + 1` (no jitter: the seeded rng
    /// draws nothing that matters).
    fn ask(
        g: &RetryGate,
        retries_so_far: u32,
        at_least: Duration,
        remaining: Option<Duration>,
    ) -> Result<Duration, Refusal> {
        let mut rng = SmallRng::seed_from_u64(1);
        g.decide(retries_so_far, NONE, at_least, remaining, &mut rng)
    }

    #[tokio::test(start_paused = true)]
    async fn retries_follow_the_backoff_until_max_retries() {
        let g = gate(2, 10);
        assert_eq!(ask(&g, 0, NONE, None), Ok(10 * MS));
        assert_eq!(ask(&g, 1, NONE, None), Ok(20 * MS));
        assert_eq!(ask(&g, 2, NONE, None), Err(Refusal::AttemptsExhausted));
    }

    #[tokio::test(start_paused = true)]
    async fn a_servers_hint_lengthens_the_delay_but_never_shortens_it() {
        let g = gate(2, 10);
        assert_eq!(ask(&g, 0, 500 * MS, None), Ok(500 * MS));
        assert_eq!(ask(&g, 0, MS, None), Ok(10 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_that_would_outlive_the_deadline_is_refused_without_spending_the_budget() {
        let g = gate(5, 1);
        assert_eq!(
            ask(&g, 0, NONE, Some(10 * MS)),
            Err(Refusal::DeadlineExhausted),
            "a delay equal to the time left reaches the deadline"
        );
        assert_eq!(ask(&g, 0, NONE, Some(11 * MS)), Ok(10 * MS));
        assert_eq!(
            ask(&g, 0, NONE, None),
            Err(Refusal::BudgetExhausted),
            "one retry per window, taken by the second call only"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_is_asked_last_and_refuses_when_empty() {
        let g = gate(1, 1);
        assert_eq!(ask(&g, 1, NONE, None), Err(Refusal::AttemptsExhausted));
        assert_eq!(ask(&g, 0, NONE, None), Ok(10 * MS), "the budget is intact");
        assert_eq!(ask(&g, 0, NONE, None), Err(Refusal::BudgetExhausted));
        g.deposit();
        assert_eq!(
            ask(&g, 0, NONE, None),
            Err(Refusal::BudgetExhausted),
            "a ratio of zero earns nothing from traffic"
        );
    }

    #[test]
    fn refusals_have_the_downstream_metric_labels() {
        let label = |r: Refusal| Outcome::from(r).as_str();
        assert_eq!(label(Refusal::AttemptsExhausted), "attempts_exhausted");
        assert_eq!(label(Refusal::DeadlineExhausted), "deadline_exhausted");
        assert_eq!(label(Refusal::BudgetExhausted), "budget_exhausted");
    }
}
