//! Every listener asks the kernel for a backlog of
//! [`LISTEN_BACKLOG`](shopeasy_runtime::lifecycle::LISTEN_BACKLOG)
//! connections: a burst of new connections waits there, handshakes
//! complete, until the process accepts them. With the runtime's default of
//! 128 the kernel drops the handshakes beyond it, and each such client
//! retransmits only after a second — a request held for seconds before
//! admission control can see it.

use std::time::Duration;

use shopeasy_runtime::lifecycle;
use tokio::net::TcpStream;

/// 600 connections to a listener that accepts none of them: every one
/// completes its handshake at once (within 500 ms; a dropped handshake is
/// retried after 1 s).
#[tokio::test]
async fn a_burst_of_connections_completes_into_the_backlog() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    let burst = 600.min(somaxconn.saturating_sub(8));
    assert!(
        burst > 256,
        "net.core.somaxconn is {somaxconn}: too low to hold more than the default 128"
    );
    let listener = lifecycle::bind("127.0.0.1:0".parse().unwrap(), "test")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();

    let mut connects = tokio::task::JoinSet::new();
    for _ in 0..burst {
        connects.spawn(tokio::time::timeout(
            Duration::from_millis(500),
            TcpStream::connect(addr),
        ));
    }
    let mut open = Vec::with_capacity(burst);
    let mut late = 0;
    while let Some(connect) = connects.join_next().await {
        match connect.unwrap() {
            Ok(Ok(stream)) => open.push(stream),
            _ => late += 1,
        }
    }
    assert_eq!(
        late, 0,
        "{late} of {burst} connections did not complete within 500 ms (the backlog overflowed)"
    );
    assert_eq!(open.len(), burst);
    drop(listener);
}
