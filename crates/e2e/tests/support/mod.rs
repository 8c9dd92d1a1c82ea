//! What every matrix test file shares: one cluster at a time per test
//! binary (metrics are per process, and the machine has two cores), the
//! admin readers, and order bodies.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy_e2e::{
    Client, Cluster, Options, Service,
    client::{eventually, metric_sum},
};
use tokio::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::const_new(());

/// A started cluster and the lock that keeps it alone in this binary.
pub struct Fixture {
    pub cluster: Cluster,
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
        let gateway = Client::new(cluster.gateway_url(), Duration::from_secs(10));
        Some(Self {
            cluster,
            gateway,
            _serial: serial,
        })
    }

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
        metric_sum(&self.metrics(Service::Gateway).await, name, labels)
    }

    /// Attempts the gateway made to the order service so far.
    pub async fn gateway_attempts(&self, route: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", route)],
        )
        .await
    }

    /// Retries of the order service's Inventory client so far.
    pub async fn inventory_retries(&self) -> f64 {
        self.inventory_retry_outcome("retried").await
    }

    /// `shopeasy_downstream_retries_total{target="inventory",outcome}`.
    pub async fn inventory_retry_outcome(&self, outcome: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_retries_total",
            &[("target", "inventory"), ("outcome", outcome)],
        )
        .await
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

    /// Asserts the breaker on `target` is open, or still short of its
    /// threshold: every call failed, so closed means fewer than
    /// `minimum_calls` (5) failures in the window. Returns whether it is
    /// open.
    pub async fn breaker_opened(&self, target: &str) -> bool {
        let b = self.breaker(target).await;
        if b["state"] == "open" {
            return true;
        }
        let failures = b["failures_in_window"].as_u64().unwrap_or(0);
        assert!(
            failures < 5,
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

    /// Places an order through the gateway.
    pub async fn order(
        &self,
        product: &str,
        quantity: i64,
        key: Option<&str>,
    ) -> shopeasy_e2e::Answer {
        self.gateway
            .post_json("/api/orders", &order_body(product, quantity), key)
            .await
    }

    /// R: true once an order of one `product` answers 201 within `within`,
    /// retrying with `same_key` (or a fresh key per try when `None`).
    pub async fn orders_recover(
        &self,
        product: &str,
        same_key: Option<&str>,
        within: Duration,
    ) -> bool {
        eventually(within, || async {
            let fresh = key();
            let key = same_key.unwrap_or(&fresh);
            self.order(product, 1, Some(key)).await.status == Some(201)
        })
        .await
    }
}

/// `{customer_id, items: [{product_id, quantity}]}`.
pub fn order_body(product: &str, quantity: i64) -> Value {
    json!({"customer_id": "e2e", "items": [{"product_id": product, "quantity": quantity}]})
}

/// A fresh idempotency key.
pub fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Asserts a problem+json answer with `status`, and `Retry-After` when
/// `retry_after`.
pub fn assert_problem(answer: &shopeasy_e2e::Answer, status: u16, retry_after: bool) {
    assert_eq!(answer.status, Some(status), "{}", answer.describe());
    assert!(
        answer.is_problem(),
        "not problem+json: {}",
        answer.describe()
    );
    if retry_after {
        assert!(
            answer.header("retry-after").is_some(),
            "no Retry-After: {:?}",
            answer.headers
        );
    }
}
