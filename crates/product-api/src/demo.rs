//! The demo catalogue: twelve products and their stock, with ids derived
//! from the SKUs.
//!
//! It is defined once, here, because three parts must agree on it without
//! talking to each other: the Product service seeds the products, the
//! Inventory service seeds the stock (keyed by product id), and the embedded
//! launcher turns both seeds on. An id is the UUIDv5 of the SKU in
//! [`NAMESPACE`], so each service computes the same ids on its own, on any
//! database, in any start order.
//!
//! ```
//! use shopeasy_product_api::demo;
//! let mug = &demo::CATALOGUE[0];
//! assert_eq!(mug.sku, "MUG-001");
//! assert_eq!(mug.id(), demo::product_id("MUG-001"));
//! assert_eq!(mug.id().get_version_num(), 5);
//! ```

use uuid::Uuid;

use crate::Product;

/// The namespace of the demo ids: UUIDv5 of
/// `https://shopeasy.example/demo-catalogue` in the URL namespace (a test
/// recomputes it), so anyone can derive an id with any UUID library.
pub const NAMESPACE: Uuid = Uuid::from_u128(0x5209_e723_2a23_5873_a068_100b_8893_26d4);

/// The currency of every demo price.
pub const CURRENCY: &str = "EUR";

/// The creation time written with every seeded row (2026-01-01T00:00:00Z, in
/// Unix milliseconds): fixed, so every seeded database holds the same rows.
pub const SEEDED_AT_MS: i64 = 1_767_225_600_000;

/// One demo product and the stock Inventory starts it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoItem {
    /// Its SKU (the id derives from it).
    pub sku: &'static str,
    /// Display name.
    pub name: &'static str,
    /// Free text.
    pub description: &'static str,
    /// Price in cents of [`CURRENCY`].
    pub price_cents: i64,
    /// Units available at start.
    pub stock: i64,
}

impl DemoItem {
    /// Its product id: [`product_id`] of its SKU.
    pub fn id(&self) -> Uuid {
        product_id(self.sku)
    }

    /// The product as the Product service serves it.
    pub fn product(&self) -> Product {
        Product {
            id: self.id(),
            sku: self.sku.to_owned(),
            name: self.name.to_owned(),
            description: self.description.to_owned(),
            price_cents: self.price_cents,
            currency: CURRENCY.to_owned(),
        }
    }
}

/// The id of the demo product with `sku`: UUIDv5 of the SKU in [`NAMESPACE`].
pub fn product_id(sku: &str) -> Uuid {
    Uuid::new_v5(&NAMESPACE, sku.as_bytes())
}

const fn item(
    sku: &'static str,
    name: &'static str,
    description: &'static str,
    price_cents: i64,
    stock: i64,
) -> DemoItem {
    DemoItem {
        sku,
        name,
        description,
        price_cents,
        stock,
    }
}

/// The demo catalogue. Two items have little stock so "out of stock" is
/// easy to see.
pub const CATALOGUE: [DemoItem; 12] = [
    item(
        "MUG-001",
        "Enamel mug",
        "A camp mug that survives drops.",
        1_200,
        100,
    ),
    item(
        "TEE-002",
        "Plain tee",
        "Organic cotton, one colour, every size.",
        1_900,
        100,
    ),
    item(
        "CAP-003",
        "Canvas cap",
        "Keeps the sun off a tired engineer.",
        1_500,
        100,
    ),
    item(
        "BAG-004",
        "Tote bag",
        "Carries a laptop and a lunch.",
        2_200,
        100,
    ),
    item(
        "PEN-005",
        "Gel pen",
        "Writes on whiteboards' margins.",
        300,
        500,
    ),
    item(
        "BOT-006",
        "Steel bottle",
        "Cold for a day, hot for half.",
        2_800,
        100,
    ),
    item(
        "NOT-007",
        "Notebook",
        "Dotted pages for diagrams of retries.",
        900,
        200,
    ),
    item(
        "STK-008",
        "Sticker pack",
        "Circuit breakers, half-open.",
        500,
        1_000,
    ),
    item(
        "HOD-009",
        "Hoodie",
        "Warm enough for an on-call night.",
        4_900,
        50,
    ),
    item("SOC-010", "Socks", "Two pairs, no holes.", 1_100, 100),
    item(
        "LMP-011",
        "Desk lamp",
        "Limited edition: only three made.",
        7_500,
        3,
    ),
    item(
        "KEY-012",
        "Keyboard",
        "Quiet switches. One left.",
        12_900,
        1,
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_namespace_is_the_documented_v5_name() {
        let name = b"https://shopeasy.example/demo-catalogue";
        assert_eq!(NAMESPACE, Uuid::new_v5(&Uuid::NAMESPACE_URL, name));
    }

    #[test]
    fn ids_are_stable_distinct_and_derived_from_the_sku() {
        // A fixed value: changing the namespace or the derivation would
        // orphan the stock of every existing demo database.
        assert_eq!(
            product_id("MUG-001").to_string(),
            "86fcd549-bb1b-50ff-add3-b7d9cbe6d0b4"
        );
        let ids: BTreeSet<Uuid> = CATALOGUE.iter().map(DemoItem::id).collect();
        let skus: BTreeSet<&str> = CATALOGUE.iter().map(|i| i.sku).collect();
        assert_eq!(ids.len(), CATALOGUE.len());
        assert_eq!(skus.len(), CATALOGUE.len());
        for item in &CATALOGUE {
            assert_eq!(item.product().id, product_id(item.sku));
            assert!(item.stock >= 0 && item.price_cents >= 0, "{}", item.sku);
        }
    }
}
