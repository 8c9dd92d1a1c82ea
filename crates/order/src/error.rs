//! The order service's one error enum, and its one mapping onto the wire
//! (RFC 9457 problems). Details of internal failures are logged here and
//! never sent.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use shopeasy_identity::AuthError;
use shopeasy_runtime::problem::{FieldError, Problem};
use uuid::Uuid;

use crate::{domain::Shortage, store::StoreError};

/// Seconds a client is told to wait before retrying after a 503.
pub const RETRY_AFTER_SECONDS: u64 = 2;

/// Everything that can go wrong serving an order request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Some fields are invalid (422).
    #[error("invalid request")]
    Validation(Vec<FieldError>),
    /// No such order (404).
    #[error("no such order")]
    NotFound,
    /// No stock is known for this product: Inventory has no record of it,
    /// or the id is not a product id (404).
    #[error("no stock record")]
    UnknownStock,
    /// Some products do not exist (404 `unknown-product`).
    #[error("unknown products")]
    UnknownProducts(Vec<Uuid>),
    /// Stock is insufficient (409 `out-of-stock`); `order` is the rejected
    /// order when one was recorded.
    #[error("out of stock")]
    OutOfStock {
        /// The short products.
        shortages: Vec<Shortage>,
        /// The order, now `rejected`, if one was created.
        order: Option<Uuid>,
    },
    /// The order cannot be cancelled in its state (409).
    #[error("order cannot be cancelled")]
    NotCancellable,
    /// The idempotency key was used with another request (422).
    #[error("idempotency key reused with a different request")]
    KeyReused,
    /// The first request with this key is still running (409).
    #[error("a request with this idempotency key is in progress")]
    InProgress {
        /// Seconds until it is worth retrying.
        retry_after: u64,
    },
    /// This request's idempotency key was taken over by another request
    /// (its lock ran out while it stalled): it wrote nothing (409
    /// `request-in-progress`; the key answers once the other finishes).
    #[error("the idempotency key was taken over by another request")]
    KeyTakenOver,
    /// The customer already has `max_open` `pending` orders (429
    /// `too-many-open-orders` + `Retry-After`); nothing was created.
    #[error("too many open orders")]
    TooManyOpenOrders {
        /// The limit (`orders.max_open_per_customer`).
        max_open: u32,
        /// Seconds until retrying is worth it.
        retry_after: u64,
    },
    /// The caller is not signed in, or its token is unusable (401 with
    /// `WWW-Authenticate: Bearer …`, RFC 6750; 503 when no verification key
    /// can be had at all).
    #[error(transparent)]
    Unauthenticated(#[from] AuthError),
    /// Inventory is unavailable and nothing cached can answer (503).
    #[error("inventory unavailable")]
    InventoryUnavailable,
    /// Product is unavailable (503).
    #[error("product service unavailable")]
    ProductUnavailable,
    /// The database is unreachable (503).
    #[error("database unavailable: {0}")]
    DatabaseUnavailable(#[source] sqlx::Error),
    /// The caller's deadline passed (504).
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// A test failpoint stopped the request as a crash would.
    #[error("failpoint {0:?} hit")]
    Failpoint(crate::failpoints::Failpoint),
    /// A bug or an unexpected database answer (500, logged).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<StoreError> for Error {
    /// The HTTP layer's reading of a storage failure: unavailable → 503 +
    /// `Retry-After` (a keyed client retry runs the whole request again);
    /// no such order → 404; a rejected order → 409 `not-cancellable`; a
    /// bug → 500.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(e) => Self::DatabaseUnavailable(e),
            StoreError::NotFound => Self::NotFound,
            StoreError::Conflict => Self::NotCancellable,
            StoreError::LockLost => Self::KeyTakenOver,
            StoreError::Internal(e) => Self::Internal(e),
        }
    }
}

impl Error {
    /// The problem this error is on the wire.
    pub fn to_problem(&self) -> Problem {
        match self {
            Self::Validation(errors) => Problem::validation(errors.iter().cloned()),
            Self::NotFound => Problem::not_found("no such order"),
            Self::UnknownStock => Problem::not_found("no stock is known for this product"),
            Self::UnknownProducts(ids) => Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-product",
                "Unknown product",
                "some products do not exist",
            )
            .extension("products", ids),
            Self::OutOfStock { shortages, order } => {
                let mut p = Problem::new(
                    StatusCode::CONFLICT,
                    "out-of-stock",
                    "Out of stock",
                    "some products do not have enough stock",
                )
                .extension("products", shortages);
                if let Some(id) = order {
                    p = p.extension("order_id", id);
                }
                p
            }
            Self::NotCancellable => Problem::new(
                StatusCode::CONFLICT,
                "not-cancellable",
                "Order cannot be cancelled",
                "a rejected order holds no stock and cannot be cancelled",
            ),
            Self::KeyReused => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused",
                "this Idempotency-Key was used with a different request",
            ),
            Self::InProgress { retry_after } => Problem::new(
                StatusCode::CONFLICT,
                "request-in-progress",
                "Request in progress",
                "a request with this Idempotency-Key is still being processed",
            )
            .retry_after(*retry_after),
            Self::KeyTakenOver => Problem::new(
                StatusCode::CONFLICT,
                "request-in-progress",
                "Request in progress",
                "another request with this Idempotency-Key took it over",
            )
            .retry_after(1),
            Self::TooManyOpenOrders {
                max_open,
                retry_after,
            } => Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-open-orders",
                "Too many open orders",
                format!(
                    "you already have {max_open} pending orders: wait until some are confirmed, or cancel one"
                ),
            )
            .extension("max_open", max_open)
            .retry_after(*retry_after),
            Self::Unauthenticated(e) => e.problem(),
            Self::InventoryUnavailable => Problem::unavailable(
                "inventory is unavailable and no cached stock can answer",
                RETRY_AFTER_SECONDS,
            ),
            Self::ProductUnavailable => {
                Problem::unavailable("the product catalogue is unavailable", RETRY_AFTER_SECONDS)
            }
            Self::DatabaseUnavailable(_) => {
                Problem::unavailable("the order database is unavailable", RETRY_AFTER_SECONDS)
            }
            Self::DeadlineExceeded => Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                "deadline-exceeded",
                "Deadline exceeded",
                "the request's deadline passed before it could be completed",
            ),
            Self::Failpoint(_) | Self::Internal(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(e) => tracing::error!(error = format!("{e:#}"), "internal error"),
            Self::DatabaseUnavailable(e) => tracing::warn!(error = %e, "database unavailable"),
            // With its `WWW-Authenticate` challenge, which the problem alone
            // does not carry.
            Self::Unauthenticated(e) => return e.to_response(),
            _ => {}
        }
        self.to_problem().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_spec() {
        let cases = [
            (Error::Validation(vec![]), 422),
            (Error::NotFound, 404),
            (Error::UnknownStock, 404),
            (Error::UnknownProducts(vec![]), 404),
            (
                Error::OutOfStock {
                    shortages: vec![],
                    order: None,
                },
                409,
            ),
            (Error::KeyReused, 422),
            (
                Error::TooManyOpenOrders {
                    max_open: 20,
                    retry_after: 30,
                },
                429,
            ),
            (Error::Unauthenticated(AuthError::Missing), 401),
            (Error::InProgress { retry_after: 1 }, 409),
            (Error::InventoryUnavailable, 503),
            (Error::ProductUnavailable, 503),
            (Error::DeadlineExceeded, 504),
            (Error::Internal(anyhow::anyhow!("secret detail")), 500),
        ];
        for (error, status) in cases {
            let p = error.to_problem();
            assert_eq!(p.status, status, "{error:?}");
            let body = serde_json::to_string(&p).unwrap();
            assert!(!body.contains("secret detail"), "{body}");
        }
        assert_eq!(
            Error::InProgress { retry_after: 1 }
                .to_problem()
                .retry_after,
            Some(1)
        );
        assert!(
            Error::InventoryUnavailable
                .to_problem()
                .retry_after
                .is_some()
        );
    }
}
