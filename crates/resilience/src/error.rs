//! The small leaf errors this crate's layers return, and how to find them.
//!
//! Every layer's error type is [`BoxError`] (tower's convention), so errors
//! from several layers nest: a retry that gives up returns the last attempt's
//! error, which may be an [`AttemptTimedOut`] from the timeout layer, or a
//! transport error from below. Callers classify by walking the
//! [`source()`](std::error::Error::source) chain with [`find`], never by
//! message text:
//!
//! ```
//! use shopeasy_resilience::error::{find, CircuitOpen};
//! use tower::BoxError;
//!
//! let err: BoxError = CircuitOpen::new("inventory").into();
//! assert!(find::<CircuitOpen>(err.as_ref()).is_some());
//! ```

use std::error::Error;
use std::time::Duration;

/// tower's boxed error: what every layer of this crate returns.
pub type BoxError = tower::BoxError;

/// The request's deadline passed before (or while) it could be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline exceeded")]
pub struct DeadlineExceeded;

/// One attempt ran past its timeout (`min(attempt timeout, time left)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("attempt timed out after {0:?}")]
pub struct AttemptTimedOut(pub Duration);

/// The circuit breaker for `target` is open (or half-open with its one trial
/// call already out): the call was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit open for {target}")]
pub struct CircuitOpen {
    /// The downstream target the breaker protects.
    pub target: &'static str,
}

impl CircuitOpen {
    /// The error for `target`.
    pub fn new(target: &'static str) -> Self {
        Self { target }
    }
}

/// The retry budget refused a retry.
///
/// The [`retry`](crate::retry) layer does not return it (a refused retry
/// ends with the last attempt's error, as SPEC §5 asks); it is for callers
/// that use a [`RetryBudget`](crate::budget::RetryBudget) by hand, such as a
/// background worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("retry budget exhausted")]
pub struct BudgetExhausted;

/// The bulkhead for this dependency is full: the call was shed instead of
/// queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("overloaded: {max_in_flight} calls already in flight")]
pub struct Overloaded {
    /// The concurrency limit that was reached.
    pub max_in_flight: usize,
}

/// Finds the first error of type `E` in `err`'s source chain (`err` itself
/// included).
pub fn find<'a, E: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a E> {
    let mut cur: Option<&'a (dyn Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        cur = e.source();
    }
    None
}

/// Whether `err` is, or was caused by, a timeout of ours: [`AttemptTimedOut`],
/// [`DeadlineExceeded`], or tower's and tokio's elapsed errors.
pub fn is_timeout(err: &(dyn Error + 'static)) -> bool {
    find::<AttemptTimedOut>(err).is_some()
        || find::<DeadlineExceeded>(err).is_some()
        || find::<tower::timeout::error::Elapsed>(err).is_some()
        || find::<tokio::time::error::Elapsed>(err).is_some()
}

/// Whether the call was refused locally because the dependency is known to be
/// unhealthy or saturated: [`CircuitOpen`] or [`Overloaded`].
pub fn is_rejected(err: &(dyn Error + 'static)) -> bool {
    find::<CircuitOpen>(err).is_some() || find::<Overloaded>(err).is_some()
}

/// Whether a gRPC status reports a timeout: `DEADLINE_EXCEEDED`, or the
/// `CANCELLED: Timeout expired` tonic's client returns when its own timeout
/// fires.
#[cfg(feature = "grpc")]
pub fn is_grpc_timeout(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::DeadlineExceeded => true,
        tonic::Code::Cancelled => status.message().to_ascii_lowercase().contains("timeout"),
        _ => false,
    }
}

/// Polls a layer's inner future — `None` when the layer refused to send
/// the call (deadline passed, bulkhead full) — failing with `refused` in
/// that case and boxing the inner error otherwise: the one shape of every
/// layer future that may not have sent its call.
pub(crate) fn poll_sent<F, T, E>(
    inner: Option<std::pin::Pin<&mut F>>,
    cx: &mut std::task::Context<'_>,
    refused: impl FnOnce() -> BoxError,
) -> std::task::Poll<Result<T, BoxError>>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    match inner {
        Some(inner) => inner.poll(cx).map_err(Into::into),
        None => std::task::Poll::Ready(Err(refused())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("wrapper")]
    struct Wrapper(#[source] BoxError);

    #[test]
    fn find_walks_the_source_chain() {
        let err = Wrapper(Box::new(AttemptTimedOut(Duration::from_secs(1))));
        assert_eq!(
            find::<AttemptTimedOut>(&err),
            Some(&AttemptTimedOut(Duration::from_secs(1)))
        );
        assert!(is_timeout(&err));
        assert!(!is_rejected(&err));
        assert!(find::<CircuitOpen>(&err).is_none());
    }
}
