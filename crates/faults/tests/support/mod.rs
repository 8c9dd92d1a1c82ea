//! Small real upstreams for the proxy tests, on 127.0.0.1:0, and the
//! fault API served there for the API tests.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use shopeasy_faults::{Proxies, api};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::{Instant, timeout},
};
use tokio_util::sync::{CancellationToken, DropGuard};

/// The fault API over `proxies`, served on 127.0.0.1:0; stopped when
/// dropped.
pub struct Api {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub http: reqwest::Client,
    pub proxies: Proxies,
    _stop: DropGuard,
}

/// Serves the fault API over `proxies`.
pub async fn start_api(proxies: Proxies) -> Api {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(api::serve(listener, proxies.clone(), stop.clone()));
    Api {
        base,
        http: reqwest::Client::new(),
        proxies,
        _stop: stop.drop_guard(),
    }
}

impl Api {
    /// Sends `request`: the status and the JSON body (`null` when empty).
    pub async fn exchange(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap()
        };
        (status, value)
    }
}

/// A test upstream and what it saw.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    /// Bytes it received, over all connections.
    pub received: Arc<AtomicUsize>,
}

impl Upstream {
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

/// Echoes every byte back on each connection.
pub async fn echo() -> Upstream {
    serve(|mut socket, received| async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    received.fetch_add(n, Ordering::SeqCst);
                    if socket.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await
}

/// Sends `message` on each connection, then closes it.
pub async fn sender(message: &'static [u8]) -> Upstream {
    serve(move |mut socket, _received| async move {
        let _ = socket.write_all(message).await;
        let _ = socket.shutdown().await;
        // Keep reading until the peer closes, so the close is a clean FIN.
        let mut sink = [0u8; 1024];
        while let Ok(n) = socket.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
}

async fn serve<F, Fut>(handle: F) -> Upstream
where
    F: Fn(TcpStream, Arc<AtomicUsize>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let _ = socket.set_nodelay(true);
            tokio::spawn(handle(socket, counter.clone()));
        }
    });
    Upstream { addr, received }
}

/// Connects to `addr` with Nagle off.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Writes `message` and reads the same number of bytes back; returns the
/// time it took. Fails after `limit`.
pub async fn round_trip(
    stream: &mut TcpStream,
    message: &[u8],
    limit: Duration,
) -> io::Result<Duration> {
    let started = Instant::now();
    stream.write_all(message).await?;
    let mut back = vec![0u8; message.len()];
    match timeout(limit, stream.read_exact(&mut back)).await {
        Ok(Ok(_)) => {
            assert_eq!(back, message, "the echo came back altered");
            Ok(started.elapsed())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
    }
}

/// Reads until EOF or error, returning what came and how it ended.
pub async fn read_to_end(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, io::Result<()>) {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => {
                return (
                    all,
                    Err(io::Error::new(io::ErrorKind::TimedOut, "still open")),
                );
            }
            Ok(Ok(0)) => return (all, Ok(())),
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return (all, Err(e)),
        }
    }
}
