//! An order in three commits (issue 19): (a) key + order + outbox row,
//! (b) Inventory's reservation, (c) the final record + response. A crash or
//! a lost answer in each gap is recovered with the same reservation id; a
//! holder stalled past its lock is fenced out; keys are the customer's;
//! one timeout per order under a hung Inventory.

use std::time::Duration;

use serde_json::Value;
use shopeasy_order::{
    domain::{Order, OrderStatus, Shortage, now_ms},
    failpoints::Failpoint,
    store::{
        Action, Claim, Created, FirstTry, KeyHold, NewKey, Resume, Store, StoreError,
        StoredResponse,
    },
};
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::all_backends;
use uuid::Uuid;

use crate::{
    fakes::{Mode, ProductMode},
    helpers::{Shop, TestApp, eventually, order_body, orders_of},
};

/// A response as it came: status, whether it was marked a replay, bytes.
async fn answer(res: reqwest::Response) -> (u16, bool, bytes::Bytes) {
    let status = res.status().as_u16();
    let replayed = res.headers().get("idempotent-replayed").is_some();
    (status, replayed, res.bytes().await.unwrap())
}

#[tokio::test]
async fn a_lost_reservation_answer_is_recovered_by_the_worker_with_the_same_id() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        // Gap (b)–(c): Inventory reserved, but the answer never came back.
        app.failpoints.arm(Failpoint::ReserveAnswerLost);
        let body = order_body("c-lost", &[(a, 3)]);
        let (status, _, first) = answer(app.post_order(Some("key-lost"), &body).await).await;
        assert_eq!(status, 202, "{}: pending, for the worker", db.name());
        let order: Value = serde_json::from_slice(&first).unwrap();
        let id = order["id"].as_str().unwrap().to_owned();
        assert_eq!(shop.inventory.live_reservations(), vec![id.clone()]);

        app.wait_status(&id, "confirmed", Duration::from_secs(5))
            .await;
        assert!(
            shop.inventory.reserve_calls() >= 2,
            "the worker reserved again"
        );
        assert_eq!(shop.inventory.reserved(a), 3, "with the same id: once (C7)");
        assert_eq!(shop.inventory.live_reservations(), vec![id.clone()]);
        assert_eq!(orders_of(&app, "c-lost").await.len(), 1, "no second order");
        let (status, replayed, again) = answer(app.post_order(Some("key-lost"), &body).await).await;
        assert_eq!((status, replayed), (202, true));
        assert_eq!(again, first, "the stored 202, byte for byte");
        let drained = eventually(Duration::from_secs(2), || async {
            app.orders.store().backlog().await.unwrap() == 0
        })
        .await;
        assert!(drained, "outbox drained");
        app.stop().await;
    }
}

#[tokio::test]
async fn a_crash_after_the_final_commit_is_a_replay_on_retry() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        // After (c): everything is stored, the answer is lost with the process.
        app.failpoints.arm(Failpoint::AfterFinalCommit);
        let body = order_body("c-final", &[(a, 2)]);
        let res = app.post_order(Some("key-final"), &body).await;
        assert_eq!(res.status(), 500, "the simulated crash");
        let orders = orders_of(&app, "c-final").await;
        assert_eq!(orders.len(), 1);
        assert_eq!(orders[0]["status"], "confirmed", "(c) committed");
        let (status, replayed, bytes) =
            answer(app.post_order(Some("key-final"), &body).await).await;
        assert_eq!((status, replayed), (201, true), "the retry is a replay");
        let replayed: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(replayed["id"], orders[0]["id"]);
        assert_eq!(shop.inventory.reserve_calls(), 1, "nothing reserved again");
        assert_eq!(shop.inventory.reserved(a), 2);
        assert_eq!(app.orders.store().backlog().await.unwrap(), 0);
        app.stop().await;
    }
}

/// A holder stalled at `point` past its lock: another request takes the
/// key over and answers; the stalled one, released, writes nothing and
/// answers the winner's response. One order, one reservation.
async fn stalled_holder(db_url: &str, point: Failpoint) {
    let shop = Shop::new(&[10]).await;
    let mut settings = shop.settings(db_url);
    settings.idempotency.lock_seconds = Seconds::new(0.5);
    let app = TestApp::spawn(settings).await;
    let a = shop.products[0];
    // One database serves every point: a customer and a key per point.
    let customer = format!("c-stall-{point:?}");
    let key = format!("key-stall-{point:?}");
    let key = key.as_str();
    let body = order_body(&customer, &[(a, 2)]);
    let stall = app.failpoints.stall(point);
    let first = {
        let http = app.client_for(&customer);
        let url = app.url("/api/orders");
        let body = body.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            answer(
                http.post(url)
                    .header("Idempotency-Key", key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        })
    };
    let reached = tokio::time::timeout(Duration::from_secs(5), stall.reached()).await;
    if reached.is_err() {
        let (status, _, body) = first.await.unwrap();
        panic!(
            "{point:?}: never stalled; answered {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    // The second request gets 409 while the first holds the key, then takes
    // it over once the lock (0.5 s) runs out.
    let won = std::cell::RefCell::new(None);
    let ok = eventually(Duration::from_secs(5), || async {
        let got = answer(app.post_order(Some(key), &body).await).await;
        let done = got.0 == 201;
        assert!(
            done || got.0 == 409,
            "{point:?}: {} {:?}",
            got.0,
            String::from_utf8_lossy(&got.2)
        );
        *won.borrow_mut() = Some(got);
        done
    })
    .await;
    assert!(ok, "{point:?}: the takeover never succeeded");
    let (_, _, winner) = won.into_inner().unwrap();
    stall.release();
    let (status, replayed, stalled) = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the stalled request answered")
        .unwrap();
    assert_eq!(
        (status, replayed),
        (201, true),
        "{point:?}: fenced out, it answers the key's stored response"
    );
    assert_eq!(stalled, winner, "{point:?}: the winner's bytes");
    let (_, replayed, again) = answer(app.post_order(Some(key), &body).await).await;
    assert!(replayed);
    assert_eq!(
        again, winner,
        "{point:?}: the stored response is the winner's"
    );
    let orders = orders_of(&app, &customer).await;
    assert_eq!(orders.len(), 1, "{point:?}: one order per key");
    assert_eq!(
        shop.inventory.live_reservations(),
        vec![orders[0]["id"].as_str().unwrap().to_owned()]
    );
    assert_eq!(shop.inventory.reserved(a), 2, "{point:?}: reserved once");
    app.stop().await;
}

#[tokio::test]
async fn a_holder_stalled_past_its_lock_never_makes_a_second_order() {
    for db in all_backends().await {
        for point in [
            Failpoint::BeforeOrderCommit,
            Failpoint::AfterOrderCommit,
            Failpoint::AfterReserve,
        ] {
            stalled_holder(db.url(), point).await;
        }
    }
}

#[tokio::test]
async fn the_final_write_is_fenced_by_the_holders_token() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let store = app.orders.store();
        let now = now_ms();
        let order = Order {
            id: Uuid::now_v7(),
            customer_id: "c-fence".into(),
            status: OrderStatus::Pending,
            items: Vec::new(),
            total_cents: 0,
            created_at: now,
            updated_at: now,
        };
        let holder = KeyHold::new("c-fence", "key-fence");
        // The first holder's lock has already run out.
        created(
            store,
            &order,
            Some(&NewKey {
                hold: &holder,
                fingerprint: "f",
                now,
                lock_until: now - 1,
            }),
        )
        .await;
        let taker = KeyHold::new("c-fence", "key-fence");
        let claim = store
            .claim_existing(&NewKey {
                hold: &taker,
                fingerprint: "f",
                now,
                lock_until: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(claim, Some(Claim::Acquired(Resume::OrderCreated(order.id))));
        let response = |body: &str| StoredResponse {
            status: 201,
            headers: Vec::new(),
            body: body.into(),
        };
        // The old holder's final transaction writes nothing at all.
        let fenced = store
            .finish_reservation(order.id, None, now, Some((&holder, &response("old"))))
            .await;
        assert!(matches!(fenced, Err(StoreError::LockLost)), "{fenced:?}");
        assert_eq!(
            store.order(order.id).await.unwrap().unwrap().status,
            OrderStatus::Pending,
            "rolled back whole"
        );
        assert!(
            store
                .task(order.id, Action::Reserve)
                .await
                .unwrap()
                .is_some(),
            "the reserve row kept"
        );
        assert!(matches!(
            store.finish_key(&holder, &response("old")).await,
            Err(StoreError::LockLost)
        ));
        let recorded = store
            .finish_reservation(order.id, None, now, Some((&taker, &response("new"))))
            .await
            .unwrap();
        assert!(recorded.key_finished);
        assert_eq!(recorded.status, OrderStatus::Confirmed);
        assert_eq!(
            store.key_state(&holder, now).await.unwrap(),
            Claim::Replay(response("new"))
        );
        assert_eq!(
            store.task(order.id, Action::Reserve).await.unwrap(),
            None,
            "the reserve row deleted with the final write"
        );

        // Without a key: the final write rejects the order and deletes its
        // row; a second one changes nothing.
        let unkeyed = Order {
            id: Uuid::now_v7(),
            ..order
        };
        created(store, &unkeyed, None).await;
        let short = [Shortage {
            product_id: Uuid::now_v7(),
            requested: 2,
            available: 1,
        }];
        let recorded = store
            .finish_reservation(unkeyed.id, Some(&short), now, None)
            .await
            .unwrap();
        assert_eq!(recorded.status, OrderStatus::Rejected);
        assert!(!recorded.key_finished);
        assert_eq!(store.task(unkeyed.id, Action::Reserve).await.unwrap(), None);
        let again = store
            .finish_reservation(unkeyed.id, None, now + 1, None)
            .await
            .unwrap();
        assert_eq!(
            again.status,
            OrderStatus::Rejected,
            "a second answer changes nothing"
        );
        app.stop().await;
    }
}

/// Creates `order` (under `key`, if any), its reserve task due for the
/// worker a minute later, and checks that it was created.
async fn created(store: &Store, order: &Order, key: Option<&NewKey<'_>>) {
    let created = store
        .create_order(
            order,
            key,
            FirstTry::Worker {
                at: order.created_at + 60_000,
            },
            None,
            u32::MAX,
        )
        .await
        .unwrap();
    assert!(matches!(created, Created::Order(_)), "{created:?}");
}

#[tokio::test]
async fn keys_are_scoped_to_the_customer() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        let (s1, r1, alice) = answer(
            app.post_order(Some("shared"), &order_body("alice", &[(a, 1)]))
                .await,
        )
        .await;
        // Another customer, the same key, another body: not 422, not a
        // replay of alice's order — bob's own.
        let (s2, r2, bob) = answer(
            app.post_order(Some("shared"), &order_body("bob", &[(a, 2)]))
                .await,
        )
        .await;
        assert_eq!((s1, r1, s2, r2), (201, false, 201, false), "{}", db.name());
        let alice: Value = serde_json::from_slice(&alice).unwrap();
        let bob: Value = serde_json::from_slice(&bob).unwrap();
        assert_ne!(alice["id"], bob["id"]);
        assert_eq!(orders_of(&app, "alice").await.len(), 1);
        assert_eq!(orders_of(&app, "bob").await.len(), 1);
        assert_eq!(shop.inventory.reserved(a), 3, "two orders");
        app.stop().await;
    }
}

#[tokio::test]
async fn a_key_answers_even_when_product_is_down() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    let body = order_body("c-down", &[(a, 1)]);
    let (status, _, first) = answer(app.post_order(Some("key-down"), &body).await).await;
    assert_eq!(status, 201);
    shop.product.set_mode(ProductMode::Unavailable(None));
    let (status, replayed, again) = answer(app.post_order(Some("key-down"), &body).await).await;
    assert_eq!((status, replayed), (201, true), "the replay needs no price");
    assert_eq!(again, first);
    let other = order_body("c-down", &[(a, 2)]);
    assert_eq!(
        app.post_order(Some("key-down"), &other).await.status(),
        422,
        "the key decides before the pricing failure"
    );
    assert_eq!(
        app.post_order(Some("key-new"), &body).await.status(),
        503,
        "a new key does need Product"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_hung_inventory_costs_one_timeout_per_order() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let mut settings = shop.settings(db.url());
        // The stock fetch waits 1 s, a reservation would wait 2 s more.
        settings.resilience.stock_cache.ttl_seconds = Seconds::new(0.1);
        settings.resilience.stock_cache.fetch_timeout_seconds = Seconds::new(1.0);
        settings.resilience.inventory.timeout_seconds = Seconds::new(2.0);
        let app = TestApp::spawn(settings).await;
        let a = shop.products[0];
        assert_eq!(
            app.post_order(None, &order_body("c-hung", &[(a, 1)]))
                .await
                .status(),
            201
        );
        // Let the cached entry expire (its TTL is 0.1 s), then hang Inventory.
        tokio::time::sleep(Duration::from_millis(200)).await;
        shop.inventory.set_mode(Mode::Hang);
        let reserves = shop.inventory.reserve_calls();
        let started = tokio::time::Instant::now();
        let res = app
            .post_order(Some("key-hung"), &order_body("c-hung", &[(a, 2)]))
            .await;
        let took = started.elapsed();
        assert_eq!(res.status(), 202, "{}: stale stock says yes", db.name());
        let order: Value = res.json().await.unwrap();
        assert_eq!(order["status"], "pending");
        assert_eq!(
            shop.inventory.reserve_calls(),
            reserves,
            "no reservation after the stock check found Inventory unavailable"
        );
        assert!(
            took < Duration::from_millis(2500),
            "took {took:?}: more than one timeout"
        );
        shop.inventory.set_mode(Mode::Healthy);
        let id = order["id"].as_str().unwrap();
        app.wait_status(id, "confirmed", Duration::from_secs(5))
            .await;
        assert_eq!(shop.inventory.reserved(a), 3);
        app.stop().await;
    }
}

/// The two turns of commits (a) and (c) the usual placement never takes, on
/// every backend (SQLite runs each commit as one script): a key row left
/// without an order is replaced by the new order's key, and an order
/// cancelled before its reservation's answer gets a `release` row again.
#[tokio::test]
async fn an_orderless_key_is_replaced_and_a_late_answer_to_a_cancelled_order_is_released() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let store = app.orders.store();
        let raw = shopeasy_runtime::db::Database::connect_lazy(
            db.url(),
            &shopeasy_runtime::settings::common::PoolSettings::default(),
        )
        .unwrap();
        let now = now_ms();
        // An older version claimed keys alone: a row with no order.
        sqlx::query(
            "INSERT INTO idempotency_keys (customer_id, idempotency_key, fingerprint, \
             recovery_point, locked_until, lock_token, created_at) \
             VALUES ('c-old', 'key-old', 'f', 'started', 0, 'gone', $1)",
        )
        .bind(now)
        .execute(raw.writer())
        .await
        .unwrap();
        let order = Order {
            id: Uuid::now_v7(),
            customer_id: "c-old".into(),
            status: OrderStatus::Pending,
            items: Vec::new(),
            total_cents: 0,
            created_at: now,
            updated_at: now,
        };
        let hold = KeyHold::new("c-old", "key-old");
        created(
            store,
            &order,
            Some(&NewKey {
                hold: &hold,
                fingerprint: "f",
                now,
                lock_until: now + 60_000,
            }),
        )
        .await;
        assert_eq!(
            store.key_state(&hold, now).await.unwrap(),
            Claim::InProgress {
                remaining_ms: 60_000
            },
            "{}: the key is the new order's, held by its request",
            db.name()
        );
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT order_id FROM idempotency_keys \
             WHERE customer_id = 'c-old' AND idempotency_key = 'key-old'",
        )
        .fetch_one(raw.pool())
        .await
        .unwrap();
        assert_eq!(owner, Some(order.id.to_string()), "{}", db.name());

        // Cancelled while pending; its release done; then Inventory's late
        // answer says the stock was reserved: it must be released again.
        let release = store
            .cancel(order.id, now, now + 60_000)
            .await
            .unwrap()
            .expect("a release task");
        store.finish_task(&release).await.unwrap();
        assert_eq!(store.task(order.id, Action::Release).await.unwrap(), None);
        let status = store
            .record_reservation(order.id, None, now + 1)
            .await
            .unwrap();
        assert_eq!(status, OrderStatus::Cancelled, "{}", db.name());
        assert!(
            store
                .task(order.id, Action::Release)
                .await
                .unwrap()
                .is_some(),
            "{}: the late reservation is released",
            db.name()
        );
        assert_eq!(store.task(order.id, Action::Reserve).await.unwrap(), None);
        app.stop().await;
    }
}

/// One reservation refused in one attempt and granted in another: Inventory
/// keeps no record of a refusal, so once a request's key lock and its
/// row's lease have run out, its attempt and the worker's can overlap, one
/// refused (the order `rejected`) and the other reserving later. The order
/// stays `rejected` and the late reservation gets a `release` row,
/// whichever attempt recorded the refusal — the request's (keyed) or the
/// worker's.
#[tokio::test]
async fn a_late_reservation_of_a_rejected_order_is_released() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let store = app.orders.store();
        let now = now_ms();
        // Recorded a minute ahead: a `release` row written then is due
        // then, so the app's worker leaves it in the outbox for the test.
        let later = now + 60_000;
        let short = [Shortage {
            product_id: Uuid::now_v7(),
            requested: 2,
            available: 1,
        }];
        let response = |body: &str| StoredResponse {
            status: 201,
            headers: Vec::new(),
            body: body.into(),
        };
        for refused_by_request in [true, false] {
            let customer = format!("c-late-{refused_by_request}");
            let order = Order {
                id: Uuid::now_v7(),
                customer_id: customer.clone(),
                status: OrderStatus::Pending,
                items: Vec::new(),
                total_cents: 0,
                created_at: now,
                updated_at: now,
            };
            let hold = KeyHold::new(&customer, "key-late");
            created(
                store,
                &order,
                Some(&NewKey {
                    hold: &hold,
                    fingerprint: "f",
                    now,
                    lock_until: now + 60_000,
                }),
            )
            .await;
            let (refused, granted) = if refused_by_request {
                // The request's attempt was refused and recorded; the
                // worker's succeeds late.
                let refused = store
                    .finish_reservation(
                        order.id,
                        Some(&short),
                        later,
                        Some((&hold, &response("refused"))),
                    )
                    .await
                    .unwrap();
                let granted = store
                    .finish_reservation(order.id, None, later, None)
                    .await
                    .unwrap();
                (refused, granted)
            } else {
                // The worker's attempt was refused and recorded; the
                // request's succeeds late.
                let refused = store
                    .finish_reservation(order.id, Some(&short), later, None)
                    .await
                    .unwrap();
                let granted = store
                    .finish_reservation(order.id, None, later, Some((&hold, &response("granted"))))
                    .await
                    .unwrap();
                (refused, granted)
            };
            let case = format!("{} ({customer})", db.name());
            assert_eq!(refused.status, OrderStatus::Rejected, "{case}");
            assert_eq!(refused.key_finished, refused_by_request, "{case}");
            assert_eq!(
                (granted.status, granted.key_finished),
                (OrderStatus::Rejected, false),
                "{case}: the order stays rejected, the key's answer unchanged"
            );
            assert_eq!(
                store.order(order.id).await.unwrap().unwrap().status,
                OrderStatus::Rejected,
                "{case}"
            );
            assert_eq!(
                store.shortages(order.id).await.unwrap(),
                short.to_vec(),
                "{case}: the refusal's shortages kept"
            );
            assert!(
                store
                    .task(order.id, Action::Release)
                    .await
                    .unwrap()
                    .is_some(),
                "{case}: the late reservation is released"
            );
            assert_eq!(
                store.task(order.id, Action::Reserve).await.unwrap(),
                None,
                "{case}"
            );
        }
        app.stop().await;
    }
}

/// A cancel racing the reservation's rejection: the rejection commits
/// while the cancel is under way. On Postgres the test holds the
/// rejection's transaction open until the cancel waits on the order's row,
/// then commits: with a plain read the cancel had already read `pending`
/// and, under read committed, its update overwrote the rejection. The
/// rejection stands and the cancel answers as for a rejected order. On
/// SQLite (one writer) the cancel waits for the transaction to begin at
/// all: the same answer, checked on both.
#[tokio::test]
async fn a_cancel_never_overwrites_a_rejection_committed_meanwhile() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let store = app.orders.store();
        let raw = shopeasy_runtime::db::Database::connect_lazy(
            db.url(),
            &shopeasy_runtime::settings::common::PoolSettings::default(),
        )
        .unwrap();
        let now = now_ms();
        let order = Order {
            id: Uuid::now_v7(),
            customer_id: "c-race".into(),
            status: OrderStatus::Pending,
            items: Vec::new(),
            total_cents: 0,
            created_at: now,
            updated_at: now,
        };
        created(store, &order, None).await;
        let id = order.id;
        // The reservation's rejection, written but not committed: it holds
        // the order's row (on SQLite, the one write lock).
        let mut rejection = raw.begin_write().await.unwrap();
        let rejected = sqlx::query(
            "UPDATE orders SET status = 'rejected', updated_at = $2 \
             WHERE id = $1 AND status = 'pending'",
        )
        .bind(id.to_string())
        .bind(now + 1)
        .execute(&mut *rejection)
        .await
        .unwrap()
        .rows_affected();
        assert_eq!(rejected, 1, "{}", db.name());
        let cancel = tokio::spawn({
            let store = store.clone();
            async move { store.cancel(id, now + 2, now + 60_000).await }
        });
        if db.is_postgres() {
            // Commit only once the cancel waits on the row: it has begun,
            // and a plain read has already seen `pending`.
            let waiting = eventually(Duration::from_secs(5), || async {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND wait_event_type = 'Lock' AND query LIKE '%orders%'",
                )
                .fetch_one(raw.pool())
                .await
                .unwrap();
                n > 0
            })
            .await;
            assert!(
                waiting,
                "{}: the cancel never waited on the order's row",
                db.name()
            );
        } else {
            // SQLite's one writer: the cancel cannot begin before the
            // rejection commits, whenever it starts; let it start now.
            tokio::task::yield_now().await;
        }
        rejection.commit().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), cancel)
            .await
            .expect("the cancel answered")
            .unwrap();
        assert!(
            matches!(answer, Err(StoreError::Conflict)),
            "{}: not cancellable, as if the rejection had been read first: {answer:?}",
            db.name()
        );
        assert_eq!(
            store.order(id).await.unwrap().unwrap().status,
            OrderStatus::Rejected,
            "{}: the rejection stands",
            db.name()
        );
        assert_eq!(
            store.task(id, Action::Release).await.unwrap(),
            None,
            "{}: nothing to release",
            db.name()
        );
        app.stop().await;
    }
}
