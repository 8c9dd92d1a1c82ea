//! The ShopEasy launcher.
//!
//! `shopeasy` (the workspace's default `cargo run` target) runs the whole
//! system in one process — embedded mode, SPEC §2: the four services on
//! SQLite under a data folder, in-process caches, a fault proxy on every
//! service-to-service edge, and the Toxiproxy-compatible API to break them.
//! `shopeasy load` drives a running system with an open-loop load.
//!
//! - [`system`]: starting and stopping the embedded system.
//! - [`seed`]: the demo catalogue written on first start.
//! - [`load`]: the load generator.
//! - [`policy`]: the whole chain's timeout and retry check, run before
//!   anything starts.

pub mod load;
pub mod policy;
pub mod seed;
pub mod system;
