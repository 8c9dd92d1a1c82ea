//! What every matrix test file shares: one cluster at a time per test
//! binary (metrics are per process, and the machine has two cores), the
//! admin readers, and order bodies.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy_e2e::{
    Client, Cluster, Options, Service,
    client::{eventually, metric_sum},
};
use tokio::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::const_new(());

/// A started cluster and the lock that keeps it alone in this binary.
pub struct Fixture {
    pub cluster: Cluster,
    pub gateway: Client,
    _serial: MutexGuard<'static, ()>,
}

impl Fixture {
    /// Starts a cluster with the fast settings, changed by `tweak`.
    pub async fn start(tweak: impl FnOnce(&mut Options)) -> Option<Self> {
        let serial = SERIAL.lock().await;
        let mut options = Options::fast(7);
        tweak(&mut options);
        let cluster = Cluster::start(options).await.expect("cluster starts")?;
        let gateway = Client::new(cluster.gateway_url(), Duration::from_secs(10));
        Some(Self {
            cluster,
            gateway,
            _serial: serial,
        })
    }

    /// A service's `/metrics` text.
    pub async fn metrics(&self, service: Service) -> String {
        reqwest::get(format!("{}/metrics", self.cluster.admin_url(service)))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// A counter's current sum (metrics are process-wide here).
    pub async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics(Service::Gateway).await, name, labels)
    }

    /// Attempts the gateway made to the order service so far.
    pub async fn gateway_attempts(&self, route: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", route)],
        )
        .await
    }

    /// Retries of the order service's Inventory client so far.
    pub async fn inventory_retries(&self) -> f64 {
        self.inventory_retry_outcome("retried").await
    }

    /// `shopeasy_downstream_retries_total{target="inventory",outcome}`.
    pub async fn inventory_retry_outcome(&self, outcome: &str) -> f64 {
        self.counter(
            "shopeasy_downstream_retries_total",
            &[("target", "inventory"), ("outcome", outcome)],
        )
        .await
    }

    /// The order service's breaker on `target`, from `/admin/resilience`.
    pub async fn breaker(&self, target: &str) -> Value {
        let body: Value = reqwest::get(format!(
            "{}/admin/resilience",
            self.cluster.admin_url(Service::Order)
        ))
        .await
        .expect("admin")
        .json()
        .await
        .expect("admin json");
        body["circuit_breakers"][target].clone()
    }

    /// The breaker's state name.
    pub async fn breaker_state(&self, target: &str) -> String {
        self.breaker(target).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Asserts the breaker on `target` is open, or still short of its
    /// threshold: every call failed, so closed means fewer than
    /// `minimum_calls` (5) failures in the window. Returns whether it is
    /// open.
    pub async fn breaker_opened(&self, target: &str) -> bool {
        let b = self.breaker(target).await;
        if b["state"] == "open" {
            return true;
        }
        let failures = b["failures_in_window"].as_u64().unwrap_or(0);
        assert!(
            failures < 5,
            "CB: {failures} failed calls and still not open: {b}"
        );
        false
    }

    /// How many orders the order database holds.
    pub async fn order_count(&self) -> i64 {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders")
            .fetch_one(self.cluster.order_db())
            .await
            .expect("count orders")
    }

    /// An order's status in the database.
    pub async fn order_status(&self, id: &str) -> Option<String> {
        sqlx::query_scalar::<_, String>("SELECT status FROM orders WHERE id = $1")
            .bind(id)
            .fetch_optional(self.cluster.order_db())
            .await
            .expect("order status")
    }

    /// Units Inventory holds reserved for `reservation` (all lines).
    pub async fn reserved_for(&self, reservation: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(
            "SELECT COALESCE(SUM(l.quantity), 0)::BIGINT FROM reservation_lines l \
             JOIN reservations r ON r.reservation_id = l.reservation_id \
             WHERE r.state = 'reserved' AND l.reservation_id = $1",
        )
        .bind(reservation)
        .fetch_one(self.cluster.inventory_db())
        .await
        .expect("reserved")
    }

    /// For `window`, reads `path` through the gateway every `every` (each
    /// 200 within 500 ms) and places an order of `product` after every
    /// `order_every` reads (each 201 within 1 s): the service stays healthy
    /// while a fault is on. Returns the reads, the orders and the time taken.
    pub async fn stays_healthy(
        &self,
        path: &str,
        product: &str,
        window: Duration,
        every: Duration,
        order_every: u32,
    ) -> (u32, u32, Duration) {
        let started = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(every);
        let (mut reads, mut orders) = (0, 0);
        while started.elapsed() < window {
            tick.tick().await;
            let read = self.gateway.get(path).await;
            assert_eq!(read.status, Some(200), "{}", read.describe());
            assert!(
                read.elapsed < Duration::from_millis(500),
                "{}",
                read.describe()
            );
            reads += 1;
            if reads % order_every == 0 {
                let placed = self.order(product, 1, Some(&key())).await;
                assert_eq!(placed.status, Some(201), "{}", placed.describe());
                assert!(
                    placed.elapsed < Duration::from_secs(1),
                    "{}",
                    placed.describe()
                );
                orders += 1;
            }
        }
        (reads, orders, started.elapsed())
    }

    /// Places an order through the gateway.
    pub async fn order(
        &self,
        product: &str,
        quantity: i64,
        key: Option<&str>,
    ) -> shopeasy_e2e::Answer {
        self.gateway
            .post_json("/api/orders", &order_body(product, quantity), key)
            .await
    }

    /// R: true once an order of one `product` answers 201 within `within`,
    /// retrying with `same_key` (or a fresh key per try when `None`).
    pub async fn orders_recover(
        &self,
        product: &str,
        same_key: Option<&str>,
        within: Duration,
    ) -> bool {
        eventually(within, || async {
            let fresh = key();
            let key = same_key.unwrap_or(&fresh);
            self.order(product, 1, Some(key)).await.status == Some(201)
        })
        .await
    }
}

/// `{customer_id, items: [{product_id, quantity}]}`.
pub fn order_body(product: &str, quantity: i64) -> Value {
    json!({"customer_id": "e2e", "items": [{"product_id": product, "quantity": quantity}]})
}

/// A fresh idempotency key.
pub fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Asserts a problem+json answer with `status`, and `Retry-After` when
/// `retry_after`.
pub fn assert_problem(answer: &shopeasy_e2e::Answer, status: u16, retry_after: bool) {
    assert_eq!(answer.status, Some(status), "{}", answer.describe());
    assert!(
        answer.is_problem(),
        "not problem+json: {}",
        answer.describe()
    );
    if retry_after {
        assert!(
            answer.header("retry-after").is_some(),
            "no Retry-After: {:?}",
            answer.headers
        );
    }
}

// ---------------------------------------------------------------------------
// Measuring instruments of the F2-Redis / F5 / F9 cells: when a proxy
// accepted connections, which statements reached Postgres, what Redis
// holds, and the reconnect schedule of the services' Redis clients.

/// When a proxy accepted each connection, sampled every 5 ms from its
/// `connections()` counter (several in one tick share a time).
pub struct ConnectionLog {
    started: tokio::time::Instant,
    times: std::sync::Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectionLog {
    /// Starts recording `proxy`'s new connections.
    pub fn start(proxy: shopeasy_faults::FaultProxy) -> Self {
        let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = times.clone();
        let task = tokio::spawn(async move {
            let mut seen = proxy.connections();
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            loop {
                tick.tick().await;
                let now = proxy.connections();
                if now > seen {
                    let at = tokio::time::Instant::now();
                    let mut log = log.lock().expect("connection log");
                    for _ in seen..now {
                        log.push(at);
                    }
                    seen = now;
                }
            }
        });
        Self {
            started: tokio::time::Instant::now(),
            times,
            task,
        }
    }

    /// Each connection's time since the log started, in order.
    pub fn offsets(&self) -> Vec<Duration> {
        self.times
            .lock()
            .expect("connection log")
            .iter()
            .map(|t| t.duration_since(self.started))
            .collect()
    }
}

impl Drop for ConnectionLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The delays before each retry of one reconnect sequence of the
/// services' Redis clients (`redis::aio::ConnectionManager` as
/// `crates/product/src/cache/redis.rs` and `crates/order/src/stock_cache.rs`
/// configure it: min delay 100 ms, factor 2, max delay 5 s, 6 retries),
/// without their jitter, which only adds (each delay is d × [1, 2)).
pub const REDIS_RECONNECT_DELAYS_MS: [u64; 6] = [100, 200, 400, 800, 1_600, 3_200];

/// The most connection attempts any `window` can hold if the Redis client
/// reconnects by its schedule: sequences of 1 + 6 attempts at the minimum
/// delays, each new sequence starting the instant the last one failed
/// (the densest the schedule allows; a new sequence starts only when a
/// call sees the previous one fail).
pub fn redis_reconnect_bound(window: Duration) -> usize {
    let mut attempts = Vec::new();
    let mut start = 0u64;
    while start < 4 * u64::try_from(window.as_millis()).unwrap_or(u64::MAX) + 20_000 {
        let mut at = start;
        attempts.push(at);
        for delay in REDIS_RECONNECT_DELAYS_MS {
            at += delay;
            attempts.push(at);
        }
        start = at;
    }
    let width = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    attempts
        .iter()
        .map(|&from| {
            attempts
                .iter()
                .filter(|&&t| t >= from && t < from + width)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Asserts that the connection attempts one Redis client made at `edge`
/// during `window` (`offsets`, in order, the first being the first
/// attempt after the fault) follow its reconnect schedule: at least one
/// (it keeps trying), no more than [`redis_reconnect_bound`], and each
/// retry of a sequence (7 attempts) no sooner after the previous one than
/// its backoff step (minus 10 ms for the 5 ms sampling).
pub fn assert_redis_backoff(edge: &str, offsets: &[Duration], window: Duration) {
    let bound = redis_reconnect_bound(window);
    println!(
        "{edge}: {} connection attempts in {window:?} (bound {bound}), at {offsets:?}",
        offsets.len()
    );
    assert!(!offsets.is_empty(), "{edge}: the client keeps trying");
    assert!(
        offsets.len() <= bound,
        "{edge}: {} attempts in {window:?}, more than one per backoff step ({bound}): {offsets:?}",
        offsets.len()
    );
    let steps = REDIS_RECONNECT_DELAYS_MS.len() + 1;
    for (j, pair) in offsets.windows(2).enumerate() {
        let position = (j + 1) % steps;
        if position == 0 {
            continue; // a new sequence starts: no delay before it
        }
        let step = Duration::from_millis(REDIS_RECONNECT_DELAYS_MS[position - 1]);
        let gap = pair[1] - pair[0];
        assert!(
            gap + Duration::from_millis(10) >= step,
            "{edge}: retry {position} came {gap:?} after the previous attempt, \
             sooner than its backoff step {step:?}: {offsets:?}"
        );
    }
}

/// A Postgres wire-protocol tap: a TCP relay that records every statement
/// a client executes (extended protocol `Parse`/`Bind`, or simple `Query`)
/// while passing every byte on unchanged. It answers `SSLRequest` with
/// `N` itself, so the client talks plaintext and the tap can read it.
pub struct PgTap {
    addr: std::net::SocketAddr,
    executed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PgTap {
    /// Starts a tap on 127.0.0.1:0 relaying to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("tap listener");
        let addr = listener.local_addr().expect("tap address");
        let executed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = executed.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, log) = (upstream.clone(), log.clone());
                connections.spawn(async move {
                    let _ = pg_tap_connection(client, &upstream, &log).await;
                });
            }
        });
        Self {
            addr,
            executed,
            task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Statements executed so far whose SQL contains `needle`.
    pub fn executions(&self, needle: &str) -> usize {
        self.executed
            .lock()
            .expect("tap log")
            .iter()
            .filter(|sql| sql.contains(needle))
            .count()
    }
}

impl Drop for PgTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The SQL `ProductStore::get` runs (one product by id).
pub const PRODUCT_BY_ID_SQL: &str = "FROM products WHERE id = $1";

/// Splits a NUL-terminated string off the front of `bytes`.
fn cstr(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let rest = bytes.get(end + 1..).unwrap_or(&[]);
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), rest)
}

async fn pg_tap_connection(
    mut client: tokio::net::TcpStream,
    upstream: &str,
    executed: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SSL_REQUEST: u32 = 80_877_103;
    const GSSENC_REQUEST: u32 = 80_877_104;
    let mut server = tokio::net::TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    // Start-up messages have no type byte: length, then a code.
    loop {
        let mut head = [0u8; 8];
        client.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            client.write_all(b"N").await?;
            continue;
        }
        let mut message = head.to_vec();
        message.resize(len.max(8), 0);
        client.read_exact(&mut message[8..]).await?;
        server.write_all(&message).await?;
        break;
    }
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let responses = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut statements = std::collections::HashMap::new();
    let result = async {
        loop {
            let mut head = [0u8; 5];
            client_read.read_exact(&mut head).await?;
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut message = head.to_vec();
            message.resize(len.max(4) + 1, 0);
            client_read.read_exact(&mut message[5..]).await?;
            let body = &message[5..];
            match head[0] {
                b'P' => {
                    let (name, rest) = cstr(body);
                    statements.insert(name, cstr(rest).0);
                }
                b'B' => {
                    let (_portal, rest) = cstr(body);
                    if let Some(sql) = statements.get(&cstr(rest).0) {
                        executed.lock().expect("tap log").push(sql.clone());
                    }
                }
                b'Q' => executed.lock().expect("tap log").push(cstr(body).0),
                _ => {}
            }
            server_write.write_all(&message).await?;
        }
    }
    .await;
    let _ = server_write.shutdown().await;
    responses.abort();
    result
}

/// The keys of the test Redis matching `pattern` (`KEYS`, straight to the
/// server, no proxy), or `None` when no test Redis is configured.
pub async fn redis_keys(pattern: &str) -> Option<Vec<String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = url::Url::parse(&shopeasy_testkit::redis_url()?).expect("redis URL");
    let addr = format!(
        "{}:{}",
        url.host_str().unwrap_or("127.0.0.1"),
        url.port().unwrap_or(6379)
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("redis");
    let command = format!("*2\r\n$4\r\nKEYS\r\n${}\r\n{pattern}\r\n", pattern.len());
    stream.write_all(command.as_bytes()).await.expect("send");
    let mut reply = Vec::new();
    loop {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("redis answers")
            .expect("read");
        assert!(n > 0, "redis closed the connection");
        reply.extend_from_slice(&buf[..n]);
        if let Some(keys) = parse_keys(&reply) {
            return Some(keys);
        }
    }
}

/// A complete RESP array of bulk strings, or `None` while incomplete.
fn parse_keys(reply: &[u8]) -> Option<Vec<String>> {
    fn line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
        let end = bytes.windows(2).position(|w| w == b"\r\n")?;
        Some((&bytes[..end], &bytes[end + 2..]))
    }
    let (head, mut rest) = line(reply)?;
    assert_eq!(head.first(), Some(&b'*'), "not an array: {head:?}");
    let count: usize = std::str::from_utf8(&head[1..]).ok()?.parse().ok()?;
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        let (size, tail) = line(rest)?;
        let size: usize = std::str::from_utf8(size.get(1..)?).ok()?.parse().ok()?;
        if tail.len() < size + 2 {
            return None;
        }
        keys.push(String::from_utf8_lossy(&tail[..size]).into_owned());
        rest = &tail[size + 2..];
    }
    Some(keys)
}

/// Inserts `count` products with `description_chars`-character
/// descriptions straight into the product database (ids in creation
/// order, as the service's UUIDv7 ids are); returns their ids.
pub async fn seed_catalogue(
    cluster: &shopeasy_e2e::Cluster,
    prefix: &str,
    count: usize,
    description_chars: usize,
) -> Vec<uuid::Uuid> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let id = uuid::Uuid::now_v7();
        sqlx::query(
            "INSERT INTO products (id, sku, name, description, price_cents, currency, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 500, 'EUR', 0, 0)",
        )
        .bind(id.to_string())
        .bind(format!("{prefix}-{i}"))
        .bind(format!("e2e {prefix} {i}"))
        .bind("d".repeat(description_chars))
        .execute(cluster.product_db())
        .await
        .expect("seed product");
        ids.push(id);
    }
    ids
}

/// The `q`-quantile (0..=1) of `samples` (sorted in place).
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}
