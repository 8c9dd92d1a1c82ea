//! Order service benchmarks (issues 6 and 19), printed as Markdown tables:
//!
//! 1. **placement**: order placement end to end — HTTP → order service →
//!    Postgres, with the real Inventory service (gRPC, its own Postgres
//!    database) and a stub Product service — without and with an
//!    `Idempotency-Key`, at each of `BENCH_CLIENTS` (default `8,32,128`)
//!    closed-loop clients for `BENCH_SECONDS`, next to `pgbench -N` at the
//!    same client count on the same server in the same run, in turns
//!    (`BENCH_SLICES`, default 5, alternating slices of each; pgbench capped
//!    below `max_connections` less the bench's pools); prints orders/s, p50/p99, the ratio to pgbench's
//!    tps, the commits per order counted by `pg_stat_database.xact_commit`
//!    over both databases, and a server-side profile (rows written per
//!    order and table, from `pg_stat_user_tables`; the backends' states,
//!    sampled from `pg_stat_activity`), and the machine's busy CPU per
//!    pgbench transaction and per order (`/proc/stat`, steal left out);
//! 2. **stampede**: 1,000 concurrent orders for one product whose stock
//!    cache entry just expired, counting `GetStock` calls at Inventory;
//! 3. **breaker open, stale entry**: latency of `POST /api/orders` while
//!    Inventory's breaker is open and the stock cache holds a stale entry.
//!
//! Needs `SHOPEASY_TEST_POSTGRES` (as the tests do). Run with
//! `cargo bench -p shopeasy-order --bench order`; `bench/order.sh` wraps it.

#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

#[allow(dead_code)]
#[path = "../tests/api/fakes.rs"]
mod fakes;
#[allow(dead_code)]
#[path = "../tests/api/helpers.rs"]
mod helpers;

use std::time::Duration;

use shopeasy_inventory::domain::ProductId;
use shopeasy_order::settings::OrderSettings;
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::quantile;
use tokio::time::Instant;
use uuid::Uuid;

/// The allocator of the service binaries, so the bench measures what they
/// run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use crate::{
    fakes::{FakeProduct, Mode},
    helpers::{Shop, TestApp, order_body, test_settings},
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var(shopeasy_testkit::POSTGRES_VAR).is_err() {
        eprintln!("order bench: set {} to run", shopeasy_testkit::POSTGRES_VAR);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // `cargo bench --bench order -- stampede` runs the parts whose name
    // contains the filter.
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let wanted = |name: &str| name.contains(filter.as_str());
    runtime.block_on(async {
        println!("| benchmark | result |\n|---|---|");
        if wanted("placement") {
            placement().await;
        }
        if wanted("stampede") {
            stampede().await;
        }
        if wanted("breaker_open_stale") {
            breaker_open_stale().await;
        }
    });
}

/// One placement run's figures.
struct Run {
    orders_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    failed: u64,
    commits_per_order: f64,
    order_db_commits_per_order: f64,
    profile: String,
    /// Statements per order, from `pg_stat_statements` when it is loaded.
    statements: Option<String>,
    /// Where the backends of both databases spent the run (sampled).
    waits: String,
    /// The machine's busy CPU time per order placed (every process: the
    /// clients, the services, Postgres), in milliseconds.
    cpu_ms_per_order: f64,
}

async fn placement() {
    let seconds = env("BENCH_SECONDS", 10);
    let clients: Vec<u64> = std::env::var("BENCH_CLIENTS")
        .unwrap_or_else(|_| "8,32,128".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let admin_url = std::env::var(shopeasy_testkit::POSTGRES_VAR).unwrap();
    let admin =
        shopeasy_runtime::db::Database::connect_lazy(&admin_url, &Default::default()).unwrap();
    let max_connections: i64 = sqlx::query_scalar::<_, String>("SHOW max_connections")
        .fetch_one(admin.pool())
        .await
        .unwrap()
        .parse()
        .unwrap();
    let scratch = shopeasy_testkit::postgres().await.unwrap();
    pgbench(&["-q", "-i", "-s", "10", scratch.url()]).await;
    println!(
        "\n| clients | pgbench -N tps (in turns with unkeyed / keyed) | unkeyed orders/s (p50 / p99 ms) | unkeyed ÷ pgbench | commits/order | keyed orders/s (p50 / p99 ms) | keyed ÷ pgbench | commits/order (order db) |\n|---|---|---|---|---|---|---|---|"
    );
    let mut profiles = Vec::new();
    let mut cpu = Vec::new();
    let slices = env("BENCH_SLICES", 5).max(1);
    let slice_seconds = (seconds / slices).max(1);
    for &c in &clients {
        // Each kind of order runs in turns with pgbench, `slices` times
        // (pgbench, orders, pgbench, orders, …), so that a machine whose
        // speed drifts during the run (another tenant of the host) slows
        // both alike, and each ratio is taken against its own turns of
        // pgbench. The rig's pools stay open between its turns: pgbench gets
        // what is left of `max_connections`.
        let statements = statement_stats(&admin).await;
        let room = u64::try_from(max_connections - 15 - rig_connections()).unwrap_or(1);
        let pg_clients = c.min(room).max(1);
        let mut turns = Vec::new();
        for keyed in [false, true] {
            let mut rig = Rig::start(&admin, keyed).await;
            let mut pg = Pgbench::default();
            for slice in 0..slices {
                pg.add(pgbench_slice(scratch.url(), pg_clients, slice_seconds).await);
                rig.slice(&admin, c, slice, slice_seconds).await;
            }
            turns.push((pg, rig.finish(&admin, statements).await));
        }
        let (pg_keyed, keyed) = turns.pop().unwrap();
        let (pg_unkeyed, unkeyed) = turns.pop().unwrap();
        let capped = if pg_clients < c {
            format!(" (-c {pg_clients}: max_connections {max_connections}, the rig's pools open)")
        } else {
            String::new()
        };
        println!(
            "| {c} | {:.0} / {:.0}{capped} | {:.0} ({:.1} / {:.1}){} | {:.1} % | {:.2} | {:.0} ({:.1} / {:.1}){} | {:.1} % | {:.2} ({:.2}) |",
            pg_unkeyed.tps(),
            pg_keyed.tps(),
            unkeyed.orders_per_s,
            unkeyed.p50_ms,
            unkeyed.p99_ms,
            failed(unkeyed.failed),
            100.0 * unkeyed.orders_per_s / pg_unkeyed.tps(),
            unkeyed.commits_per_order,
            keyed.orders_per_s,
            keyed.p50_ms,
            keyed.p99_ms,
            failed(keyed.failed),
            100.0 * keyed.orders_per_s / pg_keyed.tps(),
            keyed.commits_per_order,
            keyed.order_db_commits_per_order,
        );
        println!(
            "|   | backends, unkeyed: {} |   |   |   | backends, keyed: {} |   |   |",
            unkeyed.waits, keyed.waits
        );
        cpu.push(format!(
            "| {c} | {:.3} / {:.3} | {:.3} ({:.2}×) | {:.3} ({:.2}×) |",
            pg_unkeyed.cpu_ms_per_tx(),
            pg_keyed.cpu_ms_per_tx(),
            unkeyed.cpu_ms_per_order,
            unkeyed.cpu_ms_per_order / pg_unkeyed.cpu_ms_per_tx(),
            keyed.cpu_ms_per_order,
            keyed.cpu_ms_per_order / pg_keyed.cpu_ms_per_tx(),
        ));
        profiles.push((c, "unkeyed", unkeyed.profile, unkeyed.statements));
        profiles.push((c, "keyed", keyed.profile, keyed.statements));
    }
    // On a machine whose cores are all busy in both phases, the rate ratio
    // is about the inverse of the CPU ratio: the same comparison from the
    // other side, with the time the hypervisor took away left out.
    println!(
        "\nMachine CPU per unit (every process, from /proc/stat; on busy cores the rate ratio is about its inverse):\n\n| clients | per pgbench tx (ms, unkeyed / keyed turns) | per unkeyed order (ms, × pgbench) | per keyed order (ms, × pgbench) |\n|---|---|---|---|"
    );
    for line in &cpu {
        println!("{line}");
    }
    println!(
        "\nRows written per order, order database (pg_stat_user_tables: ins/upd/del, and of the updates how many were HOT — no index touched):\n"
    );
    for (c, kind, profile, _) in &profiles {
        println!("- {c} clients, {kind}: {profile}");
    }
    for (c, kind, _, statements) in &profiles {
        match statements {
            Some(table) => println!(
                "\nStatements per order, {c} clients, {kind} (pg_stat_statements, both databases):\n\n{table}"
            ),
            None => {
                println!(
                    "\n(pg_stat_statements is not loaded: no statement profile; \
                     `shared_preload_libraries = 'pg_stat_statements'` adds one)"
                );
                break;
            }
        }
    }
    println!();
}

/// Whether `pg_stat_statements` can be read (loaded by the server, and the
/// extension created in the admin database).
async fn statement_stats(admin: &shopeasy_runtime::db::Database) -> bool {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(admin.pool())
        .await
        .is_ok()
        && sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(admin.pool())
            .await
            .is_ok()
}

/// The statements run in the databases `names` since the last reset, per
/// order placed: calls and mean execution time, most called first.
async fn statements_per_order(
    admin: &shopeasy_runtime::db::Database,
    names: &[&str],
    placed: f64,
) -> String {
    let list = sql_names(names);
    let rows: Vec<(String, i64, f64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT CASE WHEN d.datname = '{}' THEN 'inventory' ELSE 'order' END, \
                s.calls, s.mean_exec_time, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 90) \
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
         WHERE d.datname IN ({list}) ORDER BY s.calls DESC LIMIT 14",
        names[0]
    )))
    .fetch_all(admin.pool())
    .await
    .unwrap_or_default();
    let mut table = String::from("| db | per order | mean ms | statement |\n|---|---|---|---|\n");
    for (db, calls, mean, query) in rows {
        table.push_str(&format!(
            "| {db} | {:.2} | {mean:.3} | `{}` |\n",
            calls as f64 / placed,
            query.replace('|', "\\|")
        ));
    }
    table
}

fn failed(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {n} non-2xx")
    }
}

async fn pgbench(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("pgbench")
            .args(&args)
            .output()
            .expect("pgbench on PATH");
        assert!(
            out.status.success(),
            "pgbench {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// One turn of `pgbench -N -M prepared` with `clients` for `seconds`, as
/// measured (its tps, the transactions it processed, and the machine's busy
/// CPU meanwhile).
async fn pgbench_slice(url: &str, clients: u64, seconds: u64) -> Pgbench {
    let (c, t) = (clients.to_string(), seconds.to_string());
    let before = busy_cpu_seconds();
    let out = pgbench(&["-N", "-M", "prepared", "-c", &c, "-j", "2", "-T", &t, url]).await;
    let busy_cpu_seconds = busy_cpu_seconds() - before;
    let number = |prefix: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.split('/').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} in pgbench's output: {out}"))
    };
    #[allow(clippy::cast_precision_loss)]
    let seconds = seconds as f64;
    Pgbench {
        transactions: number("tps = ") * seconds,
        processed: number("number of transactions actually processed: "),
        seconds,
        busy_cpu_seconds,
    }
}

/// The machine's busy CPU time so far, in seconds (all cores): from the
/// first line of `/proc/stat`, user, nice, system, irq and softirq — not
/// idle, I/O wait, nor steal (time the hypervisor gave to someone else).
/// Zero where there is no `/proc`.
fn busy_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …; USER_HZ is 100.
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    busy / 100.0
}

/// pgbench's slices, added up.
#[derive(Debug, Default)]
struct Pgbench {
    /// Σ tps × seconds of each slice (pgbench's tps leaves out its own
    /// connection time).
    transactions: f64,
    /// Σ the transactions pgbench says it processed.
    processed: f64,
    seconds: f64,
    /// The machine's busy CPU during the slices.
    busy_cpu_seconds: f64,
}

impl Pgbench {
    fn add(&mut self, slice: Self) {
        self.transactions += slice.transactions;
        self.processed += slice.processed;
        self.seconds += slice.seconds;
        self.busy_cpu_seconds += slice.busy_cpu_seconds;
    }

    fn tps(&self) -> f64 {
        self.transactions / self.seconds.max(1e-9)
    }

    fn cpu_ms_per_tx(&self) -> f64 {
        1e3 * self.busy_cpu_seconds / self.processed.max(1.0)
    }
}

/// `names` as a SQL list of string literals (`'a', 'b'`): the bench's own
/// database names, never input.
fn sql_names(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `xact_commit` of the databases `names`, once no backend is connected to
/// them (a backend's counts reach the statistics when it exits).
async fn commits(admin: &shopeasy_runtime::db::Database, names: &[&str]) -> i64 {
    let list = sql_names(names);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let connected: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname IN ({list})"
        )))
        .fetch_one(admin.pool())
        .await
        .unwrap();
        if connected == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COALESCE(SUM(xact_commit), 0)::BIGINT FROM pg_stat_database WHERE datname IN ({list})"
    )))
    .fetch_one(admin.pool())
    .await
    .unwrap()
}

/// Inventory on `db_url` without admission control (the bare service).
async fn bare_inventory(
    db_url: &str,
) -> (
    shopeasy_runtime::lifecycle::Running,
    shopeasy_inventory::Store,
) {
    let mut settings = shopeasy_inventory::InventorySettings {
        service_token: shopeasy_runtime::settings::Secret::new(helpers::SERVICE_TOKEN),
        ..Default::default()
    };
    settings.process.ephemeral();
    settings.process.admission.enabled = false;
    settings.storage.database_url = shopeasy_runtime::settings::SecretUrl::new(db_url);
    settings.storage.database.max_connections = inventory_pool();
    let bound = shopeasy_runtime::lifecycle::Bound::<shopeasy_inventory::App>::build(settings)
        .await
        .unwrap();
    let store = bound.service().store().clone();
    (bound.start(), store)
}

/// The order service's pool in the bench (`BENCH_ORDER_POOL`).
fn order_pool() -> u32 {
    u32::try_from(env("BENCH_ORDER_POOL", 20)).unwrap()
}

/// Inventory's pool in the bench (`BENCH_INVENTORY_POOL`).
fn inventory_pool() -> u32 {
    u32::try_from(env("BENCH_INVENTORY_POOL", 10)).unwrap()
}

/// Connections one rig's pools may hold open (order's and Inventory's).
fn rig_connections() -> i64 {
    i64::from(order_pool()) + i64::from(inventory_pool())
}

/// An order service (with the real Inventory and the Product stub) on
/// fresh databases, placing one-line orders — each with a key or none —
/// in slices, and what the slices measured, added up.
struct Rig {
    keyed: bool,
    inventory_db: shopeasy_testkit::TestDatabase,
    order_db: shopeasy_testkit::TestDatabase,
    inventory: shopeasy_runtime::lifecycle::Running,
    catalogue_server: fakes::Running,
    app: TestApp,
    products: Vec<Uuid>,
    before_all: i64,
    before_order: i64,
    latencies: Vec<Duration>,
    failed: u64,
    elapsed: Duration,
    busy: f64,
    waits: Waits,
}

impl Rig {
    /// Stocks Inventory, takes the commit baseline, starts the service.
    async fn start(admin: &shopeasy_runtime::db::Database, keyed: bool) -> Self {
        let inventory_db = shopeasy_testkit::postgres().await.unwrap();
        let order_db = shopeasy_testkit::postgres().await.unwrap();
        // Inventory's stock is written before the baseline is read.
        let (inventory, store) = bare_inventory(inventory_db.url()).await;
        let catalogue = FakeProduct::default();
        let products: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
        for p in &products {
            catalogue.add(*p, 100);
            let id = ProductId::parse("product_id", &p.to_string()).unwrap();
            store
                .set_stock(&id, 1_000_000_000, Instant::now() + Duration::from_secs(5))
                .await
                .unwrap();
        }
        // Restart Inventory, so that the stocking's commits are flushed (its
        // connections closed) before the baseline.
        let _ = tokio::time::timeout(Duration::from_secs(15), inventory.stop()).await;
        drop(store);
        let (inventory, _store) = bare_inventory(inventory_db.url()).await;
        let url = format!("http://{}", inventory.local_addr());
        let catalogue_server = catalogue.serve().await;
        let mut settings = test_settings(order_db.url(), &url, &catalogue_server.url());
        settings.resilience.inventory.timeout_seconds = Seconds::new(3.0);
        settings.resilience.product.timeout_seconds = Seconds::new(3.0);
        settings.resilience.stock_cache.ttl_seconds = Seconds::new(2.0);
        settings.resilience.inventory.max_concurrency = 1000;
        settings.resilience.product.max_concurrency = 1000;
        settings.storage.database.max_connections = order_pool();
        settings.storage.database.acquire_timeout_seconds = Seconds::new(10.0);
        settings.outbox.poll_interval_seconds = Seconds::new(1.0);
        settings.process.admission.enabled = false;
        // The baseline before any service connects: every count so far is
        // flushed (the databases are new). What start-up adds (migrations,
        // the pools, the first stock fetches) and the outbox worker's polls
        // between turns are in the figures: a few dozen commits against
        // thousands of orders.
        let names = [inventory_db.name(), order_db.name()];
        let before_all = commits(admin, &names).await;
        let before_order = commits(admin, &names[1..]).await;
        let app = TestApp::spawn(settings).await;
        Self {
            keyed,
            inventory_db,
            order_db,
            inventory,
            catalogue_server,
            app,
            products,
            before_all,
            before_order,
            latencies: Vec::new(),
            failed: 0,
            elapsed: Duration::ZERO,
            busy: 0.0,
            waits: Waits::default(),
        }
    }

    /// `concurrency` closed-loop clients for `seconds` (turn `slice`).
    async fn slice(
        &mut self,
        admin: &shopeasy_runtime::db::Database,
        concurrency: u64,
        slice: u64,
        seconds: u64,
    ) {
        let names = [self.inventory_db.name(), self.order_db.name()];
        let end = Instant::now() + Duration::from_secs(seconds);
        let keyed = self.keyed;
        let clients = (0..concurrency).map(|c| {
            let app = &self.app;
            let products = &self.products;
            async move {
                let mut latencies = Vec::new();
                let mut errors = 0u64;
                let mut i = 0usize;
                // One customer per client (one order in flight each, so the
                // open-order limit never refuses), its token signed once:
                // the clients' own signing is not what is measured.
                let customer = format!("bench-{c}");
                let http = app.client_for(&customer);
                while Instant::now() < end {
                    let p = products[(c as usize * 7 + i) % products.len()];
                    i += 1;
                    let key = format!("bench-{c}-{slice}-{i}");
                    let started = Instant::now();
                    let mut req = http
                        .post(app.url("/api/orders"))
                        .json(&order_body(&customer, &[(p, 1)]));
                    if keyed {
                        req = req.header("Idempotency-Key", &key);
                    }
                    let res = req.send().await.unwrap();
                    if res.status() == 201 {
                        latencies.push(started.elapsed());
                    } else {
                        errors += 1;
                    }
                }
                (latencies, errors)
            }
        });
        let started = Instant::now();
        let cpu_before = busy_cpu_seconds();
        let (results, ()) = tokio::join!(
            futures::future::join_all(clients),
            self.waits.sample(admin, &names, end)
        );
        self.elapsed += started.elapsed();
        self.busy += busy_cpu_seconds() - cpu_before;
        for (latencies, errors) in results {
            self.latencies.extend(latencies);
            self.failed += errors;
        }
    }

    /// Stops the services and reads what the server counted.
    async fn finish(self, admin: &shopeasy_runtime::db::Database, statements: bool) -> Run {
        let mut all = self.latencies;
        all.sort();
        self.app.stop().await;
        let _ = tokio::time::timeout(Duration::from_secs(15), self.inventory.stop()).await;
        drop(self.catalogue_server);
        let names = [self.inventory_db.name(), self.order_db.name()];
        let after_all = commits(admin, &names).await;
        let after_order = commits(admin, &names[1..]).await;
        let tuples_after = tuples(self.order_db.url()).await;
        let placed = all.len().max(1) as f64;
        let statements = if statements {
            Some(statements_per_order(admin, &names, placed).await)
        } else {
            None
        };
        let profile = tuples_after
            .iter()
            .map(|(table, rows)| {
                // The tables are new: every row counted is this run's.
                let per = |i: usize| rows[i] as f64 / placed;
                format!(
                    "{table} {:.2}/{:.2}/{:.2} (HOT {:.2})",
                    per(0),
                    per(1),
                    per(2),
                    per(3)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        Run {
            orders_per_s: all.len() as f64 / self.elapsed.as_secs_f64(),
            p50_ms: quantile(&all, 0.5).as_secs_f64() * 1e3,
            p99_ms: quantile(&all, 0.99).as_secs_f64() * 1e3,
            failed: self.failed,
            commits_per_order: (after_all - self.before_all) as f64 / placed,
            order_db_commits_per_order: (after_order - self.before_order) as f64 / placed,
            profile,
            statements,
            waits: self.waits.summary(),
            cpu_ms_per_order: 1e3 * self.busy / placed,
        }
    }
}

/// Where the database's side of an order's time goes: while a slice runs,
/// [`Waits::sample`] reads `pg_stat_activity` every `BENCH_SAMPLE_MS` (20
/// ms: 500 samples in 10 s, each a query the run's own Postgres serves, so
/// not more often) for the backends of the rig's databases, and
/// [`Waits::summary`] says how many backends were in each state on average
/// — `idle` (the connection waits in the pool or for the client: time spent
/// outside Postgres), `active`/`idle in transaction` on the CPU or waiting,
/// by `wait_event` (`WALSync`/`WALWrite`: the commit's flush;
/// `transactionid`/`tuple`: a row lock; `ClientRead` inside a transaction:
/// the client's next statement is on its way). It is Postgres's view of one
/// placement's round trips, beside the client's latency.
#[derive(Debug, Default)]
struct Waits {
    counts: std::collections::BTreeMap<String, i64>,
    samples: u32,
}

impl Waits {
    /// Samples the databases `names` until `end`.
    async fn sample(
        &mut self,
        admin: &shopeasy_runtime::db::Database,
        names: &[&str],
        end: Instant,
    ) {
        let list = sql_names(names);
        let sql = format!(
            "SELECT CASE WHEN datname = '{}' THEN 'inventory ' ELSE 'order ' END || \
                    CASE WHEN state = 'idle' THEN 'idle' \
                         WHEN wait_event IS NULL THEN state || ': on CPU' \
                         ELSE state || ': ' || wait_event END, count(*) \
             FROM pg_stat_activity WHERE datname IN ({list}) AND pid <> pg_backend_pid() GROUP BY 1",
            names[0]
        );
        let mut ticks =
            tokio::time::interval(Duration::from_millis(env("BENCH_SAMPLE_MS", 20).max(1)));
        while Instant::now() < end {
            ticks.tick().await;
            self.samples += 1;
            let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_all(admin.pool())
                .await
                .unwrap_or_default();
            for (what, n) in rows {
                *self.counts.entry(what).or_default() += n;
            }
        }
    }

    /// The ten most common states, as backends on average.
    fn summary(&self) -> String {
        let samples = f64::from(self.samples.max(1));
        let mut shares: Vec<(&String, &i64)> = self.counts.iter().collect();
        shares.sort_by_key(|s| std::cmp::Reverse(*s.1));
        shares
            .iter()
            .take(10)
            .map(|(what, n)| format!("{what} {:.1}", **n as f64 / samples))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Rows inserted/updated/deleted so far per table of the order database,
/// and how many of the updates were HOT (heap-only: no index entry
/// written).
async fn tuples(url: &str) -> Vec<(String, [i64; 4])> {
    let db = shopeasy_runtime::db::Database::connect_lazy(url, &Default::default()).unwrap();
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::TEXT, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables \
         WHERE relname IN ('orders', 'order_lines', 'outbox', 'idempotency_keys') ORDER BY relname",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    db.pool().close().await;
    rows.into_iter()
        .map(|(t, i, u, d, hot)| (t, [i, u, d, hot]))
        .collect()
}

/// The order service on `settings`, after one order of `p` for
/// `customer` (201): the product's stock is in its cache.
async fn placed_once(settings: OrderSettings, customer: &str, p: Uuid) -> TestApp {
    let app = TestApp::spawn(settings).await;
    assert_eq!(
        app.post_order(None, &order_body(customer, &[(p, 1)]))
            .await
            .status(),
        201
    );
    app
}

/// `n` orders of one unit of `p`, one after the other: their latencies,
/// sorted, and how many answered `status`.
async fn sequential(app: &TestApp, p: Uuid, n: u64, status: u16) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::with_capacity(usize::try_from(n).unwrap());
    let mut answered = 0;
    for _ in 0..n {
        let started = Instant::now();
        let res = app.post_order(None, &order_body("b", &[(p, 1)])).await;
        latencies.push(started.elapsed());
        answered += usize::from(res.status() == status);
    }
    latencies.sort();
    (latencies, answered)
}

async fn stampede() {
    let db = shopeasy_testkit::postgres().await.unwrap();
    let shop = Shop::new(&[1_000_000]).await;
    let (inventory, p) = (&shop.inventory, shop.products[0]);
    let mut settings = shop.settings(db.url());
    // Long enough that the refreshed entry stays fresh for the whole burst.
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(5.0);
    settings.resilience.inventory.timeout_seconds = Seconds::new(5.0);
    settings.resilience.inventory.max_concurrency = 2000;
    settings.resilience.product.max_concurrency = 2000;
    settings.resilience.product.timeout_seconds = Seconds::new(10.0);
    settings.storage.database.max_connections = 20;
    settings.storage.database.acquire_timeout_seconds = Seconds::new(30.0);
    // One customer, a thousand orders in flight (each `pending` until its
    // reservation): the open-order limit is not what this measures.
    settings.orders.max_open_per_customer = 10_000;
    let app = placed_once(settings, "s", p).await;
    tokio::time::sleep(Duration::from_millis(5100)).await; // the entry expires
    inventory.set_get_delay(Duration::from_millis(50));
    let before = inventory.get_calls();
    let statuses = futures::future::join_all((0..1000).map(|_| {
        let app = &app;
        async move {
            app.post_order(None, &order_body("s", &[(p, 1)]))
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    let calls = inventory.get_calls() - before;
    let ok = statuses.iter().filter(|s| **s == 201).count();
    println!(
        "| stampede: 1,000 concurrent orders, one product, expired cache entry | {calls} GetStock call(s); {ok} of 1,000 confirmed |"
    );
    app.stop().await;
}

async fn breaker_open_stale() {
    let db = shopeasy_testkit::postgres().await.unwrap();
    let shop = Shop::new(&[1_000_000]).await;
    let (inventory, p) = (&shop.inventory, shop.products[0]);
    let mut settings = shop.settings(db.url());
    settings.resilience.inventory.break_duration_seconds = Seconds::new(600.0);
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(0.05);
    settings.outbox.initial_backoff_seconds = Seconds::new(60.0);
    settings.outbox.max_backoff_seconds = Seconds::new(600.0);
    // Thousands of orders stay `pending` for one customer: the open-order
    // limit is not what this measures.
    settings.orders.max_open_per_customer = 10_000;
    let app = placed_once(settings, "b", p).await;
    inventory.set_mode(Mode::Unavailable);
    // Fail enough calls to open the breaker.
    for _ in 0..5 {
        let _ = app.post_order(None, &order_body("b", &[(p, 1)])).await;
    }
    let n = env("BENCH_REQUESTS", 2000);
    let (latencies, accepted) = sequential(&app, p, n, 202).await;
    println!(
        "| breaker open + stale stock entry: POST /api/orders ({n} sequential, Postgres) | p50 {:.2} ms, p99 {:.2} ms; {accepted} of {n} answered 202 |",
        quantile(&latencies, 0.5).as_secs_f64() * 1e3,
        quantile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    // Fast fail: a product never cached, so nothing can vouch for its
    // stock; the open breaker answers without a call and nothing is written.
    let unknown = Uuid::new_v4();
    shop.product.add(unknown, 100);
    let (latencies, refused) = sequential(&app, unknown, n, 503).await;
    println!(
        "| breaker open, no cached stock: POST /api/orders fails fast ({n} sequential) | p50 {:.2} ms, p99 {:.2} ms; {refused} of {n} answered 503 + Retry-After |",
        quantile(&latencies, 0.5).as_secs_f64() * 1e3,
        quantile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    app.stop().await;
}
