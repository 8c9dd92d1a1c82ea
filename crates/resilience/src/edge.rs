//! One client stack for one downstream edge, composed once.
//!
//! Every client of another service needs the same seven layers in the same
//! order (see the crate docs, "Stack order"); what differs between an HTTP
//! and a gRPC client is only which failures are transient (the
//! [`RetryPolicy`]), which count against the breaker (the [`Classify`]),
//! and the transport. [`EdgeConfig`] holds the numbers an edge is
//! configured with, [`EdgeClient::new`] builds the stack from them, and
//! [`EdgeClient::call`] makes one call through it: it records
//! `shopeasy_downstream_request_duration_seconds{target,outcome}` (the
//! [`Outcome`] vocabulary) and tells the caller's own deadline running out
//! ([`EdgeError::DeadlineExceeded`]) from the dependency failing
//! ([`EdgeError::Failed`]).
//!
//! ```
//! use std::time::Duration;
//! use shopeasy_resilience::{
//!     breaker::HttpClassifier,
//!     budget::{BudgetConfig, RetryBudget},
//!     edge::{EdgeClient, EdgeConfig},
//!     outcome::Outcome,
//!     retry::HttpRetryPolicy,
//! };
//! use tower::BoxError;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), BoxError> {
//! let transport = tower::service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, BoxError>(http::Response::new("pong"))
//! });
//! let config = EdgeConfig::new("product", Duration::from_secs(1));
//! let budget = RetryBudget::for_target("product", BudgetConfig::default());
//! let client = EdgeClient::new(&config, budget, HttpRetryPolicy::new(), HttpClassifier, transport);
//! let response = client
//!     .call(http::Request::new(()), |r| {
//!         if r.status().is_success() { Outcome::Ok } else { Outcome::ErrorStatus }
//!     })
//!     .await?;
//! assert_eq!(*response.body(), "pong");
//! assert_eq!(config.hop("order→product", BudgetConfig::default()).max_retries, 2);
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

use crate::backoff::Backoff;
use crate::breaker::{Breaker, BreakerConfig, BreakerHandle, BreakerLayer, Classify};
use crate::budget::{BudgetConfig, RetryBudget};
use crate::bulkhead::{Bulkhead, BulkheadLayer};
use crate::deadline::{Deadline, DeadlineLayer, HasDeadline, WithDeadline};
use crate::error::{BoxError, DeadlineExceeded, find};
use crate::outcome::Outcome;
use crate::plan::HopPolicy;
use crate::retry::{Retry, RetryLayer, RetryPolicy};
use crate::throttle::{Judge, Throttle, ThrottleConfig, ThrottleHandle, ThrottleLayer};
use crate::timeout::{AttemptTimeout, AttemptTimeoutLayer};

/// The metric every [`EdgeClient::call`] records.
pub const REQUEST_DURATION: &str = "shopeasy_downstream_request_duration_seconds";

/// What one client stack is configured with: the numbers both protocols
/// share. A service maps its settings onto this once, so the stack and the
/// start-up policy check ([`EdgeConfig::hop`]) read the same values.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeConfig {
    /// The target's name in metrics, spans and `/admin/resilience`.
    pub target: &'static str,
    /// Each attempt's timeout (never beyond the caller's time left).
    pub attempt_timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The pause before each retry.
    pub backoff: Backoff,
    /// The circuit breaker.
    pub breaker: BreakerConfig,
    /// Most calls in flight at once (the bulkhead).
    pub max_concurrency: usize,
    /// Client-side adaptive throttling of the callee's overload refusals.
    pub throttle: ThrottleConfig,
}

impl EdgeConfig {
    /// An edge to `target` with `attempt_timeout`, two retries, the default
    /// backoff and breaker (its trial timeout two attempts), 64 calls in
    /// flight, the default throttle (`K = 2` over ten seconds).
    pub fn new(target: &'static str, attempt_timeout: Duration) -> Self {
        Self {
            target,
            attempt_timeout,
            max_retries: 2,
            backoff: Backoff::default(),
            breaker: BreakerConfig {
                trial_timeout: attempt_timeout.saturating_mul(2),
                ..BreakerConfig::default()
            },
            max_concurrency: 64,
            throttle: ThrottleConfig::default(),
        }
    }

    /// The deadline of a call whose caller set none: every attempt, plus a
    /// second for the pauses between them, so such a call still ends.
    pub fn deadline_cap(&self) -> Duration {
        self.attempt_timeout
            .saturating_mul(self.max_retries.saturating_add(1))
            .saturating_add(Duration::from_secs(1))
    }

    /// This edge as a hop of the start-up policy check, named `name`
    /// (`order→inventory`), its retries drawn from a budget of `budget`.
    pub fn hop(&self, name: &'static str, budget: BudgetConfig) -> HopPolicy {
        HopPolicy::new(name, self.attempt_timeout)
            .retries(self.max_retries)
            .backoff(self.backoff)
            .deadline(self.deadline_cap())
            .budget(budget)
            .breaker(self.breaker)
    }
}

/// The composed stack, outer to inner, before it is boxed.
type Composed<S, P, C> =
    WithDeadline<Retry<Throttle<Breaker<Bulkhead<AttemptTimeout<S>>, C>, C>, P>>;

/// A call that did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The caller's own deadline passed: nobody waits for the answer any
    /// more (a 504 upstream, not a dependency failure).
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// The dependency did not answer: refused, timed out, unreachable, …
    #[error("{outcome}: {source}")]
    Failed {
        /// How the call ended (its metric label).
        outcome: Outcome,
        /// The last attempt's error.
        #[source]
        source: BoxError,
    },
}

impl EdgeError {
    /// The call's [`Outcome`] label (a deadline that ran out is a timeout).
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::DeadlineExceeded => Outcome::Timeout,
            Self::Failed { outcome, .. } => *outcome,
        }
    }
}

/// One downstream edge's client stack with its breaker, budget and
/// throttle. Cheap to clone (clones share the breaker, budget, throttle and
/// bulkhead).
pub struct EdgeClient<Req, Res> {
    target: &'static str,
    stack: BoxCloneSyncService<Req, Res, BoxError>,
    breaker: BreakerHandle,
    budget: RetryBudget,
    throttle: ThrottleHandle,
}

impl<Req, Res> Clone for EdgeClient<Req, Res> {
    fn clone(&self) -> Self {
        Self {
            target: self.target,
            stack: self.stack.clone(),
            breaker: self.breaker.clone(),
            budget: self.budget.clone(),
            throttle: self.throttle.clone(),
        }
    }
}

impl<Req, Res> fmt::Debug for EdgeClient<Req, Res> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EdgeClient")
            .field("target", &self.target)
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl<Req, Res> EdgeClient<Req, Res>
where
    Req: HasDeadline + Send + 'static,
    Res: Send + 'static,
{
    /// The stack of `config` over `transport`, read outer to inner (each
    /// layer sees what the layers above it decided):
    ///
    /// 1. deadline: the caller's remaining time, capped at
    ///    [`EdgeConfig::deadline_cap`]; an expired call is not sent;
    /// 2. retry: what `policy` calls transient, jittered backoff, each
    ///    retry from `budget`, never past the deadline; above the throttle
    ///    and the breaker, so every attempt is judged by both;
    /// 3. client-side throttle: refuses locally with the SRE book's
    ///    probability while the target refuses calls for overload
    ///    (`classifier` also tells those refusals, [`Judge`]); above the
    ///    breaker, so a throttled call is not a breaker failure;
    /// 4. circuit breaker: fails fast while the target keeps failing
    ///    (`classifier` says what a failure is), one trial after the break;
    ///    a call the bulkhead shed or the attempt timeout did not send is
    ///    not counted;
    /// 5. bulkhead: at most `max_concurrency` calls in flight, more are
    ///    shed, so a hung target cannot hold every task;
    /// 6. attempt timeout: `min(attempt_timeout, time left)`, told to the
    ///    next hop through [`HasDeadline::propagate`];
    /// 7. the transport.
    pub fn new<S, P, C>(
        config: &EdgeConfig,
        budget: RetryBudget,
        policy: P,
        classifier: C,
        transport: S,
    ) -> Self
    where
        S: Service<Req, Response = Res> + Clone,
        C: Classify<Res, BoxError> + Judge<Res> + Clone,
        P: RetryPolicy<Req, Res, BoxError>,
        Composed<S, P, C>:
            Service<Req, Response = Res, Error = BoxError> + Clone + Send + Sync + 'static,
        <Composed<S, P, C> as Service<Req>>::Future: Send + 'static,
    {
        // The duration histogram of the `ok` outcome is registered now (the
        // exporter renders it with zero observations), so the edge's
        // request-rate panel shows 0 before the first call. Failure outcomes
        // appear on their first call: a histogram series costs a line per
        // bucket, and the breaker and retry counters already show the
        // failure side at 0 from here on.
        let _ = metrics::histogram!(
            REQUEST_DURATION,
            "target" => config.target,
            "outcome" => Outcome::Ok.as_str(),
        );
        let breaker = BreakerHandle::new(config.target, config.breaker);
        let retry = RetryLayer::new(
            policy,
            budget.clone(),
            config.backoff,
            config.max_retries,
            config.target,
        );
        let inner = AttemptTimeoutLayer::new(config.attempt_timeout).layer(transport);
        let inner = BulkheadLayer::new(config.max_concurrency).layer(inner);
        let inner = BreakerLayer::new(breaker.clone(), classifier.clone()).layer(inner);
        let throttle = ThrottleHandle::new(config.target, config.throttle);
        let inner = ThrottleLayer::new(throttle.clone(), classifier).layer(inner);
        let stack = DeadlineLayer::new(config.deadline_cap()).layer(retry.layer(inner));
        Self {
            target: config.target,
            stack: BoxCloneSyncService::new(stack),
            breaker,
            budget,
            throttle,
        }
    }

    /// The target's name.
    pub fn target(&self) -> &'static str {
        self.target
    }

    /// The breaker (for `/admin/resilience`, tests, and callers that skip
    /// a call the breaker would refuse).
    pub fn breaker(&self) -> &BreakerHandle {
        &self.breaker
    }

    /// The retry budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The client-side throttle (its state for `/admin/resilience`).
    pub fn throttle(&self) -> &ThrottleHandle {
        &self.throttle
    }

    /// Makes one call, records its duration under the [`Outcome`] that
    /// `judge` gives an answer (or the error's), and maps a failure: the
    /// caller's deadline passed → [`EdgeError::DeadlineExceeded`], anything
    /// else → [`EdgeError::Failed`].
    ///
    /// # Errors
    /// As above.
    pub async fn call(
        &self,
        req: Req,
        judge: impl FnOnce(&Res) -> Outcome,
    ) -> Result<Res, EdgeError> {
        let deadline = req.deadline();
        let started = tokio::time::Instant::now();
        let result = self.stack.clone().oneshot(req).await;
        let outcome = match &result {
            Ok(res) => judge(res),
            Err(e) => Outcome::of_error(e.as_ref()),
        };
        metrics::histogram!(
            REQUEST_DURATION,
            "target" => self.target,
            "outcome" => outcome.as_str(),
        )
        .record(started.elapsed().as_secs_f64());
        result.map_err(|source| {
            if deadline.is_some_and(Deadline::is_expired)
                && find::<DeadlineExceeded>(source.as_ref()).is_some()
            {
                EdgeError::DeadlineExceeded
            } else {
                EdgeError::Failed { outcome, source }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::ErrorsAreFailures;
    use crate::deadline::Call;
    use crate::retry::Decision;

    /// Retries every error.
    #[derive(Debug, Clone, Copy)]
    struct Always;

    impl<Req: Clone, Res> RetryPolicy<Req, Res, BoxError> for Always {
        fn classify(&self, result: &Result<Res, BoxError>) -> Decision {
            if result.is_err() {
                Decision::Retry
            } else {
                Decision::Stop
            }
        }

        fn clone_request(&self, req: &Req) -> Option<Req> {
            Some(req.clone())
        }
    }

    fn budget() -> RetryBudget {
        RetryBudget::new(BudgetConfig::default())
    }

    /// A client of a target that never answers.
    fn hung(config: &EdgeConfig) -> EdgeClient<Call<()>, ()> {
        let transport =
            tower::service_fn(|_call: Call<()>| std::future::pending::<Result<(), BoxError>>());
        EdgeClient::new(config, budget(), Always, ErrorsAreFailures, transport)
    }

    #[test]
    fn the_cap_covers_every_attempt_and_the_hop_reads_the_same_numbers() {
        let mut config = EdgeConfig::new("t", Duration::from_secs(3));
        assert_eq!(config.deadline_cap(), Duration::from_secs(10));
        assert_eq!(config.breaker.trial_timeout, Duration::from_secs(6));
        config.max_retries = 0;
        assert_eq!(config.deadline_cap(), Duration::from_secs(4));
        let hop = config.hop("a→t", BudgetConfig::default());
        assert_eq!(hop.attempt_timeout, Duration::from_secs(3));
        assert_eq!(hop.max_retries, 0);
        assert_eq!(hop.deadline, Some(Duration::from_secs(4)));
        assert_eq!(hop.breaker, Some(config.breaker));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_target_costs_every_attempt_then_fails_with_its_outcome() {
        let mut config = EdgeConfig::new("hung", Duration::from_secs(1));
        config.max_retries = 2;
        let client = hung(&config);
        let started = tokio::time::Instant::now();
        let err = client
            .call(Call::new(()), |()| Outcome::Ok)
            .await
            .unwrap_err();
        assert!(matches!(err, EdgeError::Failed { .. }), "{err}");
        assert_eq!(err.outcome(), Outcome::Timeout);
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "three attempts"
        );
        assert!(started.elapsed() <= config.deadline_cap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_callers_deadline_running_out_is_not_a_dependency_failure() {
        let config = EdgeConfig::new("slow", Duration::from_secs(5));
        let client = hung(&config);
        // The attempt is cut at the caller's deadline and not retried: the
        // attempt timed out (the dependency was slow).
        let req = Call::with_deadline((), Some(Deadline::after(Duration::from_millis(200))));
        let started = tokio::time::Instant::now();
        let err = client.call(req, |()| Outcome::Ok).await.unwrap_err();
        assert!(matches!(err, EdgeError::Failed { .. }), "{err}");
        assert_eq!(err.outcome(), Outcome::Timeout);
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        // Already expired: not sent, and the caller's own doing.
        let req = Call::with_deadline((), Some(Deadline::after(Duration::ZERO)));
        let err = client.call(req, |()| Outcome::Ok).await.unwrap_err();
        assert!(matches!(err, EdgeError::DeadlineExceeded), "{err}");
    }

    #[test]
    fn a_new_edge_registers_its_series_before_any_call() {
        let rec = crate::test_recorder::Registered::default();
        let _guard = metrics::set_default_local_recorder(&rec);
        let config = EdgeConfig::new("inventory", Duration::from_secs(1));
        let budget = RetryBudget::for_target("inventory", BudgetConfig::default());
        let transport = tower::service_fn(|_call: Call<()>| async { Ok::<(), BoxError>(()) });
        let _client = EdgeClient::new(&config, budget, Always, ErrorsAreFailures, transport);
        let series = rec.series();
        let mut expected = vec![
            r#"gauge shopeasy_downstream_circuit_state{target="inventory"}"#.to_owned(),
            r#"gauge shopeasy_downstream_retry_budget_balance{target="inventory"}"#.to_owned(),
            r#"counter shopeasy_downstream_throttled_total{target="inventory"}"#.to_owned(),
            r#"histogram shopeasy_downstream_request_duration_seconds{target="inventory",outcome="ok"}"#
                .to_owned(),
        ];
        for state in ["closed", "open", "half_open"] {
            expected.push(format!(
                r#"counter shopeasy_downstream_circuit_transitions_total{{target="inventory",state="{state}"}}"#
            ));
        }
        for outcome in crate::retry::RETRY_OUTCOMES {
            expected.push(format!(
                r#"counter shopeasy_downstream_retries_total{{target="inventory",outcome="{}"}}"#,
                outcome.as_str()
            ));
        }
        for want in &expected {
            assert!(series.contains(want), "{want} missing from {series:#?}");
        }
        assert_eq!(series.len(), expected.len(), "{series:#?}");
    }

    #[tokio::test]
    async fn an_open_breaker_refuses_with_circuit_open() {
        let transport =
            tower::service_fn(|_call: Call<()>| async { Err::<(), BoxError>("down".into()) });
        let mut config = EdgeConfig::new("down", Duration::from_secs(1));
        config.max_retries = 0;
        config.breaker.minimum_throughput = 1;
        let client = EdgeClient::new(&config, budget(), Always, ErrorsAreFailures, transport);
        let first = client.call(Call::new(()), |()| Outcome::Ok).await;
        assert_eq!(first.unwrap_err().outcome(), Outcome::Error);
        assert!(client.breaker().is_refusing());
        let second = client.call(Call::new(()), |()| Outcome::Ok).await;
        assert_eq!(second.unwrap_err().outcome(), Outcome::CircuitOpen);
    }
}
