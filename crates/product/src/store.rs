//! The catalogue in the service's own database (Postgres or SQLite, one
//! portable dialect: see `shopeasy_runtime::db`).

use shopeasy_product_api::{Product, ProductPage};
use shopeasy_runtime::db::Database;
use sqlx::{
    Row,
    any::{Any, AnyArguments, AnyRow},
    query::Query,
};
use uuid::Uuid;

use crate::{Error, cursor::Cursor, domain::ProductDraft};

/// Reads and writes products.
#[derive(Debug, Clone)]
pub struct ProductStore {
    db: Database,
}

impl ProductStore {
    /// A store over `db` (migrated with [`crate::migrator`]).
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// The database, for readiness checks.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Adds a product with a fresh id (UUIDv7: ids sort by creation).
    ///
    /// # Errors
    /// [`Error::DuplicateSku`], [`Error::Unavailable`], [`Error::Internal`].
    pub async fn create(&self, draft: &ProductDraft) -> Result<Product, Error> {
        let id = Uuid::now_v7();
        with_fields(
            "INSERT INTO products (id, sku, name, description, price_cents, currency, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
            id,
            draft,
        )
        .execute(self.db.writer())
        .await?;
        Ok(product(id, draft))
    }

    /// The product with `id`, if any.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Internal`].
    pub async fn get(&self, id: Uuid) -> Result<Option<Product>, Error> {
        let row = sqlx::query(
            "SELECT id, sku, name, description, price_cents, currency FROM products WHERE id = $1",
        )
        .bind(id.to_string())
        .fetch_optional(self.db.pool())
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Replaces every field of the product with `id`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::DuplicateSku`], [`Error::Unavailable`],
    /// [`Error::Internal`].
    pub async fn update(&self, id: Uuid, draft: &ProductDraft) -> Result<Product, Error> {
        let done = with_fields(
            "UPDATE products SET sku = $2, name = $3, description = $4, price_cents = $5, \
             currency = $6, updated_at = $7 WHERE id = $1",
            id,
            draft,
        )
        .execute(self.db.writer())
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::NotFound);
        }
        Ok(product(id, draft))
    }

    /// Deletes the product with `id`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Unavailable`], [`Error::Internal`].
    pub async fn delete(&self, id: Uuid) -> Result<(), Error> {
        let done = sqlx::query("DELETE FROM products WHERE id = $1")
            .bind(id.to_string())
            .execute(self.db.writer())
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    /// Up to `limit` products in id order, starting after `after`.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Internal`].
    pub async fn list(&self, after: Option<Cursor>, limit: u32) -> Result<ProductPage, Error> {
        // One more than asked tells whether a next page exists.
        let fetch = i64::from(limit) + 1;
        let rows = match after {
            Some(cursor) => {
                sqlx::query(
                    "SELECT id, sku, name, description, price_cents, currency FROM products \
                     WHERE id > $1 ORDER BY id LIMIT $2",
                )
                .bind(cursor.last_id().to_string())
                .bind(fetch)
                .fetch_all(self.db.pool())
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT id, sku, name, description, price_cents, currency FROM products \
                     ORDER BY id LIMIT $1",
                )
                .bind(fetch)
                .fetch_all(self.db.pool())
                .await?
            }
        };
        let mut items = rows.iter().map(from_row).collect::<Result<Vec<_>, _>>()?;
        let next_cursor = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|p| Cursor::after(p.id).encode())
        } else {
            None
        };
        Ok(ProductPage { items, next_cursor })
    }
}

/// `sql` with the parameters a create and a replace share: `$1` the id,
/// `$2`…`$6` the draft's fields in column order, `$7` now (ms).
fn with_fields(
    sql: &'static str,
    id: Uuid,
    draft: &ProductDraft,
) -> Query<'static, Any, AnyArguments> {
    sqlx::query(sql)
        .bind(id.to_string())
        .bind(draft.sku.as_str())
        .bind(draft.name.as_str())
        .bind(draft.description.as_str())
        .bind(draft.price.cents())
        .bind(draft.currency.as_str())
        .bind(now_ms())
}

fn product(id: Uuid, draft: &ProductDraft) -> Product {
    Product {
        id,
        sku: draft.sku.as_str().to_owned(),
        name: draft.name.as_str().to_owned(),
        description: draft.description.as_str().to_owned(),
        price_cents: draft.price.cents(),
        currency: draft.currency.as_str().to_owned(),
    }
}

fn from_row(row: &AnyRow) -> Result<Product, Error> {
    let id: String = row.try_get("id")?;
    Ok(Product {
        id: Uuid::try_parse(&id).map_err(|e| Error::Internal(std::sync::Arc::new(e)))?,
        sku: row.try_get("sku")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        price_cents: row.try_get("price_cents")?,
        currency: row.try_get("currency")?,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
