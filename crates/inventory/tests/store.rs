//! The store's contract, on SQLite and (when configured) Postgres: the same
//! tests, the same answers.

// Test helpers panic on a failed set-up, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use shopeasy_inventory::{
    Error, Store,
    domain::{ProductId, Reservation, ReservationId},
};
use shopeasy_runtime::{
    db::{self, Database},
    settings::common::PoolSettings,
};
use shopeasy_testkit::TestDatabase;
use tokio::time::Instant;

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn product(raw: &str) -> ProductId {
    ProductId::parse("product_id", raw).unwrap()
}

fn reservation(id: &str, lines: &[(&str, i64)]) -> Reservation {
    Reservation::parse(id, lines.iter().copied()).unwrap()
}

async fn store(test_db: &TestDatabase) -> Store {
    let db = Database::connect_and_migrate(
        test_db.url(),
        &PoolSettings::default(),
        &shopeasy_inventory::migrator(),
    )
    .await
    .unwrap();
    Store::new(db)
}

/// Asserts `initial = available + reserved` for `p`.
async fn assert_conserved(store: &Store, p: &str, initial: i64) {
    let available = store.get_stock(&product(p), soon()).await.unwrap();
    let reserved = store.reserved(&product(p), soon()).await.unwrap();
    assert!(available >= 0);
    assert_eq!(
        available + reserved,
        initial,
        "available {available} + reserved {reserved}"
    );
}

#[test]
fn embedded_migrations_match_the_folder() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/inventory");
    let files = db::migration_files(&dir).unwrap();
    let embedded: Vec<(i64, String)> = shopeasy_inventory::migrator()
        .iter()
        .map(|m| (m.version, m.description.to_string()))
        .collect();
    assert_eq!(files, embedded);
}

#[tokio::test]
async fn set_and_get_stock() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let p = id();
        assert!(matches!(
            store.get_stock(&product(&p), soon()).await,
            Err(Error::UnknownProduct(_))
        ));
        assert_eq!(store.set_stock(&product(&p), 7, soon()).await.unwrap(), 7);
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 7);
        store.set_stock(&product(&p), 3, soon()).await.unwrap();
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 3);
    }
}

#[tokio::test]
async fn reservations_take_every_line_or_none() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let (a, b, c) = (id(), id(), id());
        store.set_stock(&product(&a), 5, soon()).await.unwrap();
        store.set_stock(&product(&b), 1, soon()).await.unwrap();
        store.set_stock(&product(&c), 0, soon()).await.unwrap();

        let r = reservation(&id(), &[(&a, 2), (&b, 2), (&c, 1)]);
        let Err(Error::InsufficientStock(short)) = store.reserve(&r, soon()).await else {
            panic!("expected insufficient stock");
        };
        let named: Vec<(&str, i64, i64)> = short
            .iter()
            .map(|s| (s.product_id.as_str(), s.requested, s.available))
            .collect();
        assert_eq!(named, [(b.as_str(), 2, 1), (c.as_str(), 1, 0)]);
        assert_conserved(&store, &a, 5).await;
        assert_conserved(&store, &b, 1).await;

        let unknown = id();
        let r = reservation(&id(), &[(&a, 1), (&unknown, 1)]);
        assert!(matches!(
            store.reserve(&r, soon()).await,
            Err(Error::UnknownProduct(p)) if p.as_str() == unknown
        ));
        assert_conserved(&store, &a, 5).await;

        let r = reservation(&id(), &[(&b, 1), (&a, 5)]);
        let reserved = store.reserve(&r, soon()).await.unwrap();
        assert!(!reserved.replayed);
        assert_eq!(reserved.lines, r.lines(), "lines in the order asked");
        assert_eq!(store.get_stock(&product(&a), soon()).await.unwrap(), 0);
        assert_conserved(&store, &a, 5).await;
        assert_conserved(&store, &b, 1).await;
    }
}

#[tokio::test]
async fn a_repeated_reservation_reserves_nothing_more() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let (a, b, rid) = (id(), id(), id());
        store.set_stock(&product(&a), 10, soon()).await.unwrap();
        store.set_stock(&product(&b), 10, soon()).await.unwrap();
        let r = reservation(&rid, &[(&a, 3), (&b, 1)]);
        let first = store.reserve(&r, soon()).await.unwrap();
        let again = store.reserve(&r, soon()).await.unwrap();
        assert!(!first.replayed && again.replayed);
        assert_eq!(first.lines, again.lines, "answers as the first time");
        assert_eq!(store.get_stock(&product(&a), soon()).await.unwrap(), 7);

        // The same id with other lines is a conflict, not a new reservation.
        let other = reservation(&rid, &[(&a, 4), (&b, 1)]);
        assert!(matches!(
            store.reserve(&other, soon()).await,
            Err(Error::ReservationConflict(_))
        ));
        assert_conserved(&store, &a, 10).await;
    }
}

#[tokio::test]
async fn release_returns_exactly_what_was_reserved_once() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let (a, b, rid) = (id(), id(), id());
        store.set_stock(&product(&a), 4, soon()).await.unwrap();
        store.set_stock(&product(&b), 4, soon()).await.unwrap();
        let r = reservation(&rid, &[(&a, 3), (&b, 2)]);
        store.reserve(&r, soon()).await.unwrap();
        assert_conserved(&store, &a, 4).await;

        let rid = ReservationId::parse("reservation_id", &rid).unwrap();
        let released = store.release(&rid, soon()).await.unwrap();
        assert_eq!(released, r.lines());
        assert_eq!(store.get_stock(&product(&a), soon()).await.unwrap(), 4);
        assert_eq!(store.get_stock(&product(&b), soon()).await.unwrap(), 4);
        assert!(
            store.release(&rid, soon()).await.unwrap().is_empty(),
            "twice"
        );
        assert_conserved(&store, &a, 4).await;

        // A released reservation is not made again.
        assert!(matches!(
            store.reserve(&r, soon()).await,
            Err(Error::ReservationReleased(_))
        ));

        // Releasing an unknown id is fine and refuses a late reservation.
        let late = id();
        let late_id = ReservationId::parse("reservation_id", &late).unwrap();
        assert!(store.release(&late_id, soon()).await.unwrap().is_empty());
        assert!(matches!(
            store.reserve(&reservation(&late, &[(&a, 1)]), soon()).await,
            Err(Error::ReservationReleased(_))
        ));
        assert_conserved(&store, &a, 4).await;
    }
}

#[tokio::test]
async fn concurrent_reservations_never_oversell() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = Arc::new(store(&test_db).await);
        let p = id();
        store.set_stock(&product(&p), 10, soon()).await.unwrap();
        let calls = (0..50).map(|_| {
            let store = store.clone();
            let r = reservation(&id(), &[(&p, 1)]);
            tokio::spawn(async move { store.reserve(&r, soon()).await })
        });
        let results = futures::future::join_all(calls).await;
        let ok = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        let short = results
            .iter()
            .filter(|r| matches!(r, Ok(Err(Error::InsufficientStock(_)))))
            .count();
        assert_eq!((ok, short), (10, 40), "{}: {results:?}", test_db.name());
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 0);
        assert_conserved(&store, &p, 10).await;
    }
}

#[tokio::test]
async fn concurrent_repeats_of_one_reservation_reserve_once() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = Arc::new(store(&test_db).await);
        let (p, rid) = (id(), id());
        store.set_stock(&product(&p), 100, soon()).await.unwrap();
        let r = reservation(&rid, &[(&p, 7)]);
        let calls = (0..20).map(|_| {
            let (store, r) = (store.clone(), r.clone());
            tokio::spawn(async move { store.reserve(&r, soon()).await })
        });
        let results: Vec<_> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert_eq!(results.iter().filter(|r| !r.replayed).count(), 1);
        assert!(results.iter().all(|r| r.lines == results[0].lines));
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 93);
        assert_conserved(&store, &p, 100).await;
    }
}

#[tokio::test]
async fn a_passed_deadline_does_no_work() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let p = id();
        store.set_stock(&product(&p), 1, soon()).await.unwrap();
        let r = reservation(&id(), &[(&p, 1)]);
        let result = store.reserve(&r, Instant::now()).await;
        assert!(
            matches!(result, Err(Error::DeadlineExceeded)),
            "{}: {result:?}",
            test_db.name()
        );
        assert_eq!(
            store.get_stock(&product(&p), soon()).await.unwrap(),
            1,
            "{}",
            test_db.name()
        );
    }
}

#[tokio::test]
async fn a_blocked_write_is_abandoned_at_the_deadline() {
    for test_db in shopeasy_testkit::all_backends().await {
        let store = store(&test_db).await;
        let p = id();
        store.set_stock(&product(&p), 5, soon()).await.unwrap();
        // Hold the row (Postgres) or the write lock (SQLite) from outside.
        let mut blocker = store.database().begin_write().await.unwrap();
        sqlx::query("UPDATE stock SET updated_at = updated_at WHERE product_id = $1")
            .bind(&p)
            .execute(&mut *blocker)
            .await
            .unwrap();

        let started = Instant::now();
        let r = reservation(&id(), &[(&p, 1)]);
        let result = store
            .reserve(&r, started + Duration::from_millis(300))
            .await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::DeadlineExceeded)),
            "{}: {result:?}",
            test_db.name()
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(900),
            "{}: answered after {took:?}",
            test_db.name()
        );
        blocker.rollback().await.unwrap();

        // Nothing was reserved, and the store works on.
        assert_conserved(&store, &p, 5).await;
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 5);
        for _ in 0..5 {
            store
                .reserve(&reservation(&id(), &[(&p, 1)]), soon())
                .await
                .unwrap();
        }
        assert_eq!(store.get_stock(&product(&p), soon()).await.unwrap(), 0);
        assert_conserved(&store, &p, 5).await;
    }
}
