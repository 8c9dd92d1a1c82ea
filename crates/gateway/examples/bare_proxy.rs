//! The floor of the gateway's stack: a bare hyper HTTP/1.1 forwarder with
//! none of the gateway's work — no routing, header rewriting, timers,
//! retries, pool or metrics; each client connection gets one upstream
//! connection of its own, the cheapest pooling there is. `bench/gateway.sh`
//! runs it beside the gateway, nginx and HAProxy, so the cost of hyper and
//! tokio themselves and the cost of the gateway's logic can be told apart.
//!
//! ```text
//! cargo run --release -p shopeasy-gateway --example bare_proxy -- LISTEN UPSTREAM
//! ```
//!
//! Not a proxy to deploy: it forwards every header as it came and never
//! times anything out.

use std::{net::SocketAddr, sync::Arc};

use hyper::{
    Request, body::Incoming, client::conn::http1 as client, server::conn::http1 as server,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Mutex,
};

/// The same allocator as the gateway's binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: bare_proxy LISTEN_ADDR UPSTREAM_ADDR");
    };
    let listen: SocketAddr = listen.parse()?;
    let upstream: SocketAddr = upstream.parse()?;
    let listener = TcpListener::bind(listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = connection(stream, upstream).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

/// Serves one client connection over one upstream connection.
async fn connection(stream: TcpStream, upstream: SocketAddr) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let up = TcpStream::connect(upstream).await?;
    up.set_nodelay(true)?;
    let (send, conn) = client::handshake(TokioIo::new(up)).await?;
    tokio::spawn(conn);
    // HTTP/1 serves one request at a time per connection: the lock is never
    // contended, it only satisfies the borrow checker.
    let send = Arc::new(Mutex::new(send));
    let service = service_fn(move |request: Request<Incoming>| {
        let send = send.clone();
        async move {
            let mut send = send.lock().await;
            send.ready().await?;
            send.send_request(request).await
        }
    });
    server::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await?;
    Ok(())
}
