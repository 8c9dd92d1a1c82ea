//! The ShopEasy launcher.
//!
//! `shopeasy` (the workspace's default `cargo run` target) runs the whole
//! system in one process — embedded mode, SPEC §2: the four services on
//! SQLite under a data folder, in-process caches, a fault proxy on every
//! service-to-service edge, and the Toxiproxy-compatible API to break them.
//! `shopeasy load` drives a running system with an open-loop load;
//! `shopeasy demo <scene>` replays a pattern of the lesson against it.
//!
//! - [`system`]: starting and stopping the embedded system.
//! - [`seed`]: the demo catalogue written on first start.
//! - [`load`]: the load generator.
//! - [`console_load`]: the console's load panel, on that generator.
//! - [`console_scenes`]: the console's Scenarios panel, on [`demo`].
//! - [`console_traces`]: the console's "recent order's path", from the
//!   spans this process keeps.
//! - [`demo`]: the lesson's scenes, run against the live system.
//! - [`policy`]: the whole chain's timeout and retry check, run before
//!   anything starts.

pub mod console_load;
pub mod console_scenes;
pub mod console_traces;
pub mod demo;
pub mod load;
pub mod policy;
pub mod seed;
pub mod system;
