//! Calling another service without making a bad day worse.
//!
//! `shopeasy-resilience` is the crate ShopEasy's services compose their
//! client stacks from, and the one meant to be copied: it depends on tokio,
//! tower, http, httpdate, crossbeam-utils, rand, serde, metrics and tracing only (plus tonic for the
//! gRPC policy, behind the default `grpc` feature), never on the rest of
//! ShopEasy.
//!
//! # The pieces, and why each exists
//!
//! - [`admission`]: the inbound side — an adaptive concurrency limit, a
//!   short deadline-aware queue and a fast refusal for a service's own
//!   listener, so overload is shed before any work is done.
//! - [`deadline`]: an absolute [`Deadline`](deadline::Deadline) carried in
//!   the request, narrowed on the way in and sent on the way out, so no hop
//!   works on a request its caller has given up on.
//! - [`backoff`]: exponential backoff with full, equal or decorrelated
//!   jitter, so clients that failed together do not retry together.
//! - [`budget`]: a [`RetryBudget`](budget::RetryBudget) capping retries at a
//!   ratio of recent traffic, so retries cannot multiply load during an
//!   outage.
//! - [`retry`]: the [`RetryLayer`](retry::RetryLayer) and its policies —
//!   which failures are transient is a policy object, never a loop at a call
//!   site.
//! - [`decide`]: the one retry decision (attempts, backoff, deadline,
//!   budget, in that order) for a call site whose loop cannot be a layer.
//! - [`breaker`]: a circuit breaker with a pure state machine and exactly one
//!   trial call in half-open.
//! - [`bulkhead`]: a per-dependency concurrency limit that sheds instead of
//!   queueing.
//! - [`throttle`]: client-side adaptive throttling (the SRE book's), so a
//!   callee refusing most calls for overload is not also asked for them.
//! - [`timeout`]: the per-attempt timeout, `min(attempt timeout, time left)`.
//! - [`edge`]: the whole stack for one downstream edge, built from one
//!   [`EdgeConfig`](edge::EdgeConfig) — what a service's clients use.
//! - [`outcome`]: the one vocabulary of the `outcome` label on every
//!   `shopeasy_downstream_*` metric.
//! - [`single_flight`]: one fetch per key however many callers ask.
//! - [`stale_cache`]: a cache that answers stale while its source is down.
//! - [`plan`]: cross-policy rules checked at start-up, and the worst-case
//!   amplification of a chain of hops.
//! - [`registry`]: live state of every breaker, budget and cache as JSON for
//!   `/admin/resilience`.
//! - [`error`]: the small leaf errors the layers return and [`error::find`]
//!   to spot them in a source chain.
//!
//! # Stack order
//!
//! Outer to inner — the order [`tower::ServiceBuilder`] lists them:
//!
//! 1. **deadline** — set once, so every retry shares one end time;
//! 2. **retry with budget** — above the breaker, so a fast `CircuitOpen` is
//!    not retried (the policies stop on it) and each retry meets the breaker
//!    afresh;
//! 3. **client-side throttle** ([`throttle`], in [`edge`]'s stack) — under
//!    the retry, so each attempt is one request and a throttled retry is
//!    not sent; above the breaker, so a local refusal is not a failure;
//! 4. **circuit breaker** — counts every attempt sent, timeouts included;
//!    one the layers below refused without sending (the bulkhead shed it,
//!    no time was left) is ignored, since it says nothing of the dependency;
//! 5. **concurrency limit (bulkhead)** — under the breaker, so an open
//!    breaker does not take slots;
//! 6. **attempt timeout** — innermost, so each attempt gets its own timeout
//!    and the breaker sees a hang as a failure;
//! 7. the transport.
//!
//! # A full client stack
//!
//! ```
//! use std::time::Duration;
//! use shopeasy_resilience::{
//!     backoff::{Backoff, Jitter},
//!     breaker::{BreakerConfig, BreakerHandle, BreakerLayer, HttpClassifier},
//!     budget::{BudgetConfig, RetryBudget},
//!     bulkhead::BulkheadLayer,
//!     deadline::DeadlineLayer,
//!     registry::Registry,
//!     retry::{HttpRetryPolicy, RetryLayer},
//!     timeout::AttemptTimeoutLayer,
//! };
//! use tower::{BoxError, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), BoxError> {
//! // The transport: here an in-memory stand-in for an HTTP client.
//! let transport = tower::service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, BoxError>(http::Response::new("pong".to_owned()))
//! });
//!
//! let budget = RetryBudget::for_target("product", BudgetConfig::default());
//! let breaker = BreakerHandle::new("product", BreakerConfig::default());
//! let registry = Registry::new();
//! registry.breaker(&breaker).budget("product", &budget);
//!
//! let client = ServiceBuilder::new()
//!     .layer(DeadlineLayer::new(Duration::from_secs(5)))
//!     .layer(RetryLayer::new(
//!         HttpRetryPolicy::new(),
//!         budget,
//!         Backoff::new(Duration::from_millis(25), Duration::from_secs(1), Jitter::Full),
//!         2,
//!         "product",
//!     ))
//!     .layer(BreakerLayer::new(breaker, HttpClassifier))
//!     .layer(BulkheadLayer::new(64))
//!     .layer(AttemptTimeoutLayer::new(Duration::from_secs(1)))
//!     .service(transport);
//!
//! let response = client.oneshot(http::Request::new(String::new())).await?;
//! assert_eq!(response.body(), "pong");
//! assert_eq!(registry.snapshot()["circuit_breakers"]["product"]["state"], "closed");
//! # Ok(()) }
//! ```

pub mod admission;
pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod bulkhead;
mod clock;
pub mod deadline;
pub mod decide;
pub mod edge;
pub mod error;
pub mod outcome;
pub mod plan;
pub mod registry;
pub mod retry;
pub mod single_flight;
pub mod stale_cache;
#[cfg(test)]
mod test_recorder;
pub mod throttle;
pub mod timeout;
mod window;

pub use error::{
    AttemptTimedOut, BoxError, BudgetExhausted, CircuitOpen, DeadlineExceeded, Overloaded,
};
