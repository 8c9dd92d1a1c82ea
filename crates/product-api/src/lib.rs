//! The Product service's HTTP contract (SPEC §3): the JSON types it accepts
//! and returns, and its route paths.
//!
//! It exists so the Order service (which reads products to price orders) and
//! the Product service itself share one definition of the wire format,
//! without the client depending on the server's web stack: this crate is
//! serde only. With the `openapi` feature the types also derive
//! `utoipa::ToSchema`, which the service uses to generate its OpenAPI
//! document from these very types.
//!
//! ```
//! use shopeasy_product_api::{Product, paths};
//! let id = uuid::Uuid::nil();
//! assert_eq!(paths::product(id), "/api/products/00000000-0000-0000-0000-000000000000");
//! let p: Product = serde_json::from_str(r#"{"id":"00000000-0000-0000-0000-000000000000",
//!     "sku":"TEA-001","name":"Tea","description":"","price_cents":450,"currency":"EUR"}"#).unwrap();
//! assert_eq!(p.price_cents, 450);
//! ```
//!
//! [`demo`] holds the demo catalogue (products, stock and their SKU-derived
//! ids) that Product and Inventory seed and the launcher turns on.

pub mod demo;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A product of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Product {
    /// Its id (a UUID).
    pub id: Uuid,
    /// Stock-keeping unit: 3 to 32 characters `A-Z`, `0-9` and `-`,
    /// starting with a letter or digit; unique in the catalogue.
    #[cfg_attr(
        feature = "openapi",
        schema(
            example = "TEA-001",
            pattern = "^[A-Z0-9][A-Z0-9-]{2,31}$",
            min_length = 3,
            max_length = 32
        )
    )]
    pub sku: String,
    /// Display name, 1 to 200 characters.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub name: String,
    /// Free text, at most 2,000 characters.
    #[cfg_attr(feature = "openapi", schema(max_length = 2000))]
    pub description: String,
    /// Price in the currency's minor unit (cents), never negative.
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 1_000_000_000_000_i64)
    )]
    pub price_cents: i64,
    /// ISO 4217 code, for example `EUR`.
    #[cfg_attr(feature = "openapi", schema(example = "EUR", pattern = "^[A-Z]{3}$"))]
    pub currency: String,
}

/// One page of the catalogue, in a stable order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProductPage {
    /// The products of this page.
    pub items: Vec<Product>,
    /// Pass as `cursor` to get the next page; `null` on the last page. Opaque:
    /// its format may change.
    pub next_cursor: Option<String>,
}

/// The body of `POST /api/products`: a product without its id.
///
/// Its schema's constraints are each implied by the service's rules, so
/// input that breaks one is always refused (the API conformance test
/// holds the service to that); the rules say more than a schema can (a
/// name is trimmed first and has no control characters, a currency is an
/// active ISO 4217 code), and those answer 422 naming the field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewProduct {
    /// See [`Product::sku`].
    #[cfg_attr(
        feature = "openapi",
        schema(
            example = "TEA-001",
            pattern = "^[A-Z0-9][A-Z0-9-]{2,31}$",
            min_length = 3,
            max_length = 32
        )
    )]
    pub sku: String,
    /// See [`Product::name`] (trimmed before it is counted).
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub name: String,
    /// See [`Product::description`]; may be omitted (empty), not `null`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 2000))]
    pub description: String,
    /// See [`Product::price_cents`].
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 1_000_000_000_000_i64)
    )]
    pub price_cents: i64,
    /// See [`Product::currency`].
    #[cfg_attr(feature = "openapi", schema(example = "EUR", pattern = "^[A-Z]{3}$"))]
    pub currency: String,
}

/// A SKU as a regular expression: the documents' `pattern` (the schema
/// attributes take it as a literal; the service's tests hold the two equal).
pub const SKU_PATTERN: &str = "^[A-Z0-9][A-Z0-9-]{2,31}$";

/// The shape every ISO 4217 alphabetic code has (the documents'
/// `pattern`; the service also checks the code is an active one).
pub const CURRENCY_PATTERN: &str = "^[A-Z]{3}$";

/// The body of `PUT /api/products/{id}`: it replaces every field, so it has
/// the same shape as [`NewProduct`].
pub type ProductUpdate = NewProduct;

/// The route paths, as served by the Product service and forwarded unchanged
/// by the gateway.
pub mod paths {
    use uuid::Uuid;

    /// `GET` (list, `?limit=&cursor=`) and `POST` (create).
    pub const PRODUCTS: &str = "/api/products";
    /// `GET`, `PUT`, `DELETE` of one product (axum route syntax).
    pub const PRODUCT: &str = "/api/products/{id}";
    /// The OpenAPI document.
    pub const OPENAPI: &str = "/api/products/openapi.json";
    /// The largest `limit` of one page.
    pub const MAX_LIMIT: u32 = 100;
    /// The `limit` when none is given.
    pub const DEFAULT_LIMIT: u32 = 20;

    /// The path of one product.
    pub fn product(id: Uuid) -> String {
        format!("{PRODUCTS}/{id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_product_description_defaults_to_empty() {
        let p: NewProduct =
            serde_json::from_str(r#"{"sku":"A-1","name":"x","price_cents":0,"currency":"EUR"}"#)
                .unwrap();
        assert_eq!(p.description, "");
    }

    #[test]
    fn page_round_trips() {
        let page = ProductPage {
            items: vec![],
            next_cursor: None,
        };
        let text = serde_json::to_string(&page).unwrap();
        assert_eq!(text, r#"{"items":[],"next_cursor":null}"#);
        assert_eq!(serde_json::from_str::<ProductPage>(&text).unwrap(), page);
    }
}
