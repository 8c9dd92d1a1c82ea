//! Integration tests of the Product service: one binary, real servers on
//! 127.0.0.1:0, a fresh database per test (Postgres when
//! `SHOPEASY_TEST_POSTGRES` is set, SQLite always), Redis shared by key
//! prefix or private (`PrivateRedis`) for the fault tests.

// Test helpers (not `#[test]` functions themselves) may unwrap too.
#![allow(clippy::unwrap_used)]

mod cache;
mod fuzz;
mod helpers;
mod pagination;
mod problems;
mod redis_faults;
mod routes;
mod store;
