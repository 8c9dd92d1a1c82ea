//! The one error type of the Inventory service. Each variant is something a
//! caller can act on; the gRPC adapter maps it onto a status in one place
//! (`From<Error> for tonic::Status`). Internal details are logged there,
//! never sent.

use crate::domain::{ProductId, ReservationId, Shortage, Violation};

/// Why an Inventory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; every bad field is listed.
    #[error("invalid argument: {}", list(.0))]
    InvalidArgument(Vec<Violation>),
    /// The caller is not an admin (missing or wrong bearer token).
    #[error("missing or invalid admin token")]
    Unauthenticated,
    /// A product has no stock record.
    #[error("no stock record for product {0}")]
    UnknownProduct(ProductId),
    /// Some lines could not be reserved; nothing was.
    #[error("insufficient stock for {}", .0.iter().map(|s| s.product_id.as_str()).collect::<Vec<_>>().join(", "))]
    InsufficientStock(Vec<Shortage>),
    /// The reservation id was used before with other lines.
    #[error("reservation {0} already exists with other lines")]
    ReservationConflict(ReservationId),
    /// The reservation was released (or released before it was made), so it
    /// cannot be made again.
    #[error("reservation {0} was released; use a new reservation id")]
    ReservationReleased(ReservationId),
    /// The caller's deadline (or the server's cap) passed first; the work
    /// was cancelled and rolled back.
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// The database cannot be reached or is overloaded right now; safe to
    /// retry (every write is idempotent).
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Anything else (a bug or a database refusal nobody can act on).
    #[error("internal error: {0}")]
    Internal(#[source] sqlx::Error),
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<Violation> for Error {
    fn from(v: Violation) -> Self {
        Self::InvalidArgument(vec![v])
    }
}

impl From<Vec<Violation>> for Error {
    fn from(v: Vec<Violation>) -> Self {
        Self::InvalidArgument(v)
    }
}

impl From<sqlx::Error> for Error {
    /// Classifies a database error: cancelled by `statement_timeout` →
    /// [`Error::DeadlineExceeded`]; unreachable or "not now"
    /// ([`shopeasy_runtime::db::is_transient`]: overload, serialization
    /// failure, deadlock, SQLite busy, …) → [`Error::Unavailable`];
    /// anything else → [`Error::Internal`].
    fn from(e: sqlx::Error) -> Self {
        if shopeasy_runtime::db::is_statement_timeout(&e) {
            Self::DeadlineExceeded
        } else if shopeasy_runtime::db::is_transient(&e) {
            Self::Unavailable(e)
        } else {
            Self::Internal(e)
        }
    }
}
