//! The gateway in front of fake services that misbehave (issue 7's "Done
//! when"), all on 127.0.0.1:0 with short timeouts. The fakes are raw TCP
//! servers so each can break HTTP exactly where a test needs it, and count
//! connections and request arrivals.

// Test helpers outside #[test] functions may unwrap too.
#![allow(clippy::unwrap_used)]

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

mod support;

use shopeasy_gateway::GatewaySettings;
use shopeasy_runtime::settings::Seconds;
use support::{gateway, header, http, read_message};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::{Instant, timeout},
};

/// The activity timeout every test runs with.
const ACTIVITY: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- gateway

/// Both routes on `upstream`, with the [`ACTIVITY`] timeout.
fn settings(upstream: SocketAddr) -> GatewaySettings {
    support::settings(
        upstream,
        upstream,
        Seconds::from(ACTIVITY),
        Seconds::new(1.0),
    )
}

/// The sum of metric `name`'s samples carrying `labels` (0 if none).
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    shopeasy_testkit::Metrics::parse(text).sum(name, labels)
}

// ---------------------------------------------------------------- fakes

/// What a fake saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    arrivals: AtomicUsize,
    heads: Mutex<Vec<String>>,
    bodies: Mutex<Vec<Vec<u8>>>,
}

impl Seen {
    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    fn arrivals(&self) -> usize {
        self.arrivals.load(Ordering::SeqCst)
    }
}

/// One request as read by a fake.
struct Arrival {
    /// 0-based over the fake's life.
    index: usize,
}

/// A raw TCP fake service: `serve` runs for each request read on a
/// connection and returns whether to keep reading requests on it.
struct Fake {
    addr: SocketAddr,
    seen: Arc<Seen>,
    accept: tokio::task::JoinHandle<()>,
}

impl Fake {
    /// Stops accepting (the listener closes; open connections live on).
    fn stop_listening(&self) {
        self.accept.abort();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Fake {
    async fn start<F, Fut>(serve: F) -> Fake
    where
        F: Fn(Arrival, TcpStream) -> Fut + Send + Sync + Clone + 'static,
        Fut: std::future::Future<Output = Option<TcpStream>> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, Arc::new(Seen::default()), serve)
    }

    fn on<F, Fut>(listener: TcpListener, seen: Arc<Seen>, serve: F) -> Fake
    where
        F: Fn(Arrival, TcpStream) -> Fut + Send + Sync + Clone + 'static,
        Fut: std::future::Future<Output = Option<TcpStream>> + Send,
    {
        let addr = listener.local_addr().unwrap();
        let s = seen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                s.connections.fetch_add(1, Ordering::SeqCst);
                let (s, serve) = (s.clone(), serve.clone());
                tokio::spawn(async move {
                    loop {
                        let Some((head, body)) = read_message(&mut stream).await else {
                            return;
                        };
                        let index = s.arrivals.fetch_add(1, Ordering::SeqCst);
                        s.heads.lock().unwrap().push(head);
                        s.bodies.lock().unwrap().push(body);
                        match serve(Arrival { index }, stream).await {
                            Some(back) => stream = back,
                            None => return,
                        }
                    }
                });
            }
        });
        Fake { addr, seen, accept }
    }
}

async fn ok(mut stream: TcpStream, body: &str) -> Option<TcpStream> {
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await.ok()?;
    Some(stream)
}

/// Closes the connection with a TCP reset (SO_LINGER 0).
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// A fake whose first request's connection is reset before any response
/// byte; later requests get 200 `fine`.
async fn breaks_first_request() -> Fake {
    Fake::start(|a: Arrival, stream| async move {
        if a.index == 0 {
            reset(stream);
            None
        } else {
            ok(stream, "fine").await
        }
    })
    .await
}

/// An address nothing listens on.
async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// Sends raw bytes to the gateway and reads its answer until it closes or
/// `within` passes.
async fn raw(addr: SocketAddr, request: &[u8], within: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = timeout(within, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------- retries

#[tokio::test]
async fn a_get_over_a_broken_connection_is_retried() {
    let fake = breaks_first_request().await;
    let gw = gateway(settings(fake.addr)).await;
    let res = http().get(gw.url("/api/products/1")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "fine");
    assert_eq!(fake.seen.arrivals(), 2, "one failed attempt, one retry");
    let m = gw.metrics_text().await;
    assert!(
        metric(
            &m,
            "shopeasy_gateway_retries_total",
            &[("outcome", "success_after_retry")]
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_plain_post_over_the_same_break_is_not_repeated() {
    let fake = breaks_first_request().await;
    let gw = gateway(settings(fake.addr)).await;
    let res = http()
        .post(gw.url("/api/orders"))
        .bearer_auth(support::token("alice"))
        .header("content-type", "application/json")
        .body(r#"{"customer_id":"c"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    assert_eq!(
        res.headers()["proxy-status"],
        "shopeasy-gateway; error=connection_terminated"
    );
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    assert_eq!(fake.seen.arrivals(), 1, "a plain POST is never repeated");
}

#[tokio::test]
async fn a_keyed_post_is_repeated_once_with_the_same_body() {
    let fake = breaks_first_request().await;
    let gw = gateway(settings(fake.addr)).await;
    let body = r#"{"customer_id":"c","items":[]}"#;
    let res = http()
        .post(gw.url("/api/orders"))
        .bearer_auth(support::token("alice"))
        .header("content-type", "application/json")
        .header("idempotency-key", "k-1")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(fake.seen.arrivals(), 2);
    let bodies = fake.seen.bodies.lock().unwrap().clone();
    assert_eq!(bodies, [body.as_bytes(), body.as_bytes()]);
    let heads = fake.seen.heads.lock().unwrap().clone();
    assert!(
        heads
            .iter()
            .all(|h| header(h, "idempotency-key") == Some("k-1"))
    );
}

#[tokio::test]
async fn a_refusal_of_the_retry_of_a_keyed_post_does_not_speak_for_the_first_attempt() {
    // The first attempt's connection closes after the request was sent (the
    // service may have placed the order); the retry is refused by the
    // service's admission control.
    const REFUSAL: &str = r#"{"type":"urn:shopeasy:problem:overloaded","status":503}"#;
    let fake = Fake::start(|a: Arrival, mut stream: TcpStream| async move {
        if a.index == 0 {
            reset(stream);
            return None;
        }
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
             retry-after: 1\r\ncontent-length: {}\r\n\r\n{REFUSAL}",
            REFUSAL.len()
        );
        stream.write_all(response.as_bytes()).await.ok()?;
        Some(stream)
    })
    .await;
    let gw = gateway(settings(fake.addr)).await;
    let res = http()
        .post(gw.url("/api/orders"))
        .bearer_auth(support::token("alice"))
        .header("content-type", "application/json")
        .header("idempotency-key", "k-2")
        .body(r#"{"customer_id":"c","items":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(fake.seen.arrivals(), 2, "the keyed POST was retried");
    // Not the retry's "overloaded" (nothing done), but the first attempt's
    // unknown outcome: the caller retries with the same key.
    assert_eq!(res.status(), 502);
    assert_eq!(
        res.headers()["proxy-status"],
        "shopeasy-gateway; error=connection_terminated"
    );
    let body = res.text().await.unwrap();
    assert!(!body.contains("overloaded"), "{body}");
}

#[tokio::test]
async fn a_post_whose_key_is_named_in_connection_is_sent_without_it_and_never_repeated() {
    // `Connection` makes the key hop-by-hop: the gateway drops it, so what
    // reaches the service is a plain POST, which must not be re-sent.
    let fake = breaks_first_request().await;
    let gw = gateway(settings(fake.addr)).await;
    let body = r#"{"customer_id":"c","items":[]}"#;
    let request = format!(
        "POST /api/orders HTTP/1.1\r\nhost: shop\r\nidempotency-key: k\r\n\
         connection: close, idempotency-key\r\nauthorization: {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        support::bearer("alice"),
        body.len()
    );
    let answer = raw(gw.addr, request.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(fake.seen.arrivals(), 1, "the unkeyed POST was repeated");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("proxy-status: shopeasy-gateway; error=connection_terminated"),
        "{answer}"
    );
    let head = fake.seen.heads.lock().unwrap()[0].clone();
    assert_eq!(header(&head, "idempotency-key"), None, "{head}");
}

#[tokio::test]
async fn a_503_is_passed_through_byte_for_byte_and_not_retried() {
    const BODY: &str = r#"{"type":"urn:shopeasy:problem:unavailable","status":503}"#;
    let fake = Fake::start(|_a: Arrival, mut stream: TcpStream| async move {
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
             retry-after: 7\r\nx-upstream: order\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        stream.write_all(response.as_bytes()).await.ok()?;
        Some(stream)
    })
    .await;
    let gw = gateway(settings(fake.addr)).await;
    let res = gw.get_as(&http(), "/api/orders/9", "alice").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "7");
    assert_eq!(res.headers()["x-upstream"], "order");
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    assert!(
        res.headers().get("proxy-status").is_none(),
        "the service answered, not the gateway"
    );
    assert_eq!(res.bytes().await.unwrap(), BODY.as_bytes());
    assert_eq!(fake.seen.arrivals(), 1, "no response is ever retried");
}

#[tokio::test]
async fn a_refused_connection_answers_502_in_under_a_second() {
    let gw = gateway(settings(closed_port().await)).await;
    let started = Instant::now();
    let res = http().get(gw.url("/api/products")).send().await.unwrap();
    let took = started.elapsed();
    assert_eq!(res.status(), 502);
    assert_eq!(
        res.headers()["proxy-status"],
        "shopeasy-gateway; error=connection_refused"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let m = gw.metrics_text().await;
    assert!(
        metric(
            &m,
            "shopeasy_gateway_retries_total",
            &[("outcome", "exhausted")]
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_service_that_restarts_during_the_retries_is_reached_again() {
    // The first incarnation crashes while handling the request: it stops
    // listening, a new incarnation binds the same port, and only then does
    // the old one's connection die (reset, no response byte).
    let (arrived_tx, arrived_rx) = tokio::sync::oneshot::channel::<()>();
    let (die_tx, die_rx) = tokio::sync::oneshot::channel::<()>();
    let slot = Arc::new(Mutex::new(Some((arrived_tx, die_rx))));
    let first = Fake::start(move |_a: Arrival, stream| {
        let slot = slot.clone();
        async move {
            let (arrived, die) = slot.lock().unwrap().take()?;
            let _ = arrived.send(());
            let _ = die.await;
            reset(stream);
            None
        }
    })
    .await;
    let gw = gateway(settings(first.addr)).await;
    let request = tokio::spawn({
        let url = gw.url("/api/products/7");
        async move { http().get(url).send().await.unwrap() }
    });
    arrived_rx.await.unwrap();
    first.stop_listening();
    let second = restart_on(first.addr, first.seen.clone()).await;
    die_tx.send(()).unwrap();
    let res = request.await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "back");
    assert_eq!(
        second.seen.arrivals(),
        2,
        "the crashed attempt and the retry"
    );
    assert_eq!(second.seen.connections(), 2, "one per incarnation");
}

/// Binds `addr` again (retrying while the old socket lets go) and serves 200
/// `back`.
async fn restart_on(addr: SocketAddr, seen: Arc<Seen>) -> Fake {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Fake::on(l, seen, |_a: Arrival, s| ok(s, "back")),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("cannot rebind {addr}: {e}"),
        }
    }
}

#[tokio::test]
async fn budget_exhaustion_stops_retries_and_is_counted() {
    // Every connection is reset: each GET wants 2 retries, the budget has 1.
    let fake = Fake::start(|_a: Arrival, stream| async move {
        reset(stream);
        None
    })
    .await;
    let mut s = settings(fake.addr);
    s.resilience.retry_budget.ratio = 0.0;
    s.resilience.retry_budget.min_retries_per_window = 1;
    let gw = gateway(s).await;
    let before = metric(
        &gw.metrics_text().await,
        "shopeasy_gateway_retries_total",
        &[("outcome", "budget_exhausted")],
    );
    let first = http().get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(first.status(), 502);
    assert_eq!(
        fake.seen.arrivals(),
        2,
        "one retry from the budget, then none"
    );
    let second = http().get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(second.status(), 502);
    assert_eq!(fake.seen.arrivals(), 3, "budget empty: no retry at all");
    let after = metric(
        &gw.metrics_text().await,
        "shopeasy_gateway_retries_total",
        &[("outcome", "budget_exhausted")],
    );
    assert!(after >= before + 2.0, "before {before}, after {after}");
    let state =
        shopeasy_testkit::get_json(&http(), format!("http://{}/admin/resilience", gw.admin)).await;
    assert!(
        state["resilience"]["retry_budgets"]["product"]["balance"]
            .as_f64()
            .unwrap()
            < 1.0,
        "{state}"
    );
}

// ---------------------------------------------------------------- timeouts

#[tokio::test]
async fn a_silent_service_ends_in_504_and_sees_the_cancellation() {
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let fake = Fake::start(move |_a: Arrival, mut stream: TcpStream| {
        let closed = closed_tx.clone();
        async move {
            // Never answer; report when the gateway hangs up.
            let mut b = [0u8; 64];
            while stream.read(&mut b).await.map(|n| n > 0).unwrap_or(false) {}
            let _ = closed.send(Instant::now());
            None
        }
    })
    .await;
    let gw = gateway(settings(fake.addr)).await;
    let started = Instant::now();
    let res = gw.get_as(&http(), "/api/orders/1", "alice").await;
    let answered = Instant::now();
    assert_eq!(res.status(), 504);
    assert_eq!(
        res.headers()["proxy-status"],
        "shopeasy-gateway; error=http_response_timeout"
    );
    let took = answered - started;
    assert!(
        took >= ACTIVITY && took < ACTIVITY + Duration::from_secs(1),
        "took {took:?}"
    );
    let closed = timeout(Duration::from_secs(2), closed_rx.recv())
        .await
        .expect("the fake sees its connection closed")
        .unwrap();
    assert!(closed <= answered + Duration::from_millis(500));
    assert_eq!(fake.seen.arrivals(), 1, "a timeout is not retried");
}

/// A fake that sends headers for `total` bytes, then `chunks` of them
/// every `gap`, then (if `stall`) stops before the end.
async fn trickle(chunks: usize, gap: Duration, stall: bool) -> Fake {
    Fake::start(move |_a: Arrival, mut stream: TcpStream| async move {
        let total = chunks * 10 + usize::from(stall) * 10;
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        for _ in 0..chunks {
            tokio::time::sleep(gap).await;
            stream.write_all(b"0123456789").await.ok()?;
        }
        if stall {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Some(stream)
    })
    .await
}

#[tokio::test]
async fn a_response_that_stalls_mid_body_is_aborted_after_the_timeout() {
    let fake = trickle(1, Duration::ZERO, true).await;
    let gw = gateway(settings(fake.addr)).await;
    let res = http()
        .get(gw.url("/api/products/big"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "headers went out before the stall");
    let started = Instant::now();
    let body = res.bytes().await;
    let took = started.elapsed();
    assert!(body.is_err(), "the stream is aborted, not completed");
    assert!(
        took >= ACTIVITY - Duration::from_millis(100) && took < ACTIVITY + Duration::from_secs(1),
        "took {took:?}"
    );
    let m = gw.metrics_text().await;
    assert!(
        metric(
            &m,
            "shopeasy_gateway_requests_total",
            &[
                ("route", "product"),
                ("status", "200"),
                ("outcome", "response_aborted")
            ]
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_slow_but_steady_body_completes() {
    // A chunk every ¾ of the activity timeout, for 4× the timeout overall.
    let fake = trickle(5, ACTIVITY * 3 / 4, false).await;
    let gw = gateway(settings(fake.addr)).await;
    let started = Instant::now();
    let res = http()
        .get(gw.url("/api/products/slow"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body = res.bytes().await.unwrap();
    assert_eq!(body.len(), 50);
    assert!(started.elapsed() > ACTIVITY * 3);
}

#[tokio::test]
async fn a_client_stalling_its_body_gets_408() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "unreachable")).await;
    let gw = gateway(settings(fake.addr)).await;
    let started = Instant::now();
    let request = format!(
        "POST /api/orders HTTP/1.1\r\nhost: shop\r\ncontent-type: application/json\r\n\
         authorization: {}\r\ncontent-length: 100\r\n\r\n{{\"customer_id\":",
        support::bearer("alice")
    );
    let answer = raw(gw.addr, request.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("proxy-status: shopeasy-gateway; error=http_request_error"),
        "{answer}"
    );
    assert!(started.elapsed() >= ACTIVITY - Duration::from_millis(100));
}

#[tokio::test]
async fn a_keyed_post_whose_client_stalls_gets_408_without_reaching_the_service() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "unreachable")).await;
    let gw = gateway(settings(fake.addr)).await;
    let request = format!(
        "POST /api/orders HTTP/1.1\r\nhost: shop\r\nidempotency-key: k\r\n\
         authorization: {}\r\ncontent-length: 100\r\n\r\n{{\"customer_id\":",
        support::bearer("alice")
    );
    let answer = raw(gw.addr, request.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(fake.seen.arrivals(), 0, "the buffered body never completed");
}

#[tokio::test]
async fn connect_timeout_answers_504() {
    // A listener with a full accept queue: further SYNs are dropped, so
    // connecting hangs until the gateway's connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            fillers.push(s);
        }
    }
    let mut s = settings(addr);
    s.resilience.gateway.connect_timeout_seconds = Seconds::new(0.3);
    let gw = gateway(s).await;
    let started = Instant::now();
    let res = http().get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(res.status(), 504);
    assert_eq!(
        res.headers()["proxy-status"],
        "shopeasy-gateway; error=connection_timeout"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(listener);
}

// ---------------------------------------------------------------- pool

#[tokio::test]
async fn pooled_connections_are_replaced_after_their_lifetime() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let mut s = settings(fake.addr);
    let lifetime = Duration::from_secs(1);
    s.resilience.gateway.pooled_connection_lifetime_seconds = Seconds::from(lifetime);
    let gw = gateway(s).await;
    let client = http();
    for _ in 0..3 {
        let res = client.get(gw.url("/api/products")).send().await.unwrap();
        assert_eq!(res.text().await.unwrap(), "ok");
    }
    assert_eq!(fake.seen.connections(), 1, "reused while young");
    // Let the connection age past its lifetime (+10 % jitter).
    tokio::time::sleep(lifetime.mul_f64(1.1) + Duration::from_millis(100)).await;
    let res = client.get(gw.url("/api/products")).send().await.unwrap();
    assert_eq!(res.text().await.unwrap(), "ok");
    assert_eq!(
        fake.seen.connections(),
        2,
        "a new connection after the lifetime"
    );
    assert_eq!(fake.seen.arrivals(), 4);
}

#[tokio::test]
async fn concurrent_requests_share_a_bounded_set_of_pooled_connections() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    let client = http();
    for _ in 0..5 {
        let answers = futures::future::join_all((0..8).map(|i| {
            let (client, url) = (client.clone(), gw.url(&format!("/api/products/{i}")));
            async move { client.get(url).send().await.unwrap().text().await.unwrap() }
        }))
        .await;
        assert!(answers.iter().all(|a| a == "ok"), "{answers:?}");
    }
    assert_eq!(
        fake.seen.arrivals(),
        40,
        "each request reached the service once"
    );
    assert!(
        fake.seen.connections() <= 8,
        "connections are reused across rounds: {} for 8 at a time",
        fake.seen.connections()
    );
}

#[tokio::test]
async fn bodiless_responses_complete_and_keep_their_connection() {
    let fake = Fake::start(|_a: Arrival, mut stream: TcpStream| async move {
        stream
            .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .ok()?;
        Some(stream)
    })
    .await;
    let gw = gateway(settings(fake.addr)).await;
    let client = http();
    for _ in 0..3 {
        let res = client.get(gw.url("/api/products/1")).send().await.unwrap();
        assert_eq!(res.status(), 204);
    }
    assert_eq!(fake.seen.arrivals(), 3);
    assert_eq!(
        fake.seen.connections(),
        1,
        "a 204 leaves its connection pooled"
    );
    let m = gw.metrics_text().await;
    assert_eq!(
        metric(
            &m,
            "shopeasy_gateway_requests_total",
            &[
                ("route", "product"),
                ("status", "204"),
                ("outcome", "forwarded")
            ]
        ),
        3.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_connection_the_service_closes_is_never_reused() {
    // Every answer says `connection: close` and the fake hangs up.
    let fake = Fake::start(|_a: Arrival, mut stream: TcpStream| async move {
        let answer = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let _ = stream.write_all(answer.as_bytes()).await;
        None
    })
    .await;
    let gw = gateway(settings(fake.addr)).await;
    let client = http();
    for i in 0..3 {
        // A plain POST may never be repeated: it only succeeds if it goes
        // out on a live connection the first time.
        let res = client
            .post(gw.url("/api/orders"))
            .bearer_auth(support::token("alice"))
            .body(format!(r#"{{"n":{i}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "request {i}");
        assert_eq!(res.text().await.unwrap(), "ok");
    }
    assert_eq!(fake.seen.arrivals(), 3);
    assert_eq!(
        fake.seen.connections(),
        3,
        "one fresh connection per request"
    );
}

// ---------------------------------------------------------------- headers

#[tokio::test]
async fn hop_by_hop_and_connection_named_headers_never_reach_the_service() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    let answer = raw(
        gw.addr,
        b"GET /api/products?limit=2 HTTP/1.1\r\nhost: shop.example\r\n\
          connection: close, x-hop-secret\r\nx-hop-secret: 1\r\nkeep-alive: timeout=5\r\n\
          te: trailers\r\nproxy-connection: keep-alive\r\nupgrade: h2c\r\n\
          x-forwarded-for: 6.6.6.6\r\nshopeasy-deadline-ms: 5000\r\n\
          traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let head = fake.seen.heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(
        head.starts_with("get /api/products?limit=2 http/1.1"),
        "{head}"
    );
    for gone in [
        "x-hop-secret",
        "keep-alive:",
        "te:",
        "proxy-connection",
        "upgrade",
        "6.6.6.6",
    ] {
        assert!(!head.contains(gone), "{gone} reached the service:\n{head}");
    }
    assert_eq!(header(&head, "x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(header(&head, "x-forwarded-proto"), Some("http"));
    assert_eq!(header(&head, "x-forwarded-host"), Some("shop.example"));
    assert!(
        header(&head, "traceparent")
            .is_some_and(|t| t.contains("0af7651916cd43dd8448eb211c80319c")),
        "{head}"
    );
    let deadline: u64 = header(&head, "shopeasy-deadline-ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        deadline <= 5000 && deadline > 3000,
        "remaining deadline sent: {deadline}"
    );
}

#[tokio::test]
async fn the_service_gets_origin_form_and_its_own_host_whatever_form_the_caller_used() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    for request in [
        &b"GET /api/products/1?x=1 HTTP/1.1\r\nhost: shop.example\r\nconnection: close\r\n\r\n"[..],
        // Absolute form (RFC 9112 §3.2.2): the authority is the caller's,
        // never the service's request line.
        &b"GET http://shop.example/api/products/1?x=1 HTTP/1.1\r\nhost: shop.example\r\n\
           connection: close\r\n\r\n"[..],
    ] {
        let answer = raw(gw.addr, request, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let heads = fake.seen.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    for head in heads {
        let head = head.to_ascii_lowercase();
        assert!(
            head.starts_with("get /api/products/1?x=1 http/1.1"),
            "{head}"
        );
        assert_eq!(header(&head, "host"), Some(fake.addr.to_string().as_str()));
        assert_eq!(header(&head, "x-forwarded-host"), Some("shop.example"));
    }
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_rejected_with_400() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    let answer = raw(
        gw.addr,
        b"POST /api/orders HTTP/1.1\r\nhost: shop\r\ncontent-length: 5\r\n\
          transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("proxy-status: shopeasy-gateway; error=http_request_error"),
        "{answer}"
    );
    assert_eq!(fake.seen.arrivals(), 0);
}

#[tokio::test]
async fn oversized_headers_and_bodies_are_refused() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    let res = http()
        .get(gw.url("/api/products"))
        .header("x-big", "x".repeat(40 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 431);
    let res = http()
        .post(gw.url("/api/orders"))
        .bearer_auth(support::token("alice"))
        .header("idempotency-key", "k")
        .body(vec![b'x'; 70 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413, "a keyed body is buffered up to 64 KiB");
    let res = http()
        .put(gw.url("/api/products/1"))
        .body(vec![b'x'; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    assert_eq!(fake.seen.arrivals(), 0);
}

#[tokio::test]
async fn admin_metrics_and_health_are_never_served_or_forwarded() {
    let fake = Fake::start(|_a: Arrival, s| ok(s, "ok")).await;
    let gw = gateway(settings(fake.addr)).await;
    for path in [
        "/metrics",
        "/health/live",
        "/health/ready",
        "/admin/resilience",
        "/api/productsx",
        // `/` is the storefront (tests/storefront.rs); its lookalikes are not.
        "/index.html",
    ] {
        let res = http().get(gw.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
        assert_eq!(
            res.headers()["proxy-status"],
            "shopeasy-gateway; error=destination_not_found"
        );
    }
    assert_eq!(fake.seen.arrivals(), 0);
    let live = http()
        .get(format!("http://{}/health/ready", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200, "the admin listener serves them");
}
