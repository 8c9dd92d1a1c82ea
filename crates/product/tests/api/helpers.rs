//! Starting the service for a test, and talking to it.

use std::{net::SocketAddr, time::Duration};

use serde_json::{Value, json};
use shopeasy_product::{App, ProductSettings, catalogue::Catalogue};
use shopeasy_runtime::{
    lifecycle::{Bound, Running},
    settings::{Seconds, Secret, SecretUrl},
};
use shopeasy_testkit::TestDatabase;

pub(crate) const TOKEN: &str = "test-admin-token";

/// A running service; stopped when dropped.
pub(crate) struct TestApp {
    pub(crate) addr: SocketAddr,
    pub(crate) admin_addr: SocketAddr,
    pub(crate) client: reqwest::Client,
    pub(crate) redis_timeout: Duration,
    pub(crate) catalogue: Catalogue,
    // Stops the service when the test app is dropped.
    _server: Running,
    _db: TestDatabase,
}

/// Settings for a test: both listeners on port 0, a short Redis timeout.
pub(crate) fn settings(db: &TestDatabase, redis_url: Option<String>) -> ProductSettings {
    let mut s = ProductSettings {
        admin_token: Secret::new(TOKEN),
        ..ProductSettings::default()
    };
    s.process.ephemeral();
    s.storage.database_url = SecretUrl::new(db.url());
    s.redis.redis_url = SecretUrl::new(redis_url.unwrap_or_default());
    s.cache.key_prefix = shopeasy_testkit::key_prefix();
    s.cache.redis.timeout_seconds = Seconds::new(0.05);
    s.cache.redis.rest_seconds = Seconds::new(0.2);
    s.storage.database.startup_timeout_seconds = Seconds::new(10.0);
    s
}

/// Starts the service with `settings` on `db`.
pub(crate) async fn spawn_with(db: TestDatabase, settings: ProductSettings) -> TestApp {
    let redis_timeout = settings.cache.redis.timeout_seconds.get();
    let bound = Bound::<App>::build(settings)
        .await
        .expect("the service starts");
    let catalogue = bound.service().catalogue().clone();
    let server = bound.start();
    TestApp {
        addr: server.local_addr(),
        admin_addr: server.admin_addr(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        redis_timeout,
        catalogue,
        _server: server,
        _db: db,
    }
}

/// Starts the service on `db` with the shared Redis (when configured).
pub(crate) async fn spawn(db: TestDatabase) -> TestApp {
    let redis = shopeasy_testkit::redis_url();
    let s = settings(&db, redis);
    spawn_with(db, s).await
}

/// A valid product body with SKU `sku`.
pub(crate) fn body(sku: &str) -> Value {
    json!({
        "sku": sku,
        "name": format!("Product {sku}"),
        "description": "A fine thing",
        "price_cents": 1250,
        "currency": "EUR",
    })
}

impl TestApp {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    /// `POST /api/products` as admin; returns the created product.
    pub(crate) async fn create(&self, sku: &str) -> Value {
        let res = self
            .client
            .post(self.url("/api/products"))
            .bearer_auth(TOKEN)
            .json(&body(sku))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "create {sku}");
        res.json().await.unwrap()
    }

    /// `PUT /api/products/{id}` as admin.
    pub(crate) async fn put(&self, id: &str, body: &Value) -> reqwest::Response {
        self.client
            .put(self.url(&format!("/api/products/{id}")))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The admin listener's `/metrics` page.
    pub(crate) async fn metrics_text(&self) -> String {
        self.client
            .get(format!("http://{}/metrics", self.admin_addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `/admin/resilience`'s `product_cache` member.
    pub(crate) async fn cache_stats(&self) -> Value {
        let res = self
            .client
            .get(format!("http://{}/admin/resilience", self.admin_addr))
            .send()
            .await
            .unwrap();
        let body: Value = res.json().await.unwrap();
        body["product_cache"].clone()
    }

    pub(crate) async fn hits(&self) -> u64 {
        self.cache_stats().await["hit"].as_u64().unwrap()
    }

    /// Polls `GET path` until the cache counts a new hit, for at most
    /// `within`; true when it did.
    pub(crate) async fn becomes_cached(&self, path: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            let before = self.hits().await;
            let res = self.get(path).await;
            assert_eq!(res.status(), 200);
            if self.hits().await > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

/// Asserts a problem+json answer with `status`; returns its body.
pub(crate) async fn problem(res: reqwest::Response, status: u16) -> Value {
    assert_eq!(res.status(), status, "{:?}", res.url().path());
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "status {status}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:shopeasy:problem:")
    );
    // SPEC §3: every problem is complete, `detail` included.
    for member in ["title", "detail"] {
        assert!(
            body[member].as_str().is_some_and(|v| !v.trim().is_empty()),
            "{member} in {body}"
        );
    }
    body
}

/// The field names of a 422 problem.
pub(crate) fn fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect()
}
