//! The order service's view of Inventory: two small traits the domain
//! depends on, so the saga, the stock cache and the outbox worker are
//! testable with in-memory fakes and never see generated gRPC types.
//!
//! - [`StockSource`]: how many units of a product are available (what the
//!   stock cache wraps);
//! - [`Reservations`]: reserve all lines of an order or none, and release
//!   them — both idempotent by reservation id (the order id).

use std::{fmt, time::Duration};

use futures::future::BoxFuture;
use shopeasy_resilience::deadline::Deadline;
use uuid::Uuid;

use crate::domain::{NewLine, Shortage};

/// Why Inventory gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StockError {
    /// Inventory could not answer: refused, reset, timed out, circuit open,
    /// bulkhead full, or an error status. One error for all of them; the
    /// reason is for logs and metrics only.
    #[error("inventory unavailable: {0}")]
    Unavailable(String),
    /// The caller's own deadline passed (not Inventory's fault, not counted
    /// against it).
    #[error("the caller's deadline passed")]
    DeadlineExceeded,
}

/// The answer to a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// Every line is reserved (now or by an earlier call with this id).
    Yes,
    /// Nothing was reserved: these products are short (a product Inventory
    /// has no record of is short with 0 available).
    Insufficient(Vec<Shortage>),
}

/// A stock check's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockAnswer {
    /// Units available; `None` when Inventory has no record of the product.
    pub available: Option<i64>,
    /// True when Inventory was just found unavailable and this answer is a
    /// stale copy: a reservation now would most likely wait out a second
    /// timeout, so the saga hands the order to the outbox instead.
    pub inventory_unavailable: bool,
    /// How old the count is: zero for one Inventory has just given, the
    /// cached copy's age otherwise.
    pub age: Duration,
}

/// A product's stock as the public sees it (`GET /api/stock/{id}`): the
/// count the orders are checked against, and how current it is, so a page
/// can say "stock as of 12 s ago" instead of passing an old count off as
/// live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockLevel {
    /// The product.
    pub product_id: Uuid,
    /// Units available.
    pub available: i64,
    /// True when Inventory is unavailable and this is an older copy.
    pub stale: bool,
    /// When the count was Inventory's answer (Unix milliseconds).
    pub as_of_ms: i64,
    /// How old the count is.
    pub age: Duration,
}

/// Units available per product.
///
/// Every method takes the caller's deadline (`None`: no caller waiting, as
/// for the outbox worker): no call outlives it.
pub trait StockSource: Send + Sync + fmt::Debug + 'static {
    /// Units of `product` available; `None` when Inventory has no record of
    /// it.
    fn available(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Option<i64>, StockError>>;

    /// [`Self::available`], saying whether the answer is a stale copy
    /// because Inventory just failed (a source without copies never says
    /// so).
    fn check(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<StockAnswer, StockError>> {
        let available = self.available(product, deadline);
        Box::pin(async move {
            Ok(StockAnswer {
                available: available.await?,
                inventory_unavailable: false,
                age: Duration::ZERO,
            })
        })
    }
}

/// Reserving and releasing stock for an order.
pub trait Reservations: Send + Sync + fmt::Debug + 'static {
    /// Reserves every line or none, keyed by `reservation_id`: repeating it
    /// reserves nothing more.
    fn reserve(
        &self,
        reservation_id: Uuid,
        lines: Vec<NewLine>,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Reserved, StockError>>;

    /// True while a reservation would be refused without reaching
    /// Inventory (its circuit is open): the saga then hands a new order
    /// straight to the outbox instead of making a call that cannot succeed.
    fn is_refusing(&self) -> bool {
        false
    }

    /// Returns what `reservation_id` holds to stock. Idempotent; an unknown
    /// id is fine.
    fn release(
        &self,
        reservation_id: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<(), StockError>>;
}
