//! The order service's integration tests: one binary, real servers on
//! 127.0.0.1:0, a fresh database per test (Postgres when
//! `SHOPEASY_TEST_POSTGRES` is set, SQLite always).

#![allow(clippy::unwrap_used)]

mod clients;
mod commits;
mod fakes;
mod helpers;
mod idempotency;
mod migrations;
mod openapi;
mod orders;
mod ownership;
mod problems;
mod real_inventory;
mod stock;
mod stock_cache;
mod throttle;
