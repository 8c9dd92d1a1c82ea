//! What the proxy adds to one small request/response round trip with no
//! toxics, against the same echo server reached directly (target < 100 µs).
//!
//! `cargo bench -p shopeasy-faults --bench faults_overhead`
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use shopeasy_faults::FaultProxy;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    runtime::Runtime,
};

async fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            socket.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 || socket.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

async fn round_trip(stream: &mut TcpStream) {
    let message = [42u8; 64];
    stream.write_all(&message).await.unwrap();
    let mut back = [0u8; 64];
    stream.read_exact(&mut back).await.unwrap();
}

fn overhead(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let (direct, proxied, _proxy) = runtime.block_on(async {
        let upstream = echo_server().await;
        let proxy = FaultProxy::start("bench", upstream.to_string())
            .await
            .unwrap();
        let direct = connect(upstream).await;
        let proxied = connect(proxy.listen_addr()).await;
        (direct, proxied, proxy)
    });
    let direct = tokio::sync::Mutex::new(direct);
    let proxied = tokio::sync::Mutex::new(proxied);
    let mut group = c.benchmark_group("round_trip_64B");
    group.bench_function("direct", |b| {
        b.to_async(&runtime)
            .iter(|| async { round_trip(&mut *direct.lock().await).await });
    });
    group.bench_function("through_proxy_no_toxics", |b| {
        b.to_async(&runtime)
            .iter(|| async { round_trip(&mut *proxied.lock().await).await });
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
