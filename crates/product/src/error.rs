//! The service's one error type. Each variant is something a caller can act
//! on; [`crate::http`] maps it onto the wire in one place.

use std::sync::Arc;

use crate::domain::Invalid;

/// Why a catalogue operation did not succeed.
///
/// Cheap to clone (the causes are shared), so one database read can answer
/// every request that waited for it (single flight).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No product has this id.
    #[error("no such product")]
    NotFound,
    /// Another product already has this SKU.
    #[error("a product with this SKU already exists")]
    DuplicateSku,
    /// The input has invalid fields.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The database could not be reached, or did not answer in time; worth
    /// retrying later.
    #[error("the database is unavailable")]
    Unavailable(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// Anything else: a bug or a database refusing a query. Logged, never
    /// shown to clients.
    #[error("internal error: {0}")]
    Internal(Arc<dyn std::error::Error + Send + Sync>),
}

impl From<sqlx::Error> for Error {
    /// Transient, or cancelled by `statement_timeout` → [`Error::Unavailable`]
    /// (503: a database too slow to answer now is worth retrying later, as
    /// order maps it); a duplicate SKU → [`Error::DuplicateSku`]; anything
    /// else → [`Error::Internal`].
    fn from(e: sqlx::Error) -> Self {
        if shopeasy_runtime::db::is_statement_timeout(&e) || shopeasy_runtime::db::is_transient(&e)
        {
            return Self::Unavailable(Arc::new(e));
        }
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => Self::DuplicateSku,
            _ => Self::Internal(Arc::new(e)),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::Internal(Arc::new(e))
    }
}
