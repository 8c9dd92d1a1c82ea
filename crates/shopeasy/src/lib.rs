//! The ShopEasy launcher.
//!
//! `shopeasy` (the workspace's default `cargo run` target) runs the whole
//! system in one process — embedded mode, SPEC §2 — and `shopeasy load`
//! drives a running system with an open-loop load.

pub mod load;
