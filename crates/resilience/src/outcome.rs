//! The one vocabulary of the `outcome` label on every
//! `shopeasy_downstream_*` metric.
//!
//! Dashboards and alerts join the metrics of every client on this label, so
//! its values are an enum, never a string typed at a call site: two clients
//! cannot drift into two label sets under one metric name. Two families
//! share it:
//!
//! - how one call through a client stack ended
//!   (`shopeasy_downstream_request_duration_seconds{target,outcome}`):
//!   [`Outcome::Ok`], [`Outcome::ErrorStatus`], [`Outcome::Timeout`],
//!   [`Outcome::CircuitOpen`], [`Outcome::Overloaded`], [`Outcome::Throttled`],
//!   [`Outcome::Unavailable`], [`Outcome::Error`] — [`Outcome::of_error`]
//!   reads it off a failed call's error chain;
//! - what the retry layer decided after a failed attempt
//!   (`shopeasy_downstream_retries_total{target,outcome}`, SPEC §9):
//!   [`Outcome::Retried`], [`Outcome::BudgetExhausted`],
//!   [`Outcome::DeadlineExhausted`], [`Outcome::AttemptsExhausted`].
//!
//! ```
//! use shopeasy_resilience::{error::CircuitOpen, outcome::Outcome};
//! use tower::BoxError;
//!
//! let err: BoxError = CircuitOpen::new("inventory").into();
//! assert_eq!(Outcome::of_error(err.as_ref()).as_str(), "circuit_open");
//! assert_eq!(Outcome::BudgetExhausted.as_str(), "budget_exhausted");
//! ```

use std::fmt;

use crate::error::{CircuitOpen, Overloaded, find, is_timeout};
use crate::retry::is_connection_failure;
use crate::throttle::Throttled;

/// One value of the `outcome` label (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The call got an answer (for HTTP: a 2xx or a 404, both answers).
    Ok,
    /// The service answered with an error status (HTTP 5xx, 429, other 4xx).
    ErrorStatus,
    /// An attempt or the deadline ran out (ours, or the server's
    /// `DEADLINE_EXCEEDED`).
    Timeout,
    /// The circuit breaker refused the call: it was not sent.
    CircuitOpen,
    /// The bulkhead shed the call: it was not sent.
    Overloaded,
    /// The client-side throttle refused the call (the target has been
    /// refusing calls for overload): it was not sent.
    Throttled,
    /// The service could not be reached (gRPC `UNAVAILABLE`, a refused or
    /// reset connection).
    Unavailable,
    /// Any other failure.
    Error,
    /// A retry was made.
    Retried,
    /// A retry was wanted but the retry budget refused it.
    BudgetExhausted,
    /// A retry was wanted but its backoff would reach the deadline.
    DeadlineExhausted,
    /// A retry was wanted but `max_retries` were already made.
    AttemptsExhausted,
}

impl Outcome {
    /// Every value, for tests and documentation.
    pub const ALL: [Outcome; 12] = [
        Self::Ok,
        Self::ErrorStatus,
        Self::Timeout,
        Self::CircuitOpen,
        Self::Overloaded,
        Self::Throttled,
        Self::Unavailable,
        Self::Error,
        Self::Retried,
        Self::BudgetExhausted,
        Self::DeadlineExhausted,
        Self::AttemptsExhausted,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ErrorStatus => "error_status",
            Self::Timeout => "timeout",
            Self::CircuitOpen => "circuit_open",
            Self::Overloaded => "overloaded",
            Self::Throttled => "throttled",
            Self::Unavailable => "unavailable",
            Self::Error => "error",
            Self::Retried => "retried",
            Self::BudgetExhausted => "budget_exhausted",
            Self::DeadlineExhausted => "deadline_exhausted",
            Self::AttemptsExhausted => "attempts_exhausted",
        }
    }

    /// How a failed call ended, from its error chain: a local refusal
    /// first (it says the most about why nothing was sent), then a timeout,
    /// then an unreachable service.
    pub fn of_error(err: &(dyn std::error::Error + 'static)) -> Self {
        if find::<CircuitOpen>(err).is_some() {
            Self::CircuitOpen
        } else if find::<Overloaded>(err).is_some() {
            Self::Overloaded
        } else if find::<Throttled>(err).is_some() {
            Self::Throttled
        } else if is_timeout(err) || grpc_timeout(err) {
            Self::Timeout
        } else if grpc_unavailable(err) || is_connection_failure(err) {
            Self::Unavailable
        } else {
            Self::Error
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "grpc")]
fn grpc_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    find::<tonic::Status>(err).is_some_and(crate::error::is_grpc_timeout)
}

#[cfg(not(feature = "grpc"))]
fn grpc_timeout(_err: &(dyn std::error::Error + 'static)) -> bool {
    false
}

#[cfg(feature = "grpc")]
fn grpc_unavailable(err: &(dyn std::error::Error + 'static)) -> bool {
    find::<tonic::Status>(err).is_some_and(|s| s.code() == tonic::Code::Unavailable)
}

#[cfg(not(feature = "grpc"))]
fn grpc_unavailable(_err: &(dyn std::error::Error + 'static)) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::{AttemptTimedOut, BoxError, DeadlineExceeded};

    #[test]
    fn label_values_are_distinct_snake_case_and_keep_spec_names() {
        let labels: std::collections::BTreeSet<&str> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), Outcome::ALL.len());
        assert!(
            labels
                .iter()
                .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        );
        // SPEC §9 names these, and the e2e tests query them.
        for spec in [
            "retried",
            "budget_exhausted",
            "deadline_exhausted",
            "circuit_open",
            "overloaded",
        ] {
            assert!(labels.contains(spec), "{spec}");
        }
    }

    #[test]
    fn errors_are_classified_refusal_first() {
        let cases: [(BoxError, Outcome); 7] = [
            (CircuitOpen::new("x").into(), Outcome::CircuitOpen),
            (Overloaded { max_in_flight: 1 }.into(), Outcome::Overloaded),
            (
                Throttled {
                    target: "x",
                    probability: 0.5,
                }
                .into(),
                Outcome::Throttled,
            ),
            (
                AttemptTimedOut(Duration::from_secs(1)).into(),
                Outcome::Timeout,
            ),
            (DeadlineExceeded.into(), Outcome::Timeout),
            (
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
                Outcome::Unavailable,
            ),
            ("boom".into(), Outcome::Error),
        ];
        for (err, want) in cases {
            assert_eq!(Outcome::of_error(err.as_ref()), want, "{err}");
        }
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_statuses_are_classified() {
        let cases = [
            (tonic::Status::unavailable("down"), Outcome::Unavailable),
            (tonic::Status::deadline_exceeded("late"), Outcome::Timeout),
            (
                tonic::Status::cancelled("Timeout expired"),
                Outcome::Timeout,
            ),
            (tonic::Status::internal("bug"), Outcome::Error),
        ];
        for (status, want) in cases {
            let err: BoxError = status.into();
            assert_eq!(Outcome::of_error(err.as_ref()), want, "{err}");
        }
    }
}
