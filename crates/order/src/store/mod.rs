//! The order database, one module per aggregate: idempotency keys
//! (`keys`), orders and their lines (`orders`), and the transactional
//! outbox (`outbox`) — one portable SQL dialect on Postgres and SQLite
//! (see `shopeasy_runtime::db`).
//!
//! Every method is one short transaction. Nothing here holds a transaction
//! open across a call to another service: work on a claimed outbox row is
//! protected by a lease (`locked_until`) instead, so a crashed worker's rows
//! are taken over when the lease runs out.
//!
//! Storage knows no HTTP: every method returns a [`StoreError`] saying what
//! the caller can do about a failure (try later, not found, not allowed in
//! this state, a bug), and the HTTP layer ([`crate::error`]) decides what
//! status each one is.

mod keys;
mod orders;
mod outbox;

use shopeasy_runtime::db::Database;
use uuid::Uuid;

pub use keys::{Claim, KeyHold, NewKey, Resume, StoredResponse};
pub use orders::{Created, Page, PageCursor, Recorded};
pub use outbox::{Action, FirstTry, Task};

/// Why a store method failed, in terms the caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be used now — unreachable, overloaded, a
    /// serialization failure or deadlock, or our `statement_timeout` fired
    /// ([`shopeasy_runtime::db::is_transient`]): the same call may succeed
    /// later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The order does not exist.
    #[error("no such order")]
    NotFound,
    /// The order's state does not allow the change (cancelling a rejected
    /// order).
    #[error("the order's state does not allow this change")]
    Conflict,
    /// The idempotency key is no longer this request's: its lock ran out
    /// and another request took it over. Nothing was written; the other
    /// request answers for the key.
    #[error("the idempotency key was taken over by another request")]
    LockLost,
    /// A query the database refused or a stored value this code cannot
    /// read: a bug, not worth retrying.
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl StoreError {
    /// A stored value that cannot be read back (or written) as this code
    /// expects.
    fn corrupt(e: impl Into<anyhow::Error>) -> Self {
        Self::Internal(e.into())
    }
}

impl From<sqlx::Error> for StoreError {
    /// Transient or cancelled by `statement_timeout` → [`Self::Unavailable`];
    /// anything else → [`Self::Internal`].
    fn from(e: sqlx::Error) -> Self {
        if shopeasy_runtime::db::is_statement_timeout(&e) || shopeasy_runtime::db::is_transient(&e)
        {
            Self::Unavailable(e)
        } else {
            Self::Internal(e.into())
        }
    }
}

/// The order service's storage. Cheap to clone (a pool handle).
#[derive(Debug, Clone)]
pub struct Store {
    db: Database,
}

impl Store {
    /// A store on `db` (migrated with [`crate::migrator`]).
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// A stored id, parsed back.
fn parse_id(s: &str) -> Result<Uuid, StoreError> {
    Uuid::try_parse(s).map_err(|e| StoreError::corrupt(anyhow::anyhow!("stored id {s:?}: {e}")))
}
