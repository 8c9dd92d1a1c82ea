//! Customers own their orders (issue 15), proved through the cluster's
//! real gateway and order service, with tokens of the suite's key
//! ([`shopeasy_e2e::identity`]):
//!
//! - a bad or missing token is 401 with `WWW-Authenticate: Bearer` at the
//!   gateway (its own check: order is unreachable meanwhile) and at the
//!   order service (reached without the gateway), and creates nothing;
//!   product reads stay anonymous;
//! - alice's order is, to bob, an order that does not exist: 404 for show
//!   and cancel (byte-equal to an unknown id's 404), absent from his list,
//!   and untouched by his cancel (OWASP API1);
//! - an idempotency key is its customer's: the same key from alice and bob
//!   makes two orders, and neither can replay or block the other's;
//! - ten concurrent requests of one customer with one key make exactly one
//!   order (counted in the customer's list and in Inventory's stock).
//!
//! The JWKS-down cells (cached keys keep verifying, a new `kid` fetched
//! once) are the gateway's and the identity crate's: the cluster trusts one
//! fixed public key and fetches nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{collections::BTreeSet, time::Duration};

use serde_json::{Value, json};
use shopeasy_e2e::{Answer, Client, identity};
use shopeasy_identity::DemoKey;
use support::{Fixture, assert_problem, key, order_body, order_id};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A 401 problem with an RFC 6750 challenge (`WWW-Authenticate: Bearer …`).
fn assert_unauthenticated(answer: &Answer, what: &str) {
    assert_eq!(answer.status, Some(401), "{what}: {}", answer.describe());
    assert!(answer.is_problem(), "{what}: {}", answer.describe());
    let challenge = answer.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with("Bearer"),
        "{what}: WWW-Authenticate {challenge:?}"
    );
}

/// What a 404 says, without the fields that differ per request (trace ids,
/// the request's own path): the shape two 404s must share for an order of
/// someone else to be indistinguishable from an order that does not exist.
fn not_found_shape(answer: &Answer) -> Value {
    let json = answer.json();
    json!({
        "status": answer.status,
        "content-type": answer.header("content-type"),
        "type": json["type"],
        "title": json["title"],
        "detail": json["detail"],
    })
}

/// The ids of `client`'s orders (`GET /api/orders`, every page).
async fn listed(client: &Client) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut path = "/api/orders".to_owned();
    loop {
        let page = client.get(&path).await;
        assert_eq!(page.status, Some(200), "list: {}", page.describe());
        let json = page.json();
        for order in json["items"].as_array().unwrap() {
            ids.insert(order["id"].as_str().unwrap().to_owned());
        }
        match json["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/orders?cursor={cursor}"),
            None => return ids,
        }
    }
}

/// Units Inventory has available for `product`.
async fn available(f: &Fixture, product: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT available FROM stock WHERE product_id = $1")
        .bind(product)
        .fetch_one(f.cluster.inventory_db())
        .await
        .unwrap()
}

/// No token, a token of another key, an expired one, one of another issuer
/// or audience: 401 + `WWW-Authenticate: Bearer` on every order route, at
/// the gateway (with order unreachable, so the 401 is the gateway's) and at
/// the order service itself; none of them creates an order. Product reads
/// need no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_or_missing_tokens_are_401_at_the_gateway_and_at_order() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.seed("OWN-AUTH", 100).await;
    let mine = order_id(&f.placed(&product, 1).await);
    let orders_before = f.order_count().await;

    let other_key = DemoKey::from_seed([7; 32]).unwrap();
    let bad: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        (
            "another key",
            Some(other_key.sign(&identity::claims("alice")).unwrap()),
        ),
        (
            "expired",
            Some(identity::token_with("alice", |c| {
                c.iat -= 7200;
                c.nbf -= 7200;
                c.exp = c.iat + 60;
            })),
        ),
        (
            "another issuer",
            Some(identity::token_with("alice", |c| {
                c.iss = "https://evil.example".into();
            })),
        ),
        (
            "another audience",
            Some(identity::token_with("alice", |c| c.aud = "billing".into())),
        ),
        ("not a JWT", Some("not.a.jwt".to_owned())),
    ];
    let services = [
        ("gateway", f.cluster.gateway_url()),
        ("order", format!("http://{}", f.cluster.addresses.order)),
    ];
    for (service, base) in &services {
        // The gateway's answers must be its own check, not the order
        // service's passed through: order is unreachable meanwhile (a good
        // token gets 502 there, a bad one 401 before any upstream call).
        let order_reachable = *service != "gateway";
        f.cluster
            .proxy("gateway-order")
            .await
            .set_enabled(order_reachable)
            .await;
        if !order_reachable {
            let good = Client::signed_in(base.clone(), TIMEOUT, support::CUSTOMER);
            assert_problem(&good.get(&format!("/api/orders/{mine}")).await, 502, false);
        }
        for (what, token) in &bad {
            let client = match token {
                Some(t) => Client::new(base.clone(), TIMEOUT).with_token(t.clone()),
                None => Client::new(base.clone(), TIMEOUT),
            };
            let what = format!("{service}, {what}");
            let placed = client
                .post_json("/api/orders", &order_body(&product, 1), Some(&key()))
                .await;
            assert_unauthenticated(&placed, &format!("{what}: POST /api/orders"));
            assert_unauthenticated(
                &client.get("/api/orders").await,
                &format!("{what}: GET /api/orders"),
            );
            assert_unauthenticated(
                &client.get(&format!("/api/orders/{mine}")).await,
                &format!("{what}: GET /api/orders/{{id}}"),
            );
            assert_unauthenticated(
                &client.post(&format!("/api/orders/{mine}/cancel")).await,
                &format!("{what}: POST /api/orders/{{id}}/cancel"),
            );
        }
    }
    assert_eq!(f.order_count().await, orders_before, "no order was created");
    assert_eq!(
        f.order_status(&mine).await.as_deref(),
        Some("confirmed"),
        "no cancel went through"
    );

    let anonymous = Client::new(f.cluster.gateway_url(), TIMEOUT);
    let read = anonymous.get(&format!("/api/products/{product}")).await;
    assert_eq!(
        read.status,
        Some(200),
        "product reads stay anonymous: {}",
        read.describe()
    );
    // A good token of the owner still reads the order, at both.
    for (service, base) in &services {
        let owner = Client::signed_in(base.clone(), TIMEOUT, support::CUSTOMER);
        let shown = owner.get(&format!("/api/orders/{mine}")).await;
        assert_eq!(shown.status, Some(200), "{service}: {}", shown.describe());
    }
    f.cluster.stop().await;
}

/// Alice's order is 404 for bob — show and cancel, the same answer as an
/// id that does not exist — and missing from his list; his cancel leaves
/// it confirmed with its stock reserved. Naming alice in the list's query
/// is refused (422), and alice sees her order in hers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_customers_order_is_404_and_not_listed() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.seed("OWN-404", 100).await;
    let alice = f.cluster.client("alice", TIMEOUT);
    let bob = f.cluster.client("bob", TIMEOUT);
    let placed = alice
        .post_json("/api/orders", &order_body(&product, 2), Some(&key()))
        .await;
    assert_eq!(placed.status, Some(201), "{}", placed.describe());
    assert_eq!(placed.json()["customer_id"], "alice", "the customer is sub");
    let id = order_id(&placed);
    let bobs = bob
        .post_json("/api/orders", &order_body(&product, 1), Some(&key()))
        .await;
    assert_eq!(bobs.status, Some(201), "{}", bobs.describe());
    let bobs = order_id(&bobs);

    let unknown = uuid::Uuid::new_v4();
    let shown = bob.get(&format!("/api/orders/{id}")).await;
    let nothing = bob.get(&format!("/api/orders/{unknown}")).await;
    assert_problem(&shown, 404, false);
    assert_eq!(
        not_found_shape(&shown),
        not_found_shape(&nothing),
        "another's order looks exactly like no order"
    );
    let cancelled = bob.post(&format!("/api/orders/{id}/cancel")).await;
    let cancelled_nothing = bob.post(&format!("/api/orders/{unknown}/cancel")).await;
    assert_problem(&cancelled, 404, false);
    assert_eq!(
        not_found_shape(&cancelled),
        not_found_shape(&cancelled_nothing),
        "cancelling another's order looks exactly like cancelling no order"
    );
    assert_eq!(f.order_status(&id).await.as_deref(), Some("confirmed"));
    assert_eq!(f.reserved_for(&id).await, 2, "alice's stock stays reserved");

    let bob_sees = listed(&bob).await;
    assert!(!bob_sees.contains(&id), "bob's list: {bob_sees:?}");
    assert_eq!(bob_sees, BTreeSet::from([bobs.clone()]), "bob's own only");
    let alice_sees = listed(&alice).await;
    assert_eq!(alice_sees, BTreeSet::from([id.clone()]), "alice's own only");
    let snooping = bob.get("/api/orders?customer_id=alice").await;
    assert_problem(&snooping, 422, false);
    assert!(
        snooping.body.windows(11).any(|w| w == b"customer_id"),
        "a field error on customer_id: {}",
        snooping.describe()
    );
    let own = bob.get("/api/orders?customer_id=bob").await;
    assert_eq!(own.status, Some(200), "{}", own.describe());

    // A body naming someone else is refused the same way; naming oneself
    // is accepted (SPEC §3).
    let as_alice = bob
        .post_json(
            "/api/orders",
            &json!({"customer_id": "alice", "items": [{"product_id": product, "quantity": 1}]}),
            Some(&key()),
        )
        .await;
    assert_problem(&as_alice, 422, false);
    let as_bob = bob
        .post_json(
            "/api/orders",
            &json!({"customer_id": "bob", "items": [{"product_id": product, "quantity": 1}]}),
            Some(&key()),
        )
        .await;
    assert_eq!(as_bob.status, Some(201), "{}", as_bob.describe());
    assert_eq!(listed(&alice).await, alice_sees, "alice's list unchanged");

    // Alice can still cancel her own order.
    let mine = alice.post(&format!("/api/orders/{id}/cancel")).await;
    assert_eq!(mine.status, Some(200), "{}", mine.describe());
    assert_eq!(mine.json()["status"], "cancelled", "{}", mine.describe());
    shopeasy_testkit::assert_eventually(Duration::from_secs(5), "released", async || {
        f.reserved_for(&id).await == 0
    })
    .await;
    f.cluster.stop().await;
}

/// One key, two customers: two orders, each its customer's; a retry of
/// each replays its own order (`Idempotent-Replayed: true`, byte-equal),
/// and bob's different body under alice's key is no 422 — alice's key
/// cannot block his.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_from_two_customers_makes_two_orders() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.seed("OWN-KEY", 100).await;
    let alice = f.cluster.client("alice", TIMEOUT);
    let bob = f.cluster.client("bob", TIMEOUT);
    let k = key();
    let hers = alice
        .post_json("/api/orders", &order_body(&product, 1), Some(&k))
        .await;
    assert_eq!(hers.status, Some(201), "{}", hers.describe());
    // Another body, same key: for bob it is a fresh key.
    let his = bob
        .post_json("/api/orders", &order_body(&product, 3), Some(&k))
        .await;
    assert_eq!(his.status, Some(201), "bob: {}", his.describe());
    assert!(!his.replayed(), "bob got no replay of alice's order");
    let (her_id, his_id) = (order_id(&hers), order_id(&his));
    assert_ne!(her_id, his_id, "two orders");
    assert_eq!(his.json()["customer_id"], "bob");

    for (client, first) in [(&alice, &hers), (&bob, &his)] {
        let quantity = first.json()["items"][0]["quantity"].as_i64().unwrap();
        let again = client
            .post_json("/api/orders", &order_body(&product, quantity), Some(&k))
            .await;
        assert_eq!(again.status, Some(201), "{}", again.describe());
        assert!(again.replayed(), "C9: {:?}", again.headers);
        assert_eq!(again.body, first.body, "C9: byte-equal replay");
    }
    // Alice reusing her key with bob's body is still her key's mismatch.
    let mismatch = alice
        .post_json("/api/orders", &order_body(&product, 3), Some(&k))
        .await;
    assert_problem(&mismatch, 422, false);

    assert_eq!(listed(&alice).await, BTreeSet::from([her_id.clone()]));
    assert_eq!(listed(&bob).await, BTreeSet::from([his_id.clone()]));
    assert_eq!(available(&f, &product).await, 100 - 1 - 3, "C4");
    assert_eq!(f.reserved_for(&her_id).await, 1, "C7");
    assert_eq!(f.reserved_for(&his_id).await, 3, "C7");
    f.cluster.stop().await;
}

/// Ten concurrent requests of one customer with one key: every answer is
/// the order (201, the first plain and the rest replays) or "in progress"
/// (409, retried until it replays); all name one order, the customer's
/// list holds exactly it, and Inventory reserved its quantity once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_concurrent_requests_with_one_key_make_one_order() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.seed("OWN-RACE", 100).await;
    let carol = f.cluster.client("carol", TIMEOUT);
    let k = key();
    let body = order_body(&product, 2);
    let mut set = tokio::task::JoinSet::new();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(10));
    for _ in 0..10 {
        let (client, body, k, start) = (carol.clone(), body.clone(), k.clone(), start.clone());
        set.spawn(async move {
            start.wait().await;
            client.post_json("/api/orders", &body, Some(&k)).await
        });
    }
    let mut answers = Vec::new();
    while let Some(answer) = set.join_next().await {
        answers.push(answer.unwrap());
    }
    let statuses: Vec<Option<u16>> = answers.iter().map(|a| a.status).collect();
    println!("ten concurrent answers: {statuses:?}");
    assert!(
        answers.iter().all(|a| matches!(a.status, Some(201 | 409))),
        "the order or in progress only: {statuses:?}"
    );
    let created: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == Some(201) && !a.replayed())
        .collect();
    assert_eq!(
        created.len(),
        1,
        "one creation, the rest replays: {statuses:?}"
    );
    let id = order_id(created[0]);
    for answer in &answers {
        match answer.status {
            Some(201) => {
                assert_eq!(order_id(answer), id, "C1: one order");
                assert_eq!(answer.body, created[0].body, "C9");
            }
            _ => assert!(answer.is_problem(), "409: {}", answer.describe()),
        }
    }
    // The ones told "in progress" retry, as a client would, and get the
    // same order.
    for _ in answers.iter().filter(|a| a.status == Some(409)) {
        let retried = shopeasy_testkit::eventually(Duration::from_secs(10), async || {
            let again = carol.post_json("/api/orders", &body, Some(&k)).await;
            again.status == Some(201) && order_id(&again) == id && again.replayed()
        })
        .await;
        assert!(retried, "a 409 becomes a replay of the one order");
    }

    assert_eq!(listed(&carol).await, BTreeSet::from([id.clone()]), "C1");
    assert_eq!(available(&f, &product).await, 98, "C4: reserved once");
    assert_eq!(f.reserved_for(&id).await, 2, "C7");
    assert_eq!(f.order_count().await, 1, "no other order anywhere");
    f.cluster.stop().await;
}

/// The gateway's per-customer placement budget (`limits.customer_orders_*`,
/// here 1 a second, burst 3): alice's fourth placement in a row is 429
/// with `Retry-After` and the `RateLimit` fields, naming the `orders`
/// policy, and creates nothing; bob, from the same address, is not held
/// back, nor are alice's reads; alice places again once her bucket refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_limits_placements_per_customer() {
    let Some(f) = Fixture::start(|o| {
        o.gateway.limits.customer_orders_per_minute = 60;
        o.gateway.limits.customer_order_burst = 3;
    })
    .await
    else {
        return;
    };
    let product = f.seed("OWN-RATE", 100).await;
    let alice = f.cluster.client("alice", TIMEOUT);
    let bob = f.cluster.client("bob", TIMEOUT);
    let place = async |client: &Client| {
        client
            .post_json("/api/orders", &order_body(&product, 1), Some(&key()))
            .await
    };
    let mut statuses = Vec::new();
    let started = tokio::time::Instant::now();
    let refused = loop {
        let answer = place(&alice).await;
        statuses.push(answer.status);
        if answer.status != Some(201) || statuses.len() > 20 {
            break answer;
        }
    };
    // The burst, plus one token per second refilled meanwhile (a slow
    // machine takes a while for three placements), and not one more.
    let refilled = started.elapsed().as_secs() as usize;
    let created = statuses.len() - 1;
    assert!(
        (3..=3 + refilled + 1).contains(&created),
        "burst 3 + {refilled} refilled: {statuses:?}"
    );
    assert_problem(&refused, 429, true);
    assert!(
        refused
            .header("ratelimit-policy")
            .is_some_and(|p| p.contains("orders")),
        "the orders policy refused: {:?}",
        refused.headers
    );
    assert!(
        refused.header("ratelimit").is_some(),
        "{:?}",
        refused.headers
    );
    let placed = i64::try_from(statuses.len() - 1).unwrap();
    assert_eq!(
        listed(&alice).await.len(),
        statuses.len() - 1,
        "reads go on"
    );
    assert_eq!(
        available(&f, &product).await,
        100 - placed,
        "the 429 made nothing"
    );

    let his = place(&bob).await;
    assert_eq!(
        his.status,
        Some(201),
        "bob has his own budget: {}",
        his.describe()
    );
    shopeasy_testkit::assert_eventually(
        Duration::from_secs(3),
        "alice's bucket refills",
        async || place(&alice).await.status == Some(201),
    )
    .await;
    f.cluster.stop().await;
}

/// The order service's open-order limit (`orders.max_open_per_customer`,
/// here 2): with Inventory unreachable and the stock cached, alice's orders
/// wait `pending` (202); her third is 429 `too-many-open-orders` with
/// `Retry-After` and creates nothing, while bob's is accepted. Once
/// Inventory is back her orders are confirmed (C8) and she may place again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_service_limits_open_orders_per_customer() {
    let Some(f) = Fixture::start(|o| o.order.orders.max_open_per_customer = 2).await else {
        return;
    };
    let product = f.seed_cached("OWN-OPEN", 100).await;
    let alice = f.cluster.client("alice", TIMEOUT);
    let bob = f.cluster.client("bob", TIMEOUT);
    let place = async |client: &Client| {
        client
            .post_json("/api/orders", &order_body(&product, 1), Some(&key()))
            .await
    };
    f.refuse(&["order-inventory"]).await;
    let mut pending = Vec::new();
    for _ in 0..2 {
        let answer = place(&alice).await;
        assert_eq!(answer.status, Some(202), "pending: {}", answer.describe());
        pending.push(order_id(&answer));
    }
    let before = f.order_count().await;
    let refused = place(&alice).await;
    assert_problem(&refused, 429, true);
    assert_eq!(
        refused.json()["type"]
            .as_str()
            .map(|t| t.ends_with("too-many-open-orders")),
        Some(true),
        "{}",
        refused.describe()
    );
    assert_eq!(f.order_count().await, before, "the 429 made nothing");
    let his = place(&bob).await;
    assert_eq!(his.status, Some(202), "bob's own limit: {}", his.describe());

    f.cluster.heal().await;
    for id in &pending {
        f.assert_confirmed_within(id, Duration::from_secs(10), "C8")
            .await;
    }
    let again = place(&alice).await;
    assert_eq!(again.status, Some(201), "R: {}", again.describe());
    f.cluster.stop().await;
}
