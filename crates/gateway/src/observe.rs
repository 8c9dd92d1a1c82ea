//! The gateway's metrics, named in one place:
//!
//! - `shopeasy_gateway_requests_total{route,status,outcome}` and
//!   `shopeasy_gateway_request_duration_seconds{route,status,outcome}`: one
//!   per caller request, recorded when it really ended (for a forwarded
//!   response, when its body finished or was aborted — so an aborted stream
//!   is its own `outcome`, `response_aborted`);
//! - `shopeasy_gateway_retries_total{outcome}` ([`RetryOutcome`]):
//!   `retried`, `success_after_retry`, `budget_exhausted`, `exhausted` (out
//!   of attempts), `deadline` (the caller's deadline would pass first);
//! - `shopeasy_downstream_request_duration_seconds{target,outcome}`: one
//!   per attempt to a service (`outcome` is `response` or the error's).

use std::sync::OnceLock;

use http::{Method, StatusCode};
use metrics::{Counter, Histogram, Label};
use shopeasy_resilience::decide::Refusal;
use shopeasy_runtime::telemetry;
use tokio::time::Instant;

const REQUESTS_TOTAL: &str = "shopeasy_gateway_requests_total";
const REQUEST_DURATION: &str = "shopeasy_gateway_request_duration_seconds";
const ATTEMPT_DURATION: &str = "shopeasy_downstream_request_duration_seconds";
/// The `outcome` of a response forwarded in full.
pub(crate) const FORWARDED: &str = "forwarded";
/// The `outcome` of an attempt that got response headers.
pub(crate) const RESPONSE: &str = "response";

fn request_labels(route: &'static str, status: StatusCode, outcome: &'static str) -> Vec<Label> {
    // Static strings are borrowed, not copied, into the labels.
    vec![
        Label::new("route", route),
        Label::new("status", status.as_str().to_owned()),
        Label::new("outcome", outcome),
    ]
}

/// Records one finished caller request.
pub(crate) fn request(
    route: &'static str,
    status: StatusCode,
    outcome: &'static str,
    started: Instant,
) {
    let labels = request_labels(route, status, outcome);
    metrics::counter!(REQUESTS_TOTAL, labels.clone()).increment(1);
    metrics::histogram!(REQUEST_DURATION, labels).record(started.elapsed().as_secs_f64());
}

/// Whether `method` is one of RFC 9110's (§9): GET HEAD POST PUT DELETE
/// CONNECT OPTIONS TRACE, plus PATCH (RFC 5789). Anything else is answered
/// 405 at the gateway and never forwarded, so a method made up per request
/// can add neither a metric series here nor one behind the gateway. The
/// set is the runtime's [`telemetry::method_label`], which the services'
/// own metrics label with too.
pub(crate) fn is_standard_method(method: &Method) -> bool {
    telemetry::method_label(method) != telemetry::OTHER_METHOD
}

/// A `shopeasy_gateway_retries_total` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryOutcome {
    /// A retry was made.
    Retried,
    /// A request got its response after one or more retries.
    SuccessAfterRetry,
    /// A retry was wanted but refused.
    Refused(Refusal),
}

impl RetryOutcome {
    /// Every outcome, in label order.
    pub(crate) const ALL: [RetryOutcome; 5] = [
        Self::Retried,
        Self::SuccessAfterRetry,
        Self::Refused(Refusal::AttemptsExhausted),
        Self::Refused(Refusal::DeadlineExhausted),
        Self::Refused(Refusal::BudgetExhausted),
    ];

    /// The label value. The gateway's metric keeps the names dashboards
    /// and SPEC §9 know (`exhausted`, `deadline`), which predate the
    /// downstream vocabulary (`attempts_exhausted`, `deadline_exhausted`)
    /// of `shopeasy_resilience::outcome`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Retried => "retried",
            Self::SuccessAfterRetry => "success_after_retry",
            Self::Refused(Refusal::AttemptsExhausted) => "exhausted",
            Self::Refused(Refusal::DeadlineExhausted) => "deadline",
            Self::Refused(Refusal::BudgetExhausted) => "budget_exhausted",
        }
    }
}

const RETRIES_TOTAL: &str = "shopeasy_gateway_retries_total";

/// Counts a retry decision.
pub(crate) fn retry(outcome: RetryOutcome) {
    metrics::counter!(RETRIES_TOTAL, "outcome" => outcome.as_str()).increment(1);
}

/// Registers every `shopeasy_gateway_retries_total` outcome at 0, so a
/// gateway that has not retried yet shows 0 retries, not no data. Called
/// when a route's retry policy is built (at start-up, after the recorder is
/// installed); calling it again changes nothing.
pub(crate) fn register_retries() {
    for outcome in RetryOutcome::ALL {
        metrics::counter!(RETRIES_TOTAL, "outcome" => outcome.as_str()).increment(0);
    }
}

/// Records one attempt to a service, up to its response headers.
pub(crate) fn attempt(target: &'static str, outcome: &'static str, started: Instant) {
    metrics::histogram!(
        ATTEMPT_DURATION,
        "target" => target,
        "outcome" => outcome
    )
    .record(started.elapsed().as_secs_f64());
}

/// One route's pre-registered handles for the hot path: a forwarded
/// response (`outcome="forwarded"`, any status) and a successful attempt
/// (`outcome="response"`). Registering a labelled metric builds label
/// strings and looks the series up in the recorder; these handles are made
/// once per route and status (on first use, so the recorder is installed by
/// then) and every later request only bumps them. Anything else goes through
/// the free functions above.
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    route: &'static str,
    /// Indexed by `status - 100`.
    forwarded: Box<[OnceLock<(Counter, Histogram)>]>,
    attempt_ok: OnceLock<Histogram>,
}

impl RouteMetrics {
    /// Empty handles for `route`. Its attempt histogram of `response` is
    /// registered now (rendered with zero observations), so the route has
    /// a `shopeasy_downstream_request_duration_seconds` series before its
    /// first request; the handles themselves are still taken on first use.
    pub(crate) fn new(route: &'static str) -> Self {
        let _ = metrics::histogram!(ATTEMPT_DURATION, "target" => route, "outcome" => RESPONSE);
        Self {
            route,
            forwarded: (100..600).map(|_| OnceLock::new()).collect(),
            attempt_ok: OnceLock::new(),
        }
    }

    /// As [`request`], for this route.
    pub(crate) fn request(&self, status: StatusCode, outcome: &'static str, started: Instant) {
        let slot = usize::from(status.as_u16())
            .checked_sub(100)
            .and_then(|i| self.forwarded.get(i));
        match slot {
            Some(slot) if outcome == FORWARDED => {
                let (count, duration) = slot.get_or_init(|| {
                    let labels = request_labels(self.route, status, FORWARDED);
                    (
                        metrics::counter!(REQUESTS_TOTAL, labels.clone()),
                        metrics::histogram!(REQUEST_DURATION, labels),
                    )
                });
                count.increment(1);
                duration.record(started.elapsed().as_secs_f64());
            }
            _ => request(self.route, status, outcome, started),
        }
    }

    /// As [`attempt`], for this route.
    pub(crate) fn attempt(&self, outcome: &'static str, started: Instant) {
        if outcome == RESPONSE {
            self.attempt_ok
                .get_or_init(|| {
                    metrics::histogram!(
                        ATTEMPT_DURATION,
                        "target" => self.route,
                        "outcome" => RESPONSE
                    )
                })
                .record(started.elapsed().as_secs_f64());
        } else {
            attempt(self.route, outcome, started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_outcomes_keep_the_gateways_label_names() {
        let labels = RetryOutcome::ALL.map(RetryOutcome::as_str);
        assert_eq!(
            labels,
            [
                "retried",
                "success_after_retry",
                "exhausted",
                "deadline",
                "budget_exhausted"
            ]
        );
    }
}
