//! The policy check: cross-policy rules validated at construction, and the
//! worst-case number of attempts one request can cause.
//!
//! Each policy can be valid on its own and wrong in combination: an attempt
//! timeout longer than the deadline never fires; a breaker window shorter
//! than two attempt timeouts can never see enough calls; an inner hop whose
//! attempts outlast the outer hop's attempt is cut off by the propagated
//! deadline, so its retries never happen. [`Plan::new`] checks a chain of
//! hops (outer first, e.g. gateway → order, then order → inventory) and
//! reports every violation at once; [`Plan::worst_case_attempts`] multiplies
//! the attempts along the chain (what a service prints at start-up), and
//! [`Plan::budgeted_amplification`] shows what the retry budgets bring it
//! down to in steady state.
//!
//! ```
//! use shopeasy_resilience::budget::BudgetConfig;
//! use shopeasy_resilience::plan::{HopPolicy, Plan};
//! use std::time::Duration;
//!
//! let budget = BudgetConfig::default(); // ratio 0.2
//! let gateway = HopPolicy::new("gateway→order", Duration::from_secs(10))
//!     .retries(2)
//!     .budget(budget);
//! let order = HopPolicy::new("order→inventory", Duration::from_secs(3))
//!     .retries(2)
//!     .budget(budget);
//! let plan = Plan::new(vec![gateway, order]).unwrap();
//! assert_eq!(plan.worst_case_attempts(), 9);
//! assert!((plan.budgeted_amplification() - 1.44).abs() < 1e-9);
//!
//! // The inner hop must give up before the outer one.
//! let slow = HopPolicy::new("order→inventory", Duration::from_secs(30));
//! let err = Plan::new(vec![HopPolicy::new("gateway→order", Duration::from_secs(10)), slow])
//!     .unwrap_err();
//! assert_eq!(err.violations[0].rule, "inner_gives_up_first");
//! ```

use std::fmt;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::breaker::BreakerConfig;
use crate::budget::BudgetConfig;

/// The resilience settings of one hop (one client stack).
#[derive(Debug, Clone, PartialEq)]
pub struct HopPolicy {
    /// A label for messages, e.g. `order→inventory`.
    pub name: &'static str,
    /// The deadline cap of the whole call at this hop, if any.
    pub deadline: Option<Duration>,
    /// Each attempt's timeout.
    pub attempt_timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The backoff between attempts.
    pub backoff: Backoff,
    /// The retry budget, if retries are budgeted.
    pub budget: Option<BudgetConfig>,
    /// The circuit breaker, if any.
    pub breaker: Option<BreakerConfig>,
}

impl HopPolicy {
    /// A hop with `attempt_timeout`, no retries, no deadline cap, no breaker.
    pub fn new(name: &'static str, attempt_timeout: Duration) -> Self {
        Self {
            name,
            deadline: None,
            attempt_timeout,
            max_retries: 0,
            backoff: Backoff::default(),
            budget: None,
            breaker: None,
        }
    }

    /// With `max_retries`.
    #[must_use]
    pub fn retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// With a deadline cap.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// With a backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// With a retry budget.
    #[must_use]
    pub fn budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = Some(budget);
        self
    }

    /// With a circuit breaker.
    #[must_use]
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = Some(breaker);
        self
    }

    fn check(&self, out: &mut Vec<Violation>) {
        let mut bad = |rule: &'static str, detail: String| {
            out.push(Violation {
                hop: self.name,
                rule,
                detail,
            });
        };
        let t = self.attempt_timeout;
        if t.is_zero() {
            bad("attempt_timeout_positive", "attempt timeout is zero".into());
        }
        if let Some(d) = self.deadline
            && t > d
        {
            bad(
                "attempt_timeout_within_deadline",
                format!("attempt timeout {t:?} > deadline {d:?}"),
            );
        }
        if self.backoff.base > self.backoff.cap {
            bad(
                "backoff_base_within_cap",
                format!(
                    "backoff base {:?} > cap {:?}",
                    self.backoff.base, self.backoff.cap
                ),
            );
        }
        if let Some(b) = &self.budget {
            if !(0.0..=1.0).contains(&b.ratio) {
                bad(
                    "budget_ratio_range",
                    format!("ratio {} not in 0..=1", b.ratio),
                );
            }
            if b.window.is_zero() {
                bad("budget_window_positive", "budget window is zero".into());
            }
        } else if self.max_retries > 0 {
            bad(
                "retries_are_budgeted",
                format!("{} retries without a retry budget", self.max_retries),
            );
        }
        if let Some(b) = &self.breaker {
            if b.sampling_duration < t.saturating_mul(2) {
                bad(
                    "breaker_window_covers_two_attempts",
                    format!(
                        "sampling duration {:?} < 2 × attempt timeout {t:?}",
                        b.sampling_duration
                    ),
                );
            }
            if !(b.failure_ratio > 0.0 && b.failure_ratio <= 1.0) {
                bad(
                    "breaker_ratio_range",
                    format!("failure ratio {} not in (0, 1]", b.failure_ratio),
                );
            }
            if b.minimum_throughput == 0 {
                bad(
                    "breaker_minimum_throughput",
                    "minimum throughput is zero".into(),
                );
            }
            if b.break_duration.is_zero() {
                bad("breaker_break_positive", "break duration is zero".into());
            }
            if b.trial_timeout < t {
                bad(
                    "trial_timeout_covers_attempt",
                    format!(
                        "trial timeout {:?} < attempt timeout {t:?}",
                        b.trial_timeout
                    ),
                );
            }
        }
    }

    /// The longest this hop can take for one request: every attempt timing
    /// out plus the longest backoffs, or its deadline cap if shorter.
    pub fn worst_case_duration(&self) -> Duration {
        let attempts = self.attempt_timeout.saturating_mul(self.max_retries + 1);
        let waits = (0..self.max_retries)
            .map(|n| self.backoff.max_delay(n))
            .fold(Duration::ZERO, Duration::saturating_add);
        let total = attempts.saturating_add(waits);
        self.deadline.map_or(total, |d| total.min(d))
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The hop it concerns (the inner one for chain rules).
    pub hop: &'static str,
    /// The rule's name.
    pub rule: &'static str,
    /// What is wrong, with the values.
    pub detail: String,
}

/// Every rule a chain of hops broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanError {
    /// The violations, in hop order.
    pub violations: Vec<Violation>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid resilience policy:")?;
        for v in &self.violations {
            write!(f, "\n  - {}: {} ({})", v.hop, v.detail, v.rule)?;
        }
        Ok(())
    }
}

/// A validated chain of hops, outer first.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    hops: Vec<HopPolicy>,
}

impl Plan {
    /// Validates every hop and every adjacent pair.
    ///
    /// # Errors
    /// [`PlanError`] listing every broken rule.
    pub fn new(hops: Vec<HopPolicy>) -> Result<Self, PlanError> {
        let mut violations = Vec::new();
        for hop in &hops {
            hop.check(&mut violations);
        }
        for pair in hops.windows(2) {
            let (outer, inner) = (&pair[0], &pair[1]);
            if inner.attempt_timeout >= outer.attempt_timeout {
                violations.push(Violation {
                    hop: inner.name,
                    rule: "inner_gives_up_first",
                    detail: format!(
                        "attempt timeout {:?} ≥ the calling hop {}'s attempt timeout {:?}",
                        inner.attempt_timeout, outer.name, outer.attempt_timeout
                    ),
                });
            }
        }
        if violations.is_empty() {
            Ok(Self { hops })
        } else {
            Err(PlanError { violations })
        }
    }

    /// The hops, outer first.
    pub fn hops(&self) -> &[HopPolicy] {
        &self.hops
    }

    /// The most attempts the innermost dependency can see for one request
    /// entering the outermost hop: `Π (1 + max_retries)`.
    pub fn worst_case_attempts(&self) -> u64 {
        self.hops
            .iter()
            .map(|h| 1 + u64::from(h.max_retries))
            .product()
    }

    /// The steady-state load multiplier with every hop's budget in force:
    /// `Π (1 + min(max_retries, ratio))` (the budget's floor aside).
    pub fn budgeted_amplification(&self) -> f64 {
        self.hops
            .iter()
            .map(|h| {
                let r = f64::from(h.max_retries);
                1.0 + h.budget.map_or(r, |b| r.min(b.ratio))
            })
            .product()
    }

    /// A one-line summary for start-up logs.
    pub fn describe(&self) -> String {
        let path: Vec<String> = self
            .hops
            .iter()
            .map(|h| format!("{} ({}×{:?})", h.name, h.max_retries + 1, h.attempt_timeout))
            .collect();
        format!(
            "{}: worst case {} attempts, ≤ {:.2}× with budgets",
            path.join(" → "),
            self.worst_case_attempts(),
            self.budgeted_amplification()
        )
    }
}
