//! The order service's view of the Product service: one small trait, so
//! placing an order is testable without HTTP.

use std::fmt;

use futures::future::BoxFuture;
use shopeasy_resilience::deadline::Deadline;
use uuid::Uuid;

/// Why the catalogue gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// Product could not answer (refused, timed out, 5xx, bulkhead full…);
    /// the reason is for logs only.
    #[error("product service unavailable: {0}")]
    Unavailable(String),
    /// The caller's own deadline passed.
    #[error("the caller's deadline passed")]
    DeadlineExceeded,
}

/// Prices of products.
pub trait Catalog: Send + Sync + fmt::Debug + 'static {
    /// The current price of `product` in cents; `None` when no such product
    /// exists. No call outlives `deadline`.
    fn price_cents(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Option<i64>, CatalogError>>;
}
