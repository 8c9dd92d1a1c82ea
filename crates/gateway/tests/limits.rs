//! The gateway protects itself from its callers (issue 14, SPEC §11): the
//! connection cap, the per-route in-flight cap, the per-client rate limit,
//! the head buffer, the whole-body deadline, the per-origin upstream cap and
//! bounded method labels. Real servers on 127.0.0.1:0, real time with short
//! settings, bounded waits.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used)]

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

mod support;

use shopeasy_gateway::GatewaySettings;
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::{Metrics, assert_eventually};
use support::{Gateway, gateway, header, http_from, read_message};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    task::JoinHandle,
    time::{Instant, timeout},
};

// ---------------------------------------------------------------- gateway

/// Settings with both routes on `product` and `order`, short timeouts and
/// limits loose enough not to get in the way of the test's own.
fn settings(product: SocketAddr, order: SocketAddr) -> GatewaySettings {
    let mut s = support::settings(product, order, Seconds::new(1.0), Seconds::new(2.0));
    s.limits.client_requests_per_second = 100_000;
    s.limits.client_burst = 100_000;
    s
}

fn http() -> reqwest::Client {
    http_from(IpAddr::from([127, 0, 0, 1]))
}

// ---------------------------------------------------------------- the fake

/// What the fake service saw.
#[derive(Default)]
struct Seen {
    open: AtomicUsize,
    max_open: AtomicUsize,
    arrivals: AtomicUsize,
}

impl Seen {
    fn arrivals(&self) -> usize {
        self.arrivals.load(Ordering::SeqCst)
    }
    fn max_open(&self) -> usize {
        self.max_open.load(Ordering::SeqCst)
    }
}

/// A keep-alive HTTP/1.1 service answering `200 ok` to every request, after
/// `hold` and, when `gate` is given, after taking one of its permits.
struct Fake {
    addr: SocketAddr,
    seen: Arc<Seen>,
    gate: Option<Arc<Semaphore>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Fake {
    async fn start(hold: Duration, gated: bool) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let gate = gated.then(|| Arc::new(Semaphore::new(0)));
        let (s, g) = (seen.clone(), gate.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, gate) = (s.clone(), g.clone());
                let open = seen.open.fetch_add(1, Ordering::SeqCst) + 1;
                seen.max_open.fetch_max(open, Ordering::SeqCst);
                tokio::spawn(async move {
                    serve_fake(stream, &seen, hold, gate).await;
                    seen.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Fake {
            addr,
            seen,
            gate,
            accept,
        }
    }

    fn release(&self, n: usize) {
        self.gate.as_ref().unwrap().add_permits(n);
    }
}

async fn serve_fake(
    mut stream: TcpStream,
    seen: &Seen,
    hold: Duration,
    gate: Option<Arc<Semaphore>>,
) {
    while let Some((_, _)) = read_message(&mut stream).await {
        seen.arrivals.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(hold).await;
        if let Some(gate) = &gate {
            gate.acquire().await.unwrap().forget();
        }
        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if stream.write_all(reply).await.is_err() {
            return;
        }
    }
}

fn status_of(head: &str) -> u16 {
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

const GET: &[u8] = b"GET /api/products/1 HTTP/1.1\r\nHost: shop\r\n\r\n";

/// One GET on `stream`, answered within `within`: its status.
async fn get_on(stream: &mut TcpStream, within: Duration) -> Option<u16> {
    stream.write_all(GET).await.ok()?;
    let (head, _) = timeout(within, read_message(stream)).await.ok()??;
    Some(status_of(&head))
}

/// Sends `n` GETs of `/api/products/1` through `gw` and waits (3 s at the
/// most) until `fake` has seen all of them, `what` naming the wait; the
/// requests, pending while `fake` holds them.
async fn held_at(
    fake: &Fake,
    n: usize,
    what: &str,
    http: &reqwest::Client,
    gw: &Gateway,
) -> Vec<JoinHandle<reqwest::Result<reqwest::Response>>> {
    let held = (0..n)
        .map(|_| tokio::spawn(http.get(gw.url("/api/products/1")).send()))
        .collect();
    let seen = fake.seen.clone();
    assert_eventually(Duration::from_secs(3), what, async || seen.arrivals() == n).await;
    held
}

/// Sends `request` and asserts the gateway refuses it at once (within
/// 500 ms) with 503, `retry-after: 1` and a `Proxy-Status` naming the
/// connection limit `details`; returns the problem body.
async fn refused_at_once(request: reqwest::RequestBuilder, details: &str) -> serde_json::Value {
    let started = Instant::now();
    let r = request.send().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "refused at once"
    );
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        r.headers()["proxy-status"],
        format!("shopeasy-gateway; error=connection_limit_reached; details=\"{details}\"")
    );
    r.json().await.unwrap()
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn at_the_connection_cap_no_more_are_accepted_and_held_ones_keep_being_served() {
    let fake = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(fake.addr, fake.addr);
    s.limits.max_connections = 3;
    let gw = gateway(s).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = TcpStream::connect(gw.addr).await.unwrap();
        assert_eq!(get_on(&mut c, Duration::from_secs(2)).await, Some(200));
        held.push(c);
    }
    // Ten more: the kernel completes their handshakes (backlog), the
    // gateway does not accept them, so their requests wait.
    let mut waiting = Vec::new();
    for _ in 0..10 {
        let mut c = TcpStream::connect(gw.addr).await.unwrap();
        c.write_all(GET).await.unwrap();
        waiting.push(c);
    }
    for c in &mut waiting {
        let answered = timeout(Duration::from_millis(50), read_message(c)).await;
        assert!(answered.is_err(), "a connection past the cap was served");
    }
    assert_eq!(gw.open_connections().await, 3.0);
    // The held connections keep being served, again and again.
    for c in &mut held {
        for _ in 0..3 {
            assert_eq!(get_on(c, Duration::from_secs(2)).await, Some(200));
        }
    }
    assert_eq!(gw.open_connections().await, 3.0);
    // One closes: exactly one waiting connection is taken in and served.
    drop(held.pop());
    let mut served = None;
    let started = Instant::now();
    while served.is_none() && started.elapsed() < Duration::from_secs(3) {
        for (i, c) in waiting.iter_mut().enumerate() {
            if let Ok(Some((head, _))) = timeout(Duration::from_millis(20), read_message(c)).await {
                assert_eq!(status_of(&head), 200);
                served = Some(i);
                break;
            }
        }
    }
    let served = served.expect("a waiting connection was served after one closed");
    assert_eq!(gw.open_connections().await, 3.0);
    for (i, c) in waiting.iter_mut().enumerate() {
        if i != served {
            let answered = timeout(Duration::from_millis(20), read_message(c)).await;
            assert!(answered.is_err(), "only one waiting connection got in");
        }
    }
}

#[tokio::test]
async fn a_body_trickled_within_the_activity_interval_ends_at_the_body_deadline_with_408() {
    let fake = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(fake.addr, fake.addr);
    // Activity 1 s, one byte every 0.8 s: only the body deadline ends it.
    s.limits.request_body_timeout_seconds = Seconds::new(2.5);
    let gw = gateway(s).await;
    let stream = TcpStream::connect(gw.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let head = format!(
        "POST /api/orders HTTP/1.1\r\nHost: shop\r\nAuthorization: {}\r\n\
         Content-Length: 100\r\n\r\n",
        support::bearer("alice")
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if write.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(800)).await;
        }
    });
    let (head, body) = timeout(Duration::from_secs(6), read_message(&mut read))
        .await
        .expect("answered before the client gave up")
        .unwrap();
    let took = started.elapsed();
    trickle.abort();
    assert_eq!(status_of(&head), 408, "{head}");
    assert!(
        took >= Duration::from_millis(2500),
        "not before the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_millis(3500),
        "at the deadline: {took:?}"
    );
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("2500 ms"),
        "{body}"
    );
    assert_eq!(
        header(&head, "proxy-status"),
        Some("shopeasy-gateway; error=http_request_error")
    );
}

/// A service answering one request with a body far larger than any socket
/// buffer, written until the gateway stops taking it; sends how many bytes
/// it wrote when a write fails (the gateway dropped the exchange).
async fn endless_answer() -> (SocketAddr, tokio::sync::oneshot::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (gone, dropped) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_message(&mut stream).await.unwrap();
        const TOTAL: usize = 1 << 30;
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {TOTAL}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0;
        while written < TOTAL && stream.write_all(&chunk).await.is_ok() {
            written += chunk.len();
        }
        let _ = gone.send(written);
    });
    (addr, dropped)
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_after_the_activity_timeout() {
    // The response body is only polled while the client takes it: without a
    // write timeout a caller that never reads would hold its route slot and
    // the upstream connection for ever.
    let (service, dropped) = endless_answer().await;
    let gw = gateway(settings(service, service)).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(gw.addr).await.unwrap();
    client.write_all(GET).await.unwrap();
    let started = Instant::now();
    // Activity 1 s: the exchange is dropped about then, and the service's
    // next write fails.
    let written = timeout(Duration::from_secs(10), dropped)
        .await
        .expect("the gateway gave up on a client that reads nothing")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "not before the activity timeout: {:?}",
        started.elapsed()
    );
    assert!(written < 1 << 30, "the answer was not taken in full");
    // The client finds its connection ended, with a fraction of the body.
    let mut received = Vec::new();
    let read = timeout(Duration::from_secs(5), client.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the connection was closed, not left open");
    assert!(received.len() < 1 << 30, "got {} bytes", received.len());
}

#[tokio::test]
async fn a_thousand_made_up_methods_add_at_most_one_metric_series() {
    let fake = Fake::start(Duration::ZERO, false).await;
    let gw = gateway(settings(fake.addr, fake.addr)).await;
    let http = http();
    let series = |m: &Metrics| m.matching("shopeasy_gateway_requests_total", &[]).count();
    assert_eq!(
        http.get(gw.url("/api/products/1"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let before = series(&gw.metrics().await);
    for i in 0..1000 {
        let method = reqwest::Method::from_bytes(format!("MADEUP{i}").as_bytes()).unwrap();
        let r = http
            .request(method, gw.url("/api/products/1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405);
        assert!(r.headers()["allow"].to_str().unwrap().contains("PATCH"));
    }
    let after = gw.metrics().await;
    assert!(
        series(&after) <= before + 1,
        "{before} series before, {} after",
        series(&after)
    );
    assert_eq!(
        after.sum(
            "shopeasy_gateway_requests_total",
            &[("outcome", "method_not_allowed")]
        ),
        1000.0
    );
    assert_eq!(fake.seen.arrivals(), 1, "never forwarded");
}

#[tokio::test]
async fn a_rate_limited_client_gets_429_with_the_headers_and_others_are_untouched() {
    let fake = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(fake.addr, fake.addr);
    s.limits.client_requests_per_second = 1;
    s.limits.client_burst = 3;
    let gw = gateway(s).await;
    let a = http_from(IpAddr::from([127, 0, 0, 1]));
    let b = http_from(IpAddr::from([127, 0, 0, 2]));
    for left in (0..3).rev() {
        let r = a.get(gw.url("/api/products/1")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=3;w=3");
        let rate = r.headers()["ratelimit"].to_str().unwrap();
        assert!(
            rate.starts_with(&format!("\"default\";r={left};t=")),
            "{rate}"
        );
    }
    let r = a.get(gw.url("/api/products/1")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["ratelimit-policy"], "\"default\";q=3;w=3");
    let rate = r.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(rate.starts_with("\"default\";r=0;t="), "{rate}");
    assert_eq!(
        r.headers()["proxy-status"],
        "shopeasy-gateway; error=http_request_denied"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("retry after 1 s"),
        "{body}"
    );
    // Another address is untouched: its whole burst is there.
    for _ in 0..3 {
        let r = b.get(gw.url("/api/products/1")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(fake.seen.arrivals(), 6, "the 429 was never forwarded");
}

#[tokio::test]
async fn a_saturated_route_answers_503_while_the_other_route_still_answers() {
    let product = Fake::start(Duration::ZERO, true).await;
    let order = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(product.addr, order.addr);
    s.limits.max_in_flight_per_route = 2;
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
    let gw = gateway(s).await;
    let http = http();
    let held = held_at(&product, 2, "both reach product", &http, &gw).await;
    let body = refused_at_once(
        http.get(gw.url("/api/products/2")),
        "product route in-flight cap",
    )
    .await;
    assert!(
        body["type"].as_str().unwrap().ends_with("overloaded"),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("2 requests in flight"),
        "{body}"
    );
    assert_eq!(product.seen.arrivals(), 2, "not forwarded");
    // The order route is not affected.
    let r = gw.get_as(&http, "/api/orders/1", "alice").await;
    assert_eq!(r.status(), 200);
    // Released, the held ones complete and the route takes requests again.
    product.release(3);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
    let r = http.get(gw.url("/api/products/3")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn the_service_never_sees_more_connections_than_the_per_origin_cap() {
    let fake = Fake::start(Duration::from_millis(100), false).await;
    let mut s = settings(fake.addr, fake.addr);
    s.limits.max_upstream_connections_per_origin = 3;
    let gw = gateway(s).await;
    let http = http();
    let requests: Vec<_> = (0..12)
        .map(|i| tokio::spawn(http.get(gw.url(&format!("/api/products/{i}"))).send()))
        .collect();
    for r in requests {
        assert_eq!(r.await.unwrap().unwrap().status(), 200);
    }
    let max = fake.seen.max_open();
    assert_eq!(max, 3, "at most the cap, and the cap was used");
    assert_eq!(fake.seen.arrivals(), 12);
}

#[tokio::test]
async fn waiting_for_an_upstream_connection_ends_in_503_at_the_connect_timeout() {
    let fake = Fake::start(Duration::ZERO, true).await;
    let mut s = settings(fake.addr, fake.addr);
    s.limits.max_upstream_connections_per_origin = 1;
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
    s.resilience.gateway.connect_timeout_seconds = Seconds::new(0.3);
    let gw = gateway(s).await;
    let http = http();
    let held = held_at(&fake, 1, "the first reaches the service", &http, &gw).await;
    let started = Instant::now();
    let r = http.get(gw.url("/api/products/2")).send().await.unwrap();
    let took = started.elapsed();
    assert_eq!(r.status(), 503);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(
        r.headers()["proxy-status"],
        "shopeasy-gateway; error=connection_limit_reached; details=\"upstream connection cap\""
    );
    assert_eq!(fake.seen.max_open(), 1);
    fake.release(1);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
}

#[tokio::test]
async fn a_head_past_the_buffer_is_refused_with_431_without_waiting_for_its_end() {
    let fake = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(fake.addr, fake.addr);
    s.limits.max_header_bytes = 8192;
    // hyper's header read timeout is the activity timeout: far away.
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(30.0);
    let gw = gateway(s).await;
    // A head just over the cap but inside the buffer: the problem+json 431.
    let mut c = TcpStream::connect(gw.addr).await.unwrap();
    let filler = "a".repeat(8300);
    c.write_all(
        format!("GET /api/products/1 HTTP/1.1\r\nHost: shop\r\nX-Big: {filler}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let (head, _) = timeout(Duration::from_secs(3), read_message(&mut c))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status_of(&head), 431);
    assert_eq!(
        header(&head, "content-type"),
        Some("application/problem+json")
    );
    // An unfinished head of 64 KiB: with a 1 MiB buffer hyper would wait
    // for its end (30 s); capped near 8 KiB it answers 431 once the
    // buffer is full, having read at most about that much.
    let mut c = TcpStream::connect(gw.addr).await.unwrap();
    let started = Instant::now();
    c.write_all(b"GET /api/products/1 HTTP/1.1\r\nHost: shop\r\nX-Big: ")
        .await
        .unwrap();
    let big = vec![b'a'; 64 * 1024];
    let _ = timeout(Duration::from_secs(1), c.write_all(&big)).await;
    let mut answer = Vec::new();
    let _ = timeout(Duration::from_secs(3), c.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.seen.arrivals(), 0);
}

#[tokio::test]
async fn the_gateways_own_admission_sheds_at_its_limit_and_is_reported() {
    let product = Fake::start(Duration::ZERO, true).await;
    let order = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(product.addr, order.addr);
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
    let a = &mut s.process.admission;
    a.enabled = true;
    (a.initial_limit, a.min_limit, a.max_limit, a.queue_size) = (1, 1, 1, 0);
    let gw = gateway(s).await;
    let http = http();
    let held = held_at(&product, 1, "the first reaches product", &http, &gw).await;
    // The other route has room of its own, but the gateway's limit is 1.
    let body = refused_at_once(
        http.get(gw.url("/api/orders/1"))
            .bearer_auth(support::token("alice")),
        "gateway admission limit",
    )
    .await;
    assert_eq!(body["reason"], "refused_full", "{body}");
    assert_eq!(order.seen.arrivals(), 0, "shed before any work");
    let report: serde_json::Value = reqwest::get(format!("http://{}/admin/resilience", gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admission = &report["admission"];
    assert_eq!(admission["listener"], "gateway", "{report}");
    assert_eq!(admission["in_flight"], 1, "{report}");
    assert_eq!(admission["requests"]["refused_full"], 1, "{report}");
    product.release(1);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
    let r = gw.get_as(&http, "/api/orders/1", "alice").await;
    assert_eq!(r.status(), 200);
}

/// Clients trickling keyed POST bodies hold their route's slots, not the
/// gateway's admission: with an admission limit of 2 and two such uploads
/// under way, a request on the other route is served. Admission was taken
/// before the body was read, so the two uploads held both permits (for up
/// to the whole-body deadline) and everyone else got 503 `overloaded`.
#[tokio::test]
async fn clients_trickling_their_bodies_do_not_hold_the_gateways_admission() {
    let product = Fake::start(Duration::ZERO, false).await;
    let order = Fake::start(Duration::ZERO, false).await;
    let mut s = settings(product.addr, order.addr);
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
    s.limits.request_body_timeout_seconds = Seconds::new(10.0);
    s.limits.max_in_flight_per_route = 2;
    let a = &mut s.process.admission;
    a.enabled = true;
    (a.initial_limit, a.min_limit, a.max_limit, a.queue_size) = (2, 2, 2, 0);
    let gw = gateway(s).await;
    let http = http();
    let mut uploads = Vec::new();
    for key in ["k1", "k2"] {
        let mut c = TcpStream::connect(gw.addr).await.unwrap();
        let head = format!(
            "POST /api/products/x HTTP/1.1\r\nhost: g\r\nidempotency-key: {key}\r\n\
             content-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        uploads.push(c);
    }
    // Both uploads are in: the product route's two slots are taken.
    assert_eventually(
        Duration::from_secs(3),
        "both uploads hold the product route",
        async || {
            let r = http.get(gw.url("/api/products/1")).send().await.unwrap();
            r.status() == 503
                && r.headers()["proxy-status"]
                    .to_str()
                    .unwrap()
                    .contains("product route in-flight cap")
        },
    )
    .await;
    let r = gw.get_as(&http, "/api/orders/1", "alice").await;
    assert_eq!(r.status(), 200, "{:?}", r.headers().get("proxy-status"));
    assert_eq!(product.seen.arrivals(), 0, "no upload reached the service");
    drop(uploads);
}

/// The deadline a service is told is what was left when the request went
/// on the wire, not when the gateway began to wait for a connection: with
/// one connection per origin held for 1.5 s, a request sent with 5,000 ms
/// reaches the service with about 3,500 left (it was told ~5,000 and the
/// gateway gave up on it 1.5 s before the service would).
#[tokio::test]
async fn the_deadline_sent_on_is_what_is_left_after_waiting_for_a_connection() {
    const HOLD: Duration = Duration::from_millis(1500);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (told, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let service = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let told = told.clone();
            tokio::spawn(async move {
                while let Some((head, _)) = read_message(&mut stream).await {
                    let ms: u64 = header(&head, "shopeasy-deadline-ms")
                        .unwrap()
                        .parse()
                        .unwrap();
                    told.send(ms).unwrap();
                    tokio::time::sleep(HOLD).await;
                    let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if stream.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut s = settings(addr, addr);
    s.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
    s.resilience.gateway.connect_timeout_seconds = Seconds::new(5.0);
    s.limits.max_upstream_connections_per_origin = 1;
    let gw = gateway(s).await;
    let http = http();
    let send = |path: &str| {
        tokio::spawn(
            http.get(gw.url(path))
                .header("shopeasy-deadline-ms", "5000")
                .send(),
        )
    };
    let first = send("/api/products/1");
    let told_first = heard.recv().await.unwrap();
    // Sent once the first holds the only connection: it waits ~1.5 s.
    let second = send("/api/products/2");
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    let told_second = heard.recv().await.unwrap();
    assert!(
        told_first > 4_500,
        "the first waited for nothing: {told_first}"
    );
    assert!(
        told_second < 5_000 - 1_000,
        "the second waited ~1.5 s for the connection, yet was told {told_second} ms"
    );
    service.abort();
}
