//! The Inventory client (SPEC §5): gRPC over one tonic `Channel`, behind
//! the edge stack of `shopeasy_resilience::edge`, exposed as the
//! [`StockSource`] and [`Reservations`] ports.
//!
//! Every call is a [`Call`] (cloneable, so the retry layer can repeat it)
//! that carries the caller's deadline. Whatever goes wrong — refused,
//! reset, timed out, circuit open, bulkhead full, an error status — comes
//! out as one [`StockError::Unavailable`]; Inventory's business answers
//! (`NOT_FOUND`, `FAILED_PRECONDITION`) are answers, not failures. The
//! caller's own cancellation (dropping the future) cancels the call and
//! counts as nothing.

use std::{
    fmt,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use prost::Message;
use shopeasy_proto::inventory::v1::{self as pb, inventory_service_client::InventoryServiceClient};
use shopeasy_resilience::{
    breaker::{BreakerHandle, GrpcClassifier},
    budget::RetryBudget,
    deadline::{self, Deadline},
    edge::{EdgeClient, EdgeConfig, EdgeError},
    error::BoxError,
    outcome::Outcome,
    retry::GrpcUnavailablePolicy,
    throttle::{ThrottleConfig, ThrottleHandle},
};
use shopeasy_runtime::settings::Secret;
use tonic::{
    Code, Status,
    metadata::AsciiMetadataValue,
    transport::{Channel, Endpoint},
};
use uuid::Uuid;

use crate::{
    domain::{NewLine, Shortage},
    settings::EdgeSettings,
    stock::{Reservations, Reserved, StockError, StockSource},
};

/// The target name in metrics, spans and `/admin/resilience`.
pub const TARGET: &str = "inventory";

/// HTTP/2 keep-alive ping interval: a vanished peer is noticed within
/// about interval + timeout.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// How long a keep-alive ping may go unanswered.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// One Inventory operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `GetStock`.
    GetStock(Uuid),
    /// `ReserveStock`.
    Reserve(Uuid, Vec<NewLine>),
    /// `ReleaseStock`.
    Release(Uuid),
}

/// One call through the stack: the operation, its deadline, and the
/// attempt timeout the stack decided (sent as `grpc-timeout`).
pub type Call = deadline::Call<Op>;

/// Inventory's answer to a [`Call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Units available (`None`: no such product).
    Stock(Option<i64>),
    /// The reservation's outcome.
    Reserved(Reserved),
    /// Released.
    Released,
}

/// The innermost service: one gRPC request per call, with the attempt's
/// timeout as `grpc-timeout` (tonic also enforces it on the client side,
/// reporting `CANCELLED`, which the classifiers treat as a timeout) and the
/// current trace context in the metadata.
#[derive(Debug, Clone)]
struct Transport {
    client: InventoryServiceClient<Channel>,
    /// `Bearer <inventory.service_token>`, sent with Reserve and Release
    /// only (GetStock is open); `None` when no token is configured.
    service_credential: Option<AsciiMetadataValue>,
}

/// Adds the service credential to a mutating call's metadata.
fn with_credential<T>(
    mut request: tonic::Request<T>,
    credential: Option<&AsciiMetadataValue>,
) -> tonic::Request<T> {
    if let Some(value) = credential {
        request
            .metadata_mut()
            .insert("authorization", value.clone());
    }
    request
}

impl tower::Service<Call> for Transport {
    type Response = Reply;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Reply, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The channel buffers internally; readiness is checked per call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let mut client = self.client.clone();
        let credential = self.service_credential.clone();
        Box::pin(async move {
            fn request<T>(message: T, timeout: Option<Duration>) -> tonic::Request<T> {
                let mut headers = http::HeaderMap::new();
                shopeasy_runtime::telemetry::inject_current(&mut headers);
                let mut request = tonic::Request::from_parts(
                    tonic::metadata::MetadataMap::from_headers(headers),
                    tonic::Extensions::default(),
                    message,
                );
                if let Some(timeout) = timeout {
                    request.set_timeout(timeout);
                }
                request
            }
            let t = call.timeout;
            match call.message {
                Op::GetStock(id) => {
                    let message = pb::GetStockRequest {
                        product_id: id.to_string(),
                    };
                    match client.get_stock(request(message, t)).await {
                        Ok(r) => Ok(Reply::Stock(Some(r.into_inner().available))),
                        Err(s) if s.code() == Code::NotFound => Ok(Reply::Stock(None)),
                        Err(s) => Err(s.into()),
                    }
                }
                Op::Reserve(id, lines) => {
                    let message = pb::ReserveStockRequest {
                        reservation_id: id.to_string(),
                        lines: lines
                            .iter()
                            .map(|l| pb::StockLine {
                                product_id: l.product_id.to_string(),
                                quantity: l.quantity,
                            })
                            .collect(),
                    };
                    match client
                        .reserve_stock(with_credential(request(message, t), credential.as_ref()))
                        .await
                    {
                        Ok(_) => Ok(Reply::Reserved(Reserved::Yes)),
                        Err(s) => match refusal(&s, &lines) {
                            Some(shortages) => {
                                Ok(Reply::Reserved(Reserved::Insufficient(shortages)))
                            }
                            None => Err(s.into()),
                        },
                    }
                }
                Op::Release(id) => {
                    let message = pb::ReleaseStockRequest {
                        reservation_id: id.to_string(),
                    };
                    client
                        .release_stock(with_credential(request(message, t), credential.as_ref()))
                        .await
                        .map(|_| Reply::Released)
                        .map_err(Into::into)
                }
            }
        })
    }
}

/// Inventory's definite "no" to a reservation, as shortages: the short
/// lines of `FAILED_PRECONDITION` (none when the reservation was released
/// before it was made); every line for `NOT_FOUND` (a product with no stock
/// record has none to reserve); `ALREADY_EXISTS` (the id was used for other
/// lines: a bug) refuses too. `None` for every other status.
fn refusal(status: &Status, lines: &[NewLine]) -> Option<Vec<Shortage>> {
    match status.code() {
        Code::FailedPrecondition => Some(
            pb::InsufficientStock::decode(status.details())
                .map(|d| {
                    d.lines
                        .iter()
                        .filter_map(|l| {
                            Some(Shortage {
                                product_id: Uuid::try_parse(&l.product_id).ok()?,
                                requested: l.requested,
                                available: l.available,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Code::NotFound => Some(
            lines
                .iter()
                .map(|l| Shortage {
                    product_id: l.product_id,
                    requested: l.quantity,
                    available: 0,
                })
                .collect(),
        ),
        Code::AlreadyExists => {
            tracing::error!(
                message = status.message(),
                "reservation id reused with other lines"
            );
            Some(Vec::new())
        }
        _ => None,
    }
}

/// The Inventory client. Cheap to clone (clones share the channel,
/// breaker, budget and bulkhead).
#[derive(Clone)]
pub struct InventoryClient {
    edge: EdgeClient<Call, Reply>,
}

impl fmt::Debug for InventoryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InventoryClient")
            .field("breaker", &self.edge.breaker().state())
            .finish_non_exhaustive()
    }
}

impl InventoryClient {
    /// A client of the Inventory at `url` (connected lazily: a down
    /// Inventory does not stop the order service from starting), behind
    /// the edge stack of `shopeasy_resilience::edge`: retries only
    /// `UNAVAILABLE` (connection failures, never after a timeout or a
    /// local refusal); timeouts (tonic's client-side `CANCELLED` included)
    /// count against the breaker; each attempt's timeout is sent as
    /// `grpc-timeout`.
    ///
    /// # Errors
    /// When `url` is not a valid endpoint.
    pub fn new(url: &str, edge: &EdgeSettings, budget: RetryBudget) -> anyhow::Result<Self> {
        Self::with_service_token(url, &Secret::default(), edge, budget)
    }

    /// [`InventoryClient::new`], sending `service_token` as
    /// `authorization: Bearer …` with `ReserveStock` and `ReleaseStock`
    /// (marked sensitive, so it is never logged); an empty token sends
    /// none.
    ///
    /// # Errors
    /// When `url` is not a valid endpoint or the token is not a valid
    /// header value.
    pub fn with_service_token(
        url: &str,
        service_token: &Secret,
        edge: &EdgeSettings,
        budget: RetryBudget,
    ) -> anyhow::Result<Self> {
        Self::build(url, service_token, edge, budget, ThrottleConfig::default())
    }

    /// [`InventoryClient::with_service_token`], its client-side throttle
    /// configured by `throttle` (`resilience.throttle.*`): while Inventory
    /// refuses calls for overload (`RESOURCE_EXHAUSTED`, or `UNAVAILABLE`
    /// with pushback), the excess is refused here without being sent.
    ///
    /// # Errors
    /// As [`InventoryClient::with_service_token`].
    pub fn build(
        url: &str,
        service_token: &Secret,
        edge: &EdgeSettings,
        budget: RetryBudget,
        throttle: ThrottleConfig,
    ) -> anyhow::Result<Self> {
        let service_credential = if service_token.is_empty() {
            None
        } else {
            let mut value: AsciiMetadataValue = format!("Bearer {}", service_token.expose())
                .parse()
                .map_err(|_| {
                    anyhow::anyhow!("inventory.service_token is not a valid header value")
                })?;
            value.set_sensitive(true);
            Some(value)
        };
        let channel = Endpoint::from_shared(url.to_owned())?
            .connect_timeout(edge.connect_timeout_seconds.get())
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true)
            .connect_lazy();
        let transport = Transport {
            client: InventoryServiceClient::new(channel),
            service_credential,
        };
        Ok(Self {
            edge: EdgeClient::new(
                &EdgeConfig {
                    throttle,
                    ..edge.config(TARGET)
                },
                budget,
                GrpcUnavailablePolicy,
                GrpcClassifier,
                transport,
            ),
        })
    }

    /// The breaker (for `/admin/resilience` and tests).
    pub fn breaker(&self) -> &BreakerHandle {
        self.edge.breaker()
    }

    /// The retry budget.
    pub fn budget(&self) -> &RetryBudget {
        self.edge.budget()
    }

    /// The client-side throttle (for `/admin/resilience` and tests).
    pub fn throttle(&self) -> &ThrottleHandle {
        self.edge.throttle()
    }

    async fn call(&self, op: Op, deadline: Option<Deadline>) -> Result<Reply, StockError> {
        self.edge
            .call(Call::with_deadline(op, deadline), |_| Outcome::Ok)
            .await
            .map_err(|e| match e {
                EdgeError::DeadlineExceeded => StockError::DeadlineExceeded,
                failed @ EdgeError::Failed { .. } => StockError::Unavailable(failed.to_string()),
            })
    }
}

impl StockSource for InventoryClient {
    fn available(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Option<i64>, StockError>> {
        Box::pin(async move {
            match self.call(Op::GetStock(product), deadline).await? {
                Reply::Stock(n) => Ok(n),
                other => Err(StockError::Unavailable(format!("unexpected {other:?}"))),
            }
        })
    }
}

impl Reservations for InventoryClient {
    fn reserve(
        &self,
        reservation_id: Uuid,
        lines: Vec<NewLine>,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Reserved, StockError>> {
        Box::pin(async move {
            match self
                .call(Op::Reserve(reservation_id, lines), deadline)
                .await?
            {
                Reply::Reserved(r) => Ok(r),
                other => Err(StockError::Unavailable(format!("unexpected {other:?}"))),
            }
        })
    }

    fn is_refusing(&self) -> bool {
        self.edge.breaker().is_refusing()
    }

    fn release(
        &self,
        reservation_id: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<(), StockError>> {
        Box::pin(async move {
            match self.call(Op::Release(reservation_id), deadline).await? {
                Reply::Released => Ok(()),
                other => Err(StockError::Unavailable(format!("unexpected {other:?}"))),
            }
        })
    }
}
