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

use http::StatusCode;
use metrics::Label;
use tokio::time::Instant;

/// Records one finished caller request.
pub fn request(route: &'static str, status: StatusCode, outcome: &'static str, started: Instant) {
    // Static strings are borrowed, not copied, into the labels.
    let labels = vec![
        Label::new("route", route),
        Label::new("status", status.as_str().to_owned()),
        Label::new("outcome", outcome),
    ];
    metrics::counter!("shopeasy_gateway_requests_total", labels.clone()).increment(1);
    metrics::histogram!("shopeasy_gateway_request_duration_seconds", labels)
        .record(started.elapsed().as_secs_f64());
}

/// Counts a retry decision.
pub fn retry(outcome: &'static str) {
    metrics::counter!("shopeasy_gateway_retries_total", "outcome" => outcome).increment(1);
}

/// Records one attempt to a service, up to its response headers.
pub fn attempt(target: &'static str, outcome: &'static str, started: Instant) {
    metrics::histogram!(
        "shopeasy_downstream_request_duration_seconds",
        "target" => target,
        "outcome" => outcome
    )
    .record(started.elapsed().as_secs_f64());
}
