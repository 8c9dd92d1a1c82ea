//! Starting the order service for a test: real listeners on 127.0.0.1:0,
//! a real database, fake Inventory and Product servers.

use std::{future::Future, net::SocketAddr, time::Duration};

use serde_json::{Value, json};
use shopeasy_order::{
    App,
    failpoints::Failpoints,
    saga::Orders,
    settings::{OrderSettings, UpstreamSettings},
};
use shopeasy_runtime::settings::{Seconds, SecretUrl};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::fakes::{FakeInventory, FakeProduct, Running};

/// Settings for tests: ephemeral ports, short breaks, leases and backoffs;
/// attempt timeouts generous enough for a loaded machine (tests about
/// timeouts set their own).
pub(crate) fn test_settings(db_url: &str, inventory_url: &str, product_url: &str) -> OrderSettings {
    let mut s = OrderSettings {
        listen_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        database_url: SecretUrl::new(db_url),
        inventory: UpstreamSettings {
            url: inventory_url.to_owned(),
        },
        product: UpstreamSettings {
            url: product_url.to_owned(),
        },
        ..OrderSettings::default()
    };
    let inv = &mut s.resilience.inventory;
    inv.timeout_seconds = Seconds::new(2.0);
    inv.break_duration_seconds = Seconds::new(1.0);
    inv.connect_timeout_seconds = Seconds::new(0.5);
    let prod = &mut s.resilience.product;
    prod.timeout_seconds = Seconds::new(2.0);
    prod.break_duration_seconds = Seconds::new(1.0);
    s.resilience.stock_cache.ttl_seconds = Seconds::new(0.2);
    s.resilience.stock_cache.fetch_timeout_seconds = Seconds::new(1.0);
    s.outbox.poll_interval_seconds = Seconds::new(0.1);
    s.outbox.lease_seconds = Seconds::new(1.0);
    s.outbox.initial_backoff_seconds = Seconds::new(0.1);
    s.outbox.max_backoff_seconds = Seconds::new(0.5);
    s.idempotency.lock_seconds = Seconds::new(2.0);
    s
}

/// A running order service.
#[derive(Debug)]
pub(crate) struct TestApp {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) http: reqwest::Client,
    pub(crate) orders: Orders,
    pub(crate) failpoints: Failpoints,
    shutdown: CancellationToken,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub(crate) async fn spawn(settings: OrderSettings) -> Self {
        Self::spawn_with(settings, Failpoints::default()).await
    }

    pub(crate) async fn spawn_with(settings: OrderSettings, failpoints: Failpoints) -> Self {
        let app = App::build_with(settings, failpoints.clone()).await.unwrap();
        let addr = app.local_addr().unwrap();
        let admin = app.admin_addr().unwrap();
        let orders = app.orders().clone();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(app.run_until_stopped(shutdown.clone()));
        Self {
            addr,
            admin,
            http: reqwest::Client::new(),
            orders,
            failpoints,
            shutdown,
            handle: Some(handle),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops serving and the workers (as a process stop would).
    pub(crate) async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(h) = self.handle.take() {
            let _ = tokio::time::timeout(Duration::from_secs(15), h).await;
        }
    }

    pub(crate) async fn post_order(&self, key: Option<&str>, body: &Value) -> reqwest::Response {
        let mut req = self.http.post(self.url("/api/orders")).json(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await.unwrap()
    }

    pub(crate) async fn get_order(&self, id: &str) -> Value {
        let res = self
            .http
            .get(self.url(&format!("/api/orders/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    /// Waits (bounded) until order `id` has `status`.
    pub(crate) async fn wait_status(&self, id: &str, status: &str, within: Duration) -> Value {
        let last = std::cell::RefCell::new(Value::Null);
        let done = eventually(within, || async {
            let order = self.get_order(id).await;
            let ok = order["status"] == status;
            *last.borrow_mut() = order;
            ok
        })
        .await;
        let last = last.into_inner();
        assert!(done, "order {id} not {status} within {within:?}: {last}");
        last
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Polls `check` every 50 ms until it holds or `within` passes.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A shop: fake Inventory and Product with `products` (price 250, stock
/// as given), both serving.
pub(crate) struct Shop {
    pub(crate) inventory: FakeInventory,
    pub(crate) product: FakeProduct,
    pub(crate) inventory_server: Option<Running>,
    pub(crate) product_server: Running,
    pub(crate) products: Vec<Uuid>,
}

impl Shop {
    pub(crate) async fn new(stock: &[i64]) -> Self {
        let inventory = FakeInventory::default();
        let product = FakeProduct::default();
        let mut products = Vec::new();
        for &n in stock {
            let id = Uuid::new_v4();
            inventory.set_stock(id, n);
            product.add(id, 250);
            products.push(id);
        }
        let inventory_server = inventory.serve().await;
        let product_server = product.serve().await;
        Self {
            inventory,
            product,
            inventory_server: Some(inventory_server),
            product_server,
            products,
        }
    }

    pub(crate) fn settings(&self, db_url: &str) -> OrderSettings {
        test_settings(
            db_url,
            &self.inventory_server.as_ref().unwrap().url(),
            &self.product_server.url(),
        )
    }
}

/// An order body for `lines` of (product, quantity).
pub(crate) fn order_body(customer: &str, lines: &[(Uuid, i64)]) -> Value {
    json!({
        "customer_id": customer,
        "items": lines.iter().map(|(p, q)| json!({"product_id": p, "quantity": q})).collect::<Vec<_>>(),
    })
}
