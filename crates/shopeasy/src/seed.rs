//! The demo catalogue of the embedded mode: the one seed full mode uses too.
//!
//! The launcher writes nothing itself: it starts Product and Inventory with
//! `demo_seed` on ([`crate::system::System::start`]), and each seeds its own
//! part of [`CATALOGUE`] on an empty database, with ids derived from the
//! SKUs (`shopeasy_product_api::demo`). Compose and the Kubernetes demo set
//! `DEMO_SEED=true` and get the same products, ids and stock, without an
//! admin token or a gRPC client (`tests/seed.rs` compares the two).

pub use shopeasy_product_api::demo::{CATALOGUE, DemoItem, product_id};
