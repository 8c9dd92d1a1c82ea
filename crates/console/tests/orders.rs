//! The orders bought from the page are still followed after their
//! customer's first token expired: against a stub gateway whose tokens live
//! one second and whose order is confirmed only after 1.5 s.

#![allow(clippy::unwrap_used)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};
use shopeasy_console::{Console, ConsoleSettings, ServiceTarget};
use shopeasy_runtime::settings::Secret;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "orders-test-token";
/// How long the stub gateway accepts a token.
const LIFE: Duration = Duration::from_secs(1);
/// How long after it was placed the order reads `confirmed`: after its
/// first token expired.
const CONFIRMED_AFTER: Duration = Duration::from_millis(1_500);

/// A gateway that signs demo customers in, sells one product and answers
/// an order's customer with `pending`, then `confirmed`, as long as the
/// token is at most [`LIFE`] old (else 401). Its sign-in says the token
/// lives `expires_in` seconds.
#[derive(Clone)]
struct Gateway {
    expires_in: u64,
    /// Token → (customer, issued).
    tokens: Arc<Mutex<HashMap<String, (String, Instant)>>>,
    /// Order id → (customer, placed).
    orders: Arc<Mutex<HashMap<String, (String, Instant)>>>,
    sign_ins: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gateway {
    async fn serve(expires_in: u64) -> (Self, String) {
        let gateway = Self {
            expires_in,
            tokens: Arc::default(),
            orders: Arc::default(),
            sign_ins: Arc::default(),
            refused: Arc::default(),
        };
        let app = Router::new()
            .route("/api/session", post(session))
            .route(
                "/api/products",
                get(|| async { Json(json!({"items": [{"id": "p1"}]})) }),
            )
            .route("/api/orders", post(place))
            .route("/api/orders/{id}", get(read))
            .with_state(gateway.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (gateway, url)
    }

    /// The customer of the bearer token in `headers`, if it is still valid.
    fn customer(&self, headers: &HeaderMap) -> Option<String> {
        let token = headers
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?;
        let (customer, issued) = lock(&self.tokens).get(token).cloned()?;
        (issued.elapsed() <= LIFE).then_some(customer)
    }

    fn refuse(&self) -> Response {
        self.refused.fetch_add(1, Ordering::SeqCst);
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"status": 401, "detail": "expired"})),
        )
            .into_response()
    }
}

async fn session(State(gateway): State<Gateway>, Json(body): Json<Value>) -> Json<Value> {
    let customer = body["customer"].as_str().unwrap().to_owned();
    let n = gateway.sign_ins.fetch_add(1, Ordering::SeqCst);
    let token = format!("{customer}.{n}");
    lock(&gateway.tokens).insert(token.clone(), (customer.clone(), Instant::now()));
    Json(json!({"access_token": token, "token_type": "Bearer",
                "expires_in": gateway.expires_in, "customer": customer}))
}

async fn place(State(gateway): State<Gateway>, headers: HeaderMap) -> Response {
    let Some(customer) = gateway.customer(&headers) else {
        return gateway.refuse();
    };
    let mut orders = lock(&gateway.orders);
    let id = format!("order-{}", orders.len());
    orders.insert(id.clone(), (customer, Instant::now()));
    (
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "status": "pending"})),
    )
        .into_response()
}

async fn read(
    State(gateway): State<Gateway>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (owner, placed) = lock(&gateway.orders).get(&id).cloned().unwrap();
    if gateway.customer(&headers).as_ref() != Some(&owner) {
        return gateway.refuse();
    }
    let status = if placed.elapsed() >= CONFIRMED_AFTER {
        "confirmed"
    } else {
        "pending"
    };
    Json(json!({"id": id, "status": status})).into_response()
}

/// A console following orders at the stub gateway; buys one and returns
/// the status the page shows once it is `confirmed` (or after 8 s).
async fn buy_and_follow(gateway: &str) -> String {
    let mut settings = ConsoleSettings::new(
        vec![ServiceTarget::new("order", "http://127.0.0.1:9")],
        "http://127.0.0.1:9",
        Secret::new(TOKEN),
    );
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.gateway_url = Some(gateway.to_owned());
    let console = Console::bind(settings, None).await.unwrap();
    let url = format!("http://{}", console.local_addr().unwrap());
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    console.spawn(stop);
    let http = reqwest::Client::new();
    let res = http
        .post(format!("{url}/api/orders/buy"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let res = http
            .get(format!("{url}/api/snapshot"))
            .send()
            .await
            .unwrap();
        if res.status() == 200 {
            let snapshot: Value = res.json().await.unwrap();
            // A snapshot from before the purchase lists no order yet.
            let status = snapshot["orders"][0]["status"].as_str().unwrap_or("none");
            if status == "confirmed" || Instant::now() >= deadline {
                return status.to_owned();
            }
        }
        assert!(Instant::now() < deadline, "a snapshot within 8 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sign-in says the token lives a second: the console signs the
/// customer in again half way (a short token's renewal point), so no read
/// is ever refused and the order confirmed after the first token expired
/// is seen. Read with the first token for ever, it stayed `pending`.
#[tokio::test]
async fn a_token_is_renewed_before_it_expires() {
    let (gateway, url) = Gateway::serve(1).await;
    assert_eq!(buy_and_follow(&url).await, "confirmed");
    assert_eq!(
        gateway.refused.load(Ordering::SeqCst),
        0,
        "no read with an expired token"
    );
    assert!(gateway.sign_ins.load(Ordering::SeqCst) >= 2);
}

/// The sign-in says an hour, but the gateway stops accepting the token
/// after a second (as when the issuer restarts with a new key): the
/// console signs in again on the 401 and reads on.
#[tokio::test]
async fn a_refused_token_is_renewed_and_the_read_retried() {
    let (gateway, url) = Gateway::serve(3_600).await;
    assert_eq!(buy_and_follow(&url).await, "confirmed");
    assert!(
        gateway.refused.load(Ordering::SeqCst) >= 1,
        "a read was refused"
    );
    assert!(gateway.sign_ins.load(Ordering::SeqCst) >= 2);
}
