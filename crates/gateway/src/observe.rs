//! The gateway's metrics, named in one place:
//!
//! - `shopeasy_gateway_requests_total{route,status,outcome}` and
//!   `shopeasy_gateway_request_duration_seconds{route,status,outcome}`: one
//!   per caller request, recorded when it really ended (for a forwarded
//!   response, when its body finished or was aborted — so an aborted stream
//!   is its own `outcome`, `response_aborted`);
//! - `shopeasy_gateway_retries_total{outcome}`: `retried`,
//!   `success_after_retry`, `budget_exhausted`, `exhausted` (out of
//!   attempts);
//! - `shopeasy_downstream_request_duration_seconds{target,outcome}`: one
//!   per attempt to a service (`outcome` is `response` or the error's).

use std::sync::OnceLock;

use http::StatusCode;
use metrics::{Counter, Histogram, Label};
use tokio::time::Instant;

const REQUESTS_TOTAL: &str = "shopeasy_gateway_requests_total";
const REQUEST_DURATION: &str = "shopeasy_gateway_request_duration_seconds";
const ATTEMPT_DURATION: &str = "shopeasy_downstream_request_duration_seconds";
/// The `outcome` of a response forwarded in full.
pub const FORWARDED: &str = "forwarded";
/// The `outcome` of an attempt that got response headers.
pub const RESPONSE: &str = "response";

fn request_labels(route: &'static str, status: StatusCode, outcome: &'static str) -> Vec<Label> {
    // Static strings are borrowed, not copied, into the labels.
    vec![
        Label::new("route", route),
        Label::new("status", status.as_str().to_owned()),
        Label::new("outcome", outcome),
    ]
}

/// Records one finished caller request.
pub fn request(route: &'static str, status: StatusCode, outcome: &'static str, started: Instant) {
    let labels = request_labels(route, status, outcome);
    metrics::counter!(REQUESTS_TOTAL, labels.clone()).increment(1);
    metrics::histogram!(REQUEST_DURATION, labels).record(started.elapsed().as_secs_f64());
}

/// Counts a retry decision.
pub fn retry(outcome: &'static str) {
    metrics::counter!("shopeasy_gateway_retries_total", "outcome" => outcome).increment(1);
}

/// Records one attempt to a service, up to its response headers.
pub fn attempt(target: &'static str, outcome: &'static str, started: Instant) {
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
pub struct RouteMetrics {
    route: &'static str,
    /// Indexed by `status - 100`.
    forwarded: Box<[OnceLock<(Counter, Histogram)>]>,
    attempt_ok: OnceLock<Histogram>,
}

impl RouteMetrics {
    /// Empty handles for `route`.
    pub fn new(route: &'static str) -> Self {
        Self {
            route,
            forwarded: (100..600).map(|_| OnceLock::new()).collect(),
            attempt_ok: OnceLock::new(),
        }
    }

    /// As [`request`], for this route.
    pub fn request(&self, status: StatusCode, outcome: &'static str, started: Instant) {
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
    pub fn attempt(&self, outcome: &'static str, started: Instant) {
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
