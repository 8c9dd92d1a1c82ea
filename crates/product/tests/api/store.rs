//! The store contract, on every backend (SQLite always, Postgres when
//! configured).

use serde_json::json;
use shopeasy_product::{
    Error, cursor::Cursor, domain::ProductDraft, migrator, store::ProductStore,
};
use shopeasy_runtime::{db::Database, settings::common::PoolSettings};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

fn draft(sku: &str, price: i64) -> ProductDraft {
    ProductDraft::parse(&json!({
        "sku": sku, "name": format!("N {sku}"), "description": "d",
        "price_cents": price, "currency": "USD"
    }))
    .unwrap()
}

#[tokio::test]
async fn store_contract_on_every_backend() {
    for db in shopeasy_testkit::all_backends().await {
        let database =
            Database::connect_and_migrate(db.url(), &PoolSettings::default(), &migrator())
                .await
                .unwrap();
        let store = ProductStore::new(database);
        let which = db.url().split(':').next().unwrap().to_owned();

        // Create and read back.
        let a = store.create(&draft("SKU-A", 100)).await.unwrap();
        assert_eq!(store.get(a.id).await.unwrap().as_ref(), Some(&a), "{which}");
        assert_eq!(a.price_cents, 100);
        assert!(store.get(Uuid::now_v7()).await.unwrap().is_none());

        // SKUs are unique, on create and on update.
        assert!(
            matches!(
                store.create(&draft("SKU-A", 1)).await,
                Err(Error::DuplicateSku)
            ),
            "{which}"
        );
        let b = store.create(&draft("SKU-B", 200)).await.unwrap();
        assert!(
            matches!(
                store.update(b.id, &draft("SKU-A", 1)).await,
                Err(Error::DuplicateSku)
            ),
            "{which}"
        );

        // Update replaces every field; unknown ids are NotFound.
        let b2 = store.update(b.id, &draft("SKU-B2", 0)).await.unwrap();
        assert_eq!(store.get(b.id).await.unwrap(), Some(b2.clone()));
        assert_eq!(b2.sku, "SKU-B2");
        assert!(matches!(
            store.update(Uuid::now_v7(), &draft("SKU-C", 1)).await,
            Err(Error::NotFound)
        ));

        // Pages come in id (creation) order, and end with no cursor.
        let c = store.create(&draft("SKU-C", 300)).await.unwrap();
        let first = store.list(None, 2).await.unwrap();
        assert_eq!(
            first.items.iter().map(|p| p.id).collect::<Vec<_>>(),
            [a.id, b.id],
            "{which}"
        );
        let cursor = Cursor::parse(first.next_cursor.as_deref().unwrap()).unwrap();
        let second = store.list(Some(cursor), 2).await.unwrap();
        assert_eq!(second.items, std::slice::from_ref(&c));
        assert_eq!(second.next_cursor, None);
        // A page that exactly fills the limit has no next page either.
        assert_eq!(store.list(None, 3).await.unwrap().next_cursor, None);

        // Delete; deleting again is NotFound.
        store.delete(a.id).await.unwrap();
        assert!(store.get(a.id).await.unwrap().is_none());
        assert!(matches!(store.delete(a.id).await, Err(Error::NotFound)));
        // A cursor whose product was deleted still pages on.
        let after_a = store.list(Some(Cursor::after(a.id)), 10).await.unwrap();
        assert_eq!(after_a.items.len(), 2, "{which}");
    }
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_not_internal() {
    let settings = PoolSettings {
        acquire_timeout_seconds: shopeasy_runtime::settings::Seconds::new(0.3),
        ..PoolSettings::default()
    };
    let port = shopeasy_testkit::free_port();
    let db = Database::connect_lazy(&format!("postgres://nobody@127.0.0.1:{port}/x"), &settings)
        .unwrap();
    let store = ProductStore::new(db);
    assert!(matches!(
        store.get(Uuid::now_v7()).await,
        Err(Error::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_statement_cancelled_by_its_timeout_is_unavailable_not_internal() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    // A real cancellation (SQLSTATE 57014), as Postgres reports a query
    // that ran past `statement_timeout`.
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("SET statement_timeout = 1")
        .execute(&mut conn)
        .await
        .unwrap();
    let cancelled = sqlx::query("SELECT pg_sleep(1)")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert!(
        shopeasy_runtime::db::is_statement_timeout(&cancelled),
        "{cancelled:?}"
    );
    let error = Error::from(cancelled);
    assert!(matches!(error, Error::Unavailable(_)), "{error:?}");
}
