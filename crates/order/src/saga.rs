//! Placing and cancelling orders: the saga of FAULTS.md, as plain async
//! code over the storage and the two ports (catalogue, inventory).
//!
//! Placing an order takes three commits, whatever the outcome:
//! 1. price every line (Product) and check stock (the stale-serving stock
//!    cache): unknown product → 404, short → 409, no answer → 503 — with a
//!    key, an existing key decides first (replay, 409, 422, or resume);
//! 2. **(a)** in one transaction: the customer's open-order count (at
//!    `orders.max_open_per_customer` nothing is written: 429, unless an
//!    existing key answers), the idempotency key (held by this request's
//!    lock token), the order `pending` and its `reserve` outbox row (leased
//!    to this request);
//! 3. **(b)** `ReserveStock(reservation_id = order id)` at Inventory;
//! 4. **(c)** in one transaction: reserved → `confirmed` (201), short →
//!    `rejected` (409), with the outbox row removed and the response stored
//!    under the key (fenced: only if this request still holds it); no
//!    answer → the row handed to the outbox worker and the `pending` (202)
//!    response stored.
//!
//! When Inventory's circuit is open, or the stock check has just found
//! Inventory unavailable (it answered from a stale copy), (a) writes the
//! row due for the worker and the 202 response at once: one commit, one
//! timeout at most.
//!
//! Cancelling writes `cancelled` and a `release` row in one transaction,
//! then calls `ReleaseStock` (idempotent); the worker finishes what a
//! failed call left. Every step after a commit is idempotent, so a crash
//! anywhere is repaired by running the step again.

use std::{sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use shopeasy_resilience::{
    backoff::{Backoff, Jitter},
    deadline::Deadline,
};
use uuid::Uuid;

use crate::{
    catalog::{Catalog, CatalogError},
    domain::{Customer, NewOrder, Order, OrderLine, OrderStatus, Shortage, now_ms},
    error::Error,
    failpoints::{Failpoint, Failpoints},
    stock::{Reservations, Reserved, StockError, StockLevel, StockSource},
    store::{
        Action, Claim, Created, FirstTry, KeyHold, NewKey, Page, PageCursor, Resume, Store,
        StoredResponse, Task,
    },
};

/// Most lookups of one order in flight at once, per dependency (prices at
/// Product, stock at Inventory). A 50-line order sent all at once would
/// take 50 of a bulkhead's 64 slots (`resilience.*.max_concurrency`), so
/// two such orders together were shed with a 503 though neither
/// dependency was busy; eight per order lets eight large orders share the
/// default bulkhead, and keeps a one-line order a single round trip.
pub const LOOKUPS_IN_FLIGHT: usize = 8;

/// The answer to a successful `POST /api/orders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Stock is reserved (201).
    Confirmed(Order),
    /// Accepted; the outbox worker reserves later (202).
    Pending(Order),
}

/// A keyed request: its hold on the key, the request's fingerprint, how
/// long it locks the key, and how an outcome is rendered for storage (the
/// bytes a replay sends).
#[derive(Debug, Clone, Copy)]
pub struct Keyed<'a> {
    /// The holder (customer, key, lock token).
    pub hold: &'a KeyHold,
    /// The fingerprint of the canonical request.
    pub fingerprint: &'a str,
    /// How long the key stays locked by this request.
    pub lock: Duration,
    /// Renders an outcome as the response to store.
    pub render: fn(&Result<Placed, Error>) -> StoredResponse,
}

impl<'a> Keyed<'a> {
    fn new_key(self) -> NewKey<'a> {
        let now = now_ms();
        NewKey {
            hold: self.hold,
            fingerprint: self.fingerprint,
            now,
            lock_until: now.saturating_add(millis(self.lock)),
        }
    }

    fn stored(self, outcome: &Result<Placed, Error>) -> (&'a KeyHold, StoredResponse) {
        (self.hold, (self.render)(outcome))
    }
}

/// What a placement came to.
#[derive(Debug)]
pub enum Attempt {
    /// This request ran; a definite outcome is stored under its key.
    Ran(Result<Placed, Error>),
    /// The key decided without running: a replay, in progress, or a
    /// mismatch.
    Key(Claim),
}

/// Inventory's answer to the outbox worker's reservation, once recorded.
#[derive(Debug)]
enum Reservation {
    /// Reserved: the order is `confirmed` (or stays `cancelled` or
    /// `rejected`, with a `release` row, if it was cancelled meanwhile or
    /// an overlapping attempt was refused).
    Confirmed,
    /// Refused for shortages: the order is `rejected`.
    Rejected,
    /// No answer: the reservation waits for the outbox.
    Deferred(StockError),
}

/// Timings of the saga.
#[derive(Debug, Clone, Copy)]
pub struct SagaTimings {
    /// How long a request holds the outbox row of its order before the
    /// worker may take it over.
    pub lease: Duration,
    /// First delay before the worker retries a row (doubles per try).
    pub initial_backoff: Duration,
    /// Longest delay between two tries of a row.
    pub max_backoff: Duration,
}

/// The services the saga calls: Product for prices, a stock source
/// (normally the stock cache) for availability, and Inventory for
/// reservations. Ports, so tests script them without a network.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Prices (Product).
    pub catalog: Arc<dyn Catalog>,
    /// Availability before reserving (normally the stock cache).
    pub stock: Arc<dyn StockSource>,
    /// Reservations and releases (Inventory).
    pub reservations: Arc<dyn Reservations>,
}

/// The order service's use cases.
#[derive(Debug, Clone)]
pub struct Orders {
    store: Store,
    ports: Ports,
    failpoints: Failpoints,
    timings: SagaTimings,
    open_limit: OpenOrderLimit,
}

/// How many `pending` orders one customer may have, and what a refused
/// placement is told (`Retry-After`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOrderLimit {
    /// Most `pending` orders per customer (`orders.max_open_per_customer`).
    pub max_open: u32,
    /// Seconds until retrying is worth it: about when the outbox next tries
    /// the pending orders (its longest backoff), so some may be settled.
    pub retry_after: u64,
}

impl Default for OpenOrderLimit {
    /// The setting's default (20), retried after the outbox's default
    /// longest backoff (30 s).
    fn default() -> Self {
        Self {
            max_open: 20,
            retry_after: 30,
        }
    }
}

impl Orders {
    /// The use cases over `store`, calling the services in `ports`.
    pub fn new(store: Store, ports: Ports, failpoints: Failpoints, timings: SagaTimings) -> Self {
        Self {
            store,
            ports,
            failpoints,
            timings,
            open_limit: OpenOrderLimit::default(),
        }
    }

    /// The same use cases with `limit` on each customer's open orders.
    #[must_use]
    pub fn with_open_limit(mut self, limit: OpenOrderLimit) -> Self {
        self.open_limit = limit;
        self
    }

    /// The storage.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Places `request`; with `key`, at most once per key (see the module
    /// docs for the three commits).
    pub async fn place(
        &self,
        request: &NewOrder,
        key: Option<Keyed<'_>>,
        deadline: Option<Deadline>,
    ) -> Attempt {
        match self.run(request, key, deadline).await {
            Ok(attempt) => attempt,
            Err(Error::KeyTakenOver) if key.is_some() => {
                // This request stalled past its lock and another took the
                // key over: it wrote nothing; the key answers.
                let hold = key.map(|k| k.hold);
                match self.key_state(hold).await {
                    Ok(claim) => Attempt::Key(claim),
                    Err(e) => Attempt::Ran(Err(e)),
                }
            }
            Err(e) => {
                if let Some(k) = key
                    && matches!(
                        e,
                        Error::DatabaseUnavailable(_)
                            | Error::Internal(_)
                            | Error::NotFound
                            | Error::DeadlineExceeded
                    )
                {
                    // Nothing definite happened after the order was created:
                    // let a retry resume at once (fenced: only our own lock).
                    // Off the answer's path: after a database failure this
                    // write waits out the same pool timeout, and the caller
                    // must not pay it twice (the lock expires regardless).
                    let store = self.store.clone();
                    let hold = k.hold.clone();
                    tokio::spawn(async move {
                        if let Err(e) = store.unlock_key(&hold).await {
                            tracing::warn!(error = %e, "could not unlock idempotency key");
                        }
                    });
                }
                Attempt::Ran(Err(e))
            }
        }
    }

    async fn key_state(&self, hold: Option<&KeyHold>) -> Result<Claim, Error> {
        let hold = hold.ok_or_else(|| anyhow::anyhow!("no key"))?;
        Ok(self.store.key_state(hold, now_ms()).await?)
    }

    /// [`Self::place`]'s steps; `Err` is an outcome of this request.
    async fn run(
        &self,
        request: &NewOrder,
        key: Option<Keyed<'_>>,
        deadline: Option<Deadline>,
    ) -> Result<Attempt, Error> {
        let (order, inventory_down) = match self.price_and_check(request, deadline).await {
            Ok(priced) => priced,
            Err(e) => {
                // Nothing was created, but an existing key decides first: a
                // replay or a resumed order must not depend on Product or
                // the stock check (only failing requests pay this read).
                if let Some(decided) = self.existing_key(key, deadline).await {
                    return decided;
                }
                return Err(e);
            }
        };
        let now = order.created_at;
        // While Inventory's circuit is open, or the stock check has just
        // waited out Inventory's timeout and answered from a stale copy, a
        // reservation would be refused or wait a second timeout: the order
        // goes to the outbox in the same commit, with no call.
        let refusing = self.ports.reservations.is_refusing();
        let deferred = refusing || inventory_down;
        let first = if deferred {
            FirstTry::Worker {
                at: now + millis(self.timings.initial_backoff),
            }
        } else {
            FirstTry::Caller {
                lease_until: now + millis(self.timings.lease),
            }
        };
        self.failpoints.pause(Failpoint::BeforeOrderCommit).await;
        let new_key = key.map(|k| k.new_key());
        let known = match key {
            Some(k) if deferred => Some((k.render)(&Ok(Placed::Pending(order.clone())))),
            _ => None,
        };
        // Commit (a), with the customer's open-order limit: a customer at
        // it places nothing new; an existing key still answers (a replay is
        // not a new placement). Checked in this commit rather than before
        // pricing: one statement fewer for every placement, one Product
        // call more for a refused one.
        let task = match self
            .store
            .create_order(
                &order,
                new_key.as_ref(),
                first,
                known.as_ref(),
                self.open_limit.max_open,
            )
            .await?
        {
            Created::Order(task) => task,
            Created::AtOpenLimit => {
                if let Some(decided) = self.existing_key(key, deadline).await {
                    return decided;
                }
                metrics::counter!("shopeasy_orders_refused_open_limit_total").increment(1);
                return Err(Error::TooManyOpenOrders {
                    max_open: self.open_limit.max_open,
                    retry_after: self.open_limit.retry_after,
                });
            }
            Created::Existing(Claim::Acquired(Resume::OrderCreated(id))) => {
                let k = key.ok_or_else(|| anyhow::anyhow!("a key decided an unkeyed order"))?;
                return self.resume(id, k, deadline).await.map(ran);
            }
            Created::Existing(claim) => return Ok(Attempt::Key(claim)),
        };
        metrics::counter!("shopeasy_orders_created_total").increment(1);
        self.failpoints
            .check(Failpoint::AfterOrderCommit)
            .map_err(Error::Failpoint)?;
        self.failpoints.pause(Failpoint::AfterOrderCommit).await;
        if deferred {
            if refusing {
                tracing::info!(order = %order.id, "inventory's circuit is open: reservation handed to the outbox");
            } else {
                tracing::info!(order = %order.id, "the stock check found inventory unavailable: reservation handed to the outbox");
            }
            return Ok(ran(Placed::Pending(order)));
        }
        self.reserve_and_finish(order, Some(task), key, deadline)
            .await
            .map(ran)
    }

    /// What an existing key decides when this request cannot place a new
    /// order: its replay, its in-progress or mismatch answer, or its order
    /// resumed; `None` without a key, or when the key is new (or cannot be
    /// read: the request's own failure then stands).
    async fn existing_key(
        &self,
        key: Option<Keyed<'_>>,
        deadline: Option<Deadline>,
    ) -> Option<Result<Attempt, Error>> {
        let k = key?;
        match self.store.claim_existing(&k.new_key()).await {
            Ok(Some(Claim::Acquired(Resume::OrderCreated(id)))) => {
                Some(self.resume(id, k, deadline).await.map(ran))
            }
            Ok(Some(claim)) => Some(Ok(Attempt::Key(claim))),
            Ok(None) => None,
            Err(db) => {
                tracing::warn!(error = %db, "idempotency key lookup failed");
                None
            }
        }
    }

    /// Resumes the order a key holder created before it stopped (crashed,
    /// or stalled past its lock): reserve if still `pending`, else answer
    /// what is stored; either way the response is stored under the key.
    async fn resume(
        &self,
        id: Uuid,
        key: Keyed<'_>,
        deadline: Option<Deadline>,
    ) -> Result<Placed, Error> {
        let order = self.store.order(id).await?.ok_or(Error::NotFound)?;
        if order.status == OrderStatus::Pending {
            return self
                .reserve_and_finish(order, None, Some(key), deadline)
                .await;
        }
        self.answer_stored(id, Some(key)).await
    }

    /// Answers what is stored for order `id` (another writer got there
    /// first), storing it under the key.
    async fn answer_stored(&self, id: Uuid, key: Option<Keyed<'_>>) -> Result<Placed, Error> {
        let order = self.store.order(id).await?.ok_or(Error::NotFound)?;
        let outcome = match order.status {
            OrderStatus::Pending => Ok(Placed::Pending(order)),
            OrderStatus::Rejected => Err(Error::OutOfStock {
                shortages: self.store.shortages(id).await?,
                order: Some(id),
            }),
            OrderStatus::Confirmed | OrderStatus::Cancelled => Ok(Placed::Confirmed(order)),
        };
        if let Some(k) = key {
            let (hold, response) = k.stored(&outcome);
            self.store.finish_key(hold, &response).await?;
        }
        outcome
    }

    /// Commits (b) and (c) of a request: reserve at Inventory, then record
    /// the answer and store the response in one transaction. `task` is the
    /// outbox row this request leased in (a) (none when resuming).
    async fn reserve_and_finish(
        &self,
        order: Order,
        task: Option<Task>,
        key: Option<Keyed<'_>>,
        deadline: Option<Deadline>,
    ) -> Result<Placed, Error> {
        let answer = self
            .ports
            .reservations
            .reserve(order.id, order.stock_lines(), deadline)
            .await;
        let answer = match answer {
            Ok(Reserved::Yes) if self.failpoints.check(Failpoint::ReserveAnswerLost).is_err() => {
                Err(StockError::Unavailable(
                    "failpoint: the answer was lost".into(),
                ))
            }
            other => other,
        };
        let id = order.id;
        match answer {
            Ok(Reserved::Yes) => {
                self.failpoints
                    .check(Failpoint::AfterReserve)
                    .map_err(Error::Failpoint)?;
                self.failpoints.pause(Failpoint::AfterReserve).await;
                let at = now_ms();
                let placed = Placed::Confirmed(Order {
                    status: OrderStatus::Confirmed,
                    updated_at: at,
                    ..order
                });
                let outcome = Ok(placed);
                let stored = key.map(|k| k.stored(&outcome));
                // Commit (c).
                let recorded = self
                    .store
                    .finish_reservation(id, None, at, stored.as_ref().map(|(h, r)| (*h, r)))
                    .await?;
                self.failpoints
                    .check(Failpoint::AfterFinalCommit)
                    .map_err(Error::Failpoint)?;
                if recorded.key_finished
                    || (key.is_none() && recorded.status == OrderStatus::Confirmed)
                {
                    outcome
                } else {
                    // Cancelled meanwhile (or rejected by an overlapping
                    // attempt: the stock is released), or recorded by the
                    // worker first: answer what is stored.
                    self.answer_stored(id, key).await
                }
            }
            Ok(Reserved::Insufficient(shortages)) => {
                let outcome = Err(Error::OutOfStock {
                    shortages: shortages.clone(),
                    order: Some(id),
                });
                let stored = key.map(|k| k.stored(&outcome));
                let recorded = self
                    .store
                    .finish_reservation(
                        id,
                        Some(&shortages),
                        now_ms(),
                        stored.as_ref().map(|(h, r)| (*h, r)),
                    )
                    .await?;
                self.failpoints
                    .check(Failpoint::AfterFinalCommit)
                    .map_err(Error::Failpoint)?;
                if recorded.key_finished || key.is_none() {
                    outcome
                } else {
                    self.answer_stored(id, key).await
                }
            }
            Err(e) => {
                tracing::info!(order = %id, error = %e, "reservation deferred to the outbox");
                let outcome = Ok(Placed::Pending(order));
                let next = now_ms() + millis(self.timings.initial_backoff);
                match (task, key) {
                    (Some(task), Some(k)) => {
                        let (hold, response) = k.stored(&outcome);
                        self.store
                            .hand_over(&task, next, Some((hold, &response)))
                            .await?;
                    }
                    (Some(task), None) => {
                        // Hand the row to the worker without making the
                        // caller wait: if this update is lost (a crash), the
                        // request's lease runs out and the worker takes the
                        // row anyway.
                        let store = self.store.clone();
                        tokio::spawn(async move {
                            if let Err(e) = store.retry_later(&task, next).await {
                                tracing::warn!(error = %e, "outbox hand-over failed; the lease will run out");
                            }
                        });
                    }
                    (None, Some(k)) => {
                        let (hold, response) = k.stored(&outcome);
                        self.store.finish_key(hold, &response).await?;
                    }
                    (None, None) => {}
                }
                outcome
            }
        }
    }

    /// The outbox worker's reservation: asks Inventory to reserve `order`'s
    /// stock and records a definite answer.
    async fn reserve(&self, order: &Order) -> Result<Reservation, Error> {
        match self
            .ports
            .reservations
            .reserve(order.id, order.stock_lines(), None)
            .await
        {
            Ok(Reserved::Yes) => {
                let at = now_ms();
                self.store.record_reservation(order.id, None, at).await?;
                Ok(Reservation::Confirmed)
            }
            Ok(Reserved::Insufficient(shortages)) => {
                self.store
                    .record_reservation(order.id, Some(&shortages), now_ms())
                    .await?;
                Ok(Reservation::Rejected)
            }
            Err(e) => Ok(Reservation::Deferred(e)),
        }
    }

    /// Prices every line and checks stock, concurrently per line (at most
    /// [`LOOKUPS_IN_FLIGHT`] of each at once); builds the `pending` order,
    /// and says whether the stock check just found Inventory unavailable
    /// (some answer is a stale copy).
    async fn price_and_check(
        &self,
        request: &NewOrder,
        deadline: Option<Deadline>,
    ) -> Result<(Order, bool), Error> {
        let items = request.items();
        // Streams of owned ids: a stream whose closures take a borrowed
        // item makes the handler's future not `Send` (rust#102211).
        let ids: Vec<Uuid> = items.iter().map(|l| l.product_id).collect();
        let (prices, stock): (Vec<_>, Vec<_>) = futures::join!(
            stream::iter(ids.clone())
                .map(|id| self.ports.catalog.price_cents(id, deadline))
                .buffered(LOOKUPS_IN_FLIGHT)
                .collect(),
            stream::iter(ids)
                .map(|id| self.ports.stock.check(id, deadline))
                .buffered(LOOKUPS_IN_FLIGHT)
                .collect(),
        );
        let mut unknown = Vec::new();
        let mut lines = Vec::with_capacity(items.len());
        for (line, price) in items.iter().zip(prices) {
            match price {
                Ok(Some(price)) => lines.push(OrderLine {
                    product_id: line.product_id,
                    quantity: line.quantity,
                    unit_price_cents: price,
                }),
                Ok(None) => unknown.push(line.product_id),
                Err(CatalogError::DeadlineExceeded) => return Err(Error::DeadlineExceeded),
                Err(CatalogError::Unavailable(reason)) => {
                    tracing::warn!(%reason, "product lookup failed");
                    return Err(Error::ProductUnavailable);
                }
            }
        }
        if !unknown.is_empty() {
            return Err(Error::UnknownProducts(unknown));
        }
        let mut shortages = Vec::new();
        let mut inventory_down = false;
        for (line, available) in items.iter().zip(stock) {
            let available = match available {
                Ok(answer) => {
                    inventory_down |= answer.inventory_unavailable;
                    answer.available.unwrap_or(0)
                }
                Err(StockError::DeadlineExceeded) => return Err(Error::DeadlineExceeded),
                Err(StockError::Unavailable(reason)) => {
                    tracing::warn!(%reason, product = %line.product_id, "no stock answer");
                    return Err(Error::InventoryUnavailable);
                }
            };
            if available < line.quantity {
                shortages.push(Shortage {
                    product_id: line.product_id,
                    requested: line.quantity,
                    available,
                });
            }
        }
        if !shortages.is_empty() {
            return Err(Error::OutOfStock {
                shortages,
                order: None,
            });
        }
        let now = now_ms();
        let order = Order {
            id: Uuid::now_v7(),
            customer_id: request.customer_id().to_owned(),
            status: OrderStatus::Pending,
            total_cents: lines
                .iter()
                .map(|l| l.quantity.saturating_mul(l.unit_price_cents))
                .fold(0i64, i64::saturating_add),
            items: lines,
            created_at: now,
            updated_at: now,
        };
        Ok((order, inventory_down))
    }

    /// One of `customer`'s orders. Another customer's order is
    /// [`Error::NotFound`], exactly like an unknown id: nobody learns
    /// which ids exist (OWASP API1).
    ///
    /// # Errors
    /// [`Error::NotFound`]; database failures.
    pub async fn get(&self, id: Uuid, customer: &Customer) -> Result<Order, Error> {
        self.store
            .order(id)
            .await?
            .filter(|o| customer.owns(o))
            .ok_or(Error::NotFound)
    }

    /// The stock of `product`, read through the same stock source the
    /// placements check (the stale-serving, single-flight stock cache): a
    /// page asking for it costs Inventory no more than an order does, and
    /// while Inventory is down it answers the cached count, marked stale,
    /// with its age.
    ///
    /// # Errors
    /// [`Error::UnknownStock`] when Inventory has no record of `product`;
    /// [`Error::InventoryUnavailable`] when Inventory is unavailable and no
    /// cached count is usable; [`Error::DeadlineExceeded`].
    pub async fn stock(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> Result<StockLevel, Error> {
        let answer = match self.ports.stock.check(product, deadline).await {
            Ok(answer) => answer,
            Err(StockError::DeadlineExceeded) => return Err(Error::DeadlineExceeded),
            Err(StockError::Unavailable(reason)) => {
                tracing::warn!(%reason, %product, "no stock answer");
                return Err(Error::InventoryUnavailable);
            }
        };
        let available = answer.available.ok_or(Error::UnknownStock)?;
        Ok(StockLevel {
            product_id: product,
            available,
            stale: answer.inventory_unavailable,
            as_of_ms: now_ms().saturating_sub(millis(answer.age)),
            age: answer.age,
        })
    }

    /// A page of `customer`'s orders (at most `limit`, capped at
    /// [`MAX_PAGE`]), newest first, continuing after `after`.
    ///
    /// # Errors
    /// Database failures.
    pub async fn of_customer(
        &self,
        customer: &Customer,
        limit: u32,
        after: Option<&PageCursor>,
    ) -> Result<Page, Error> {
        let limit = i64::from(limit.clamp(1, MAX_PAGE));
        Ok(self
            .store
            .orders_of(customer.as_str(), limit, after)
            .await?)
    }

    /// Cancels one of `customer`'s orders and releases its stock.
    /// Idempotent: cancelling a cancelled order answers the order and
    /// releases nothing more. Ownership is checked first: another
    /// customer's order is [`Error::NotFound`] and nothing changes (an
    /// order's customer never changes, so the check cannot go stale).
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::NotCancellable`] for a rejected order;
    /// database failures; a failpoint.
    pub async fn cancel(
        &self,
        id: Uuid,
        customer: &Customer,
        deadline: Option<Deadline>,
    ) -> Result<Order, Error> {
        self.get(id, customer).await?;
        let now = now_ms();
        if let Some(task) = self
            .store
            .cancel(id, now, now + millis(self.timings.lease))
            .await?
        {
            self.run_release(&task, deadline).await?;
        }
        self.get(id, customer).await
    }

    async fn run_release(&self, task: &Task, deadline: Option<Deadline>) -> Result<(), Error> {
        match self
            .ports
            .reservations
            .release(task.order_id, deadline)
            .await
        {
            Ok(()) => {
                self.failpoints
                    .check(Failpoint::AfterRelease)
                    .map_err(Error::Failpoint)?;
                Ok(self.store.finish_task(task).await?)
            }
            Err(e) => {
                tracing::info!(order = %task.order_id, error = %e, "release deferred to the outbox");
                Ok(self
                    .store
                    .retry_later(task, now_ms() + self.backoff_ms(task.attempts))
                    .await?)
            }
        }
    }

    /// Does one claimed outbox task (the worker's unit of work): reserve
    /// for a `pending` order, or release for a cancelled one (or a rejected
    /// one whose stock a late attempt reserved). Failures are scheduled
    /// again with jittered exponential backoff.
    ///
    /// # Errors
    /// Database failures (the task's lease then runs out and it is retried).
    pub async fn run_task(&self, task: &Task) -> Result<(), Error> {
        if self.failpoints.check(Failpoint::OutboxTaskPanics).is_err() {
            panic!("failpoint: outbox task for order {} panics", task.order_id);
        }
        match task.action {
            Action::Release => self.run_release(task, None).await,
            Action::Reserve => {
                let order = self.store.order(task.order_id).await?;
                let Some(order) = order.filter(|o| o.status == OrderStatus::Pending) else {
                    return Ok(self.store.finish_task(task).await?);
                };
                let (outcome, deferred) = match self.reserve(&order).await? {
                    Reservation::Confirmed => ("confirmed", None),
                    Reservation::Rejected => ("rejected", None),
                    Reservation::Deferred(e) => ("deferred", Some(e)),
                };
                metrics::counter!("shopeasy_outbox_processed_total", "outcome" => outcome)
                    .increment(1);
                let Some(e) = deferred else {
                    return Ok(());
                };
                tracing::debug!(order = %order.id, error = %e, "reservation still deferred");
                Ok(self
                    .store
                    .retry_later(task, now_ms() + self.backoff_ms(task.attempts))
                    .await?)
            }
        }
    }

    /// The outbox's delay before the `attempts`-th try of a row: the shared
    /// exponential backoff, equal jitter (never retried at once).
    fn backoff_ms(&self, attempts: i64) -> i64 {
        let backoff = Backoff::new(
            self.timings.initial_backoff,
            self.timings.max_backoff,
            Jitter::Equal,
        );
        let retry = u32::try_from(attempts.saturating_sub(1)).unwrap_or(0);
        millis(backoff.delay(retry, Duration::ZERO, &mut rand::rng()))
    }
}

/// Most orders on one page of a customer's list.
pub const MAX_PAGE: u32 = 100;

fn ran(placed: Placed) -> Attempt {
    Attempt::Ran(Ok(placed))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    //! The saga over in-memory ports and a SQLite file: no network.

    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering::SeqCst},
    };

    use futures::future::BoxFuture;

    use super::*;
    use crate::{
        domain::{ItemRequest, NewLine, OrderRequest},
        stock::Reserved,
    };

    /// Scripted Inventory: answers reservations from a queue (then `Yes`).
    #[derive(Debug, Default)]
    struct Scripted {
        answers: Mutex<Vec<Result<Reserved, StockError>>>,
        refusing: std::sync::atomic::AtomicBool,
        reserves: Mutex<Vec<Uuid>>,
        releases: Mutex<Vec<Uuid>>,
    }

    impl StockSource for Scripted {
        fn available(
            &self,
            _: Uuid,
            _: Option<Deadline>,
        ) -> BoxFuture<'_, Result<Option<i64>, StockError>> {
            Box::pin(async { Ok(Some(100)) })
        }
    }

    impl Reservations for Scripted {
        fn reserve(
            &self,
            id: Uuid,
            _: Vec<NewLine>,
            _: Option<Deadline>,
        ) -> BoxFuture<'_, Result<Reserved, StockError>> {
            self.reserves.lock().unwrap().push(id);
            let answer = self.answers.lock().unwrap().pop();
            Box::pin(async move { answer.unwrap_or(Ok(Reserved::Yes)) })
        }

        fn is_refusing(&self) -> bool {
            self.refusing.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn release(&self, id: Uuid, _: Option<Deadline>) -> BoxFuture<'_, Result<(), StockError>> {
            self.releases.lock().unwrap().push(id);
            Box::pin(async { Ok(()) })
        }
    }

    impl Catalog for Scripted {
        fn price_cents(
            &self,
            _: Uuid,
            _: Option<Deadline>,
        ) -> BoxFuture<'_, Result<Option<i64>, CatalogError>> {
            Box::pin(async { Ok(Some(5)) })
        }
    }

    /// Counts lookups in flight and the most at once. Each lookup yields
    /// once before it answers, so every lookup started in one poll is in
    /// flight together.
    #[derive(Debug, Default)]
    struct Crowd {
        now: AtomicUsize,
        most: AtomicUsize,
    }

    impl Crowd {
        fn lookup<T: Send + 'static>(&self, answer: T) -> BoxFuture<'_, T> {
            Box::pin(async move {
                let now = self.now.fetch_add(1, SeqCst) + 1;
                self.most.fetch_max(now, SeqCst);
                tokio::task::yield_now().await;
                self.now.fetch_sub(1, SeqCst);
                answer
            })
        }
    }

    impl Catalog for Crowd {
        fn price_cents(
            &self,
            _: Uuid,
            _: Option<Deadline>,
        ) -> BoxFuture<'_, Result<Option<i64>, CatalogError>> {
            self.lookup(Ok(Some(5)))
        }
    }

    impl StockSource for Crowd {
        fn available(
            &self,
            _: Uuid,
            _: Option<Deadline>,
        ) -> BoxFuture<'_, Result<Option<i64>, StockError>> {
            self.lookup(Ok(Some(100)))
        }
    }

    async fn orders(inventory: Arc<Scripted>) -> (Orders, shopeasy_testkit::TestDatabase) {
        orders_with(Ports {
            catalog: inventory.clone(),
            stock: inventory.clone(),
            reservations: inventory,
        })
        .await
    }

    async fn orders_with(ports: Ports) -> (Orders, shopeasy_testkit::TestDatabase) {
        let file = shopeasy_testkit::sqlite();
        let db = shopeasy_runtime::db::Database::connect_and_migrate(
            file.url(),
            &Default::default(),
            &crate::migrator(),
        )
        .await
        .unwrap();
        let orders = Orders::new(
            Store::new(db),
            ports,
            Failpoints::default(),
            SagaTimings {
                lease: Duration::from_secs(30),
                initial_backoff: Duration::ZERO,
                max_backoff: Duration::ZERO,
            },
        );
        (orders, file)
    }

    fn request() -> NewOrder {
        NewOrder::parse(
            OrderRequest {
                customer_id: None,
                items: vec![ItemRequest {
                    product_id: Uuid::new_v4().to_string(),
                    quantity: 2,
                }],
            },
            &customer(),
        )
        .unwrap()
    }

    fn customer() -> Customer {
        Customer::from_subject("c").unwrap()
    }

    /// Places [`request`] and expects it handed to the worker (`pending`).
    async fn place_pending(orders: &Orders) -> Order {
        let Attempt::Ran(placed) = orders.place(&request(), None, None).await else {
            panic!("an unkeyed order is never decided by a key")
        };
        let placed = placed.unwrap();
        let Placed::Pending(order) = placed else {
            panic!("{placed:?}")
        };
        order
    }

    /// Claims the outbox tasks due now, as a worker does (one-second lease).
    async fn claim_due(orders: &Orders) -> Vec<Task> {
        orders
            .store()
            .claim_tasks(now_ms(), now_ms() + 1000, 10)
            .await
            .unwrap()
    }

    /// An order placed while Inventory does not answer: `pending`.
    async fn placed_while_inventory_is_down()
    -> (Arc<Scripted>, Orders, shopeasy_testkit::TestDatabase, Order) {
        let inventory = Arc::new(Scripted::default());
        inventory
            .answers
            .lock()
            .unwrap()
            .push(Err(StockError::Unavailable("down".into())));
        let (orders, db) = orders(inventory.clone()).await;
        let order = place_pending(&orders).await;
        (inventory, orders, db, order)
    }

    #[tokio::test]
    async fn a_large_order_keeps_a_few_lookups_in_flight_per_dependency() {
        let (prices, stock) = (Arc::new(Crowd::default()), Arc::new(Crowd::default()));
        let (orders, _db) = orders_with(Ports {
            catalog: prices.clone(),
            stock: stock.clone(),
            reservations: Arc::new(Scripted::default()),
        })
        .await;
        let request = NewOrder::parse(
            OrderRequest {
                customer_id: None,
                items: (0..crate::domain::MAX_LINES)
                    .map(|_| ItemRequest {
                        product_id: Uuid::new_v4().to_string(),
                        quantity: 1,
                    })
                    .collect(),
            },
            &customer(),
        )
        .unwrap();
        let Attempt::Ran(placed) = orders.place(&request, None, None).await else {
            panic!("an unkeyed order is never decided by a key")
        };
        let placed = placed.unwrap();
        let Placed::Confirmed(order) = placed else {
            panic!("{placed:?}")
        };
        // Every line priced, in the order given.
        let ordered: Vec<Uuid> = request.items().iter().map(|l| l.product_id).collect();
        let priced: Vec<Uuid> = order.items.iter().map(|l| l.product_id).collect();
        assert_eq!(priced, ordered);
        assert_eq!(order.total_cents, 5 * 50);
        // Concurrent, but never the whole order at once.
        assert_eq!(prices.most.load(SeqCst), LOOKUPS_IN_FLIGHT);
        assert_eq!(stock.most.load(SeqCst), LOOKUPS_IN_FLIGHT);
    }

    #[tokio::test]
    async fn unavailable_inventory_leaves_the_order_pending_for_the_worker() {
        let (inventory, orders, _db, order) = placed_while_inventory_is_down().await;
        assert_eq!(order.total_cents, 10);
        // The hand-over to the worker is detached: wait for it (bounded).
        let mut tasks = Vec::new();
        for _ in 0..100 {
            tasks = claim_due(&orders).await;
            if !tasks.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(tasks.len(), 1);
        // The waiting row's age: written at or before now, and it grows.
        let oldest = orders.store().oldest_pending_at().await.unwrap().unwrap();
        let now = crate::domain::now_ms();
        assert!(oldest <= now, "{oldest} > {now}");
        let age = crate::outbox::oldest_age_seconds(Some(oldest), now + 1500);
        assert!(age >= 1.5, "{age}");
        orders.run_task(&tasks[0]).await.unwrap();
        assert_eq!(
            orders.get(order.id, &customer()).await.unwrap().status,
            OrderStatus::Confirmed
        );
        assert_eq!(
            *inventory.reserves.lock().unwrap(),
            vec![order.id, order.id]
        );
        assert_eq!(orders.store().backlog().await.unwrap(), 0);
        assert_eq!(orders.store().oldest_pending_at().await.unwrap(), None);
        assert_eq!(crate::outbox::oldest_age_seconds(None, now), 0.0);
    }

    #[tokio::test]
    async fn an_open_circuit_hands_the_order_to_the_worker_without_a_call() {
        let inventory = Arc::new(Scripted::default());
        inventory
            .refusing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (orders, _db) = orders(inventory.clone()).await;
        let order = place_pending(&orders).await;
        assert!(inventory.reserves.lock().unwrap().is_empty(), "no call");
        // Written due for the worker, not leased to the request: claimable
        // at once (the lease would hold it for 30 s).
        let tasks = claim_due(&orders).await;
        assert_eq!(tasks.len(), 1);
        inventory
            .refusing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        orders.run_task(&tasks[0]).await.unwrap();
        assert_eq!(
            orders.get(order.id, &customer()).await.unwrap().status,
            OrderStatus::Confirmed
        );
        assert_eq!(*inventory.reserves.lock().unwrap(), vec![order.id]);
    }

    #[tokio::test]
    async fn another_customers_order_is_not_found_and_cannot_be_cancelled() {
        let (inventory, orders, _db, order) = placed_while_inventory_is_down().await;
        let bob = Customer::from_subject("bob").unwrap();
        assert!(matches!(
            orders.get(order.id, &bob).await,
            Err(Error::NotFound)
        ));
        assert!(matches!(
            orders.cancel(order.id, &bob, None).await,
            Err(Error::NotFound)
        ));
        assert!(
            inventory.releases.lock().unwrap().is_empty(),
            "nothing released"
        );
        let page = orders.of_customer(&bob, 10, None).await.unwrap();
        assert!(page.orders.is_empty());
        assert_eq!(
            orders.get(order.id, &customer()).await.unwrap().status,
            OrderStatus::Pending,
            "unchanged"
        );
    }

    #[tokio::test]
    async fn the_open_order_limit_refuses_new_placements_only() {
        let inventory = Arc::new(Scripted::default());
        inventory
            .refusing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (orders, _db) = orders(inventory.clone()).await;
        let orders = orders.with_open_limit(OpenOrderLimit {
            max_open: 2,
            retry_after: 7,
        });
        place_pending(&orders).await;
        place_pending(&orders).await;
        let Attempt::Ran(refused) = orders.place(&request(), None, None).await else {
            panic!("unkeyed")
        };
        assert!(
            matches!(
                refused,
                Err(Error::TooManyOpenOrders {
                    max_open: 2,
                    retry_after: 7
                })
            ),
            "{refused:?}"
        );
        // Another customer is not limited by c's orders.
        let bob = NewOrder::parse(
            OrderRequest {
                customer_id: None,
                items: vec![ItemRequest {
                    product_id: Uuid::new_v4().to_string(),
                    quantity: 1,
                }],
            },
            &Customer::from_subject("bob").unwrap(),
        )
        .unwrap();
        let Attempt::Ran(placed) = orders.place(&bob, None, None).await else {
            panic!("unkeyed")
        };
        assert!(placed.is_ok(), "{placed:?}");
    }

    #[tokio::test]
    async fn a_reservation_that_lands_after_a_cancel_is_released() {
        let (inventory, orders, _db, order) = placed_while_inventory_is_down().await;
        orders.cancel(order.id, &customer(), None).await.unwrap();
        // A worker's reservation (started before the cancel) succeeds late.
        let status = orders
            .store()
            .record_reservation(order.id, None, now_ms())
            .await
            .unwrap();
        assert_eq!(status, OrderStatus::Cancelled, "never resurrected");
        let tasks = claim_due(&orders).await;
        assert_eq!(tasks.len(), 1);
        assert_eq!(
            tasks[0].action,
            Action::Release,
            "the late reservation is released"
        );
        orders.run_task(&tasks[0]).await.unwrap();
        assert_eq!(inventory.releases.lock().unwrap().len(), 2);
        assert_eq!(orders.store().backlog().await.unwrap(), 0);
    }
}
