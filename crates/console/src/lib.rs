//! The ShopEasy console (issue 18, SPEC §12): a live resilience dashboard
//! on its own loopback listener.
//!
//! About twice a second it reads every admin listener's
//! `/admin/resilience` and `/metrics` and the fault API's `/proxies`, turns
//! them into one [`Snapshot`] and pushes it to the page over server-sent
//! events. The page draws the topology (each edge coloured by its success
//! rate, as wide as its request rate, with toxic and breaker badges), each
//! breaker's state over time, the retry budgets, the stock cache, the
//! outbox, admission and limits, and the load generator; its buttons add and
//! remove toxics, disable edges and heal everything — only with the admin
//! token, and only from its own origin.
//!
//! How the pieces fit, in the order a snapshot travels:
//!
//! - [`settings`]: what to read and where to listen (loopback unless told);
//! - [`poll`]: the loop that reads everything each interval;
//! - [`prom`]: reading the `/metrics` pages;
//! - [`observe`]: one round of reads (plus the previous rounds) → a
//!   [`Snapshot`] — pure, so every rate and history is unit-tested;
//! - [`snapshot`]: the typed model the page and the events carry;
//! - [`sse`]: `GET /events`;
//! - [`guard`]: Host, same-origin and admin-token checks;
//! - [`faults`]: the fault controls forwarded to the fault API;
//! - [`load`]: the [`LoadControl`] trait the launcher implements;
//! - [`orders`]: the page's "buy one" button and the orders it follows;
//! - [`traces`]: the [`TraceSource`] trait behind "a recent order's path";
//! - [`scenes`]: the [`scenes::SceneControl`] trait behind the Scenarios panel;
//! - [`presentation`]: faults cycled on a seeded schedule, for talks;
//! - [`stage`]: a scene or presentation mode, never both;
//! - [`stores`]: each service's Postgres and Redis, in full mode;
//! - [`assets`]: the embedded page;
//! - [`server`]: the router, [`Console::bind`] and [`Console::serve`];
//! - [`error`]: the one error enum and its problem+json.

pub mod assets;
pub mod error;
pub mod faults;
pub mod guard;
pub mod load;
pub mod observe;
pub mod orders;
pub mod poll;
pub mod presentation;
pub mod prom;
pub mod scenes;
pub mod server;
pub mod settings;
pub mod snapshot;
pub mod sse;
pub mod stage;
pub mod stores;
pub mod traces;

pub use load::{LoadControl, LoadRequest, LoadStatus};
pub use server::{Console, StartError};
pub use settings::{ConsoleSettings, ServiceTarget};
pub use snapshot::Snapshot;
pub use traces::{AttemptView, Hop, OrderPath, TraceSource};

/// Now, in Unix milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
