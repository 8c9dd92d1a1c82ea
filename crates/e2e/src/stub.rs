//! Stand-ins for an upstream that answers, but badly (F7):
//!
//! - [`Stub`]: an HTTP/1.1 upstream that answers every request with one
//!   canned response and counts the requests (a 503 burst, a 404). Each
//!   answer closes its connection, so every request is one connection and
//!   one count.
//! - [`GrpcStub`]: an Inventory answering every call with one status.
//! - [`ScriptedStub`]: an HTTP upstream playing a script of [`Canned`]
//!   answers (503 + `Retry-After`, then 200) and recording each request's
//!   [`Arrival`], so a test can check when a retry came ([`waits`]).
//! - [`ScriptedInventory`]: an Inventory whose `ReserveStock` follows a
//!   script of [`GrpcReply`]s (with an optional `grpc-retry-pushback-ms`)
//!   and records each call's reservation id and [`Arrival`].

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
use tokio::{io::AsyncWriteExt, net::TcpListener};
use tokio_util::sync::CancellationToken;

use crate::listen::{accept_until, read_head};

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
        let count = requests.clone();
        accept_until(listener, stop.clone(), move |mut socket| {
            let (response, count) = (response.clone(), count.clone());
            async move {
                // Answer each request head, then close.
                if !read_head(&mut socket).await {
                    return;
                }
                count.fetch_add(1, Ordering::Relaxed);
                let _ = socket.write_all(&response).await;
                let _ = socket.shutdown().await;
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
        serve_inventory(listener, service, stop.clone());
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

/// Serves `service` as Inventory on `listener` until `stop` is cancelled.
fn serve_inventory<S: InventoryService>(
    listener: TcpListener,
    service: InventoryServiceServer<S>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await;
    });
}

impl Drop for GrpcStub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

// ---------------------------------------------------------------------------
// Scripted stubs that record when each request arrived (F7 timing: the
// retry after `Retry-After` / `grpc-retry-pushback-ms` must not come early).

/// When one request reached a scripted stub, and when its answer left.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// The request was read (HTTP: its headers; gRPC: the handler ran).
    pub arrived: tokio::time::Instant,
    /// The answer was handed to the connection.
    pub answered: tokio::time::Instant,
}

/// The gaps between each answer and the next request's arrival: how long
/// the caller waited before retrying.
pub fn waits(arrivals: &[Arrival]) -> Vec<std::time::Duration> {
    arrivals
        .windows(2)
        .map(|pair| pair[1].arrived.saturating_duration_since(pair[0].answered))
        .collect()
}

/// One canned HTTP answer of a [`ScriptedStub`].
#[derive(Debug, Clone)]
pub struct Canned {
    /// Status code.
    pub status: u16,
    /// Extra headers (`content-length` and `connection: close` are added).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Canned {
    /// An answer with `status`, `headers` and `body`.
    pub fn new(status: u16, headers: &[(&str, &str)], body: impl Into<String>) -> Self {
        Self {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.into(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut response = format!(
            "HTTP/1.1 {} Stub\r\ncontent-length: {}\r\nconnection: close\r\n",
            self.status,
            self.body.len()
        );
        for (name, value) in &self.headers {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(&self.body);
        response.into_bytes()
    }
}

/// An HTTP/1.1 upstream answering request *i* with the script's entry *i*
/// (the last entry repeats), recording each request's [`Arrival`]. Every
/// answer closes its connection (one request, one connection). Stopped on
/// drop.
#[derive(Debug)]
pub struct ScriptedStub {
    addr: SocketAddr,
    arrivals: Arc<std::sync::Mutex<Vec<Arrival>>>,
    stop: CancellationToken,
}

impl ScriptedStub {
    /// Starts one playing `script` (at least one entry).
    ///
    /// # Errors
    /// When no port can be bound, or the script is empty.
    pub async fn start(script: Vec<Canned>) -> std::io::Result<Self> {
        if script.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an empty script",
            ));
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script: Arc<[Vec<u8>]> = script.iter().map(Canned::bytes).collect();
        let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let log = arrivals.clone();
        accept_until(listener, stop.clone(), move |mut socket| {
            let (script, log) = (script.clone(), log.clone());
            async move {
                if !read_head(&mut socket).await {
                    return;
                }
                let arrived = tokio::time::Instant::now();
                // Take a slot and answer under the lock, so arrivals are in
                // script order.
                let response = {
                    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                    let index = log.len().min(script.len() - 1);
                    log.push(Arrival {
                        arrived,
                        answered: arrived,
                    });
                    (log.len() - 1, script[index].clone())
                };
                let _ = socket.write_all(&response.1).await;
                let answered = tokio::time::Instant::now();
                if let Some(entry) = log
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(response.0)
                {
                    entry.answered = answered;
                }
                let _ = socket.shutdown().await;
            }
        });
        Ok(Self {
            addr,
            arrivals,
            stop,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

impl Drop for ScriptedStub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One scripted answer to `ReserveStock` of a [`ScriptedInventory`].
#[derive(Debug, Clone)]
pub enum GrpcReply {
    /// The reservation is made.
    Reserved,
    /// An error status with this code and, when given, this raw
    /// `grpc-retry-pushback-ms` value (`"500"`, `"-1"`, `"soon"`).
    Status(tonic::Code, Option<&'static str>),
}

/// An Inventory that knows every product's stock (`GetStock` answers a
/// fixed number) and answers `ReserveStock` call *i* with the script's
/// entry *i* (the last repeats), recording each call's [`Arrival`] and
/// reservation id. `ReleaseStock` and `SetStock` succeed.
#[derive(Debug)]
pub struct ScriptedInventory {
    addr: SocketAddr,
    reserves: Arc<std::sync::Mutex<Vec<(String, Arrival)>>>,
    stop: CancellationToken,
}

#[derive(Debug)]
struct Scripted {
    available: i64,
    script: Arc<[GrpcReply]>,
    reserves: Arc<std::sync::Mutex<Vec<(String, Arrival)>>>,
}

#[tonic::async_trait]
impl InventoryService for Scripted {
    async fn get_stock(
        &self,
        request: tonic::Request<pb::GetStockRequest>,
    ) -> Result<tonic::Response<pb::GetStockResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::GetStockResponse {
            product_id: request.into_inner().product_id,
            available: self.available,
        }))
    }

    async fn reserve_stock(
        &self,
        request: tonic::Request<pb::ReserveStockRequest>,
    ) -> Result<tonic::Response<pb::ReserveStockResponse>, tonic::Status> {
        let arrived = tokio::time::Instant::now();
        let message = request.into_inner();
        let reply = {
            let mut log = self.reserves.lock().unwrap_or_else(|p| p.into_inner());
            let index = log.len().min(self.script.len().saturating_sub(1));
            log.push((
                message.reservation_id.clone(),
                Arrival {
                    arrived,
                    answered: tokio::time::Instant::now(),
                },
            ));
            self.script.get(index).cloned()
        };
        match reply {
            None | Some(GrpcReply::Reserved) => {
                Ok(tonic::Response::new(pb::ReserveStockResponse {
                    reservation_id: message.reservation_id,
                    lines: message.lines,
                    replayed: false,
                }))
            }
            Some(GrpcReply::Status(code, pushback)) => {
                let mut status = tonic::Status::new(code, "scripted");
                if let Some(value) = pushback
                    && let Ok(value) = value.parse()
                {
                    status.metadata_mut().insert(PUSHBACK_HEADER, value);
                }
                Err(status)
            }
        }
    }

    async fn release_stock(
        &self,
        _: tonic::Request<pb::ReleaseStockRequest>,
    ) -> Result<tonic::Response<pb::ReleaseStockResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::ReleaseStockResponse {
            released: Vec::new(),
        }))
    }

    async fn set_stock(
        &self,
        request: tonic::Request<pb::SetStockRequest>,
    ) -> Result<tonic::Response<pb::SetStockResponse>, tonic::Status> {
        let message = request.into_inner();
        Ok(tonic::Response::new(pb::SetStockResponse {
            product_id: message.product_id,
            available: message.available,
        }))
    }
}

/// gRPC's server pushback header: how long the client must wait before
/// retrying, in milliseconds (negative or malformed: do not retry).
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

impl ScriptedInventory {
    /// Starts one reporting `available` units of every product and
    /// answering reservations by `script` (empty: every one succeeds).
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(available: i64, script: Vec<GrpcReply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let reserves = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let service = InventoryServiceServer::new(Scripted {
            available,
            script: script.into(),
            reserves: reserves.clone(),
        });
        serve_inventory(listener, service, stop.clone());
        Ok(Self {
            addr,
            reserves,
            stop,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every `ReserveStock` call so far: its reservation id and
    /// [`Arrival`], in arrival order.
    pub fn reserves(&self) -> Vec<(String, Arrival)> {
        self.reserves
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The arrivals of `ReserveStock` calls for one reservation id.
    pub fn reserves_of(&self, reservation_id: &str) -> Vec<Arrival> {
        self.reserves()
            .into_iter()
            .filter(|(id, _)| id == reservation_id)
            .map(|(_, a)| a)
            .collect()
    }
}

impl Drop for ScriptedInventory {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
