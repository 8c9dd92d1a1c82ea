//! The step's HTTP client: hyper-util's pooled HTTP/1 client, each request
//! put together from parts made once.
//!
//! **Why not reqwest here** (the rest of `load` uses it). The generator
//! shares the machine with the system it measures, so every microsecond it
//! spends per request is taken from that system, more as the offered load
//! rises (the sweep's `generator_cpu_cores` column). Per request reqwest
//! formats and parses a URL, serialises the body and builds its own request
//! and response types over the same hyper-util client; here the URIs, the
//! bodies (one per product) and the customers' `Authorization` values are
//! made once, and a request is a few reference-count bumps, a fresh
//! idempotency key and the send. The README's figures give what it saved.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{
        Client,
        connect::{Connected, Connection, HttpConnector},
    },
    rt::{TokioExecutor, TokioIo},
};
use serde_json::json;
use tokio::{
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore},
};

use super::step::{Target, pick};

/// Sends a step's requests to its [`Target`]. Cloning it (once per request,
/// for the request's task) costs a few reference counts.
#[derive(Debug, Clone)]
pub struct StepClient {
    client: Client<Capped, Full<Bytes>>,
    parts: Arc<Parts>,
}

/// What every request is built from, made once.
#[derive(Debug)]
struct Parts {
    target: Target,
    /// `GET /api/products?limit=20`: what a step without products sends.
    read: Uri,
    /// `POST /api/orders`.
    order: Uri,
    /// The order body of each of `target.products`, in their order.
    bodies: Vec<Bytes>,
}

impl StepClient {
    /// A client for `target` with at most `max_connections` connections
    /// open at once (all of them may stay idle in its pool).
    ///
    /// # Errors
    /// When the target's base URL does not make a URI.
    pub fn new(target: Target, max_connections: usize) -> anyhow::Result<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let connector = Capped {
            inner: connector,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_connections)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let read = format!("{}/api/products?limit=20", target.base).parse()?;
        let order = format!("{}/api/orders", target.base).parse()?;
        let bodies = target
            .products
            .iter()
            .map(|p| Bytes::from(json!({"items": [{"product_id": p, "quantity": 1}]}).to_string()))
            .collect();
        Ok(Self {
            client,
            parts: Arc::new(Parts {
                target,
                read,
                order,
                bodies,
            }),
        })
    }

    /// What it sends to.
    pub fn target(&self) -> &Target {
        &self.parts.target
    }

    /// Request `i` of a step: a read when there is no product, else an
    /// order of product `i % n` by the customer [`pick`] names, under a
    /// fresh idempotency key.
    pub fn request(&self, i: u64) -> Request<Full<Bytes>> {
        let parts = &*self.parts;
        let n = parts.bodies.len() as u64;
        if n == 0 {
            let mut request = Request::new(Full::default());
            *request.uri_mut() = parts.read.clone();
            return request;
        }
        let body = parts.bodies[usize::try_from(i % n).unwrap_or(0)].clone();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = parts.order.clone();
        let headers = request.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut key = uuid::Uuid::encode_buffer();
        let key = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut key);
        if let Ok(key) = HeaderValue::from_str(key) {
            headers.insert("idempotency-key", key);
        }
        let customers = &parts.target.customers;
        if let Some(bearer) = customers.bearer(pick(parts.target.seed, i, customers.len())) {
            headers.insert(header::AUTHORIZATION, bearer.clone());
        }
        request
    }

    /// Sends `request` and reads the whole answer: its status, or `None`
    /// when the connection failed.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Option<u16> {
        let response = self.client.request(request).await.ok()?;
        let status = response.status().as_u16();
        response.into_body().collect().await.ok()?;
        Some(status)
    }
}

/// A connector that keeps at most as many connections open as it has slots.
///
/// Why: hyper-util's pool starts a connect for every request that finds no
/// idle connection and keeps it even when an idle one came back first, so
/// the number of connections is not bounded by the requests in flight. A
/// step from half the capacity to five times it opened about 4,500
/// connections in two seconds with at most 1,024 requests outstanding
/// (full mode, two vCPUs): accepting and reading them took the cores the
/// system needed, and requests went unanswered — the generator measuring
/// its own connection storm. A real client's pool has a bound (a
/// browser's six per host, a load tool's fixed connections); so does this
/// one. A connect waits for a slot; a closed connection frees its slot.
#[derive(Debug, Clone)]
pub struct Capped {
    inner: HttpConnector,
    slots: Arc<Semaphore>,
}

impl tower::Service<Uri> for Capped {
    type Response = CappedIo;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<CappedIo, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let slots = self.slots.clone();
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let slot = slots.acquire_owned().await?;
            let io = tower::Service::call(&mut inner, uri).await?;
            Ok(CappedIo { io, _slot: slot })
        })
    }
}

/// A connection of [`Capped`]: holds its slot until it is dropped.
#[derive(Debug)]
pub struct CappedIo {
    io: TokioIo<TcpStream>,
    _slot: OwnedSemaphorePermit,
}

impl Connection for CappedIo {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl hyper::rt::Read for CappedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for CappedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::signin::Customers;

    fn target(products: &[&str]) -> Target {
        Target {
            base: "http://127.0.0.1:8080".to_owned(),
            products: products.iter().map(|p| (*p).to_owned()).collect(),
            customers: Customers::from_tokens(["a".to_owned(), "b".to_owned()]).unwrap(),
            seed: 3,
        }
    }

    #[tokio::test]
    async fn an_order_carries_its_product_a_fresh_key_and_the_picked_customer() {
        let client = StepClient::new(target(&["p1", "p\"2"]), 8).unwrap();
        let first = client.request(1);
        assert_eq!(first.method(), Method::POST);
        assert_eq!(first.uri(), "http://127.0.0.1:8080/api/orders");
        assert_eq!(first.headers()[header::CONTENT_TYPE], "application/json");
        let bearer = client.target().customers.bearer(pick(3, 1, 2)).unwrap();
        assert_eq!(&first.headers()[header::AUTHORIZATION], bearer);
        let key = first.headers()["idempotency-key"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(uuid::Uuid::parse_str(&key).is_ok(), "{key}");
        let again = client.request(1);
        assert_ne!(again.headers()["idempotency-key"], key.as_str(), "fresh");
        let body = first.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["items"][0]["product_id"], "p\"2", "escaped, i % n");
        assert_eq!(body["items"][0]["quantity"], 1);
    }

    #[tokio::test]
    async fn without_products_a_request_reads_the_catalogue() {
        let client = StepClient::new(target(&[]), 8).unwrap();
        let read = client.request(5);
        assert_eq!(read.method(), Method::GET);
        assert_eq!(read.uri(), "http://127.0.0.1:8080/api/products?limit=20");
        assert!(!read.headers().contains_key(header::AUTHORIZATION));
    }

    /// 64 requests at once through a client capped at 4 connections, to a
    /// server that holds each answer 20 ms: every request is answered, over
    /// at most 4 connections (uncapped, each waiting request opened one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_stay_within_the_cap_however_many_requests_wait() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(|_| async {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"ok"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        let mut to = target(&[]);
        to.base = format!("http://{addr}");
        let client = StepClient::new(to, 4).unwrap();
        let mut sends = tokio::task::JoinSet::new();
        for i in 0..64 {
            let client = client.clone();
            sends.spawn(async move { client.send(client.request(i)).await });
        }
        while let Some(status) = sends.join_next().await {
            assert_eq!(status.unwrap(), Some(200));
        }
        let n = accepted.load(Ordering::SeqCst);
        assert!(
            (1..=4).contains(&n),
            "{n} connections for 64 requests with a cap of 4"
        );
    }
}
