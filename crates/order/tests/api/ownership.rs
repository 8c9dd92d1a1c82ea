//! Issue 15 over the real router: every `/api/orders*` route acts for the
//! bearer token's `sub` — nobody else's orders can be seen, listed,
//! cancelled, replayed or blocked — and one customer cannot have more than
//! `orders.max_open_per_customer` pending orders.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use shopeasy_identity::{DemoIssuerConfig, DemoKey, demo::DemoClaims};
use shopeasy_testkit::all_backends;

use crate::{
    fakes::Mode,
    helpers::{Shop, TestApp, order_body, orders_of, test_key},
};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims the service accepts, for `sub`; tests spoil one field each.
fn good_claims(sub: &str) -> DemoClaims {
    let config = DemoIssuerConfig::default();
    let now = now();
    DemoClaims {
        iss: config.issuer,
        sub: sub.to_owned(),
        aud: config.audience,
        exp: now + 600,
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        client_id: "shopeasy-demo".into(),
        scope: "orders:read orders:write".into(),
    }
}

fn signed(key: &DemoKey, claims: &DemoClaims) -> String {
    format!("Bearer {}", key.sign(claims).unwrap())
}

/// Asserts a 401 problem with an RFC 6750 challenge; returns the challenge.
async fn unauthorized(res: reqwest::Response) -> String {
    let what = format!("{} {}", res.status(), res.url().path());
    assert_eq!(res.status(), 401, "{what}");
    let challenge = res.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "{what}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], 401, "{body}");
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    challenge
}

#[tokio::test]
async fn without_a_token_every_order_route_is_401_and_touches_nothing() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    let placed: Value = app
        .post_order(None, &order_body("alice", &[(a, 1)]))
        .await
        .json()
        .await
        .unwrap();
    let id = placed["id"].as_str().unwrap();
    let url = app.url("/api/orders");
    let one = app.url(&format!("/api/orders/{id}"));
    let cancel = app.url(&format!("/api/orders/{id}/cancel"));
    let http = &app.http;
    for res in [
        http.post(&url)
            .json(&order_body("alice", &[(a, 1)]))
            .send()
            .await
            .unwrap(),
        // The token is checked before the body is read.
        http.post(&url)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
        http.get(&url).send().await.unwrap(),
        http.get(format!("{url}?customer_id=alice"))
            .send()
            .await
            .unwrap(),
        http.get(&one).send().await.unwrap(),
        http.post(&cancel).send().await.unwrap(),
        // Another scheme is no bearer token.
        http.get(&one)
            .header("authorization", "Basic YWxpY2U6c2VjcmV0")
            .send()
            .await
            .unwrap(),
    ] {
        let challenge = unauthorized(res).await;
        assert!(
            !challenge.contains("error="),
            "no token, no error code: {challenge}"
        );
    }
    assert_eq!(orders_of(&app, "alice").await.len(), 1, "nothing placed");
    assert_eq!(
        app.get_order(id).await["status"],
        "confirmed",
        "nothing cancelled"
    );
    assert_eq!(shop.inventory.stock(a), 9);
    app.stop().await;
}

#[tokio::test]
async fn expired_foreign_wrong_issuer_or_audience_tokens_are_401() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let key = test_key();
    let stranger = DemoKey::from_seed([7; 32]).unwrap();
    let past = now() - 3600;
    let cases = [
        (
            "expired",
            signed(
                &key,
                &DemoClaims {
                    exp: past,
                    iat: past - 600,
                    nbf: past - 600,
                    ..good_claims("alice")
                },
            ),
        ),
        ("wrongly signed", signed(&stranger, &good_claims("alice"))),
        (
            "wrong issuer",
            signed(
                &key,
                &DemoClaims {
                    iss: "https://evil.example".into(),
                    ..good_claims("alice")
                },
            ),
        ),
        (
            "wrong audience",
            signed(
                &key,
                &DemoClaims {
                    aud: "another-api".into(),
                    ..good_claims("alice")
                },
            ),
        ),
        ("unusable sub", signed(&key, &good_claims(&"a".repeat(129)))),
        ("padded sub", signed(&key, &good_claims(" alice"))),
        ("not a jwt", "Bearer abc.def".to_owned()),
    ];
    let body = order_body("alice", &[(shop.products[0], 1)]);
    for (what, token) in &cases {
        let res = app
            .http
            .post(app.url("/api/orders"))
            .header("authorization", token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let challenge = unauthorized(res).await;
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        let res = app
            .http
            .get(app.url("/api/orders"))
            .header("authorization", token)
            .send()
            .await
            .unwrap();
        unauthorized(res).await;
    }
    // The same claims, signed right, pass: each case spoilt one thing.
    let res = app
        .http
        .post(app.url("/api/orders"))
        .header("authorization", signed(&key, &good_claims("alice")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(
        shop.inventory.reserve_calls(),
        1,
        "only the good token reserved"
    );
    app.stop().await;
}

#[tokio::test]
async fn alice_cannot_see_list_or_cancel_bobs_order() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        let res = app
            .post_order_as(
                "bob",
                None,
                &json!({"items": [{"product_id": a, "quantity": 3}]}),
            )
            .await;
        assert_eq!(res.status(), 201, "{}", db.name());
        let bobs: Value = res.json().await.unwrap();
        let id = bobs["id"].as_str().unwrap();
        assert_eq!(
            bobs["customer_id"], "bob",
            "the customer is the token's sub"
        );

        // Exactly the answer of an id that does not exist.
        let unknown = uuid::Uuid::new_v4().to_string();
        let not_found: Value = app.show_as("alice", &unknown).await.json().await.unwrap();
        for res in [
            app.show_as("alice", id).await,
            app.cancel_as("alice", id).await,
        ] {
            assert_eq!(res.status(), 404, "{}", db.name());
            let body: Value = res.json().await.unwrap();
            assert_eq!(body, not_found);
        }
        assert!(orders_of(&app, "alice").await.is_empty());
        let res = app
            .client_for("alice")
            .get(app.url("/api/orders?customer_id=bob"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 422);
        let problem: Value = res.json().await.unwrap();
        assert_eq!(problem["errors"][0]["field"], "customer_id", "{problem}");

        // Bob's order is untouched, nothing was released, and bob still
        // sees and lists it.
        assert_eq!(shop.inventory.stock(a), 7);
        let shown: Value = app.show_as("bob", id).await.json().await.unwrap();
        assert_eq!(shown["status"], "confirmed");
        let listed = orders_of(&app, "bob").await;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["id"], id);
        // And bob can cancel it.
        assert_eq!(app.cancel_as("bob", id).await.status(), 200);
        assert_eq!(shop.inventory.stock(a), 10);
        app.stop().await;
    }
}

#[tokio::test]
async fn the_body_may_name_only_the_signed_in_customer() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    let res = app
        .post_order_as("alice", Some("k-bob"), &order_body("bob", &[(a, 1)]))
        .await;
    assert_eq!(res.status(), 422);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(problem["errors"][0]["field"], "customer_id", "{problem}");
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("signed-in customer"),
        "{problem}"
    );
    assert_eq!(shop.inventory.reserve_calls(), 0);
    let res = app
        .post_order_as("alice", None, &order_body("alice", &[(a, 1)]))
        .await;
    assert_eq!(res.status(), 201);
    let res = app
        .post_order_as(
            "alice",
            None,
            &json!({"items": [{"product_id": a, "quantity": 1}]}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let order: Value = res.json().await.unwrap();
    assert_eq!(order["customer_id"], "alice");
    assert!(orders_of(&app, "bob").await.is_empty());
    assert_eq!(orders_of(&app, "alice").await.len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn alice_can_neither_replay_nor_block_bobs_key() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let body = json!({"items": [{"product_id": shop.products[0], "quantity": 1}]});
        // Alice uses the key first (seen or guessed): bob's is still his.
        let alice = app.post_order_as("alice", Some("shared-key"), &body).await;
        assert_eq!(alice.status(), 201, "{}", db.name());
        assert!(!alice.headers().contains_key("idempotent-replayed"));
        let alice: Value = alice.json().await.unwrap();
        let bob = app.post_order_as("bob", Some("shared-key"), &body).await;
        assert_eq!(bob.status(), 201, "{}", db.name());
        assert!(
            !bob.headers().contains_key("idempotent-replayed"),
            "not alice's replay"
        );
        let bob: Value = bob.json().await.unwrap();
        assert_ne!(alice["id"], bob["id"]);
        assert_eq!(bob["customer_id"], "bob");
        // A different request under the same key is 422 only for its owner.
        let other = json!({"items": [{"product_id": shop.products[0], "quantity": 2}]});
        assert_eq!(
            app.post_order_as("bob", Some("shared-key"), &other)
                .await
                .status(),
            422
        );
        // Each replays their own.
        let again = app.post_order_as("bob", Some("shared-key"), &body).await;
        assert_eq!(again.status(), 201);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["id"], bob["id"]);
        assert_eq!(orders_of(&app, "alice").await.len(), 1);
        assert_eq!(orders_of(&app, "bob").await.len(), 1);
        assert_eq!(shop.inventory.stock(shop.products[0]), 8);
        app.stop().await;
    }
}

#[tokio::test]
async fn ten_concurrent_requests_with_one_key_make_one_order_per_customer() {
    for db in all_backends().await {
        let shop = Shop::new(&[100]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let body = json!({"items": [{"product_id": shop.products[0], "quantity": 1}]});
        let responses = futures::future::join_all(
            ["carol", "dave"]
                .iter()
                .flat_map(|c| std::iter::repeat_n(*c, 10))
                .map(|customer| {
                    let app = &app;
                    let body = &body;
                    async move {
                        let res = app.post_order_as(customer, Some("one-key"), body).await;
                        (customer, res.status().as_u16(), res.text().await.unwrap())
                    }
                }),
        )
        .await;
        for (customer, status, text) in &responses {
            assert!(
                *status == 201 || (*status == 409 && text.contains("request-in-progress")),
                "{}: {customer} {status} {text}",
                db.name()
            );
        }
        assert_eq!(orders_of(&app, "carol").await.len(), 1, "{}", db.name());
        assert_eq!(orders_of(&app, "dave").await.len(), 1, "{}", db.name());
        assert_eq!(shop.inventory.stock(shop.products[0]), 98);
        app.stop().await;
    }
}

#[tokio::test]
async fn beyond_the_open_order_limit_a_new_placement_is_429() {
    for db in all_backends().await {
        let shop = Shop::new(&[100]).await;
        let mut settings = shop.settings(db.url());
        settings.orders.max_open_per_customer = 2;
        let app = TestApp::spawn(settings).await;
        let a = shop.products[0];
        let body = order_body("erin", &[(a, 1)]);
        // Warm the stock cache, then take Inventory away: orders stay
        // `pending` (202), answered from the stale stock.
        assert_eq!(app.post_order(None, &body).await.status(), 201);
        shop.inventory.set_mode(Mode::Unavailable);
        let first = app.post_order(Some("open-1"), &body).await;
        assert_eq!(first.status(), 202, "{}", db.name());
        let first: Value = first.json().await.unwrap();
        assert_eq!(app.post_order(Some("open-2"), &body).await.status(), 202);

        let refused = app.post_order(Some("open-3"), &body).await;
        assert_eq!(refused.status(), 429, "{}", db.name());
        let retry_after: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=3600).contains(&retry_after), "{retry_after}");
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(
            problem["type"], "urn:shopeasy:problem:too-many-open-orders",
            "{problem}"
        );
        assert!(
            problem["detail"].as_str().unwrap().contains('2'),
            "{problem}"
        );
        assert_eq!(orders_of(&app, "erin").await.len(), 3, "nothing created");
        // A replay of an earlier key is not a new placement.
        let replay = app.post_order(Some("open-1"), &body).await;
        assert_eq!(replay.status(), 202);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        // The limit is per customer.
        assert_eq!(
            app.post_order(None, &order_body("frank", &[(a, 1)]))
                .await
                .status(),
            202
        );
        // One fewer open order: room for one more.
        assert_eq!(
            app.cancel(first["id"].as_str().unwrap()).await.status(),
            200
        );
        assert_eq!(app.post_order(Some("open-3"), &body).await.status(), 202);
        assert_eq!(app.post_order(Some("open-4"), &body).await.status(), 429);
        app.stop().await;
    }
}

#[tokio::test]
async fn without_a_usable_key_source_the_service_does_not_start() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[1]).await;
    for auth in [
        shopeasy_identity::AuthSettings::default(),
        shopeasy_identity::AuthSettings {
            public_key_pem: "not a key".into(),
            ..Default::default()
        },
    ] {
        let settings = shopeasy_order::settings::OrderSettings {
            auth,
            ..shop.settings(db.url())
        };
        let err = shopeasy_order::App::build_with(settings, Default::default())
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("auth"), "{err:#}");
    }
}

#[tokio::test]
async fn tokens_from_an_issuers_jwks_verify_as_in_the_one_command_system() {
    // The demo issuer as the launcher serves it; order reads its JWKS.
    let issuer = shopeasy_identity::DemoIssuer::new(
        DemoKey::from_seed([9; 32]).unwrap(),
        DemoIssuerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer_addr = listener.local_addr().unwrap();
    let served = tokio::spawn(axum::serve(listener, issuer.router()).into_future());
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let settings = shopeasy_order::settings::OrderSettings {
        auth: shopeasy_identity::AuthSettings::for_jwks(format!(
            "http://{issuer_addr}/.well-known/jwks.json"
        )),
        ..shop.settings(db.url())
    };
    let app = TestApp::spawn(settings).await;
    // Sign in as a browser would, then order with the token.
    let session: Value = app
        .http
        .post(format!("http://{issuer_addr}/api/session"))
        .json(&json!({"customer": "grace"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = format!("Bearer {}", session["access_token"].as_str().unwrap());
    let res = app
        .http
        .post(app.url("/api/orders"))
        .header("authorization", &token)
        .json(&json!({"items": [{"product_id": shop.products[0], "quantity": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let order: Value = res.json().await.unwrap();
    assert_eq!(order["customer_id"], "grace");
    // The tests' own key is not this issuer's: refused.
    let res = app
        .post_order_as(
            "grace",
            None,
            &order_body("grace", &[(shop.products[0], 1)]),
        )
        .await;
    assert_eq!(res.status(), 401);
    app.stop().await;
    served.abort();
}
