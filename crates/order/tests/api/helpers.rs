//! Starting the order service for a test: real listeners on 127.0.0.1:0,
//! a real database, fake Inventory and Product servers.

use std::{net::SocketAddr, time::Duration};

use serde_json::{Value, json};
use shopeasy_identity::{AuthSettings, DemoIssuerConfig, DemoKey, demo::DemoClaims};
use shopeasy_order::{
    App,
    failpoints::Failpoints,
    saga::Orders,
    settings::{InventoryUpstreamSettings, OrderSettings, UpstreamSettings},
};
use shopeasy_runtime::{
    lifecycle::{self, Bound},
    settings::{Seconds, Secret, SecretUrl},
};
use shopeasy_testkit::get_json;
use uuid::Uuid;

use crate::fakes::{FakeInventory, FakeProduct, Running};

/// The service credential between the test order service and a real
/// Inventory (`real_inventory`).
pub(crate) const SERVICE_TOKEN: &str = "order-test-service-token-32-chars";

/// The key every test's tokens are signed with (the service under test
/// trusts its public half through `auth.public_key_pem`).
pub(crate) fn test_key() -> DemoKey {
    DemoKey::from_seed([42; 32]).unwrap()
}

/// `Bearer <token>` for `customer`, signed with [`test_key`] for the
/// issuer and audience the service expects by default (as the demo issuer
/// signs, but for any `sub`: the demo issuer signs only lowercase names,
/// and the tests' customers are not all such).
pub(crate) fn bearer(customer: &str) -> String {
    let config = DemoIssuerConfig::default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = DemoClaims {
        iss: config.issuer,
        sub: customer.to_owned(),
        aud: config.audience,
        exp: now + 3600,
        iat: now,
        nbf: now,
        jti: Uuid::new_v4().to_string(),
        client_id: "shopeasy-tests".into(),
        scope: config.scope,
    };
    format!("Bearer {}", test_key().sign(&claims).unwrap())
}

/// The customer tests act as when a request names nobody.
pub(crate) const SOMEONE: &str = "c-someone";

/// Settings for tests: ephemeral ports, short breaks, leases and backoffs;
/// attempt timeouts generous enough for a loaded machine (tests about
/// timeouts set their own).
pub(crate) fn test_settings(db_url: &str, inventory_url: &str, product_url: &str) -> OrderSettings {
    let mut s = OrderSettings {
        inventory: InventoryUpstreamSettings {
            url: inventory_url.to_owned(),
            service_token: Secret::new(SERVICE_TOKEN),
        },
        product: UpstreamSettings {
            url: product_url.to_owned(),
        },
        auth: AuthSettings {
            public_key_pem: test_key().public_key_pem(),
            ..AuthSettings::default()
        },
        ..OrderSettings::default()
    };
    s.process.ephemeral();
    s.storage.database_url = SecretUrl::new(db_url);
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

/// The real Inventory service on 127.0.0.1:0 over `db_url`, and its store
/// (to set stock directly).
pub(crate) async fn real_inventory(
    db_url: &str,
) -> (lifecycle::Running, shopeasy_inventory::Store) {
    let mut settings = shopeasy_inventory::InventorySettings {
        service_token: Secret::new(SERVICE_TOKEN),
        ..Default::default()
    };
    settings.process.ephemeral();
    settings.storage.database_url = SecretUrl::new(db_url);
    let bound = Bound::<shopeasy_inventory::App>::build(settings)
        .await
        .unwrap();
    let store = bound.service().store().clone();
    (bound.start(), store)
}

/// A running order service.
#[derive(Debug)]
pub(crate) struct TestApp {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) http: reqwest::Client,
    pub(crate) orders: Orders,
    pub(crate) failpoints: Failpoints,
    server: lifecycle::Running,
}

impl TestApp {
    pub(crate) async fn spawn(settings: OrderSettings) -> Self {
        Self::spawn_with(settings, Failpoints::default()).await
    }

    pub(crate) async fn spawn_with(settings: OrderSettings, failpoints: Failpoints) -> Self {
        let bound = App::build_with(settings, failpoints.clone()).await.unwrap();
        let orders = bound.service().orders().clone();
        let server = bound.start();
        Self {
            addr: server.local_addr(),
            admin: server.admin_addr(),
            http: reqwest::Client::new(),
            orders,
            failpoints,
            server,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops serving and the workers (as a process stop would).
    pub(crate) async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(15), self.server.stop()).await;
    }

    /// A client that sends `customer`'s bearer token with every request.
    pub(crate) fn client_for(&self, customer: &str) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            bearer(customer).parse().unwrap(),
        );
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap()
    }

    /// Who owns order `id` ([`SOMEONE`] for an unknown one): the tests that
    /// are not about ownership act as the owner.
    async fn owner_of(&self, id: &str) -> String {
        let Ok(id) = Uuid::try_parse(id) else {
            return SOMEONE.to_owned();
        };
        match self.orders.store().order(id).await.unwrap() {
            Some(order) => order.customer_id,
            None => SOMEONE.to_owned(),
        }
    }

    /// `POST /api/orders` as the customer the body names (or [`SOMEONE`]
    /// when it names nobody).
    pub(crate) async fn post_order(&self, key: Option<&str>, body: &Value) -> reqwest::Response {
        let customer = body["customer_id"]
            .as_str()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or(SOMEONE);
        self.post_order_as(customer, key, body).await
    }

    /// `POST /api/orders` with `customer`'s token.
    pub(crate) async fn post_order_as(
        &self,
        customer: &str,
        key: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(self.url("/api/orders"))
            .header(reqwest::header::AUTHORIZATION, bearer(customer))
            .json(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await.unwrap()
    }

    /// `POST /api/orders` with a raw `body` of `content_type`: the bodies
    /// `post_order` cannot send (malformed, mislabelled, oversized).
    pub(crate) async fn post_raw(
        &self,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.http
            .post(self.url("/api/orders"))
            .header(reqwest::header::AUTHORIZATION, bearer(SOMEONE))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /api/orders/{id}/cancel` as the order's owner, the answer as
    /// it came.
    pub(crate) async fn cancel(&self, id: &str) -> reqwest::Response {
        let owner = self.owner_of(id).await;
        self.cancel_as(&owner, id).await
    }

    /// `POST /api/orders/{id}/cancel` as `customer`.
    pub(crate) async fn cancel_as(&self, customer: &str, id: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/api/orders/{id}/cancel")))
            .header(reqwest::header::AUTHORIZATION, bearer(customer))
            .send()
            .await
            .unwrap()
    }

    /// `GET /api/orders/{id}` as `customer`, the answer as it came.
    pub(crate) async fn show_as(&self, customer: &str, id: &str) -> reqwest::Response {
        self.http
            .get(self.url(&format!("/api/orders/{id}")))
            .header(reqwest::header::AUTHORIZATION, bearer(customer))
            .send()
            .await
            .unwrap()
    }

    /// `GET path` on the admin listener, decoded as JSON.
    pub(crate) async fn admin_json(&self, path: &str) -> Value {
        get_json(&self.http, format!("http://{}{path}", self.admin)).await
    }

    /// `GET /api/orders/{id}` as the order's owner, which must answer 200.
    pub(crate) async fn get_order(&self, id: &str) -> Value {
        let owner = self.owner_of(id).await;
        let res = self.show_as(&owner, id).await;
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

/// The testkit's bounded poll, as every crate's tests wait.
pub(crate) use shopeasy_testkit::eventually;

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

/// The orders of `customer`, as `GET /api/orders` lists them for their
/// token.
pub(crate) async fn orders_of(app: &TestApp, customer: &str) -> Vec<Value> {
    let list = get_json(&app.client_for(customer), app.url("/api/orders")).await;
    list["items"].as_array().unwrap().clone()
}
