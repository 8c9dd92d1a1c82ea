//! Real processes (FAULTS.md: "private processes it may stop (SIGSTOP) or
//! kill (SIGKILL)"): the four service binaries, started as a deployment
//! starts them (settings file + environment), with a fresh Postgres
//! database each and no proxy in between. What the rest of the suite
//! stands in for in-process, here for real:
//!
//! - F3 gateway → order: SIGSTOP the order process → 504 at the activity
//!   timeout, not retried; SIGCONT → the next request succeeds (R) and a
//!   keyed retry finds one order (C1).
//! - F3 order → inventory: SIGSTOP Inventory while orders flow → orders
//!   with cached stock answer 202 within their attempt deadlines; SIGCONT
//!   → every pending order is confirmed (C8), reserved once (C7).
//! - F6 gateway → order: SIGKILL the order process mid-load and respawn it
//!   on the same ports and database → keyed retries replay or complete; no
//!   order lost or duplicated (C1, C2).
//!
//! The binaries are taken from the target directory this test runs from
//! (`<target>/<profile>/deps/processes-…` → `<target>/<profile>/`) when
//! all four are newer than every source of the workspace — as after
//! `cargo test --workspace`, which builds every package's binaries before
//! running any test. Otherwise they are built there first, once per test
//! binary (`cargo build -p … --bins`: a few seconds when only relinking).
//! `SHOPEASY_E2E_BIN_DIR=<dir>` uses binaries from elsewhere as they are.
//! When they can be neither found nor built, the tests skip with the
//! testkit's skip line (a failure under `SHOPEASY_REQUIRE_SERVICES=1`).
//!
//! Every child is killed when its test ends or panics (a guard's `Drop`),
//! after being resumed if it was stopped; on a panic the last lines of each
//! child's log are printed.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use serde_json::{Value, json};
use shopeasy_e2e::{Answer, Client, Options, identity::token};
use shopeasy_proto::inventory::v1::{
    SetStockRequest, inventory_service_client::InventoryServiceClient,
};
use shopeasy_runtime::settings::render;
use shopeasy_testkit::{TestDatabase, eventually, metric_sum};
use sqlx::PgPool;
use support::{assert_problem, key};
use tokio::{sync::Mutex, time::Instant};

/// The four service binaries, in start order.
const BINARIES: [&str; 4] = [
    "shopeasy-inventory",
    "shopeasy-product",
    "shopeasy-order",
    "shopeasy-gateway",
];

/// The admin token every child accepts.
// A binary started from its environment refuses a credential shorter than
// 32 characters (shopeasy_runtime::settings::credential).
const ADMIN_TOKEN: &str = "e2e-process-admin-token-0123456789abcdef";
/// Order's credential at Inventory: inventory's SERVICE_TOKEN, order's
/// INVENTORY__SERVICE_TOKEN (each other binary ignores both).
const SERVICE_TOKEN: &str = "e2e-process-service-token-0123456789abcdef";

/// Activity timeout of the fast settings, and the slack a loaded two-core
/// machine needs on top of FAULTS.md's 200 ms (as in `f3_hang.rs`).
const ACTIVITY: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_millis(400);

/// One system at a time per test binary (two cores; fixed ports per
/// system).
static SERIAL: Mutex<()> = Mutex::const_new(());

// ---------------------------------------------------------------------------
// The binaries.

static BIN_DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The directory holding the four binaries, built if needed; `None`
/// (announced as a skip) when they can be neither found nor built.
fn bin_dir() -> Option<PathBuf> {
    match BIN_DIR.get_or_init(locate_or_build) {
        Ok(dir) => Some(dir.clone()),
        Err(reason) => {
            shopeasy_testkit::skip("the service binaries", reason);
            None
        }
    }
}

fn missing(dir: &Path) -> Vec<&'static str> {
    BINARIES
        .into_iter()
        .filter(|b| {
            !dir.join(format!("{b}{}", std::env::consts::EXE_SUFFIX))
                .is_file()
        })
        .collect()
}

/// The workspace's root (two levels above this package).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The newest modification time of anything a service binary is built
/// from: every crate's sources, manifests and build scripts, the
/// migrations, the protos and the lock file (over-inclusive on purpose).
fn newest_source() -> Option<std::time::SystemTime> {
    fn walk(path: &Path, newest: &mut Option<std::time::SystemTime>) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), newest);
            }
        } else if let Ok(modified) = meta.modified() {
            *newest = (*newest).max(Some(modified));
        }
    }
    let root = workspace();
    let mut newest = None;
    for top in ["Cargo.toml", "Cargo.lock", "migrations", "proto"] {
        walk(&root.join(top), &mut newest);
    }
    for krate in std::fs::read_dir(root.join("crates")).ok()?.flatten() {
        for part in ["src", "Cargo.toml", "build.rs"] {
            walk(&krate.path().join(part), &mut newest);
        }
    }
    newest
}

/// Whether all four binaries are in `dir` and newer than every source.
fn up_to_date(dir: &Path) -> bool {
    let Some(newest) = newest_source() else {
        return false;
    };
    BINARIES.into_iter().all(|b| {
        std::fs::metadata(dir.join(format!("{b}{}", std::env::consts::EXE_SUFFIX)))
            .and_then(|m| m.modified())
            .is_ok_and(|built| built >= newest)
    })
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("SHOPEASY_E2E_BIN_DIR") {
        let dir = PathBuf::from(dir);
        let absent = missing(&dir);
        return if absent.is_empty() {
            Ok(dir)
        } else {
            Err(format!(
                "SHOPEASY_E2E_BIN_DIR={} lacks {absent:?}",
                dir.display()
            ))
        };
    }
    // <target>/<profile>/deps/<this test> → <target>/<profile>.
    let exe = std::env::current_exe().map_err(|e| format!("no current exe: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test executable is not in <target>/<profile>/deps")?
        .to_path_buf();
    if up_to_date(&profile_dir) {
        // Typically `cargo test --workspace` built them in this run; a
        // `cargo build` of just these packages could resolve other
        // features and recompile dependencies for nothing.
        return Ok(profile_dir);
    }
    let target = profile_dir
        .parent()
        .ok_or("no target directory above the profile directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(name) => name.to_owned(),
        None => return Err("an unnamed profile directory".to_owned()),
    };
    let manifest = workspace().join("Cargo.toml");
    // The cargo running this test (set at run time), else the one that
    // compiled it.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let started = Instant::now();
    let mut build = Command::new(&cargo);
    build
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--profile", &profile, "--bins"])
        .env("CARGO_TARGET_DIR", target);
    for bin in BINARIES {
        build.args(["-p", bin]);
    }
    let output = build
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build of {BINARIES:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    println!(
        "built {BINARIES:?} into {} in {:?}",
        profile_dir.display(),
        started.elapsed()
    );
    let absent = missing(&profile_dir);
    if absent.is_empty() {
        Ok(profile_dir)
    } else {
        Err(format!(
            "built, yet {absent:?} are not in {}",
            profile_dir.display()
        ))
    }
}

// ---------------------------------------------------------------------------
// One child process.

/// A service binary run as a child: its settings file and environment, so
/// it can be respawned identically; killed on drop.
struct Proc {
    name: &'static str,
    bin: PathBuf,
    config: PathBuf,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
    admin: SocketAddr,
    child: Option<Child>,
}

impl Proc {
    /// Starts it (appending to its log).
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("child log");
        let err = log.try_clone().expect("child log");
        let mut command = Command::new(&self.bin);
        command
            .arg("--config")
            .arg(&self.config)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        self.child = Some(command.spawn().expect("the service binary starts"));
    }

    /// Waits until `/health/ready` answers 200; panics (with the log) when
    /// the child exits or 30 s pass.
    async fn ready(&mut self) -> Duration {
        let started = Instant::now();
        let url = format!("http://{}/health/ready", self.admin);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(exit)) = child.try_wait()
            {
                panic!("{} exited with {exit}:\n{}", self.name, self.log_tail(40));
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status() == 200
            {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} not ready within 30 s:\n{}",
                self.name,
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends a signal (`-STOP`, `-CONT`, `-KILL`).
    fn signal(&self, signal: &str) {
        let Some(child) = &self.child else {
            panic!("{} is not running", self.name);
        };
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", self.name);
    }

    /// SIGKILL, and reaps it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of its log.
    fn log_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.log) {
            let _ = file.read_to_string(&mut text);
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped process is killed too, but resume it first so that
            // nothing lingers half-stopped if the kill fails.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// The system: four children, their databases, a client of the gateway.

/// The four services as processes.
struct System {
    // Dropped first: the children, then the pools, then the databases.
    inventory: Proc,
    product: Proc,
    order: Proc,
    gateway: Proc,
    client: Client,
    gateway_url: String,
    product_url: String,
    inventory_url: String,
    order_db: PgPool,
    inventory_db: PgPool,
    dir: PathBuf,
    _databases: [TestDatabase; 3],
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// `127.0.0.1:<a free port>`.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], shopeasy_testkit::free_port()))
}

impl System {
    /// Starts the four binaries with the fast settings, or `None` (skip)
    /// without Postgres or binaries.
    async fn start() -> Option<Self> {
        let serial = SERIAL.lock().await;
        let bins = bin_dir()?;
        let order_db = shopeasy_testkit::postgres().await?;
        let inventory_db = shopeasy_testkit::postgres().await?;
        let product_db = shopeasy_testkit::postgres().await?;
        let dir = std::env::temp_dir().join(format!("shopeasy-e2e-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temporary folder");

        let mut o = Options::fast(7);
        // No Redis: the stock cache and product cache are in-process only
        // (a private process test needs nothing shared).
        let (inv, inv_admin) = (free_addr(), free_addr());
        let (prod, prod_admin) = (free_addr(), free_addr());
        let (ord, ord_admin) = (free_addr(), free_addr());
        let (gw, gw_admin) = (free_addr(), free_addr());
        o.inventory.process.listen_addr = inv;
        o.inventory.process.admin_addr = inv_admin;
        o.product.process.listen_addr = prod;
        o.product.process.admin_addr = prod_admin;
        o.order.process.listen_addr = ord;
        o.order.process.admin_addr = ord_admin;
        o.order.inventory.url = format!("http://{inv}");
        o.order.product.url = format!("http://{prod}");
        o.gateway.process.listen_addr = gw;
        o.gateway.process.admin_addr = gw_admin;
        o.gateway.routes.order_url = format!("http://{ord}");
        o.gateway.routes.product_url = format!("http://{prod}");

        let proc = |name: &'static str, settings: String, admin, db: Option<&TestDatabase>| {
            let config = dir.join(format!("{name}.toml"));
            std::fs::write(&config, settings).expect("settings file");
            let mut env = vec![
                ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
                ("SERVICE_TOKEN", SERVICE_TOKEN.to_owned()),
                ("INVENTORY__SERVICE_TOKEN", SERVICE_TOKEN.to_owned()),
            ];
            if let Some(db) = db {
                // Secrets are masked in the rendered file: the real URL
                // comes from the environment, which beats the file.
                env.push(("DATABASE_URL", db.url().to_owned()));
            }
            Proc {
                name,
                bin: bins.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)),
                config,
                env,
                log: dir.join(format!("{name}.log")),
                admin,
                child: None,
            }
        };
        let mut system = Self {
            inventory: proc(
                "shopeasy-inventory",
                render(&o.inventory),
                inv_admin,
                Some(&inventory_db),
            ),
            product: proc(
                "shopeasy-product",
                render(&o.product),
                prod_admin,
                Some(&product_db),
            ),
            order: proc(
                "shopeasy-order",
                render(&o.order),
                ord_admin,
                Some(&order_db),
            ),
            gateway: proc("shopeasy-gateway", render(&o.gateway), gw_admin, None),
            client: Client::signed_in(format!("http://{gw}"), Duration::from_secs(10), "e2e"),
            gateway_url: format!("http://{gw}"),
            product_url: format!("http://{prod}"),
            inventory_url: format!("http://{inv}"),
            order_db: pool(order_db.url()).await,
            inventory_db: pool(inventory_db.url()).await,
            dir,
            _databases: [order_db, inventory_db, product_db],
            _serial: serial,
        };
        let started = Instant::now();
        for name in BINARIES {
            let p = system.proc_mut(name);
            p.spawn();
            p.ready().await;
        }
        println!("four processes ready in {:?}", started.elapsed());
        Some(system)
    }

    fn proc_mut(&mut self, name: &str) -> &mut Proc {
        match name {
            "shopeasy-inventory" => &mut self.inventory,
            "shopeasy-product" => &mut self.product,
            "shopeasy-order" => &mut self.order,
            _ => &mut self.gateway,
        }
    }

    /// Creates a product and sets its stock; returns its id.
    async fn seed_product(&self, sku: &str, stock: i64) -> String {
        let product: Value = reqwest::Client::new()
            .post(format!("{}/api/products", self.product_url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({
                "sku": sku, "name": format!("e2e {sku}"), "description": "processes",
                "price_cents": 500, "currency": "EUR"
            }))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = product["id"].as_str().unwrap().to_owned();
        let mut inventory = InventoryServiceClient::connect(self.inventory_url.clone())
            .await
            .unwrap();
        let mut request = tonic::Request::new(SetStockRequest {
            product_id: id.clone(),
            available: stock,
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
        );
        inventory.set_stock(request).await.unwrap();
        id
    }

    /// `POST /api/orders` through the gateway, one unit of `product`, with
    /// `key` as both idempotency key and customer (the token's `sub`, so
    /// an order can be traced back to its key in the database).
    async fn order(&self, product: &str, key: &str) -> Answer {
        let body = json!({"items": [{"product_id": product, "quantity": 1}]});
        self.client
            .clone()
            .with_token(token(key))
            .post_json("/api/orders", &body, Some(key))
            .await
    }

    /// Attempts the gateway made to the order service so far.
    async fn gateway_attempts(&self) -> f64 {
        let text = reqwest::get(format!("http://{}/metrics", self.gateway.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric_sum(
            &text,
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "order")],
        )
    }

    /// `customer_id` (= the token's `sub` = idempotency key) → `[(order
    /// id, status)]`.
    async fn orders_by_key(&self) -> BTreeMap<String, Vec<(String, String)>> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT customer_id, id, status FROM orders")
                .fetch_all(&self.order_db)
                .await
                .unwrap();
        let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (key, id, status) in rows {
            out.entry(key).or_default().push((id, status));
        }
        out
    }

    /// Units Inventory holds reserved for `reservation` (all lines).
    async fn reserved_for(&self, reservation: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(
            "SELECT COALESCE(SUM(l.quantity), 0)::BIGINT FROM reservation_lines l \
             JOIN reservations r ON r.reservation_id = l.reservation_id \
             WHERE r.state = 'reserved' AND l.reservation_id = $1",
        )
        .bind(reservation)
        .fetch_one(&self.inventory_db)
        .await
        .unwrap()
    }

    /// Waits until no order is `pending` (C8), within `within`.
    async fn drained(&self, within: Duration) -> bool {
        eventually(within, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders WHERE status = 'pending'")
                .fetch_one(&self.order_db)
                .await
                .unwrap()
                == 0
        })
        .await
    }

    /// C7 and C6 for every order: a confirmed order holds exactly its
    /// quantity reserved (one unit here), any other order none.
    async fn assert_reserved_once(&self) {
        for (key, orders) in self.orders_by_key().await {
            for (id, status) in orders {
                let expected = i64::from(status == "confirmed");
                assert_eq!(
                    self.reserved_for(&id).await,
                    expected,
                    "C7/C6: order {id} ({status}) of key {key}"
                );
            }
        }
    }
}

impl Drop for System {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in [&self.inventory, &self.product, &self.order, &self.gateway] {
                eprintln!("--- last lines of {} ---\n{}", p.name, p.log_tail(30));
            }
        }
        for name in BINARIES {
            self.proc_mut(name).kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn pool(url: &str) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .expect("test database")
}

/// The order id of a 201/202 answer.
fn order_id(answer: &Answer) -> Option<String> {
    answer.json()["id"].as_str().map(str::to_owned)
}

// ---------------------------------------------------------------------------
// The cells.

/// F3 gateway → order with a frozen order process: 504 at the activity
/// timeout, one attempt (A(1)); after SIGCONT the next request succeeds
/// (R) and the frozen keyed POST, retried by its client, leaves one order
/// (C1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_order_is_504_at_the_activity_timeout_and_sigcont_recovers() {
    let Some(system) = System::start().await else {
        return;
    };
    let product = system.seed_product("PROC-STOP-ORD", 100).await;
    let warm = system.order(&product, &key()).await;
    assert_eq!(warm.status, Some(201), "{}", warm.describe());

    system.order.signal("-STOP");
    let before = system.gateway_attempts().await;
    let get = system
        .client
        .get(&format!("/api/orders/{}", uuid::Uuid::new_v4()))
        .await;
    println!("GET while order is stopped: {}", get.describe());
    assert_problem(&get, 504, false);
    assert!(
        get.elapsed >= ACTIVITY && get.elapsed < ACTIVITY + SLACK,
        "L(activity + slack): {:?}",
        get.elapsed
    );
    assert_eq!(system.gateway_attempts().await - before, 1.0, "GET: A(1)");

    let k = key();
    let before = system.gateway_attempts().await;
    let post = system.order(&product, &k).await;
    println!("keyed POST while order is stopped: {}", post.describe());
    assert_problem(&post, 504, false);
    assert!(
        post.elapsed >= ACTIVITY && post.elapsed < ACTIVITY + SLACK,
        "L(activity + slack): {:?}",
        post.elapsed
    );
    assert_eq!(
        system.gateway_attempts().await - before,
        1.0,
        "keyed POST: A(1), a timeout is not retried"
    );

    system.order.signal("-CONT");
    let resumed = Instant::now();
    let fresh = system.order(&product, &key()).await;
    println!(
        "first request after SIGCONT: {} ({:?} after SIGCONT)",
        fresh.describe(),
        resumed.elapsed()
    );
    assert_eq!(fresh.status, Some(201), "R: {}", fresh.describe());
    // The frozen POST may have been read and completed once the process
    // resumed (its connection was gone by then) or never: the client's
    // retry with the same key replays it, completes it, or waits out the
    // key's lock (409) — and the key ends with one order.
    let answers = std::sync::Mutex::new(Vec::new());
    let settled = eventually(Duration::from_secs(10), || {
        let (system, product, k, answers) = (&system, &product, &k, &answers);
        async move {
            let retry = system.order(product, k).await;
            let done = retry.status == Some(201);
            answers.lock().unwrap().push(retry);
            done
        }
    })
    .await;
    let answers = answers.into_inner().unwrap();
    let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
    println!(
        "keyed retries after SIGCONT: {statuses:?}, last one a replay: {}",
        answers.last().is_some_and(Answer::replayed)
    );
    assert!(settled, "the keyed retry never got 201: {statuses:?}");
    assert!(
        answers.iter().all(|a| matches!(a.status, Some(201 | 409))),
        "replay, completion or in progress only: {statuses:?}"
    );
    let orders = system.orders_by_key().await;
    assert_eq!(orders.get(&k).map(Vec::len), Some(1), "C1: {orders:?}");
    assert_eq!(
        order_id(answers.last().unwrap()).as_deref(),
        Some(orders[&k][0].0.as_str()),
        "C2: the answer names the stored order"
    );
    assert_eq!(orders.len(), 3, "warm-up, fresh and the keyed order only");
}

/// F3 order → inventory with a frozen Inventory process while orders
/// flow: with the product's stock cached, every order answers 202 within
/// its attempt deadlines (a stale stock read and a timed-out reservation,
/// 0.3 s each; then the breaker opens and both fail fast), never 504;
/// after SIGCONT every pending order is confirmed (C8), reserved once
/// (C7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_inventory_orders_wait_pending_then_confirm() {
    let Some(system) = System::start().await else {
        return;
    };
    let product = system.seed_product("PROC-STOP-INV", 100).await;
    let warm = system.order(&product, &key()).await;
    assert_eq!(warm.status, Some(201), "{}", warm.describe());

    system.inventory.signal("-STOP");
    let stopped = Instant::now();
    let mut pending = Vec::new();
    let mut latencies = Vec::new();
    // Orders for 5 s: past the stock cache's 2 s TTL (stale reads) and
    // past the HTTP/2 keep-alive's 2 s + 2 s (the channel gives up on the
    // frozen peer and reconnects to it).
    while stopped.elapsed() < Duration::from_secs(5) {
        let answer = system.order(&product, &key()).await;
        latencies.push(answer.elapsed);
        assert_eq!(
            answer.status,
            Some(202),
            "cached stock → pending at {:?}: {}",
            stopped.elapsed(),
            answer.describe()
        );
        pending.push(order_id(&answer).unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let worst = latencies.iter().max().copied().unwrap_or_default();
    println!(
        "{} orders while Inventory was stopped, latencies {latencies:?}",
        latencies.len()
    );
    // A stale stock read (one 0.3 s attempt) and a reservation (one 0.3 s
    // attempt), plus the order's own work; below the gateway's activity
    // timeout, so never a 504.
    assert!(
        worst < Duration::from_millis(900),
        "L(2 × attempt + ε): worst {worst:?}"
    );

    system.inventory.signal("-CONT");
    let resumed = Instant::now();
    assert!(
        system.drained(Duration::from_secs(20)).await,
        "C8: orders still pending 20 s after SIGCONT"
    );
    println!(
        "pending orders resolved {:?} after SIGCONT",
        resumed.elapsed()
    );
    let orders = system.orders_by_key().await;
    for id in &pending {
        let status = orders
            .values()
            .flatten()
            .find(|(o, _)| o == id)
            .map(|(_, s)| s.as_str());
        assert_eq!(status, Some("confirmed"), "C8: order {id}");
    }
    system.assert_reserved_once().await;
    let after = system.order(&product, &key()).await;
    assert_eq!(after.status, Some(201), "R: {}", after.describe());
}

/// What one client saw for one key.
#[derive(Debug, Default)]
struct KeyLog {
    statuses: Vec<Option<u16>>,
    ids: BTreeSet<String>,
    replays: usize,
}

/// F6 gateway → order with a real restart: SIGKILL the order process
/// under load from 4 clients, respawn it ~1 s later on the same ports and
/// database. Every key is retried until it gets 201/202; afterwards each
/// key has exactly one order (C1), the one its answers named (C2), and
/// every order is confirmed and reserved once (C8, C7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_order_mid_load_and_respawn_loses_and_duplicates_nothing() {
    let Some(mut system) = System::start().await else {
        return;
    };
    let product = system.seed_product("PROC-KILL-ORD", 10_000).await;
    let stop_load = tokio_util::sync::CancellationToken::new();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (client, product, stop) = (
            Client::new(system.gateway_url.clone(), Duration::from_secs(10)),
            product.clone(),
            stop_load.clone(),
        );
        clients.spawn(async move {
            let mut log: BTreeMap<String, KeyLog> = BTreeMap::new();
            while !stop.is_cancelled() {
                let k = key();
                // The key is its customer too (see `System::order`).
                let client = client.clone().with_token(token(&k));
                let body = json!({"items": [{"product_id": product, "quantity": 1}]});
                let started = Instant::now();
                let entry = log.entry(k.clone()).or_default();
                // The same key until a definite answer; 20 s at most.
                loop {
                    let answer = client.post_json("/api/orders", &body, Some(&k)).await;
                    entry.statuses.push(answer.status);
                    if matches!(answer.status, Some(201 | 202)) {
                        entry.ids.extend(order_id(&answer));
                        entry.replays += usize::from(answer.replayed());
                        break;
                    }
                    if started.elapsed() > Duration::from_secs(20) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            log
        });
    }

    tokio::time::sleep(Duration::from_millis(1500)).await; // load before the kill
    system.order.kill();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await; // the outage
    system.order.spawn();
    let ready = system.order.ready().await;
    println!(
        "order respawned: ready {ready:?} after spawn, {:?} after SIGKILL",
        killed.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // load after the respawn
    stop_load.cancel();
    let mut log = BTreeMap::new();
    while let Some(done) = clients.join_next().await {
        log.extend(done.expect("a client task"));
    }

    let ambiguous = log
        .values()
        .filter(|l| l.statuses.iter().any(|s| !matches!(s, Some(201 | 202))))
        .count();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in log.values() {
        for s in &l.statuses {
            *counts.entry(format!("{s:?}")).or_default() += 1;
        }
    }
    let replays: usize = log.values().map(|l| l.replays).sum();
    println!(
        "{} keys, {ambiguous} with a non-2xx answer on the way, {replays} final replays; answers {counts:?}",
        log.len()
    );
    assert!(ambiguous > 0, "the kill never met the load: {counts:?}");

    assert!(
        system.drained(Duration::from_secs(20)).await,
        "C8: orders still pending 20 s after the respawn"
    );
    let orders = system.orders_by_key().await;
    for (k, l) in &log {
        let stored = orders.get(k).map(Vec::as_slice).unwrap_or_default();
        assert!(
            l.ids.len() == 1,
            "key {k} never completed, or named two orders: {l:?}"
        );
        assert_eq!(stored.len(), 1, "C1: key {k} has {stored:?} ({l:?})");
        assert!(
            l.ids.contains(&stored[0].0),
            "C2: key {k} answered {:?}, stored {stored:?}",
            l.ids
        );
        assert_eq!(stored[0].1, "confirmed", "C8: key {k}");
    }
    let phantoms: Vec<_> = orders.keys().filter(|k| !log.contains_key(*k)).collect();
    assert!(
        phantoms.is_empty(),
        "orders no client asked for: {phantoms:?}"
    );
    system.assert_reserved_once().await;
}
