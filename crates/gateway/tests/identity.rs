//! Identity at the edge (issue 15, SPEC §11): the gateway verifies the
//! bearer token of `/api/orders*` before contacting order, leaves
//! `/api/products*` anonymous, forwards `Authorization` unchanged, routes
//! sign-in to the issuer, keys the rate limit of signed-in requests by
//! customer with a placement budget of its own, and keeps verifying with
//! cached keys while the JWKS provider is down. Real gateway, real stub
//! services and a real demo issuer, all on 127.0.0.1:0; tokens are signed
//! locally.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used)]

mod support;

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{Router, extract::Request, middleware::Next, response::IntoResponse};
use shopeasy_faults::FaultProxy;
use shopeasy_gateway::GatewaySettings;
use shopeasy_identity::{AuthSettings, DemoKey, demo::DemoClaims};
use shopeasy_runtime::settings::Seconds;
use support::{Gateway, gateway, http};

// ---------------------------------------------------------------- servers

/// Serves `router` on a free port of 127.0.0.1.
async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// One request as a stub service saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
}

/// A stub service answering 200 `{"ok":true}` to everything, recording
/// what it was sent.
#[derive(Clone, Default)]
struct Stub {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Stub {
    async fn start() -> (Self, SocketAddr) {
        let stub = Self::default();
        let seen = stub.seen.clone();
        let router = Router::new().fallback(move |request: Request| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(Seen {
                    method: request.method().to_string(),
                    path: request.uri().path().to_owned(),
                    authorization: request
                        .headers()
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_owned()),
                });
                axum::Json(serde_json::json!({ "ok": true })).into_response()
            }
        });
        let addr = serve(router).await;
        (stub, addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// The demo issuer's router (with the test key) on 127.0.0.1:0, counting
/// the requests it serves.
async fn issuer() -> (SocketAddr, Arc<AtomicUsize>) {
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let router = support::issuer().router().layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let count = count.clone();
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                next.run(request).await
            }
        },
    ));
    (serve(router).await, served)
}

// ---------------------------------------------------------------- gateway

/// Product and order on their stubs, `auth` trusting the test key.
fn settings(product: SocketAddr, order: SocketAddr) -> GatewaySettings {
    support::settings(product, order, Seconds::new(2.0), Seconds::new(1.0))
}

/// Two stubs and a gateway in front of them.
async fn system() -> (Gateway, Stub, Stub) {
    system_with(|_| {}).await
}

/// Two stubs and a gateway in front of them, its settings changed by
/// `tune` first.
async fn system_with(tune: impl FnOnce(&mut GatewaySettings)) -> (Gateway, Stub, Stub) {
    let (product, p) = Stub::start().await;
    let (order, o) = Stub::start().await;
    let mut s = settings(p, o);
    tune(&mut s);
    (gateway(s).await, product, order)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims the default `auth` settings accept, for a test to spoil.
fn claims(customer: &str) -> DemoClaims {
    let now = now();
    DemoClaims {
        iss: "shopeasy-demo".into(),
        sub: customer.into(),
        aud: "shopeasy".into(),
        exp: now + 600,
        iat: now,
        nbf: now,
        jti: format!("test-{customer}-{now}"),
        client_id: "shopeasy-demo".into(),
        scope: "orders:read orders:write".into(),
    }
}

/// Asserts a gateway 401: problem+json with a `detail`, and an RFC 6750
/// challenge; returns the challenge.
async fn assert_401(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.starts_with("Bearer realm=\"shopeasy\""),
        "{challenge}"
    );
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{body}"
    );
    challenge
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn an_order_route_without_a_token_is_401_and_order_never_hears_of_it() {
    let (gw, _product, order) = system().await;
    let http = http();
    for request in [
        http.get(gw.url("/api/orders")),
        http.get(gw.url("/api/orders/1")),
        http.post(gw.url("/api/orders"))
            .header("content-type", "application/json")
            .body(r#"{"items":[]}"#),
        http.post(gw.url("/api/orders/1/cancel")),
        // Another scheme is no bearer token at all.
        http.get(gw.url("/api/orders"))
            .basic_auth("alice", Some("pw")),
    ] {
        let challenge = assert_401(request.send().await.unwrap()).await;
        assert_eq!(challenge, "Bearer realm=\"shopeasy\"", "no error code");
    }
    assert_eq!(order.count(), 0, "no request reached order");
    // The recorder is shared by the tests of this binary: at least these 5.
    let m = gw.metrics().await;
    assert!(
        m.sum(
            "shopeasy_gateway_requests_total",
            &[
                ("route", "order"),
                ("status", "401"),
                ("outcome", "unauthenticated")
            ]
        ) >= 5.0,
        "401s count under the route's request metrics"
    );
}

#[tokio::test]
async fn a_forged_expired_or_misaddressed_token_is_401() {
    let (gw, _product, order) = system().await;
    let key = support::key();
    let stranger = DemoKey::from_seed([7; 32]).unwrap();
    let mut expired = claims("alice");
    (expired.iat, expired.nbf, expired.exp) = (now() - 7200, now() - 7200, now() - 3600);
    let wrong_issuer = DemoClaims {
        iss: "https://evil.example".into(),
        ..claims("alice")
    };
    let wrong_audience = DemoClaims {
        aud: "someone-else".into(),
        ..claims("alice")
    };
    let valid = key.sign(&claims("alice")).unwrap();
    // One character in the middle of the signature changed: still valid
    // base64url (the last character carries padding bits, so changing it
    // may make the token malformed instead of wrongly signed).
    let mut tampered = valid.clone().into_bytes();
    let i = tampered.len() - 20;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (what, token, description) in [
        (
            "signed by another key",
            stranger.sign(&claims("alice")).unwrap(),
            "signature",
        ),
        ("signature altered", tampered, "signature"),
        ("expired", key.sign(&expired).unwrap(), "expired"),
        (
            "wrong issuer",
            key.sign(&wrong_issuer).unwrap(),
            "another issuer",
        ),
        (
            "wrong audience",
            key.sign(&wrong_audience).unwrap(),
            "another audience",
        ),
        ("not a JWT", "not-a-jwt".to_owned(), "malformed"),
    ] {
        let r = http()
            .get(gw.url("/api/orders"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let challenge = assert_401(r).await;
        assert!(
            challenge.contains("error=\"invalid_token\"") && challenge.contains(description),
            "{what}: {challenge}"
        );
    }
    assert_eq!(order.count(), 0, "no bad token reached order");
}

#[tokio::test]
async fn a_valid_token_is_forwarded_with_the_same_authorization_header() {
    let (gw, _product, order) = system().await;
    let bearer = support::bearer("alice");
    let http = http();
    let r = http
        .post(gw.url("/api/orders"))
        .header("authorization", &bearer)
        .header("content-type", "application/json")
        .body(r#"{"items":[{"product_id":1,"quantity":1}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .get(gw.url("/api/orders/1"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = order.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/api/orders")
    );
    for s in &seen {
        assert_eq!(s.authorization.as_deref(), Some(bearer.as_str()), "{s:?}");
    }
}

#[tokio::test]
async fn product_routes_stay_anonymous_and_pass_any_token_through() {
    let (gw, product, _order) = system().await;
    let r = http().get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // A token there is not checked: even a broken one is just forwarded.
    let r = http()
        .get(gw.url("/api/products/1"))
        .bearer_auth("not-a-jwt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = product.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[1].authorization.as_deref(), Some("Bearer not-a-jwt"));
}

#[tokio::test]
async fn stock_goes_to_order_for_anyone_and_only_to_read() {
    let (gw, product, order) = system().await;
    let id = "0b9f6a3e-0000-4000-8000-000000000000";
    let path = format!("/api/stock/{id}");
    // No token, or a broken one: not checked, forwarded as it came.
    let r = http().get(gw.url(&path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http()
        .get(gw.url(&path))
        .bearer_auth("not-a-jwt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http().head(gw.url(&path)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let seen = order.seen();
    assert_eq!(seen.len(), 3, "all three reached order");
    assert!(seen.iter().all(|s| s.path == path), "{seen:?}");
    assert_eq!(
        seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(),
        ["GET", "GET", "HEAD"]
    );
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[1].authorization.as_deref(), Some("Bearer not-a-jwt"));
    assert_eq!(product.count(), 0);

    // Read-only: any other method is the gateway's 405, with `Allow`.
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        let r = http()
            .request(method.parse().unwrap(), gw.url(&path))
            .bearer_auth(support::token("alice"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method}");
        assert_eq!(r.headers()["allow"], "GET, HEAD", "{method}");
    }
    assert_eq!(order.count(), 3, "refused at the gateway");
    let m = gw.metrics().await;
    assert!(
        m.sum(
            "shopeasy_gateway_requests_total",
            &[("route", "stock"), ("status", "200")]
        ) >= 3.0,
        "stock has its own route label"
    );
}

#[tokio::test]
async fn sign_in_through_the_gateway_returns_a_token_the_order_routes_accept() {
    let (issuer, served) = issuer().await;
    let (gw, _product, order) = system_with(|s| {
        s.routes.identity_url = format!("http://{issuer}");
    })
    .await;
    let http = http();
    let r = http
        .post(gw.url("/api/session"))
        .json(&serde_json::json!({ "customer": "alice" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["shopeasy-demo-issuer"], "true");
    let session: serde_json::Value = r.json().await.unwrap();
    assert_eq!(session["customer"], "alice", "{session}");
    assert_eq!(session["token_type"], "Bearer", "{session}");
    let token = session["access_token"].as_str().unwrap();
    let r = http
        .get(gw.url("/api/orders"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the issued token opens the order routes");
    assert_eq!(order.count(), 1);
    let before = served.load(Ordering::SeqCst);
    assert_eq!(before, 1, "one sign-in reached the issuer");

    // Only POST, and only that path: the issuer's other endpoints are not
    // public through the gateway.
    let r = http.get(gw.url("/api/session")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("POST"), "{body}");
    for path in ["/.well-known/jwks.json", "/api/session/x"] {
        let r = http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        before,
        "refused at the gateway"
    );
    let m = gw.metrics().await;
    assert!(
        m.sum(
            "shopeasy_gateway_requests_total",
            &[("route", "identity"), ("status", "200")]
        ) >= 1.0,
        "sign-in has its own route label"
    );
}

#[tokio::test]
async fn sign_in_is_not_routed_unless_configured() {
    let (gw, product, order) = system().await;
    let r = http()
        .post(gw.url("/api/session"))
        .json(&serde_json::json!({ "customer": "alice" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.headers()["proxy-status"],
        "shopeasy-gateway; error=destination_not_found"
    );
    assert_eq!(product.count() + order.count(), 0);
}

#[tokio::test]
async fn a_customer_out_of_placements_gets_429_while_another_on_the_same_address_places() {
    let (gw, _product, order) = system_with(|s| {
        s.limits.customer_orders_per_minute = 6;
        s.limits.customer_order_burst = 3;
    })
    .await;
    let http = http();
    let place = |who: &str| {
        http.post(gw.url("/api/orders"))
            .bearer_auth(support::token(who))
            .header("content-type", "application/json")
            .body(r#"{"items":[]}"#)
            .send()
    };
    for left in (0..3).rev() {
        let r = place("alice").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["ratelimit-policy"],
            "\"default\";q=2000;w=2, \"orders\";q=3;w=30"
        );
        let rate = r.headers()["ratelimit"].to_str().unwrap();
        assert!(rate.contains(&format!("\"orders\";r={left};t=")), "{rate}");
    }
    let r = place("alice").await.unwrap();
    assert_eq!(r.status(), 429);
    // 6 a minute: one placement back in 10 s.
    assert_eq!(r.headers()["retry-after"], "10");
    assert_eq!(r.headers()["ratelimit-policy"], "\"orders\";q=3;w=30");
    let rate = r.headers()["ratelimit"].to_str().unwrap();
    assert!(rate.starts_with("\"orders\";r=0;t="), "{rate}");
    assert_eq!(
        r.headers()["proxy-status"],
        "shopeasy-gateway; error=http_request_denied"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("retry after"),
        "{body}"
    );

    // Bob, from the same address, has his own placements; alice can still
    // read her orders (only placements have the extra budget).
    let r = place("bob").await.unwrap();
    assert_eq!(r.status(), 200);
    let r = gw.get_as(&http, "/api/orders", "alice").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=2000;w=2");
    assert_eq!(
        order.count(),
        5,
        "the refused placement was never forwarded"
    );
}

#[tokio::test]
async fn signed_in_requests_are_limited_per_customer_not_per_address() {
    let (gw, _product, order) = system_with(|s| {
        s.limits.client_requests_per_second = 1;
        s.limits.client_burst = 2;
    })
    .await;
    let http = http();
    for _ in 0..2 {
        assert_eq!(gw.get_as(&http, "/api/orders", "alice").await.status(), 200);
    }
    let r = gw.get_as(&http, "/api/orders", "alice").await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=2;w=2");
    // Same address, another customer, and anonymous traffic: untouched.
    assert_eq!(gw.get_as(&http, "/api/orders", "bob").await.status(), 200);
    let r = http.get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(order.count(), 3);
}

#[tokio::test]
async fn refused_tokens_count_against_the_address_so_guessing_is_rate_limited() {
    let (gw, _product, order) = system_with(|s| {
        s.limits.client_requests_per_second = 1;
        s.limits.client_burst = 2;
    })
    .await;
    let guess = || {
        http()
            .get(gw.url("/api/orders"))
            .bearer_auth("guessed.token.here")
            .send()
    };
    assert_eq!(guess().await.unwrap().status(), 401);
    assert_eq!(guess().await.unwrap().status(), 401);
    let r = guess().await.unwrap();
    assert_eq!(r.status(), 429, "the address's budget is spent");
    assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=2;w=2");
    // A signed-in customer from the same address has a budget of its own.
    let r = gw.get_as(&http(), "/api/orders", "alice").await;
    assert_eq!(r.status(), 200);
    assert_eq!(order.count(), 1);
}

#[tokio::test]
async fn with_the_jwks_provider_down_cached_keys_still_verify() {
    let (issuer, served) = issuer().await;
    let provider = FaultProxy::start("jwks", issuer.to_string()).await.unwrap();
    let (gw, _product, order) = system_with(|s| {
        s.auth = AuthSettings::for_jwks(format!(
            "http://{}/.well-known/jwks.json",
            provider.listen_addr()
        ));
    })
    .await;
    let http = http();
    let r = gw.get_as(&http, "/api/orders", "alice").await;
    assert_eq!(r.status(), 200, "verified with the fetched JWKS");
    let fetched = served.load(Ordering::SeqCst);
    assert!(fetched >= 1, "the keys came from the provider");

    provider.set_enabled(false).await;
    for who in ["alice", "bob", "carol"] {
        let r = gw.get_as(&http, "/api/orders", who).await;
        assert_eq!(r.status(), 200, "{who}: a cached key verifies while down");
    }
    // A forged token is still refused while the provider is down.
    let forged = DemoKey::from_seed([7; 32])
        .unwrap()
        .sign(&claims("alice"))
        .unwrap();
    let r = http
        .get(gw.url("/api/orders"))
        .bearer_auth(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(order.count(), 4);
    assert_eq!(
        served.load(Ordering::SeqCst),
        fetched,
        "nothing reached the provider while it was down"
    );
}

#[tokio::test]
async fn with_no_keys_ever_fetched_order_routes_answer_503_and_products_still_work() {
    // Nothing listens on the JWKS address: no key was ever had.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (gw, product, order) = system_with(|s| {
        s.auth = AuthSettings {
            fetch_retries: 0,
            fetch_timeout_seconds: Seconds::new(0.5),
            fetch_deadline_seconds: Seconds::new(1.0),
            min_refresh_interval_seconds: Seconds::new(1.0),
            ..AuthSettings::for_jwks(format!("http://{closed}/jwks.json"))
        };
    })
    .await;
    let r = gw.get_as(&http(), "/api/orders", "alice").await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert!(
        !r.headers().contains_key("www-authenticate"),
        "not the caller's fault"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .ends_with("identity-unavailable"),
        "{body}"
    );
    assert_eq!(order.count(), 0);
    let r = http().get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(product.count(), 1);
}
