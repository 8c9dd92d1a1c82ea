//! The embedded migrations are exactly the files of `migrations/order/`.

use std::path::Path;

#[test]
fn embedded_migrations_match_the_folder() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/order");
    let files = shopeasy_runtime::db::migration_files(&dir).unwrap();
    let embedded: Vec<(i64, String)> = shopeasy_order::migrator()
        .iter()
        .map(|m| (m.version, m.description.to_string()))
        .collect();
    assert_eq!(embedded, files);
}
