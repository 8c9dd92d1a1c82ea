//! What every matrix test file shares, one concern a module:
//!
//! - [`fixture`]: one cluster at a time per test binary (metrics are per
//!   process, and the machine has two cores), its admin and database
//!   readers, and the customer's moves (seed, order, read);
//! - [`cells`]: the assertions a FAULTS.md cell is made of, named by its
//!   codes (L, A(n), CB, R, C1–C9), so that each test reads as its cell;
//! - [`toxics`]: the fault of each column (F2 reset, F3 hang, F4 latency,
//!   F5 slicer and bandwidth);
//! - [`pg_tap`]: a Postgres wire tap that counts the statements a service
//!   runs;
//! - [`redis`]: what the test Redis holds, and the reconnect schedule of
//!   the services' Redis clients with the log that checks it;
//! - [`stats`]: seeding a catalogue.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod cells;
pub mod fixture;
pub mod pg_tap;
pub mod redis;
pub mod stats;
pub mod toxics;

pub use cells::*;
pub use fixture::{CUSTOMER, Fixture, REDIS_EDGES, key, order_body, order_id};
pub use pg_tap::{PRODUCT_BY_ID_SQL, PgTap};
pub use redis::{
    ConnectionLog, assert_redis_backoff, redis_delete, redis_keys, redis_reconnect_bound,
};
pub use stats::seed_catalogue;
