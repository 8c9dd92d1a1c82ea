//! Embedded migrations run on SQLite and on Postgres, twice without harm,
//! and from several replicas at once.

use shopeasy_runtime::{
    db::{self, Backend, Database},
    settings::common::PoolSettings,
};

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "widgets", include_str!("migrations/0001_widgets.sql")),
    (
        2,
        "widget_names",
        include_str!("migrations/0002_widget_names.sql"),
    ),
];

#[test]
fn embedded_list_matches_the_folder() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/migrations");
    let files = db::migration_files(&dir).unwrap();
    let embedded: Vec<(i64, String)> = MIGRATIONS
        .iter()
        .map(|(v, d, _)| (*v, (*d).to_owned()))
        .collect();
    assert_eq!(files, embedded);
}

#[tokio::test]
async fn migrations_run_on_both_backends() {
    let migrator = db::migrator(MIGRATIONS);
    for test_db in shopeasy_testkit::all_backends().await {
        let settings = PoolSettings::default();
        // Two replicas starting together: the migrations run once.
        let (a, b) = tokio::join!(
            Database::connect_and_migrate(test_db.url(), &settings, &migrator),
            Database::connect_and_migrate(test_db.url(), &settings, &migrator),
        );
        let (a, _b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            a.backend(),
            if test_db.is_postgres() {
                Backend::Postgres
            } else {
                Backend::Sqlite
            }
        );
        a.ping().await.unwrap();
        sqlx::query("INSERT INTO widgets (id, quantity, name) VALUES ($1, $2, $3)")
            .bind("w1")
            .bind(3_i64)
            .bind("bolt")
            .execute(a.pool())
            .await
            .unwrap();
        let (q, name): (i64, String) =
            sqlx::query_as("SELECT quantity, name FROM widgets WHERE id = $1")
                .bind("w1")
                .fetch_one(a.pool())
                .await
                .unwrap();
        assert_eq!((q, name.as_str()), (3, "bolt"));
        let negative = sqlx::query("INSERT INTO widgets (id, quantity) VALUES ('w2', -1)")
            .execute(a.pool())
            .await;
        assert!(
            negative.is_err(),
            "CHECK constraints hold on {:?}",
            a.backend()
        );

        // Running again is a no-op.
        Database::connect_and_migrate(test_db.url(), &settings, &migrator)
            .await
            .unwrap();
        let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(a.pool())
            .await
            .unwrap();
        assert_eq!(applied, 2);
        let mut tx = a.begin_write().await.unwrap();
        sqlx::query("UPDATE widgets SET quantity = quantity - 1 WHERE id = 'w1'")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn an_unreachable_database_fails_within_the_startup_timeout() {
    let settings = PoolSettings {
        acquire_timeout_seconds: shopeasy_runtime::settings::Seconds::new(0.2),
        startup_timeout_seconds: shopeasy_runtime::settings::Seconds::new(0.5),
        ..PoolSettings::default()
    };
    let port = shopeasy_testkit::free_port();
    let started = tokio::time::Instant::now();
    let result = Database::connect_and_migrate(
        &format!("postgres://postgres@127.0.0.1:{port}/x"),
        &settings,
        &db::migrator(MIGRATIONS),
    )
    .await;
    assert!(result.is_err());
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}
