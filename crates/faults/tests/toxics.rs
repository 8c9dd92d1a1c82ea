//! Every toxic over real sockets: a real upstream on 127.0.0.1:0, the proxy
//! in front of it, a real client. Bounds are generous (a loaded 2-core
//! machine) but each one would fail without the toxic.
#![allow(clippy::unwrap_used)]

mod support;

use std::{io::ErrorKind, time::Duration};

use shopeasy_faults::{FaultProxy, ProxyConfig, Stream, Toxic, ToxicKind};
use shopeasy_testkit::assert_eventually;
use support::{connect, echo, read_to_end, round_trip, sender};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

const LIMIT: Duration = Duration::from_secs(5);

async fn proxy_to(upstream: std::net::SocketAddr) -> FaultProxy {
    FaultProxy::start("test", upstream.to_string())
        .await
        .unwrap()
}

#[tokio::test]
async fn forwards_both_ways_and_counts_connections() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    assert_eq!(proxy.connections(), 0);
    for _ in 0..3 {
        let mut client = connect(proxy.listen_addr()).await;
        round_trip(&mut client, b"hello", LIMIT).await.unwrap();
        let big = vec![7u8; 300_000];
        round_trip(&mut client, &big, LIMIT).await.unwrap();
    }
    assert_eq!(proxy.connections(), 3);
    assert_eq!(upstream.received(), 3 * (5 + 300_000));
}

#[tokio::test]
async fn latency_delays_each_round_trip() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Latency {
                latency: 150,
                jitter: 20,
            },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let took = round_trip(&mut client, b"ping", LIMIT).await.unwrap();
    assert!(took >= Duration::from_millis(130), "took {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn latency_delays_each_chunk_from_its_arrival_keeping_throughput() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Latency {
                latency: 200,
                jitter: 0,
            },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    // About 13 chunks of 32 KiB: delayed one after the other this would take
    // 2.6 s; delayed from their arrival, about 200 ms.
    let took = round_trip(&mut client, &vec![5u8; 400_000], LIMIT)
        .await
        .unwrap();
    assert!(took >= Duration::from_millis(200), "took {took:?}");
    assert!(took < Duration::from_millis(1200), "took {took:?}");
}

#[tokio::test]
async fn toxics_apply_to_an_already_open_connection_and_heal_it() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    let mut client = connect(proxy.listen_addr()).await;
    let before = round_trip(&mut client, b"ping", LIMIT).await.unwrap();
    assert!(before < Duration::from_millis(300), "took {before:?}");

    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Latency {
                latency: 400,
                jitter: 0,
            },
            Stream::Upstream,
        ))
        .unwrap();
    let slowed = round_trip(&mut client, b"ping", LIMIT).await.unwrap();
    assert!(slowed >= Duration::from_millis(400), "took {slowed:?}");

    proxy.remove_toxic("latency_upstream").unwrap();
    let healed = round_trip(&mut client, b"ping", LIMIT).await.unwrap();
    assert!(healed < Duration::from_millis(300), "took {healed:?}");

    // A black hole on the open connection, then healed without reconnecting.
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Downstream,
        ))
        .unwrap();
    let lost = round_trip(&mut client, b"lost", Duration::from_millis(300)).await;
    assert_eq!(lost.unwrap_err().kind(), ErrorKind::TimedOut);
    proxy.remove_toxic("timeout_downstream").unwrap();
    round_trip(&mut client, b"back", LIMIT).await.unwrap();
    assert_eq!(proxy.connections(), 1, "all on one connection");
}

#[tokio::test]
async fn timeout_black_holes_then_closes_after_the_timeout() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 300 },
            Stream::Upstream,
        ))
        .unwrap();
    let started = Instant::now();
    let mut client = connect(proxy.listen_addr()).await;
    client.write_all(b"never arrives").await.unwrap();
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    let took = started.elapsed();
    assert!(data.is_empty());
    assert!(end.is_ok(), "closed, not timed out: {end:?}");
    assert!(took >= Duration::from_millis(280), "closed after {took:?}");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
    assert_eq!(upstream.received(), 0, "the request was black-holed");
}

#[tokio::test]
async fn timeout_zero_hangs_until_removed() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Upstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let (_, end) = {
        client.write_all(b"x").await.unwrap();
        read_to_end(&mut client, Duration::from_millis(500)).await
    };
    assert_eq!(
        end.unwrap_err().kind(),
        ErrorKind::TimedOut,
        "still open, silent"
    );
    assert_eq!(upstream.received(), 0);
}

#[tokio::test]
async fn reset_peer_upstream_never_delivers_the_request() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::ResetPeer { timeout: 0 },
            Stream::Upstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    client.write_all(b"request").await.unwrap();
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    assert!(data.is_empty());
    assert_eq!(end.unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(
        upstream.received(),
        0,
        "request must not reach the upstream"
    );
}

#[tokio::test]
async fn reset_peer_downstream_delivers_the_request_and_loses_the_answer() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::ResetPeer { timeout: 50 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    client.write_all(b"request").await.unwrap();
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    assert!(data.is_empty(), "the answer must be lost");
    assert_eq!(end.unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(upstream.received(), 7, "the request was processed");
}

#[tokio::test]
async fn down_refuses_new_connections_and_closes_open_ones() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    let addr = proxy.listen_addr();
    let mut open = connect(addr).await;
    round_trip(&mut open, b"ping", LIMIT).await.unwrap();

    proxy.set_enabled(false).await;
    assert!(!proxy.enabled());
    let refused = TcpStream::connect(addr).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    let (_, end) = read_to_end(&mut open, LIMIT).await;
    assert!(end.is_ok() || end.as_ref().is_err_and(|e| e.kind() != ErrorKind::TimedOut));
    assert_eventually(LIMIT, "every connection closed", async || {
        proxy.open_connections() == 0
    })
    .await;
    let accepted = proxy.connections();

    proxy.set_enabled(true).await;
    let mut again = connect(addr).await;
    round_trip(&mut again, b"ping", LIMIT).await.unwrap();
    assert_eq!(proxy.connections(), accepted + 1);
}

#[tokio::test]
async fn a_proxy_created_down_refuses_from_the_start() {
    let upstream = echo().await;
    let proxy =
        FaultProxy::start_with(ProxyConfig::new("down", upstream.addr.to_string()).enabled(false))
            .await
            .unwrap();
    let refused = TcpStream::connect(proxy.listen_addr()).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!(proxy.connections(), 0);
}

#[tokio::test]
async fn bandwidth_limits_throughput() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    // 20 KB at 50 KB/s: about 400 ms; unlimited it takes a few ms.
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Bandwidth { rate: 50 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let took = round_trip(&mut client, &vec![1u8; 20_000], LIMIT)
        .await
        .unwrap();
    assert!(took >= Duration::from_millis(300), "took {took:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

#[tokio::test]
async fn slicer_cuts_data_into_delayed_pieces() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    // 1000 bytes in ~100-byte pieces 20 ms apart: about 9 gaps = 180 ms.
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Slicer {
                average_size: 100,
                size_variation: 20,
                delay: 20_000,
            },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let took = round_trip(&mut client, &vec![3u8; 1000], LIMIT)
        .await
        .unwrap();
    assert!(took >= Duration::from_millis(120), "took {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[tokio::test]
async fn slow_close_delays_the_close() {
    let upstream = sender(b"bye").await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::SlowClose { delay: 300 },
            Stream::Downstream,
        ))
        .unwrap();
    let started = Instant::now();
    let mut client = connect(proxy.listen_addr()).await;
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    let took = started.elapsed();
    assert_eq!(data, b"bye");
    assert!(end.is_ok(), "{end:?}");
    assert!(took >= Duration::from_millis(280), "closed after {took:?}");
}

#[tokio::test]
async fn limit_data_closes_after_the_byte_budget() {
    let upstream = sender(b"0123456789abcdefghij").await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::LimitData { bytes: 8 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    assert_eq!(data, b"01234567");
    assert!(end.is_ok(), "{end:?}");
}

/// Which of `n` sequential connections a toxicity-0.5 `limit_data 0` hits.
async fn hit_pattern(seed: u64, n: usize) -> Vec<bool> {
    let upstream = echo().await;
    let proxy =
        FaultProxy::start_with(ProxyConfig::new("rolls", upstream.addr.to_string()).seed(seed))
            .await
            .unwrap();
    proxy
        .add_toxic(
            Toxic::new(ToxicKind::LimitData { bytes: 0 }, Stream::Upstream).with_toxicity(0.5),
        )
        .unwrap();
    let mut hits = Vec::with_capacity(n);
    for _ in 0..n {
        let mut client = connect(proxy.listen_addr()).await;
        hits.push(round_trip(&mut client, b"x", LIMIT).await.is_err());
    }
    hits
}

#[tokio::test]
async fn toxicity_is_rolled_per_connection_from_the_seed() {
    let first = hit_pattern(7, 16).await;
    let again = hit_pattern(7, 16).await;
    assert_eq!(first, again, "the same seed gives the same rolls");
    let hits = first.iter().filter(|h| **h).count();
    assert!((1..16).contains(&hits), "toxicity 0.5 hit {hits} of 16");
}

#[tokio::test]
async fn toxicity_zero_never_applies() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(
            Toxic::new(ToxicKind::ResetPeer { timeout: 0 }, Stream::Upstream).with_toxicity(0.0),
        )
        .unwrap();
    for _ in 0..5 {
        let mut client = connect(proxy.listen_addr()).await;
        round_trip(&mut client, b"fine", LIMIT).await.unwrap();
    }
}

#[tokio::test]
async fn toxic_names_are_unique_and_removal_of_an_unknown_one_fails() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    let toxic = Toxic::new(
        ToxicKind::Latency {
            latency: 1,
            jitter: 0,
        },
        Stream::Upstream,
    );
    proxy.add_toxic(toxic.clone()).unwrap();
    assert!(matches!(
        proxy.add_toxic(toxic),
        Err(shopeasy_faults::Error::ToxicExists)
    ));
    assert!(matches!(
        proxy.remove_toxic("nope"),
        Err(shopeasy_faults::Error::ToxicNotFound)
    ));
    assert_eq!(proxy.toxics().len(), 1);
}

#[tokio::test]
async fn an_unreachable_upstream_closes_the_client() {
    let port = unused_port().await;
    let proxy = FaultProxy::start("nowhere", format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    assert!(data.is_empty());
    assert!(end.is_ok() || end.as_ref().is_err_and(|e| e.kind() != ErrorKind::TimedOut));
}

/// An upstream that takes no connection, as a black-holed host: a listener
/// (backlog 1) whose accept queue is filled and never drained, so the
/// kernel drops every further SYN and a connect waits for its retries
/// (about two minutes). Filled until a connect hangs, rather than trusting
/// how the kernel counts the backlog; the listener and the queued
/// connections must be kept.
async fn black_hole() -> (
    std::net::SocketAddr,
    tokio::net::TcpListener,
    Vec<TcpStream>,
) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..64 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(connected) => queued.push(connected.unwrap()),
            Err(_) => return (addr, listener, queued),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

#[tokio::test]
async fn an_upstream_that_never_accepts_closes_the_client_after_the_connect_timeout() {
    let (upstream, _listener, _queued) = black_hole().await;
    let proxy = FaultProxy::start_with(
        ProxyConfig::new("black-hole", upstream.to_string())
            .connect_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert_eq!(proxy.connect_timeout(), Duration::from_millis(300));
    let started = Instant::now();
    let mut client = connect(proxy.listen_addr()).await;
    let (data, end) = read_to_end(&mut client, LIMIT).await;
    let took = started.elapsed();
    assert!(data.is_empty());
    assert!(end.is_ok(), "closed as when refused: {end:?}");
    assert!(took >= Duration::from_millis(280), "closed after {took:?}");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
}

#[tokio::test]
async fn a_connect_timeout_out_of_range_is_refused() {
    assert_eq!(
        ProxyConfig::new("t", "127.0.0.1:9").connect_timeout_or_default(),
        shopeasy_faults::proxy::DEFAULT_CONNECT_TIMEOUT
    );
    for timeout in [Duration::ZERO, Duration::from_secs(24 * 60 * 60 + 1)] {
        let refused =
            FaultProxy::start_with(ProxyConfig::new("t", "127.0.0.1:9").connect_timeout(timeout))
                .await;
        assert!(
            matches!(refused, Err(shopeasy_faults::Error::BadBody(_))),
            "{timeout:?}: {refused:?}"
        );
    }
}

/// A port nothing listens on: bind one, note it, release it.
async fn unused_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn stop_closes_the_listener_and_connections() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    let addr = proxy.listen_addr();
    let mut open = connect(addr).await;
    round_trip(&mut open, b"ping", LIMIT).await.unwrap();
    proxy.stop().await;
    assert_eq!(
        TcpStream::connect(addr).await.unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
    let (_, end) = read_to_end(&mut open, LIMIT).await;
    assert!(end.is_ok() || end.as_ref().is_err_and(|e| e.kind() != ErrorKind::TimedOut));
}

/// The median of `n` 64-byte round trips on `client`.
async fn median_round_trip(client: &mut TcpStream, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        times.push(round_trip(client, &[9u8; 64], LIMIT).await.unwrap());
    }
    times.sort();
    times[n / 2]
}

#[tokio::test]
async fn no_toxics_adds_little_to_a_round_trip() {
    // A regression guard with a loaded-machine margin; the criterion bench
    // `faults_overhead` measures the real figure (target < 100 µs).
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    let mut direct = connect(upstream.addr).await;
    let mut proxied = connect(proxy.listen_addr()).await;
    median_round_trip(&mut proxied, 20).await; // warm up
    let direct = median_round_trip(&mut direct, 200).await;
    let proxied = median_round_trip(&mut proxied, 200).await;
    let added = proxied.saturating_sub(direct);
    println!("median round trip: direct {direct:?}, proxied {proxied:?}, added {added:?}");
    assert!(
        added < Duration::from_millis(1),
        "the proxy added {added:?}"
    );
}

/// How long a test gives a chunk already in delivery to come through once
/// its toxic is gone: far less than the toxic would have held it.
const HEALED: Duration = Duration::from_secs(2);

/// Writes `request` on `client`, waits until the echo `upstream` has it,
/// and gives the proxy a moment to take the echoed answer in: the answer is
/// then in the proxy, held by its downstream toxic.
async fn answer_in_flight(client: &mut TcpStream, upstream: &support::Upstream, request: &[u8]) {
    client.write_all(request).await.unwrap();
    assert_eventually(LIMIT, "the request reached the upstream", async || {
        upstream.received() == request.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Reads exactly `n` bytes within `limit`.
async fn read_n(client: &mut TcpStream, n: usize, limit: Duration) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(limit, client.read_exact(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("{n} bytes did not come within {limit:?}"))
        .unwrap();
    buf
}

#[tokio::test]
async fn removing_latency_releases_an_answer_it_already_holds() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Latency {
                latency: 10_000,
                jitter: 0,
            },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    answer_in_flight(&mut client, &upstream, b"ping").await;
    proxy.remove_toxic("latency_downstream").unwrap();
    assert_eq!(read_n(&mut client, 4, HEALED).await, b"ping");
}

/// An echo behind a 1 KB/s downstream bandwidth toxic, a 20 KB answer in
/// it (20 s of pacing: 100 bytes every 100 ms), and a client that has read
/// its first 100 bytes: a chunk the toxic is pacing right now.
async fn a_chunk_being_paced() -> (support::Upstream, FaultProxy, TcpStream) {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Bandwidth { rate: 1 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    client.write_all(&[6u8; 20_000]).await.unwrap();
    assert_eq!(read_n(&mut client, 100, LIMIT).await.len(), 100);
    (upstream, proxy, client)
}

#[tokio::test]
async fn removing_bandwidth_releases_the_rest_of_a_chunk_it_is_pacing() {
    let (_upstream, proxy, mut client) = a_chunk_being_paced().await;
    proxy.remove_toxic("bandwidth_downstream").unwrap();
    let rest = read_n(&mut client, 20_000 - 100, HEALED).await;
    assert!(rest.iter().all(|b| *b == 6));
}

#[tokio::test]
async fn a_black_hole_added_mid_chunk_drops_the_rest_of_it() {
    let (_upstream, proxy, mut client) = a_chunk_being_paced().await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Downstream,
        ))
        .unwrap();
    // At most the piece written as the toxic came; still trickling, a
    // second would bring about ten.
    let (after, end) = read_to_end(&mut client, Duration::from_secs(1)).await;
    assert_eq!(end.unwrap_err().kind(), ErrorKind::TimedOut, "still open");
    assert!(
        after.len() <= 100,
        "{} bytes passed the black hole",
        after.len()
    );
}

#[tokio::test]
async fn removing_reset_peer_before_it_fires_lets_the_answer_through() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::ResetPeer { timeout: 10_000 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    answer_in_flight(&mut client, &upstream, b"ping").await;
    proxy.remove_toxic("reset_peer_downstream").unwrap();
    assert_eq!(read_n(&mut client, 4, HEALED).await, b"ping");
    round_trip(&mut client, b"again", LIMIT).await.unwrap();
}

#[tokio::test]
async fn removing_slow_close_passes_a_held_close_on() {
    let upstream = sender(b"bye").await;
    let proxy = proxy_to(upstream.addr).await;
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::SlowClose { delay: 10_000 },
            Stream::Downstream,
        ))
        .unwrap();
    let mut client = connect(proxy.listen_addr()).await;
    assert_eq!(read_n(&mut client, 3, LIMIT).await, b"bye");
    // The upstream closed right after "bye": give the close time to reach
    // the proxy (with the toxic still there, the client must not see it).
    let (_, held) = read_to_end(&mut client, Duration::from_millis(200)).await;
    assert_eq!(held.unwrap_err().kind(), ErrorKind::TimedOut);
    proxy.remove_toxic("slow_close_downstream").unwrap();
    let (data, end) = read_to_end(&mut client, HEALED).await;
    assert!(data.is_empty());
    assert!(end.is_ok(), "closed once the toxic was removed: {end:?}");
}

/// In process nothing bounds the attributes (the API does): values that
/// overflowed the proxy's arithmetic (a debug build panicked in the
/// connection's task, dropping the connection) saturate instead.
#[tokio::test]
async fn huge_attributes_set_in_process_saturate_instead_of_dropping_the_connection() {
    let upstream = echo().await;
    let proxy = proxy_to(upstream.addr).await;
    for toxic in [
        Toxic::new(ToxicKind::Bandwidth { rate: u64::MAX }, Stream::Downstream),
        Toxic::new(
            ToxicKind::Slicer {
                average_size: u64::MAX,
                size_variation: u64::MAX / 2,
                delay: 0,
            },
            Stream::Downstream,
        ),
    ] {
        proxy.add_toxic(toxic).unwrap();
    }
    let mut client = connect(proxy.listen_addr()).await;
    round_trip(&mut client, &vec![4u8; 100_000], LIMIT)
        .await
        .unwrap();

    // Two latencies of u64::MAX ms: their sum saturates, "for ever".
    for name in ["forever", "and_ever"] {
        proxy
            .add_toxic(
                Toxic::new(
                    ToxicKind::Latency {
                        latency: u64::MAX,
                        jitter: 0,
                    },
                    Stream::Upstream,
                )
                .named(name),
            )
            .unwrap();
    }
    let held = round_trip(&mut client, b"ping", Duration::from_millis(300)).await;
    assert_eq!(
        held.unwrap_err().kind(),
        ErrorKind::TimedOut,
        "held, the connection still open"
    );
    proxy.remove_toxic("forever").unwrap();
    proxy.remove_toxic("and_ever").unwrap();
    assert_eq!(read_n(&mut client, 4, HEALED).await, b"ping");
}
