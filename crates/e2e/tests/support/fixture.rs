//! [`Fixture`]: a started cluster, alone in its test binary, with the
//! readers (metrics, breakers, databases) and the customer's moves (seed,
//! order, read) the matrix tests are written in.

use std::{net::SocketAddr, time::Duration};

use serde_json::{Value, json};
use shopeasy_e2e::{Answer, Client, Cluster, Options, Service};
use shopeasy_faults::{FaultProxy, Toxic};
use shopeasy_testkit::{Metrics, assert_eventually, eventually};

use super::cells::assert_answers;
use tokio::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::const_new(());

/// The two service → Redis edges (product's read cache, order's stock
/// cache): the Redis cells fault both.
pub const REDIS_EDGES: [&str; 2] = ["product-redis", "order-redis"];

/// The customer the fixture's client is signed in as.
pub const CUSTOMER: &str = "e2e";

/// FAULTS.md's CB: a breaker opens after at least this many calls in its
/// window (`minimum_calls`, as the fast settings leave it).
pub const BREAKER_MINIMUM_CALLS: u64 = 5;

/// A started cluster and the lock that keeps it alone in this binary.
pub struct Fixture {
    pub cluster: Cluster,
    /// A client of the gateway signed in as [`CUSTOMER`].
    pub gateway: Client,
    _serial: MutexGuard<'static, ()>,
}

impl Fixture {
    /// Starts a cluster with the fast settings, changed by `tweak`.
    pub async fn start(tweak: impl FnOnce(&mut Options)) -> Option<Self> {
        let serial = SERIAL.lock().await;
        let mut options = Options::fast(7);
        tweak(&mut options);
        let cluster = Cluster::start(options).await.expect("cluster starts")?;
        let gateway = cluster.client(CUSTOMER, Duration::from_secs(10));
        Some(Self {
            cluster,
            gateway,
            _serial: serial,
        })
    }

    // ---------------------------------------------------------- faults

    /// F1: `edges`' proxies refuse connections (turned off).
    pub async fn refuse(&self, edges: &[&str]) {
        for edge in edges {
            self.cluster.proxy(edge).await.set_enabled(false).await;
        }
    }

    /// Puts `toxic` on `edge`'s proxy; returns the proxy.
    pub async fn add_toxic(&self, edge: &str, toxic: Toxic) -> FaultProxy {
        let proxy = self.cluster.proxy(edge).await;
        proxy
            .add_toxic(toxic)
            .unwrap_or_else(|e| panic!("{edge}: toxic: {e}"));
        proxy
    }

    /// Points `edge`'s proxy at `stub` and returns where it forwarded
    /// before (to point it back with `f.cluster.redirect(edge, real)`).
    pub async fn stand_in(&self, edge: &str, stub: SocketAddr) -> SocketAddr {
        let real = self.upstream(edge).await;
        self.cluster.redirect(edge, stub).await.expect("redirect");
        real
    }

    /// Where `edge`'s proxy forwards to, resolved.
    pub async fn upstream(&self, edge: &str) -> SocketAddr {
        let upstream = self.cluster.proxy(edge).await.upstream().to_owned();
        tokio::net::lookup_host(upstream.as_str())
            .await
            .expect("upstream resolves")
            .next()
            .expect("an upstream address")
    }

    // ---------------------------------------------------------- readers

    /// A service's `/metrics` text.
    pub async fn metrics(&self, service: Service) -> String {
        reqwest::get(format!("{}/metrics", self.cluster.admin_url(service)))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// A counter's current sum (metrics are process-wide here).
    pub async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        Metrics::parse(&self.metrics(Service::Gateway).await).sum(name, labels)
    }

    /// Attempts the gateway made to `route` (`order`, `product`) so far.
    pub async fn gateway_attempts(&self, route: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", route)],
        )
        .await
    }

    /// `shopeasy_downstream_retries_total{target,outcome}`: the order
    /// service's client retries of `target`.
    pub async fn downstream_retries(&self, target: &str, outcome: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_retries_total",
            &[("target", target), ("outcome", outcome)],
        )
        .await
    }

    /// Places one order of `product` (fresh key) and counts the order →
    /// product retries it drew (`outcome="retried"`): the F1 and F3
    /// order → product cells judge the answer and that count together.
    pub async fn order_counting_product_retries(&self, product: &str) -> (Answer, f64) {
        let before = self.downstream_retries("product", "retried").await;
        let answer = self.order(product, 1, Some(&key())).await;
        let retries = self.downstream_retries("product", "retried").await - before;
        (answer, retries)
    }

    /// Retries of the order service's Inventory client so far.
    pub async fn inventory_retries(&self) -> f64 {
        self.inventory_retry_outcome("retried").await
    }

    /// `shopeasy_downstream_retries_total{target="inventory",outcome}`.
    pub async fn inventory_retry_outcome(&self, outcome: &str) -> f64 {
        self.downstream_retries("inventory", outcome).await
    }

    /// Order's calls to Inventory so far by how they ended (after their
    /// retries): the counts of
    /// `shopeasy_downstream_request_duration_seconds{target="inventory",outcome}`.
    pub async fn inventory_call_outcomes(&self) -> std::collections::BTreeMap<String, f64> {
        let page = Metrics::parse(&self.metrics(Service::Gateway).await);
        page.matching(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "inventory")],
        )
        .filter_map(|s| Some((s.label("outcome")?.to_owned(), s.value)))
        .collect()
    }

    /// `shopeasy_product_cache_requests_total{kind="item",result}`: the
    /// product service's read cache, one product at a time.
    pub async fn product_cache(&self, result: &str) -> f64 {
        Metrics::parse(&self.metrics(Service::Product).await).sum(
            "shopeasy_product_cache_requests_total",
            &[("kind", "item"), ("result", result)],
        )
    }

    /// A health endpoint's status (`live`, `ready`), 0 without an answer
    /// within 5 s.
    pub async fn health(&self, service: Service, which: &str) -> u16 {
        reqwest::Client::new()
            .get(format!(
                "{}/health/{which}",
                self.cluster.admin_url(service)
            ))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_or(0, |r| r.status().as_u16())
    }

    /// The order service's breaker on `target`, from `/admin/resilience`.
    pub async fn breaker(&self, target: &str) -> Value {
        let body: Value = reqwest::get(format!(
            "{}/admin/resilience",
            self.cluster.admin_url(Service::Order)
        ))
        .await
        .expect("admin")
        .json()
        .await
        .expect("admin json");
        body["circuit_breakers"][target].clone()
    }

    /// The breaker's state name.
    pub async fn breaker_state(&self, target: &str) -> String {
        self.breaker(target).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Asserts the breaker on `target` opened neither late nor early:
    /// closed, it is short of its threshold (every call failed, so fewer
    /// than [`BREAKER_MINIMUM_CALLS`] failures in the window); open, its
    /// window holds at least that many calls. (The window keeps the calls
    /// it opened on: it is emptied only on closing, calls refused while
    /// open are not counted, and a cell runs well inside its 30 s.)
    /// Returns whether it is open.
    pub async fn breaker_opened(&self, target: &str) -> bool {
        let b = self.breaker(target).await;
        let failures = b["failures_in_window"].as_u64().unwrap_or(0);
        if b["state"] == "open" {
            let calls = failures + b["successes_in_window"].as_u64().unwrap_or(0);
            assert!(
                calls >= BREAKER_MINIMUM_CALLS,
                "CB: open after {calls} calls, fewer than {BREAKER_MINIMUM_CALLS}: {b}"
            );
            return true;
        }
        assert!(
            failures < BREAKER_MINIMUM_CALLS,
            "CB: {failures} failed calls and still not open: {b}"
        );
        false
    }

    /// How many orders the order database holds.
    pub async fn order_count(&self) -> i64 {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders")
            .fetch_one(self.cluster.order_db())
            .await
            .expect("count orders")
    }

    /// An order's status in the database.
    pub async fn order_status(&self, id: &str) -> Option<String> {
        sqlx::query_scalar::<_, String>("SELECT status FROM orders WHERE id = $1")
            .bind(id)
            .fetch_optional(self.cluster.order_db())
            .await
            .expect("order status")
    }

    /// Units Inventory holds reserved for `reservation` (all lines).
    pub async fn reserved_for(&self, reservation: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(
            "SELECT COALESCE(SUM(l.quantity), 0)::BIGINT FROM reservation_lines l \
             JOIN reservations r ON r.reservation_id = l.reservation_id \
             WHERE r.state = 'reserved' AND l.reservation_id = $1",
        )
        .bind(reservation)
        .fetch_one(self.cluster.inventory_db())
        .await
        .expect("reserved")
    }

    // ---------------------------------------------------------- moves

    /// Seeds a product (price 500) with `stock` units; returns its id.
    pub async fn seed(&self, sku: &str, stock: i64) -> String {
        self.cluster
            .seed_product(sku, 500, stock)
            .await
            .expect("seed product")
            .id
            .to_string()
    }

    /// Seeds a product and orders one unit of it (201), so that its stock
    /// is in the order service's stock cache before the fault; returns its
    /// id.
    pub async fn seed_cached(&self, sku: &str, stock: i64) -> String {
        let id = self.seed(sku, stock).await;
        self.placed(&id, 1).await;
        id
    }

    /// Places an order through the gateway.
    pub async fn order(&self, product: &str, quantity: i64, key: Option<&str>) -> Answer {
        self.gateway
            .post_json("/api/orders", &order_body(product, quantity), key)
            .await
    }

    /// Places a keyed order that must be created (201); returns it.
    pub async fn placed(&self, product: &str, quantity: i64) -> Answer {
        let answer = self.order(product, quantity, Some(&key())).await;
        assert_eq!(answer.status, Some(201), "placed: {}", answer.describe());
        answer
    }

    /// Places a keyed order that must be accepted `pending` (202: a stale
    /// stock entry stood in for Inventory); returns the order's id.
    pub async fn pending(&self, product: &str, quantity: i64) -> String {
        let answer = self.order(product, quantity, Some(&key())).await;
        assert_eq!(
            answer.status,
            Some(202),
            "stale cache → 202 pending: {}",
            answer.describe()
        );
        order_id(&answer)
    }

    /// For `window`, reads `path` through the gateway every `every` (each
    /// 200 within 500 ms) and places an order of `product` after every
    /// `order_every` reads (each 201 within 1 s): the service stays healthy
    /// while a fault is on. Returns the reads, the orders and the time taken.
    pub async fn stays_healthy(
        &self,
        path: &str,
        product: &str,
        window: Duration,
        every: Duration,
        order_every: u32,
    ) -> (u32, u32, Duration) {
        let started = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(every);
        let (mut reads, mut orders) = (0, 0);
        while started.elapsed() < window {
            tick.tick().await;
            let read = self.gateway.get(path).await;
            assert_answers(&read, 200, Duration::from_millis(500));
            reads += 1;
            if reads % order_every == 0 {
                let placed = self.order(product, 1, Some(&key())).await;
                assert_answers(&placed, 201, Duration::from_secs(1));
                orders += 1;
            }
        }
        (reads, orders, started.elapsed())
    }

    /// R: true once an order of one `product` answers 201 within `within`,
    /// retrying with `same_key` (or a fresh key per try when `None`).
    pub async fn orders_recover(
        &self,
        product: &str,
        same_key: Option<&str>,
        within: Duration,
    ) -> bool {
        eventually(within, async || {
            let fresh = key();
            let key = same_key.unwrap_or(&fresh);
            self.order(product, 1, Some(key)).await.status == Some(201)
        })
        .await
    }

    /// Heals every edge, then R: an order of one `product` (a fresh key
    /// per try) answers 201 again within `within`.
    pub async fn heal_and_assert_orders_recover(&self, product: &str, within: Duration) {
        self.cluster.heal().await;
        assert!(
            self.orders_recover(product, None, within).await,
            "R: orders recover within {within:?}"
        );
    }

    /// R: asserts that `GET path` through the gateway answers 200 again
    /// within `within`; returns how long it took.
    pub async fn assert_reads_recover(&self, path: &str, within: Duration, what: &str) -> Duration {
        assert_eventually(within, what, async || {
            self.gateway.get(path).await.status == Some(200)
        })
        .await
    }

    /// R for the product cache: asserts that reads of `path` (each 200)
    /// hit the product cache again within `within` (a hit counted after
    /// the call); returns how long it took.
    pub async fn assert_product_cache_hits(
        &self,
        path: &str,
        within: Duration,
        what: &str,
    ) -> Duration {
        let hits = self.product_cache("hit").await;
        assert_eventually(within, what, async || {
            let read = self.gateway.get(path).await;
            assert_eq!(read.status, Some(200), "{what}: {}", read.describe());
            self.product_cache("hit").await > hits
        })
        .await
    }

    /// C8: asserts that order `id` is confirmed within `within` (the outbox
    /// worker's retry once the fault is healed).
    pub async fn assert_confirmed_within(&self, id: &str, within: Duration, what: &str) {
        assert_eventually(within, format!("{what}: order {id}"), async || {
            self.order_status(id).await.as_deref() == Some("confirmed")
        })
        .await;
    }

    /// C8 + C7: order `id` is confirmed within 10 s and holds exactly
    /// `units` reserved (once, whatever the retries).
    pub async fn assert_confirmed_and_reserved_once(&self, id: &str, units: i64) {
        self.assert_confirmed_within(id, Duration::from_secs(10), "C8")
            .await;
        assert_eq!(self.reserved_for(id).await, units, "C7: reserved once");
    }
}

/// `{items: [{product_id, quantity}]}`: the customer is the token's.
pub fn order_body(product: &str, quantity: i64) -> Value {
    json!({"items": [{"product_id": product, "quantity": quantity}]})
}

/// A fresh idempotency key.
pub fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The order id of a 201/202 answer.
///
/// # Panics
/// When the answer names none.
pub fn order_id(answer: &Answer) -> String {
    answer.json()["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no order id: {}", answer.describe()))
        .to_owned()
}
