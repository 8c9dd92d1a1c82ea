//! Placing and cancelling orders: the saga of FAULTS.md, as plain async
//! code over the storage and the two ports (catalogue, inventory).
//!
//! Placing an order:
//! 1. price every line (Product) and check stock (the stale-serving stock
//!    cache): unknown product → 404, short → 409, no answer → 503;
//! 2. in one transaction: the order `pending`, its `reserve` outbox row
//!    (leased to this request) and the idempotency key's recovery point;
//! 3. `ReserveStock(reservation_id = order id)`: reserved → `confirmed`
//!    (201); short → `rejected` (409); no answer → the row is handed to the
//!    outbox worker and the order stays `pending` (202).
//!
//! Cancelling writes `cancelled` and a `release` row in one transaction,
//! then calls `ReleaseStock` (idempotent); the worker finishes what a
//! failed call left. Every step after a commit is idempotent, so a crash
//! anywhere is repaired by running the step again.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use shopeasy_resilience::{
    backoff::{Backoff, Jitter},
    deadline::Deadline,
};
use uuid::Uuid;

use crate::{
    catalog::{Catalog, CatalogError},
    domain::{NewOrder, Order, OrderLine, OrderStatus, Shortage, now_ms},
    error::Error,
    failpoints::{Failpoint, Failpoints},
    stock::{Reservations, Reserved, StockError, StockSource},
    store::{Action, FirstTry, Resume, Store, Task},
};

/// The answer to a successful `POST /api/orders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Stock is reserved (201).
    Confirmed(Order),
    /// Accepted; the outbox worker reserves later (202).
    Pending(Order),
}

/// Inventory's answer to a reservation, once recorded.
#[derive(Debug)]
enum Reservation {
    /// Reserved; `status` is the order's status afterwards (`confirmed`,
    /// or `cancelled` if it was cancelled meanwhile), as of `at`.
    Confirmed {
        /// The order's status after recording.
        status: OrderStatus,
        /// When it was recorded (milliseconds).
        at: i64,
    },
    /// Refused for these shortages: the order is `rejected`.
    Rejected(Vec<Shortage>),
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
}

impl Orders {
    /// The use cases over `store`, calling the services in `ports`.
    pub fn new(store: Store, ports: Ports, failpoints: Failpoints, timings: SagaTimings) -> Self {
        Self {
            store,
            ports,
            failpoints,
            timings,
        }
    }

    /// The storage.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Places `request`; with `key`, records progress on the idempotency
    /// key the caller holds, and resumes from `resume`.
    ///
    /// # Errors
    /// The problems of SPEC §3 (unknown product, out of stock, dependency
    /// unavailable), database failures, or a failpoint.
    pub async fn place(
        &self,
        request: &NewOrder,
        key: Option<&str>,
        resume: Resume,
        deadline: Option<Deadline>,
    ) -> Result<Placed, Error> {
        let (order, task, deferred) = match resume {
            Resume::OrderCreated(id) => {
                let order = self.store.order(id).await?.ok_or(Error::NotFound)?;
                match order.status {
                    OrderStatus::Pending => (order, None, false),
                    OrderStatus::Rejected => {
                        return Err(Error::OutOfStock {
                            shortages: self.store.shortages(id).await?,
                            order: Some(id),
                        });
                    }
                    OrderStatus::Confirmed | OrderStatus::Cancelled => {
                        return Ok(Placed::Confirmed(order));
                    }
                }
            }
            Resume::Start => {
                let order = self.price_and_check(request, deadline).await?;
                let now = order.created_at;
                // While Inventory's circuit is open a reservation would be
                // refused anyway: the order goes to the outbox in the same
                // commit, with no second write and no call.
                let deferred = self.ports.reservations.is_refusing();
                let first = if deferred {
                    FirstTry::Worker {
                        at: now + millis(self.timings.initial_backoff),
                    }
                } else {
                    FirstTry::Caller {
                        lease_until: now + millis(self.timings.lease),
                    }
                };
                let task = self.store.create_order(&order, key, first).await?;
                metrics::counter!("shopeasy_orders_created_total").increment(1);
                (order, Some(task), deferred)
            }
        };
        self.failpoints
            .check(Failpoint::AfterOrderCommit)
            .map_err(Error::Failpoint)?;
        if deferred {
            tracing::info!(order = %order.id, "inventory's circuit is open: reservation handed to the outbox");
            return Ok(Placed::Pending(order));
        }
        match self
            .reserve(&order, deadline, Some(Failpoint::AfterReserve))
            .await?
        {
            Reservation::Confirmed { status, at } => {
                let order = if status == OrderStatus::Confirmed {
                    Order {
                        status,
                        updated_at: at,
                        ..order
                    }
                } else {
                    // Cancelled meanwhile: answer what is stored.
                    self.store.order(order.id).await?.ok_or(Error::NotFound)?
                };
                Ok(Placed::Confirmed(order))
            }
            Reservation::Rejected(shortages) => Err(Error::OutOfStock {
                shortages,
                order: Some(order.id),
            }),
            Reservation::Deferred(e) => {
                tracing::info!(order = %order.id, error = %e, "reservation deferred to the outbox");
                if let Some(task) = task {
                    // Hand the row to the worker without making the caller
                    // wait: if this update is lost (a crash), the request's
                    // lease runs out and the worker takes the row anyway.
                    let store = self.store.clone();
                    let next = now_ms() + millis(self.timings.initial_backoff);
                    tokio::spawn(async move {
                        if let Err(e) = store.retry_later(&task, next).await {
                            tracing::warn!(error = %e, "outbox hand-over failed; the lease will run out");
                        }
                    });
                }
                Ok(Placed::Pending(order))
            }
        }
    }

    /// Asks Inventory to reserve `order`'s stock and records a definite
    /// answer (the one step the request and the outbox worker share); with
    /// `after_reserve`, that failpoint is checked between the two, where a
    /// crash leaves stock reserved for a `pending` order.
    async fn reserve(
        &self,
        order: &Order,
        deadline: Option<Deadline>,
        after_reserve: Option<Failpoint>,
    ) -> Result<Reservation, Error> {
        match self
            .ports
            .reservations
            .reserve(order.id, order.stock_lines(), deadline)
            .await
        {
            Ok(Reserved::Yes) => {
                if let Some(point) = after_reserve {
                    self.failpoints.check(point).map_err(Error::Failpoint)?;
                }
                let at = now_ms();
                let status = self.store.record_reservation(order.id, None, at).await?;
                Ok(Reservation::Confirmed { status, at })
            }
            Ok(Reserved::Insufficient(shortages)) => {
                self.store
                    .record_reservation(order.id, Some(&shortages), now_ms())
                    .await?;
                Ok(Reservation::Rejected(shortages))
            }
            Err(e) => Ok(Reservation::Deferred(e)),
        }
    }

    /// Prices every line and checks stock, concurrently per line; builds
    /// the `pending` order.
    async fn price_and_check(
        &self,
        request: &NewOrder,
        deadline: Option<Deadline>,
    ) -> Result<Order, Error> {
        let items = request.items();
        let (prices, stock) = futures::join!(
            join_all(
                items
                    .iter()
                    .map(|l| self.ports.catalog.price_cents(l.product_id, deadline))
            ),
            join_all(
                items
                    .iter()
                    .map(|l| self.ports.stock.available(l.product_id, deadline))
            ),
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
        for (line, available) in items.iter().zip(stock) {
            let available = match available {
                Ok(n) => n.unwrap_or(0),
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
        Ok(Order {
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
        })
    }

    /// One order.
    ///
    /// # Errors
    /// [`Error::NotFound`]; database failures.
    pub async fn get(&self, id: Uuid) -> Result<Order, Error> {
        self.store.order(id).await?.ok_or(Error::NotFound)
    }

    /// The customer's latest orders (at most 100), newest first.
    ///
    /// # Errors
    /// Database failures.
    pub async fn of_customer(&self, customer_id: &str) -> Result<Vec<Order>, Error> {
        Ok(self.store.orders_of(customer_id, 100).await?)
    }

    /// Cancels an order and releases its stock. Idempotent: cancelling a
    /// cancelled order answers the order and releases nothing more.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::NotCancellable`] for a rejected order;
    /// database failures; a failpoint.
    pub async fn cancel(&self, id: Uuid, deadline: Option<Deadline>) -> Result<Order, Error> {
        let now = now_ms();
        if let Some(task) = self
            .store
            .cancel(id, now, now + millis(self.timings.lease))
            .await?
        {
            self.run_release(&task, deadline).await?;
        }
        self.get(id).await
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
    /// for a `pending` order, or release for a cancelled one. Failures are
    /// scheduled again with jittered exponential backoff.
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
                let (outcome, deferred) = match self.reserve(&order, None, None).await? {
                    Reservation::Confirmed { .. } => ("confirmed", None),
                    Reservation::Rejected(_) => ("rejected", None),
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

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    //! The saga over in-memory ports and a SQLite file: no network.

    use std::sync::Mutex;

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

    async fn orders(inventory: Arc<Scripted>) -> (Orders, shopeasy_testkit::TestDatabase) {
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
            Ports {
                catalog: inventory.clone(),
                stock: inventory.clone(),
                reservations: inventory,
            },
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
        NewOrder::parse(OrderRequest {
            customer_id: "c".into(),
            items: vec![ItemRequest {
                product_id: Uuid::new_v4().to_string(),
                quantity: 2,
            }],
        })
        .unwrap()
    }

    /// Places [`request`] and expects it handed to the worker (`pending`).
    async fn place_pending(orders: &Orders) -> Order {
        let placed = orders
            .place(&request(), None, Resume::Start, None)
            .await
            .unwrap();
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
        orders.run_task(&tasks[0]).await.unwrap();
        assert_eq!(
            orders.get(order.id).await.unwrap().status,
            OrderStatus::Confirmed
        );
        assert_eq!(
            *inventory.reserves.lock().unwrap(),
            vec![order.id, order.id]
        );
        assert_eq!(orders.store().backlog().await.unwrap(), 0);
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
            orders.get(order.id).await.unwrap().status,
            OrderStatus::Confirmed
        );
        assert_eq!(*inventory.reserves.lock().unwrap(), vec![order.id]);
    }

    #[tokio::test]
    async fn a_reservation_that_lands_after_a_cancel_is_released() {
        let (inventory, orders, _db, order) = placed_while_inventory_is_down().await;
        orders.cancel(order.id, None).await.unwrap();
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
