//! Stand-ins for an upstream that answers, but badly (F7):
//!
//! - [`Stub`]: an HTTP/1.1 upstream that answers every request with one
//!   canned response and counts the requests (a 503 burst, a 404). Each
//!   answer closes its connection, so every request is one connection and
//!   one count.
//! - [`GrpcStub`]: an Inventory answering every call with one status.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use shopeasy_proto::inventory::v1::{
    self as pb,
    inventory_service_server::{InventoryService, InventoryServiceServer},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};
use tokio_util::sync::CancellationToken;

/// A canned-answer HTTP server on 127.0.0.1:0, stopped on drop.
#[derive(Debug)]
pub struct Stub {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Stub {
    /// Starts one answering `status` with `headers` and `body`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(status: u16, headers: &[(&str, &str)], body: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut response = format!(
            "HTTP/1.1 {status} Stub\r\ncontent-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(body);
        let response: Arc<[u8]> = response.into_bytes().into();
        let requests = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (count, token) = (requests.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut socket, _)) = accepted else {
                    continue;
                };
                let (response, count) = (response.clone(), count.clone());
                tokio::spawn(async move {
                    // Read until the end of the headers (bodies are small
                    // and ignored), then answer and close.
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    let _ = socket.write_all(&response).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Ok(Self {
            addr,
            requests,
            stop,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// An Inventory that answers every call with one gRPC status (F7:
/// `UNAVAILABLE` bursts, `INTERNAL`) and counts the calls.
#[derive(Debug)]
pub struct GrpcStub {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    stop: CancellationToken,
}

#[derive(Debug)]
struct Refuse {
    code: tonic::Code,
    calls: Arc<AtomicU64>,
}

impl Refuse {
    fn refuse<T>(&self) -> Result<tonic::Response<T>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Err(tonic::Status::new(self.code, "stub"))
    }
}

#[tonic::async_trait]
impl InventoryService for Refuse {
    async fn get_stock(
        &self,
        _: tonic::Request<pb::GetStockRequest>,
    ) -> Result<tonic::Response<pb::GetStockResponse>, tonic::Status> {
        self.refuse()
    }

    async fn reserve_stock(
        &self,
        _: tonic::Request<pb::ReserveStockRequest>,
    ) -> Result<tonic::Response<pb::ReserveStockResponse>, tonic::Status> {
        self.refuse()
    }

    async fn release_stock(
        &self,
        _: tonic::Request<pb::ReleaseStockRequest>,
    ) -> Result<tonic::Response<pb::ReleaseStockResponse>, tonic::Status> {
        self.refuse()
    }

    async fn set_stock(
        &self,
        _: tonic::Request<pb::SetStockRequest>,
    ) -> Result<tonic::Response<pb::SetStockResponse>, tonic::Status> {
        self.refuse()
    }
}

impl GrpcStub {
    /// Starts one answering every call with `code`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(code: tonic::Code) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let calls = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let service = InventoryServiceServer::new(Refuse {
            code,
            calls: calls.clone(),
        });
        let token = stop.clone();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, token.cancelled_owned())
                .await;
        });
        Ok(Self { addr, calls, stop })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Calls answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for GrpcStub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
