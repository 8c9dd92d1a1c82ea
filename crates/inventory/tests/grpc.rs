//! The Inventory gRPC service against a real server on 127.0.0.1:0 and a
//! real database (Postgres when `SHOPEASY_TEST_POSTGRES` is set, else
//! SQLite; the deadline and outage tests need Postgres).

// Test helpers panic on a failed set-up, like the tests themselves.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use prost::Message;
use shopeasy_proto::inventory::v1::{
    FieldViolations, GetStockRequest, InsufficientStock, ReleaseStockRequest, ReserveStockRequest,
    SetStockRequest, StockLine,
};
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::{Metrics, TestDatabase, assert_eventually, eventually};
use sqlx::{Connection, PgConnection};
use support::{
    ADMIN_TOKEN, Forwarder, Running, SERVICE_TOKEN, as_service, product, settings, start,
    with_bearer,
};
use tokio::time::Instant;
use tonic::Code;

/// Postgres when configured, else SQLite.
async fn database() -> TestDatabase {
    if std::env::var(shopeasy_testkit::POSTGRES_VAR).is_ok() {
        shopeasy_testkit::postgres().await.expect("postgres")
    } else {
        shopeasy_testkit::sqlite()
    }
}

/// A `ReserveStock` request carrying the service token.
fn reserve(reservation_id: &str, lines: &[(&str, i64)]) -> tonic::Request<ReserveStockRequest> {
    as_service(reserve_message(reservation_id, lines))
}

/// A `ReleaseStock` request carrying the service token.
fn release(reservation_id: &str) -> tonic::Request<ReleaseStockRequest> {
    as_service(ReleaseStockRequest {
        reservation_id: reservation_id.into(),
    })
}

fn reserve_message(reservation_id: &str, lines: &[(&str, i64)]) -> ReserveStockRequest {
    ReserveStockRequest {
        reservation_id: reservation_id.into(),
        lines: lines
            .iter()
            .map(|&(p, q)| StockLine {
                product_id: p.into(),
                quantity: q,
            })
            .collect(),
    }
}

fn get(product_id: &str) -> GetStockRequest {
    GetStockRequest {
        product_id: product_id.into(),
    }
}

fn fields(status: &tonic::Status) -> Vec<String> {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    FieldViolations::decode(status.details())
        .unwrap()
        .violations
        .into_iter()
        .map(|v| v.field)
        .collect()
}

async fn available(server: &Running, product_id: &str) -> i64 {
    server
        .client()
        .await
        .get_stock(get(product_id))
        .await
        .unwrap()
        .into_inner()
        .available
}

/// Waits (within 5 s) until the standard gRPC health check of the whole
/// server reports `serving` (true: SERVING) or not.
async fn health_becomes(
    health: &mut tonic_health::pb::health_client::HealthClient<tonic::transport::Channel>,
    serving: bool,
    what: &str,
) {
    let wanted = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    assert_eventually(Duration::from_secs(5), what, async || {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
        (r.into_inner().status == wanted) == serving
    })
    .await;
}

#[tokio::test]
async fn every_rpc_answers_with_its_success_and_error_codes() {
    let db = database().await;
    let server = start(settings(db.url())).await;
    let mut client = server.client().await;
    let (a, b) = (product(), product());

    // SetStock: admin only, missing or wrong token alike.
    let request = SetStockRequest {
        product_id: a.clone(),
        available: 5,
    };
    let err = client.set_stock(request.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut wrong = tonic::Request::new(request.clone());
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer not-the-token".parse().unwrap());
    let err = client.set_stock(wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(!err.message().contains(ADMIN_TOKEN));
    server.set_stock(&a, 5).await;
    server.set_stock(&b, 1).await;

    // GetStock.
    assert_eq!(available(&server, &a).await, 5);
    let err = client.get_stock(get(&product())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // ReserveStock: success, replay, short, unknown, conflict.
    let rid = product();
    let ok = client
        .reserve_stock(reserve(&rid, &[(&a, 2), (&b, 1)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (ok.reservation_id.as_str(), ok.replayed),
        (rid.as_str(), false)
    );
    assert_eq!(ok.lines.len(), 2);
    let again = client
        .reserve_stock(reserve(&rid, &[(&a, 2), (&b, 1)]))
        .await
        .unwrap()
        .into_inner();
    assert!(again.replayed);
    assert_eq!(again.lines, ok.lines);
    assert_eq!(available(&server, &a).await, 3);

    let err = client
        .reserve_stock(reserve(&product(), &[(&a, 1), (&b, 1)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains(&b), "{}", err.message());
    let short = InsufficientStock::decode(err.details()).unwrap();
    assert_eq!(short.lines.len(), 1);
    assert_eq!(
        (
            short.lines[0].product_id.as_str(),
            short.lines[0].requested,
            short.lines[0].available
        ),
        (b.as_str(), 1, 0)
    );
    assert_eq!(available(&server, &a).await, 3, "all or none");

    let err = client
        .reserve_stock(reserve(&product(), &[(&product(), 1)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = client
        .reserve_stock(reserve(&rid, &[(&a, 1)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);

    // ReleaseStock: exactly what was reserved, once; unknown ids are fine.
    let released = client
        .release_stock(release(&rid))
        .await
        .unwrap()
        .into_inner()
        .released;
    assert_eq!(released, ok.lines);
    assert_eq!(available(&server, &a).await, 5);
    for id in [rid.clone(), product()] {
        let again = client
            .release_stock(release(&id))
            .await
            .unwrap()
            .into_inner();
        assert!(again.released.is_empty());
    }
    let err = client
        .reserve_stock(reserve(&rid, &[(&a, 2), (&b, 1)]))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "released stays released"
    );
    server.stop().await;
}

/// Reserve and Release need the service token: none, a wrong one and the
/// admin token alike are UNAUTHENTICATED, and nothing moves; the service
/// token is no admin (SetStock refuses it) and GetStock stays open.
#[tokio::test]
async fn reserve_and_release_need_the_service_credential() {
    let db = database().await;
    let server = start(settings(db.url())).await;
    let mut client = server.client().await;
    let (p, rid) = (product(), product());
    server.set_stock(&p, 5).await;
    client
        .reserve_stock(reserve(&rid, &[(&p, 2)]))
        .await
        .unwrap();
    assert_eq!(available(&server, &p).await, 3);

    let other = product();
    for token in [None, Some("not-the-token"), Some(ADMIN_TOKEN)] {
        let with = |m| match token {
            Some(t) => with_bearer(m, t),
            None => tonic::Request::new(m),
        };
        let err = client
            .reserve_stock(with(reserve_message(&other, &[(&p, 1)])))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "reserve, {token:?}");
        let mut released = tonic::Request::new(ReleaseStockRequest {
            reservation_id: rid.clone(),
        });
        if let Some(t) = token {
            released = with_bearer(released.into_inner(), t);
        }
        let err = client.release_stock(released).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "release, {token:?}");
        assert!(!err.message().contains(SERVICE_TOKEN));
    }
    assert_eq!(
        available(&server, &p).await,
        3,
        "nothing was reserved or released"
    );

    let set = SetStockRequest {
        product_id: p.clone(),
        available: 100,
    };
    let err = client
        .set_stock(with_bearer(set, SERVICE_TOKEN))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::Unauthenticated,
        "the service token is no admin"
    );
    assert_eq!(available(&server, &p).await, 3);
    client.release_stock(release(&rid)).await.unwrap();
    assert_eq!(available(&server, &p).await, 5);
    server.stop().await;
}

/// An inventory with no service token configured lets nobody reserve: a
/// forgotten setting is a closed door.
#[tokio::test]
async fn no_service_token_configured_admits_nobody() {
    let db = database().await;
    let mut s = settings(db.url());
    s.service_token = shopeasy_runtime::settings::Secret::default();
    let server = start(s).await;
    let p = product();
    server.set_stock(&p, 5).await;
    let mut client = server.client().await;
    for request in [
        reserve(&product(), &[(&p, 1)]),
        with_bearer(reserve_message(&product(), &[(&p, 1)]), ""),
    ] {
        let err = client.reserve_stock(request).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }
    assert_eq!(available(&server, &p).await, 5);
    server.stop().await;
}

#[tokio::test]
async fn validation_errors_name_the_field() {
    let db = shopeasy_testkit::sqlite();
    let server = start(settings(db.url())).await;
    let mut client = server.client().await;
    let p = product();

    let err = client.get_stock(get("nope")).await.unwrap_err();
    assert_eq!(fields(&err), ["product_id"]);
    assert!(err.message().contains("product_id"), "{}", err.message());

    let err = client
        .reserve_stock(reserve("", &[(&p, 0), (&p, 1), ("x", 1001)]))
        .await
        .unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "reservation_id",
            "lines[0].quantity",
            "lines[1].product_id",
            "lines[2].product_id",
            "lines[2].quantity"
        ]
    );
    let err = client
        .reserve_stock(reserve(&product(), &[]))
        .await
        .unwrap_err();
    assert_eq!(fields(&err), ["lines"]);
    let many: Vec<String> = (0..51).map(|_| product()).collect();
    let lines: Vec<(&str, i64)> = many.iter().map(|p| (p.as_str(), 1)).collect();
    let err = client
        .reserve_stock(reserve(&product(), &lines))
        .await
        .unwrap_err();
    assert_eq!(fields(&err), ["lines"]);
    // Many bad lines: still the one `lines` violation, not one per line.
    let bad = vec![("x", 0); 5_000];
    let err = client
        .reserve_stock(reserve(&product(), &bad))
        .await
        .unwrap_err();
    assert_eq!(fields(&err), ["lines"]);
    // A message over the 64 KiB the server decodes is refused from its
    // length, before it is read or validated.
    let huge = vec![("x", 0); 20_000];
    let err = client
        .reserve_stock(reserve(&product(), &huge))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");

    let err = client.release_stock(release("123")).await.unwrap_err();
    assert_eq!(fields(&err), ["reservation_id"]);

    let mut request = tonic::Request::new(SetStockRequest {
        product_id: String::new(),
        available: -1,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
    );
    let err = client.set_stock(request).await.unwrap_err();
    assert_eq!(fields(&err), ["product_id", "available"]);
    server.stop().await;
}

#[tokio::test]
async fn fifty_concurrent_reservations_of_one_on_stock_ten_reserve_exactly_ten() {
    let db = database().await;
    let server = start(settings(db.url())).await;
    let p = product();
    server.set_stock(&p, 10).await;
    let client = server.client().await;
    let calls = (0..50).map(|_| {
        let mut client = client.clone();
        let request = reserve(&product(), &[(&p, 1)]);
        tokio::spawn(async move { client.reserve_stock(request).await })
    });
    let results = futures::future::join_all(calls).await;
    let codes: Vec<Code> = results
        .into_iter()
        .map(|r| r.unwrap().map_or_else(|s| s.code(), |_| Code::Ok))
        .collect();
    let ok = codes.iter().filter(|c| **c == Code::Ok).count();
    let short = codes
        .iter()
        .filter(|c| **c == Code::FailedPrecondition)
        .count();
    assert_eq!((ok, short), (10, 40), "{codes:?}");
    assert_eq!(available(&server, &p).await, 0);
    let product_id = shopeasy_inventory::domain::ProductId::parse("p", &p).unwrap();
    let far = Instant::now() + Duration::from_secs(10);
    assert_eq!(server.store.reserved(&product_id, far).await.unwrap(), 10);
    server.stop().await;
}

#[tokio::test]
async fn twenty_concurrent_repeats_of_one_reservation_reserve_once() {
    let db = database().await;
    let server = start(settings(db.url())).await;
    let (p, rid) = (product(), product());
    server.set_stock(&p, 50).await;
    let client = server.client().await;
    let calls = (0..20).map(|_| {
        let mut client = client.clone();
        let request = reserve(&rid, &[(&p, 3)]);
        tokio::spawn(async move { client.reserve_stock(request).await })
    });
    let answers: Vec<_> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap().into_inner())
        .collect();
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1);
    assert!(answers.iter().all(|a| a.lines == answers[0].lines));
    assert_eq!(available(&server, &p).await, 47);
    server.stop().await;
}

/// Active `ReserveStock` stock updates in this database (the one-line
/// reservation's prepared statement, or a step of the long way), how many
/// of them wait on a lock, and the text of one that waits.
async fn reserve_queries(monitor: &mut PgConnection) -> (i64, i64, Option<String>) {
    sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock'), \
                max(query) FILTER (WHERE wait_event_type = 'Lock') \
         FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND state = 'active' AND (query LIKE '%UPDATE stock SET available = available -%' \
              OR query LIKE '%EXECUTE shopeasy_reserve_one_line%')",
    )
    .fetch_one(monitor)
    .await
    .unwrap()
}

/// Holds the row lock of `p` from a connection of the test's own, calls
/// `ReserveStock` (with `timeout` as its grpc-timeout if given), checks the
/// query waited in Postgres, and returns the code, how long the answer took,
/// whether the query was gone from `pg_stat_activity` within 1 s, and the
/// text of the query that waited.
async fn reserve_against_a_held_lock(
    server: &Running,
    db: &TestDatabase,
    timeout: Option<Duration>,
) -> (Code, Duration, bool, String) {
    let p = product();
    server.set_stock(&p, 5).await;
    let mut blocker = PgConnection::connect(db.url()).await.unwrap();
    let mut monitor = PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("UPDATE stock SET updated_at = updated_at WHERE product_id = $1")
        .bind(&p)
        .execute(&mut blocker)
        .await
        .unwrap();

    let mut client = server.client().await;
    let mut request = reserve(&product(), &[(&p, 1)]);
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    let started = Instant::now();
    let call = tokio::spawn(async move { client.reserve_stock(request).await });
    let mut waiting = None;
    assert!(
        eventually(Duration::from_secs(2), async || {
            let (_, waits, query) = reserve_queries(&mut monitor).await;
            waiting = query;
            waits == 1
        })
        .await,
        "the reservation's update waits on the held lock"
    );
    let code = call.await.unwrap().unwrap_err().code();
    let took = started.elapsed();
    let gone = eventually(Duration::from_secs(1), async || {
        reserve_queries(&mut monitor).await.0 == 0
    })
    .await;

    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    assert_eq!(available(server, &p).await, 5, "nothing was reserved");
    (code, took, gone, waiting.unwrap_or_default())
}

#[tokio::test]
async fn the_server_deadline_cancels_the_query_in_postgres() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let mut s = settings(db.url());
    s.request_timeout_seconds = Seconds::new(0.3);
    let server = start(s).await;

    let (code, took, gone, waiting) = reserve_against_a_held_lock(&server, &db, None).await;
    assert_eq!(code, Code::DeadlineExceeded);
    // A one-line reservation is one round trip: its timeout and the
    // prepared statement in one simple query, no `BEGIN` before it.
    assert!(
        waiting.starts_with("SET LOCAL statement_timeout = ")
            && waiting.contains("EXECUTE shopeasy_reserve_one_line ("),
        "the waiting query: {waiting}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(800),
        "answered after {took:?}"
    );
    assert!(gone, "the query was cancelled in Postgres within 1 s");
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        Metrics::parse(&metrics).has(
            "shopeasy_grpc_server_requests_total",
            &[
                (
                    "method",
                    "shopeasy.inventory.v1.InventoryService/ReserveStock"
                ),
                ("code", "DeadlineExceeded")
            ]
        ),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_callers_grpc_timeout_reaches_the_database() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    // The server's own cap is far away: only the caller's 300 ms can stop
    // the query.
    let server = start(settings(db.url())).await;
    let (code, took, gone, _) =
        reserve_against_a_held_lock(&server, &db, Some(Duration::from_millis(300))).await;
    // Whichever answers first: the server's DEADLINE_EXCEEDED or tonic's own
    // client-side timer (reported as CANCELLED).
    assert!(
        matches!(code, Code::DeadlineExceeded | Code::Cancelled),
        "{code:?}"
    );
    assert!(took < Duration::from_millis(800), "answered after {took:?}");
    assert!(gone, "the query was cancelled in Postgres within 1 s");
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_database_answers_unavailable_fast_and_recovers() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let forwarder = Forwarder::start(support::postgres_addr(db.url())).await;
    let mut s = settings(&forwarder.url(db.url()));
    s.storage.database.acquire_timeout_seconds = Seconds::new(0.5);
    let server = start(s).await;
    let p = product();
    server.set_stock(&p, 3).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    forwarder.down().await;
    let mut client = server.client().await;
    for _ in 0..2 {
        let started = Instant::now();
        let err = client.get_stock(get(&p)).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(took < Duration::from_millis(600), "answered after {took:?}");
    }
    let err = client
        .reserve_stock(reserve(&product(), &[(&p, 1)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.admin_get("/health/ready").await.0, 503);
    assert_eq!(server.admin_get("/health/live").await.0, 200);
    health_becomes(
        &mut health,
        false,
        "gRPC health follows readiness to NOT_SERVING",
    )
    .await;

    forwarder.up().await;
    assert!(
        eventually(Duration::from_secs(10), async || {
            client.get_stock(get(&p)).await.is_ok()
        })
        .await,
        "recovers without a restart"
    );
    assert_eq!(server.admin_get("/health/ready").await.0, 200);
    health_becomes(&mut health, true, "gRPC health back to SERVING").await;
    assert_eq!(available(&server, &p).await, 3);
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "shopeasy.inventory.v1.InventoryService".into(),
        })
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test]
async fn health_and_reflection_answer() {
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };

    let db = shopeasy_testkit::sqlite();
    let server = start(settings(db.url())).await;
    let channel = server.channel().await;

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "shopeasy.inventory.v1.InventoryService"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let requests = tokio_stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "shopeasy.inventory.v1.InventoryService".into(),
        )),
    ]);
    let mut answers = reflection
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "shopeasy.inventory.v1.InventoryService",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a file descriptor");
    };
    let file = prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
        .unwrap();
    assert_eq!(file.package(), "shopeasy.inventory.v1");

    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        Metrics::parse(&metrics).has(
            "shopeasy_grpc_server_request_duration_seconds_count",
            &[("method", "grpc.health.v1.Health/Check"), ("code", "Ok")]
        ),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn made_up_methods_of_a_known_service_share_the_unknown_label() {
    let db = database().await;
    let server = start(settings(db.url())).await;
    let channel = server.channel().await;
    // Raw calls: no generated client has these methods.
    for name in ["x1", "x2", "x3"] {
        let request =
            http::Request::post(format!("/shopeasy.inventory.v1.InventoryService/{name}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(tonic::body::Body::empty())
                .unwrap();
        let response = tower::ServiceExt::oneshot(channel.clone(), request)
            .await
            .unwrap();
        assert_eq!(
            response.headers()["grpc-status"],
            "12",
            "{name}: UNIMPLEMENTED"
        );
    }

    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        !metrics.contains("InventoryService/x"),
        "a made-up method is a label:\n{metrics}"
    );
    let page = Metrics::parse(&metrics);
    let unknown = [("method", "unknown"), ("code", "Unimplemented")];
    // One series for all three (the recorder is the process's: other tests
    // may add to it, never a series of their own).
    assert!(
        page.get("shopeasy_grpc_server_requests_total", &unknown)
            .is_some_and(|n| n >= 3.0),
        "{metrics}"
    );
    assert!(
        page.has(
            "shopeasy_grpc_server_request_duration_seconds_count",
            &unknown
        ),
        "{metrics}"
    );
    server.stop().await;
}
