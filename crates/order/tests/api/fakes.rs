//! Test doubles that are real servers on 127.0.0.1:0: an Inventory gRPC
//! server (tonic, from `shopeasy-proto`) and a Product HTTP server (axum),
//! each with switchable faults and call counters.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use prost::Message;
use shopeasy_proto::inventory::v1::{
    self as pb,
    inventory_service_server::{InventoryService, InventoryServiceServer},
};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_stream::{StreamExt, wrappers::TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Normally.
    Healthy,
    /// `UNAVAILABLE` to every call.
    Unavailable,
    /// Never answers.
    Hang,
}

#[derive(Debug, Default)]
struct Reservation {
    lines: Vec<(String, i64)>,
    released: bool,
}

#[derive(Debug)]
struct State {
    stock: Mutex<HashMap<String, i64>>,
    reservations: Mutex<HashMap<String, Reservation>>,
    mode: Mutex<Mode>,
    get_calls: AtomicUsize,
    reserve_calls: AtomicUsize,
    release_calls: AtomicUsize,
    connections: AtomicUsize,
    timeouts: Mutex<Vec<String>>,
    get_delay: Mutex<Duration>,
    reserve_delay: Mutex<Duration>,
}

/// An in-memory Inventory with switchable faults. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct FakeInventory(Arc<State>);

impl Default for FakeInventory {
    fn default() -> Self {
        Self(Arc::new(State {
            stock: Mutex::default(),
            reservations: Mutex::default(),
            mode: Mutex::new(Mode::Healthy),
            get_calls: AtomicUsize::new(0),
            reserve_calls: AtomicUsize::new(0),
            release_calls: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            timeouts: Mutex::default(),
            get_delay: Mutex::new(Duration::ZERO),
            reserve_delay: Mutex::new(Duration::ZERO),
        }))
    }
}

/// A running fake server.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    stop: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

impl Running {
    /// `http://addr`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops listening (new connections are refused).
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(handle) = self.handle.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeInventory {
    pub(crate) fn set_stock(&self, product: Uuid, available: i64) {
        self.0
            .stock
            .lock()
            .unwrap()
            .insert(product.to_string(), available);
    }

    pub(crate) fn stock(&self, product: Uuid) -> i64 {
        self.0.stock.lock().unwrap()[&product.to_string()]
    }

    /// Units held by live reservations of `product`.
    pub(crate) fn reserved(&self, product: Uuid) -> i64 {
        let p = product.to_string();
        self.0
            .reservations
            .lock()
            .unwrap()
            .values()
            .filter(|r| !r.released)
            .flat_map(|r| r.lines.iter())
            .filter(|(id, _)| *id == p)
            .map(|(_, q)| q)
            .sum()
    }

    /// Ids of live reservations.
    pub(crate) fn live_reservations(&self) -> Vec<String> {
        self.0
            .reservations
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| !r.released)
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        *self.0.mode.lock().unwrap() = mode;
    }

    pub(crate) fn set_get_delay(&self, delay: Duration) {
        *self.0.get_delay.lock().unwrap() = delay;
    }

    /// Delays every `ReserveStock` answer (after the reservation is made).
    pub(crate) fn set_reserve_delay(&self, delay: Duration) {
        *self.0.reserve_delay.lock().unwrap() = delay;
    }

    pub(crate) fn get_calls(&self) -> usize {
        self.0.get_calls.load(Ordering::SeqCst)
    }

    pub(crate) fn reserve_calls(&self) -> usize {
        self.0.reserve_calls.load(Ordering::SeqCst)
    }

    pub(crate) fn release_calls(&self) -> usize {
        self.0.release_calls.load(Ordering::SeqCst)
    }

    pub(crate) fn connections(&self) -> usize {
        self.0.connections.load(Ordering::SeqCst)
    }

    /// The `grpc-timeout` headers received.
    pub(crate) fn timeouts(&self) -> Vec<String> {
        self.0.timeouts.lock().unwrap().clone()
    }

    /// Serves on a fresh port.
    pub(crate) async fn serve(&self) -> Running {
        self.serve_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// Serves on `addr` (to come back on the same port after a stop).
    pub(crate) async fn serve_on(&self, addr: SocketAddr) -> Running {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = self.0.clone();
        let incoming = TcpListenerStream::new(listener).map(move |conn| {
            state.connections.fetch_add(1, Ordering::SeqCst);
            conn
        });
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let server = tonic::transport::Server::builder()
            .add_service(InventoryServiceServer::new(self.clone()))
            .serve_with_incoming_shutdown(incoming, async move { signal.cancelled().await });
        let handle = tokio::spawn(async move {
            let _ = server.await;
        });
        Running {
            addr,
            stop,
            handle: Some(handle),
        }
    }

    async fn gate<T>(&self, request: &Request<T>) -> Result<(), Status> {
        if let Some(t) = request.metadata().get("grpc-timeout") {
            self.0
                .timeouts
                .lock()
                .unwrap()
                .push(t.to_str().unwrap_or_default().to_owned());
        }
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            Mode::Healthy => Ok(()),
            Mode::Unavailable => Err(Status::unavailable("test: unavailable")),
            Mode::Hang => {
                futures::future::pending::<()>().await;
                Ok(())
            }
        }
    }
}

#[tonic::async_trait]
impl InventoryService for FakeInventory {
    async fn get_stock(
        &self,
        request: Request<pb::GetStockRequest>,
    ) -> Result<Response<pb::GetStockResponse>, Status> {
        self.0.get_calls.fetch_add(1, Ordering::SeqCst);
        self.gate(&request).await?;
        let delay = *self.0.get_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let id = request.into_inner().product_id;
        let available = self.0.stock.lock().unwrap().get(&id).copied();
        match available {
            Some(available) => Ok(Response::new(pb::GetStockResponse {
                product_id: id,
                available,
            })),
            None => Err(Status::not_found("no such product")),
        }
    }

    async fn reserve_stock(
        &self,
        request: Request<pb::ReserveStockRequest>,
    ) -> Result<Response<pb::ReserveStockResponse>, Status> {
        self.0.reserve_calls.fetch_add(1, Ordering::SeqCst);
        self.gate(&request).await?;
        let delay = *self.0.reserve_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let r = request.into_inner();
        let mut reservations = self.0.reservations.lock().unwrap();
        if let Some(existing) = reservations.get(&r.reservation_id) {
            if existing.released {
                return Err(Status::failed_precondition("reservation was released"));
            }
            return Ok(Response::new(pb::ReserveStockResponse {
                reservation_id: r.reservation_id,
                lines: r.lines,
                replayed: true,
            }));
        }
        let mut stock = self.0.stock.lock().unwrap();
        let mut short = Vec::new();
        for line in &r.lines {
            let Some(available) = stock.get(&line.product_id) else {
                return Err(Status::not_found("no such product"));
            };
            if *available < line.quantity {
                short.push(pb::ShortLine {
                    product_id: line.product_id.clone(),
                    requested: line.quantity,
                    available: *available,
                });
            }
        }
        if !short.is_empty() {
            let details = pb::InsufficientStock { lines: short }.encode_to_vec();
            return Err(Status::with_details(
                tonic::Code::FailedPrecondition,
                "insufficient stock",
                details.into(),
            ));
        }
        for line in &r.lines {
            *stock.get_mut(&line.product_id).unwrap() -= line.quantity;
        }
        reservations.insert(
            r.reservation_id.clone(),
            Reservation {
                lines: r
                    .lines
                    .iter()
                    .map(|l| (l.product_id.clone(), l.quantity))
                    .collect(),
                released: false,
            },
        );
        Ok(Response::new(pb::ReserveStockResponse {
            reservation_id: r.reservation_id,
            lines: r.lines,
            replayed: false,
        }))
    }

    async fn release_stock(
        &self,
        request: Request<pb::ReleaseStockRequest>,
    ) -> Result<Response<pb::ReleaseStockResponse>, Status> {
        self.0.release_calls.fetch_add(1, Ordering::SeqCst);
        self.gate(&request).await?;
        let id = request.into_inner().reservation_id;
        let mut reservations = self.0.reservations.lock().unwrap();
        let entry = reservations.entry(id).or_insert_with(|| Reservation {
            lines: Vec::new(),
            released: true,
        });
        let mut released = Vec::new();
        if !entry.released {
            entry.released = true;
            let mut stock = self.0.stock.lock().unwrap();
            for (product, quantity) in &entry.lines {
                *stock.get_mut(product).unwrap() += quantity;
                released.push(pb::StockLine {
                    product_id: product.clone(),
                    quantity: *quantity,
                });
            }
        }
        Ok(Response::new(pb::ReleaseStockResponse { released }))
    }

    async fn set_stock(
        &self,
        _: Request<pb::SetStockRequest>,
    ) -> Result<Response<pb::SetStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
}

/// How the fake Product answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProductMode {
    Healthy,
    /// 503 with `Retry-After: <secs>` (None: no header).
    Unavailable(Option<u64>),
    /// 400 to everything.
    BadRequest,
    Hang,
    /// Delays every answer.
    #[allow(dead_code)] // for tests that need a slow catalogue
    Slow(Duration),
}

#[derive(Debug)]
struct ProductState {
    prices: Mutex<HashMap<Uuid, i64>>,
    mode: Mutex<ProductMode>,
    calls: AtomicUsize,
    call_times: Mutex<Vec<tokio::time::Instant>>,
}

/// An in-memory Product service. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct FakeProduct(Arc<ProductState>);

impl Default for FakeProduct {
    fn default() -> Self {
        Self(Arc::new(ProductState {
            prices: Mutex::default(),
            mode: Mutex::new(ProductMode::Healthy),
            calls: AtomicUsize::new(0),
            call_times: Mutex::default(),
        }))
    }
}

impl FakeProduct {
    pub(crate) fn add(&self, id: Uuid, price_cents: i64) {
        self.0.prices.lock().unwrap().insert(id, price_cents);
    }

    pub(crate) fn set_mode(&self, mode: ProductMode) {
        *self.0.mode.lock().unwrap() = mode;
    }

    pub(crate) fn calls(&self) -> usize {
        self.0.calls.load(Ordering::SeqCst)
    }

    pub(crate) fn call_times(&self) -> Vec<tokio::time::Instant> {
        self.0.call_times.lock().unwrap().clone()
    }

    pub(crate) async fn serve(&self) -> Running {
        use axum::{
            extract::{Path, State},
            http::StatusCode,
            response::IntoResponse,
            routing::get,
        };
        async fn product(
            State(fake): State<FakeProduct>,
            Path(id): Path<Uuid>,
        ) -> axum::response::Response {
            fake.0.calls.fetch_add(1, Ordering::SeqCst);
            fake.0
                .call_times
                .lock()
                .unwrap()
                .push(tokio::time::Instant::now());
            let mode = *fake.0.mode.lock().unwrap();
            match mode {
                ProductMode::Healthy => {}
                ProductMode::Unavailable(retry_after) => {
                    let mut r = StatusCode::SERVICE_UNAVAILABLE.into_response();
                    if let Some(s) = retry_after {
                        r.headers_mut()
                            .insert("retry-after", s.to_string().parse().unwrap());
                    }
                    return r;
                }
                ProductMode::BadRequest => return StatusCode::BAD_REQUEST.into_response(),
                ProductMode::Hang => futures::future::pending::<()>().await,
                ProductMode::Slow(d) => tokio::time::sleep(d).await,
            }
            let price = fake.0.prices.lock().unwrap().get(&id).copied();
            match price {
                Some(price_cents) => axum::Json(shopeasy_product_api::Product {
                    id,
                    sku: "SKU-1".into(),
                    name: "Thing".into(),
                    description: String::new(),
                    price_cents,
                    currency: "EUR".into(),
                })
                .into_response(),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new()
            .route("/api/products/{id}", get(product))
            .with_state(self.clone());
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let handle = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { signal.cancelled().await })
                .await;
        });
        Running {
            addr,
            stop,
            handle: Some(handle),
        }
    }
}
