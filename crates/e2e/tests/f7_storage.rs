//! F7 on the storage edges: a Postgres or Redis that answers, but with an
//! error, stands behind the edge's proxy (`pgwire::PgStub`,
//! `resp::RespStub`). Redirecting a proxy restarts it, which closes every
//! connection it carried, so the services' pools cannot keep using
//! connections to the real server opened before.
//!
//! - order → Postgres `53300` / `57P03` at connect: 503 + Retry-After within
//!   the acquire timeout, not ready but live, connect attempts bounded, no
//!   partial rows; R and C1 once the real database is back.
//! - inventory → Postgres `40001` on every statement: each reservation is
//!   one transaction per order attempt (≤ 3 per order: UNAVAILABLE retried
//!   ≤ 2), the order waits `pending` with a cached stock entry and is 503
//!   without one; C1, C7, C8 once healed.
//! - product/order → Redis `LOADING` / `BUSY` / `OOM`: reads 200 from
//!   Postgres, orders 201, ≤ 2 Redis commands per request and no
//!   reconnects; hits again once the real Redis is back.
//! - order → Postgres `40001` on its own database: 503 + Retry-After, no
//!   partial rows; one order per key after the heal.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{net::SocketAddr, time::Duration};

use serde_json::json;
use shopeasy_e2e::{Answer, Service, pgwire::PgStub, resp::RespStub};
use shopeasy_testkit::assert_eventually;
use support::{Fixture, assert_answers, assert_problem, assert_problem_within, key};
use tokio::time::Instant;

/// L: the acquire timeout (0.5 s) + 100 ms, with slack for two loaded cores.
const ACQUIRE_BOUND: Duration = Duration::from_millis(900);

/// An order placed by a customer named after its key (the token's `sub`
/// is the key), so the order rows of a key can be counted (C1).
async fn order(f: &Fixture, product: &str, quantity: i64, key: &str) -> Answer {
    let body = json!({"items": [{"product_id": product, "quantity": quantity}]});
    f.gateway
        .clone()
        .with_token(f.cluster.token(key))
        .post_json("/api/orders", &body, Some(key))
        .await
}

/// Order rows placed with `key`.
async fn orders_of(f: &Fixture, key: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders WHERE customer_id = $1")
        .bind(key)
        .fetch_one(f.cluster.order_db())
        .await
        .unwrap()
}

/// A Postgres that fails every statement with a serialization failure.
async fn serialization_failures() -> PgStub {
    PgStub::fail_statements(
        "40001",
        "could not serialize access due to concurrent update",
    )
    .await
    .unwrap()
}

/// Puts `stub` in the place of `edge`'s database; returns the real one.
/// The redirect cut the service's pooled connections to the real
/// database. One that answered within `ALIVE_BYPASS` would be handed to
/// the next statement unchecked and fail it, an attempt that never reaches
/// the stub; so this waits the window out: idle past it, each is pinged,
/// found dead and replaced, and every attempt after is one the stub counts.
async fn stand_in_for_every_attempt(f: &Fixture, edge: &str, stub: &PgStub) -> SocketAddr {
    let real = f.stand_in(edge, stub.addr()).await;
    tokio::time::sleep(shopeasy_runtime::db::ALIVE_BYPASS).await;
    real
}

/// R then C1, once the real database is back: a keyed retry of `key`
/// creates its order within 5 s, exactly one.
async fn keyed_retry_recovers(f: &Fixture, product: &str, key: &str) {
    assert_eventually(Duration::from_secs(5), "R(5 s)", async || {
        order(f, product, 1, key).await.status == Some(201)
    })
    .await;
    assert_eq!(orders_of(f, key).await, 1, "C1: one order for the key");
}

/// order → Postgres refusing every connection at startup with `code`.
async fn order_postgres_refuses_at_connect(code: &str, message: &str) {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed(&format!("F7-PG-{code}"), 10).await;
    // Healthy first: the pool holds connections to the real database.
    assert_eq!(order(&f, &id, 1, &key()).await.status, Some(201));
    let stub = PgStub::refuse_startup(code, message).await.unwrap();
    let real = f.stand_in("order-postgres", stub.addr()).await;

    let started = Instant::now();
    assert_eq!(f.health(Service::Order, "ready").await, 503, "not ready");
    assert_eq!(f.health(Service::Order, "live").await, 200, "still live");
    let k = key();
    for _ in 0..3 {
        let answer = order(&f, &id, 1, &k).await;
        assert_problem_within(&answer, 503, true, ACQUIRE_BOUND);
    }
    let window = started.elapsed();
    // A connection the service is still opening in the background (its
    // outbox worker, the unlock of a failed key) has been accepted but not
    // yet sent its startup: let the counts settle before comparing them.
    // One whose acquire gave up between the handshake and the startup (a
    // busy machine stretches that moment) is closed unsent: abandoned.
    assert_eventually(Duration::from_secs(2), "startups settle", async || {
        stub.startups() + stub.abandoned() == stub.connections()
    })
    .await;
    let attempts = stub.connections();
    // Retried only at connect: every attempt is a new connection refused
    // at its startup, and nothing else reached the stub.
    assert!(
        stub.startups() >= 1,
        "the pool reconnected through the stub"
    );
    assert_eq!(
        stub.errors(),
        stub.startups(),
        "each startup was refused once"
    );
    assert!(stub.statements().is_empty());
    // Bounded: sqlx backs off 10 ms, doubling, capped at a fifth of the
    // acquire timeout (≤ 8 attempts per acquire); a retry loop without a
    // backoff would make thousands per second.
    let rate = attempts as f64 / window.as_secs_f64();
    println!(
        "{code}: {attempts} connect attempts ({} abandoned before the startup) in {window:?} ({rate:.1}/s) for 3 orders + 2 probes + the outbox worker",
        stub.abandoned()
    );
    assert!(rate < 100.0, "connect storm: {rate:.1}/s");
    assert_eq!(orders_of(&f, &k).await, 0, "no partial rows");

    f.cluster.redirect("order-postgres", real).await.unwrap();
    assert_eventually(Duration::from_secs(5), "ready again", async || {
        f.health(Service::Order, "ready").await == 200
    })
    .await;
    keyed_retry_recovers(&f, &id, &k).await;
    f.cluster.stop().await;
}

/// order → Postgres `53300 too_many_connections` at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_postgres_too_many_connections_is_503_within_the_acquire_timeout() {
    order_postgres_refuses_at_connect("53300", "sorry, too many clients already").await;
}

/// order → Postgres `57P03 cannot_connect_now` at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_postgres_starting_up_is_503_within_the_acquire_timeout() {
    order_postgres_refuses_at_connect("57P03", "the database system is starting up").await;
}

/// inventory → Postgres `40001 serialization_failure` on every statement:
/// Inventory answers UNAVAILABLE, order retries it ≤ 2 times, so each
/// order makes ≤ 3 reservation transactions at the stub; with a cached
/// stock entry the order is 202 `pending`, without one 503; once healed the
/// worker confirms it (C8), reserving once (C7), one order per key (C1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_inventory_postgres_serialization_failure_is_retried_a_bounded_number_of_times() {
    let Some(f) = Fixture::start(|o| {
        // The outbox worker leaves a deferred order alone for 3 s, so the
        // stub's counts right after the answer are the request's own.
        o.order.outbox.initial_backoff_seconds = shopeasy_runtime::settings::Seconds::new(3.0);
        o.order.outbox.max_backoff_seconds = shopeasy_runtime::settings::Seconds::new(3.0);
        // The breaker is proved elsewhere (f7_unavailable.rs); kept closed
        // here, every order shows the retry bound itself.
        o.order.resilience.inventory.minimum_calls = 100;
    })
    .await
    else {
        return;
    };
    let a = f.seed("F7-40001-A", 10).await;
    let b = f.seed("F7-40001-B", 10).await;
    // Order A once: its stock is now in order's stock cache.
    assert_eq!(order(&f, &a, 1, &key()).await.status, Some(201));
    let stub = serialization_failures().await;
    let real = stand_in_for_every_attempt(&f, "inventory-postgres", &stub).await;

    let ka = key();
    let pending = order(&f, &a, 2, &ka).await;
    assert_eq!(pending.status, Some(202), "{}", pending.describe());
    let order_id = support::order_id(&pending);
    // A one-line reservation is one prepared statement sent with its
    // timeout (`EXECUTE shopeasy_reserve_one_line`); the step-by-step path
    // inserts the reservation row itself. Either is one attempt.
    let reserves = stub.statements_containing("INSERT INTO reservations")
        + stub.statements_containing("EXECUTE shopeasy_reserve_one_line");
    println!(
        "40001 with a cached stock entry: {reserves} reservation transactions, {} transactions in all, in {:?}",
        stub.transactions(),
        pending.elapsed
    );
    // A(3): UNAVAILABLE retried twice, then no more.
    assert_eq!(
        reserves,
        3,
        "reservation transactions for one order\n{:#?}",
        stub.statements()
    );
    assert_eq!(orders_of(&f, &ka).await, 1, "C1");

    let kb = key();
    let stocks = stub.statements_containing("FROM stock WHERE product_id");
    let unavailable = order(&f, &b, 1, &kb).await;
    assert_problem(&unavailable, 503, true);
    let stock_reads = stub.statements_containing("FROM stock WHERE product_id") - stocks;
    println!(
        "40001 without a cached stock entry: {stock_reads} stock transactions, in {:?}",
        unavailable.elapsed
    );
    assert_eq!(stock_reads, 3, "stock transactions for one order: A(3)");
    assert_eq!(orders_of(&f, &kb).await, 0, "C3: no order without stock");
    assert_eq!(f.breaker_state("inventory").await, "closed");
    // Every transaction the stub saw began, failed at its first statement
    // and was rolled back: none was committed.
    assert_eq!(stub.statements_containing("COMMIT"), 0);

    f.cluster
        .redirect("inventory-postgres", real)
        .await
        .unwrap();
    f.assert_confirmed_within(
        &order_id,
        Duration::from_secs(10),
        "C8: pending → confirmed once Inventory's database is back",
    )
    .await;
    assert_eq!(f.reserved_for(&order_id).await, 2, "C7: reserved once");
    let replay = order(&f, &a, 2, &ka).await;
    assert!(replay.replayed(), "{}", replay.describe());
    assert_eq!(replay.json()["id"], pending.json()["id"], "C9: same order");
    assert_eventually(Duration::from_secs(5), "R: B orders again", async || {
        order(&f, &b, 1, &kb).await.status == Some(201)
    })
    .await;
    assert_eq!(orders_of(&f, &ka).await, 1, "C1");
    assert_eq!(orders_of(&f, &kb).await, 1, "C1");
    f.cluster.stop().await;
}

/// Fresh products, one per order while they last (each asks order's Redis).
const FRESH: usize = 12;

/// product → Redis and order → Redis answering every command with `error`.
async fn redis_answers_with(error: &str) {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let code = error.split(' ').next().unwrap_or_default().to_owned();
    let id = f.seed(&format!("F7-REDIS-{code}"), 1_000).await;
    // Not yet in order's stock cache: the first order of each asks Redis.
    let mut fresh = Vec::new();
    for i in 0..FRESH {
        fresh.push(f.seed(&format!("F7-REDIS-{code}-{i}"), 10).await);
    }
    let path = format!("/api/products/{id}");
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    assert_eq!(order(&f, &id, 1, &key()).await.status, Some(201));

    let product_stub = RespStub::start(error).await.unwrap();
    let order_stub = RespStub::start(error).await.unwrap();
    let real_product = f.stand_in("product-redis", product_stub.addr()).await;
    let real_order = f.stand_in("order-redis", order_stub.addr()).await;

    // Requests for 2.5 s: the redirect broke each service's connection
    // (the first call fails on it and Redis rests for 1 s), so the calls
    // after each rest reach the stub and get the error.
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_millis(2_500) {
        let before = product_stub.refused();
        let read = f.gateway.get(&path).await;
        assert_answers(&read, 200, Duration::from_millis(500));
        let per_read = product_stub.refused() - before;
        assert!(per_read <= 2, "read {rounds}: {per_read} Redis commands");

        let before = order_stub.refused();
        let product = fresh.get(rounds).unwrap_or(&id);
        let placed = order(&f, product, 1, &key()).await;
        assert_answers(&placed, 201, Duration::from_secs(1));
        let per_order = order_stub.refused() - before;
        assert!(per_order <= 2, "order {rounds}: {per_order} Redis commands");
        rounds += 1;
    }
    println!(
        "{code}: {rounds} reads + {rounds} orders in {:?}; product Redis {} refused of {:?} on {} connection(s); order Redis {} refused of {:?} on {}",
        started.elapsed(),
        product_stub.refused(),
        product_stub.commands(),
        product_stub.connections(),
        order_stub.refused(),
        order_stub.commands(),
        order_stub.connections(),
    );
    // The calls were made and refused, and a server error is not a broken
    // connection: no reconnect loop.
    assert!(product_stub.refused() >= 1, "product asked Redis");
    assert!(order_stub.refused() >= 1, "order asked Redis");
    assert!(product_stub.connections() <= 2, "product reconnected");
    assert!(order_stub.connections() <= 2, "order reconnected");
    // No storm: after a refusal Redis rests for 1 s, so ~1 call per second
    // and service reach it, whatever the request rate.
    for (name, stub) in [("product", &product_stub), ("order", &order_stub)] {
        assert!(
            stub.refused() <= 6,
            "{name}: {} Redis calls in 2.5 s",
            stub.refused()
        );
    }

    f.cluster
        .redirect("product-redis", real_product)
        .await
        .unwrap();
    f.cluster.redirect("order-redis", real_order).await.unwrap();
    f.assert_product_cache_hits(&path, Duration::from_secs(5), "R: reads hit Redis again")
        .await;
    f.cluster.stop().await;
}

/// Redis `LOADING` (a restarted server reading its dataset): degrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_redis_loading_degrades_without_a_retry_storm() {
    redis_answers_with("LOADING Redis is loading the dataset in memory").await;
}

/// Redis `BUSY` (a script running past its time limit): degrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_redis_busy_degrades_without_a_retry_storm() {
    redis_answers_with(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    )
    .await;
}

/// Redis `OOM` (`maxmemory` reached, writes refused): degrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_redis_out_of_memory_degrades_without_a_retry_storm() {
    redis_answers_with("OOM command not allowed when used memory > 'maxmemory'.").await;
}

/// order → Postgres `40001` on its own database: 503 + Retry-After within
/// the acquire bound, the order's write tried at least once and at most 3
/// times, no partial rows; a keyed retry after the heal makes exactly one
/// order (C1). (The order service does not retry the write itself: the
/// keyed client retry runs the whole request again, so 1 is what it does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_postgres_serialization_failure_is_503_and_bounded() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F7-ORDER-40001", 10).await;
    assert_eq!(order(&f, &id, 1, &key()).await.status, Some(201));
    let stub = serialization_failures().await;
    let real = stand_in_for_every_attempt(&f, "order-postgres", &stub).await;
    let k = key();
    let answer = order(&f, &id, 1, &k).await;
    // The order's write (one statement on Postgres, no `BEGIN`: the
    // stub's transactions are the outbox worker's polls) met the 40001,
    // and was not repeated without bound.
    let writes = stub.statements_containing("INSERT INTO orders");
    println!(
        "order's own 40001: {} after {writes} order writes ({} transactions in all)",
        answer.describe(),
        stub.transactions()
    );
    assert!(
        (1..=3).contains(&writes),
        "order writes met the 40001 and were bounded: {writes}\n{:#?}",
        stub.statements()
    );
    assert_problem_within(&answer, 503, true, ACQUIRE_BOUND);
    assert_eq!(orders_of(&f, &k).await, 0, "no partial rows");
    f.cluster.redirect("order-postgres", real).await.unwrap();
    keyed_retry_recovers(&f, &id, &k).await;
    f.cluster.stop().await;
}
