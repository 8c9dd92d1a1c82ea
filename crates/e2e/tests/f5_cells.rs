//! F5 (slow body), the cells `f5_slow_body.rs` leaves open: a slow
//! *request* body from the client (gateway → order), a large product page
//! over a slow link (gateway → product), and a large result over a slow
//! link between product and its Postgres.
//!
//! The activity timeout (1 s in `Options::fast`) cuts silence, never
//! slowness: each test has a slow-but-steady half that must complete in
//! more than one timeout, and a silent half that must be cut at it.
//!
//! Note on the proxy: a toxic added or changed while a connection is open
//! applies from the next chunk the proxy reads (up to 32 KiB), not in the
//! middle of one it is already pacing out; the mid-body cut below uses a
//! page of several chunks for that reason.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{net::SocketAddr, time::Duration};

use shopeasy_e2e::{Client, Service};
use shopeasy_testkit::assert_eventually;
use support::{
    Fixture, assert_problem, assert_problem_within, key, order_body, seed_catalogue,
    toxics::{bandwidth, hang},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

/// One raw HTTP/1.1 answer.
struct RawAnswer {
    status: u16,
    head: String,
    /// From the last request byte sent to the whole answer read.
    after_last_byte: Duration,
}

/// Sends `POST /api/orders` to `addr` by hand: the headers (declaring the
/// whole body's length), then `pieces` of the body with `gap` between
/// them. When `stall` is set only the first half of the pieces is sent
/// and the client then goes silent. Returns the answer.
async fn post_order_raw(
    addr: SocketAddr,
    product: &str,
    idempotency_key: Option<&str>,
    pieces: usize,
    gap: Duration,
    stall: bool,
) -> RawAnswer {
    let body = order_body(product, 1).to_string().into_bytes();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut head = format!(
        "POST /api/orders HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {}\r\nContent-Length: {}\r\n",
        shopeasy_e2e::identity::token(support::CUSTOMER),
        body.len()
    );
    if let Some(k) = idempotency_key {
        head.push_str(&format!("Idempotency-Key: {k}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let size = body.len().div_ceil(pieces);
    let chunks: Vec<&[u8]> = body.chunks(size).collect();
    let send = if stall {
        chunks.len() / 2
    } else {
        chunks.len()
    };
    for (i, chunk) in chunks[..send].iter().enumerate() {
        if i > 0 {
            // Pacing the body is the fault itself, not a wait.
            tokio::time::sleep(gap).await;
        }
        stream.write_all(chunk).await.unwrap();
    }
    let last_byte = Instant::now();
    let raw = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut stream))
        .await
        .expect("the gateway answers within 10 s");
    let after_last_byte = last_byte.elapsed();
    let head = raw.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    RawAnswer {
        status,
        head: raw,
        after_last_byte,
    }
}

/// Reads one answer: headers, then `Content-Length` bytes (or up to EOF).
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        if n == 0 {
            return text;
        }
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if raw.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

/// gateway → order, slow request body from the client: headers and half
/// the body, then silence → 408 (the client is at fault, not the
/// service) one activity timeout after the last byte, `Connection:
/// close`; no order exists (C3), neither for a keyed POST (buffered by the
/// gateway, never sent) nor for a plain one (streamed to the order
/// service, which sees an aborted body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_order_stalled_request_body_is_408_without_an_order() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F5-STALL", 10).await;
    let gateway = f.cluster.addresses.gateway;
    let gap = Duration::from_millis(100);

    for k in [Some(key()), None] {
        let answer = post_order_raw(gateway, &id, k.as_deref(), 8, gap, true).await;
        assert_eq!(answer.status, 408, "keyed {}: {}", k.is_some(), answer.head);
        assert!(
            answer
                .head
                .to_ascii_lowercase()
                .contains("connection: close"),
            "{}",
            answer.head
        );
        assert!(
            answer.head.contains("application/problem+json"),
            "{}",
            answer.head
        );
        // L(activity + 200 ms): cut at the activity timeout, not earlier.
        assert!(
            answer.after_last_byte >= Duration::from_millis(950)
                && answer.after_last_byte < Duration::from_millis(1_200),
            "408 {:?} after the last byte (activity timeout 1 s)",
            answer.after_last_byte
        );
        assert_eq!(
            f.order_count().await,
            0,
            "C3: a half body never becomes an order"
        );
        println!(
            "F5 stalled body (keyed {}): 408 {:?} after the last byte",
            k.is_some(),
            answer.after_last_byte
        );
    }
    // The order service is fine: the same product orders normally after.
    f.placed(&id, 1).await;
    assert_eq!(f.order_count().await, 1, "C3: only the whole order exists");
    f.cluster.stop().await;
}

/// gateway → order, slow but steady request body (a piece every 300 ms,
/// 1.5 s in all: longer than the activity timeout, never silent for it):
/// the order is placed, keyed (buffered) and plain (streamed) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_order_slow_steady_request_body_is_placed() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F5-STEADY", 10).await;
    let gateway = f.cluster.addresses.gateway;
    let gap = Duration::from_millis(300);

    for (placed, k) in [Some(key()), None].into_iter().enumerate() {
        let started = Instant::now();
        let answer = post_order_raw(gateway, &id, k.as_deref(), 6, gap, false).await;
        assert_eq!(answer.status, 201, "keyed {}: {}", k.is_some(), answer.head);
        assert!(
            started.elapsed() > Duration::from_millis(1_400),
            "the body took longer than the activity timeout: {:?}",
            started.elapsed()
        );
        assert_eq!(
            f.order_count().await,
            i64::try_from(placed + 1).unwrap(),
            "one order per request"
        );
    }
    f.cluster.stop().await;
}

/// gateway → product, a product page over a 1 KB/s link: ~4 KB, so the
/// transfer takes several activity timeouts; it completes (200, the same
/// bytes as unthrottled) because bytes keep flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_product_page_at_1kb_per_second_completes() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    seed_catalogue(&f.cluster, "F5-PAGE", 4, 900).await;
    let path = "/api/products?limit=4";
    let fast = f.gateway.get(path).await;
    assert_eq!(fast.status, Some(200), "{}", fast.describe());
    assert!(
        fast.body.len() >= 3_500,
        "a page of several KB: {}",
        fast.body.len()
    );

    f.add_toxic("gateway-product", bandwidth(1)).await;
    let client = Client::new(f.cluster.gateway_url(), Duration::from_secs(15));
    let slow = client.get(path).await;
    assert_eq!(slow.status, Some(200), "{}", slow.describe());
    assert_eq!(slow.body, fast.body, "the whole page arrived");
    assert!(
        slow.elapsed > Duration::from_secs(3),
        "several activity timeouts long: {:?} for {} bytes",
        slow.elapsed,
        slow.body.len()
    );
    println!(
        "F5 gateway-product: {} bytes at 1 KB/s in {:?}",
        slow.body.len(),
        slow.elapsed
    );
    f.cluster.stop().await;
}

/// gateway → product, a large page (~100 KB, several proxy chunks) over a
/// 32 KB/s link; once the body is flowing, the link goes silent (`timeout`
/// toxic): the gateway aborts the response one activity timeout after the
/// last byte, the client sees an incomplete body, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_product_silence_mid_body_is_cut() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    seed_catalogue(&f.cluster, "F5-CUT", 100, 900).await;
    let url = format!("{}/api/products?limit=100", f.cluster.gateway_url());
    let whole = f.gateway.get("/api/products?limit=100").await;
    assert_eq!(whole.status, Some(200), "{}", whole.describe());
    assert!(whole.body.len() > 3 * 32 * 1024, "{}", whole.body.len());

    let proxy = f.add_toxic("gateway-product", bandwidth(32)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut response = http.get(&url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut received = 0usize;
    let mut last_byte = Instant::now();
    let mut silenced = false;
    let ended = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                received += chunk.len();
                last_byte = Instant::now();
                if !silenced {
                    proxy.add_toxic(hang()).unwrap();
                    silenced = true;
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let silence = last_byte.elapsed();
    println!(
        "F5 cut: {received} of {} bytes, cut {silence:?} after the last byte, {:?} in all",
        whole.body.len(),
        started.elapsed()
    );
    assert!(ended.is_err(), "the response was cut, not completed");
    assert!(received < whole.body.len(), "{received} bytes");
    assert!(
        silence >= Duration::from_millis(950) && silence < Duration::from_millis(1_500),
        "cut one activity timeout after the last byte: {silence:?}"
    );
    f.cluster.heal().await;
    let healed = f.gateway.get("/api/products?limit=100").await;
    assert_eq!(healed.body, whole.body, "R");
    f.cluster.stop().await;
}

/// product → Postgres, a large result (~100 KB) over a 10 KB/s link (~10 s
/// to deliver; Postgres itself finished at once, so its
/// `statement_timeout` never fires): the product service's own bound on a
/// database read (acquire 0.5 s + statement 2 s = 2.5 s) answers 503 +
/// Retry-After at that bound, through the gateway the activity timeout
/// answers 504 at 1 s; neither hangs. After the heal, 200 again (R) without
/// a restart. The read cache is off, so every request reads Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_product_postgres_slow_result_is_bounded_by_the_read_timeout() {
    let Some(f) = Fixture::start(|o| o.product.cache.enabled = false).await else {
        return;
    };
    seed_catalogue(&f.cluster, "F5-PG", 100, 900).await;
    let path = "/api/products?limit=100";
    let direct = Client::new(
        format!("http://{}", f.cluster.addresses.product),
        Duration::from_secs(15),
    );
    let baseline = direct.get(path).await;
    assert_eq!(baseline.status, Some(200), "{}", baseline.describe());
    assert!(baseline.body.len() > 90_000, "{}", baseline.body.len());

    let proxy = f.add_toxic("product-postgres", bandwidth(10)).await;
    let slow = direct.get(path).await;
    assert_problem(&slow, 503, true);
    assert!(
        slow.elapsed >= Duration::from_millis(2_400) && slow.elapsed < Duration::from_millis(3_200),
        "L(read bound 2.5 s + ε): {}",
        slow.describe()
    );
    let via_gateway = f.gateway.get(path).await;
    // L(activity 1 s + ε)
    assert_problem_within(&via_gateway, 504, false, Duration::from_millis(1_300));
    assert_eq!(
        f.health(Service::Product, "live").await,
        200,
        "live: no restart needed"
    );

    proxy.remove_all_toxics();
    let healed = Instant::now();
    assert_eventually(Duration::from_secs(10), "R(10 s)", async || {
        direct.get(path).await.body == baseline.body
    })
    .await;
    println!(
        "F5 product-postgres: 503 in {:?}, 504 in {:?}, recovered {:?} after the heal",
        slow.elapsed,
        via_gateway.elapsed,
        healed.elapsed()
    );
    f.cluster.stop().await;
}
