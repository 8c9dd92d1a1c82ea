//! The Inventory client (SPEC §5): gRPC over one tonic `Channel`, behind a
//! tower stack built in `stack`, exposed as the [`StockSource`] and
//! [`Reservations`] ports.
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
    backoff::Backoff,
    breaker::{BreakerConfig, BreakerHandle, BreakerLayer, GrpcClassifier},
    budget::RetryBudget,
    bulkhead::BulkheadLayer,
    deadline::{Deadline, DeadlineLayer, HasDeadline},
    error::{BoxError, DeadlineExceeded},
    retry::{GrpcUnavailablePolicy, RetryLayer},
    timeout::AttemptTimeoutLayer,
};
use tonic::{
    Code, Status,
    transport::{Channel, Endpoint},
};
use tower::{ServiceBuilder, ServiceExt, util::BoxCloneSyncService};
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
#[derive(Debug, Clone)]
pub struct Call {
    op: Op,
    deadline: Option<Deadline>,
    timeout: Option<Duration>,
}

impl HasDeadline for Call {
    fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    fn set_deadline(&mut self, deadline: Deadline) {
        self.deadline = Some(deadline);
    }

    fn propagate(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }
}

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
            match call.op {
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
                    match client.reserve_stock(request(message, t)).await {
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
                        .release_stock(request(message, t))
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

type Stack = BoxCloneSyncService<Call, Reply, BoxError>;

/// The Inventory client. Cheap to clone (clones share the channel,
/// breaker, budget and bulkhead).
#[derive(Clone)]
pub struct InventoryClient {
    stack: Stack,
    breaker: BreakerHandle,
    budget: RetryBudget,
}

impl fmt::Debug for InventoryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InventoryClient")
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl InventoryClient {
    /// A client of the Inventory at `url` (connected lazily: a down
    /// Inventory does not stop the order service from starting).
    ///
    /// # Errors
    /// When `url` is not a valid endpoint.
    pub fn new(url: &str, edge: &EdgeSettings, budget: RetryBudget) -> anyhow::Result<Self> {
        let channel = Endpoint::from_shared(url.to_owned())?
            .connect_timeout(edge.connect_timeout_seconds.get())
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true)
            .connect_lazy();
        let breaker = BreakerHandle::new(
            TARGET,
            BreakerConfig {
                failure_ratio: edge.failure_ratio,
                minimum_throughput: edge.minimum_calls,
                sampling_duration: edge.sampling_window_seconds.get(),
                break_duration: edge.break_duration_seconds.get(),
                trial_timeout: edge.timeout_seconds.get() * 2,
            },
        );
        let stack = stack(channel, edge, budget.clone(), breaker.clone());
        Ok(Self {
            stack,
            breaker,
            budget,
        })
    }

    /// The breaker (for `/admin/resilience` and tests).
    pub fn breaker(&self) -> &BreakerHandle {
        &self.breaker
    }

    /// The retry budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    async fn call(&self, op: Op, deadline: Option<Deadline>) -> Result<Reply, StockError> {
        let call = Call {
            op,
            deadline,
            timeout: None,
        };
        let started = tokio::time::Instant::now();
        let result = self.stack.clone().oneshot(call).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => outcome_of(e.as_ref()),
        };
        metrics::histogram!(
            "shopeasy_downstream_request_duration_seconds",
            "target" => TARGET,
            "outcome" => outcome,
        )
        .record(started.elapsed().as_secs_f64());
        result.map_err(|e| {
            if deadline.is_some_and(Deadline::is_expired)
                && shopeasy_resilience::error::find::<DeadlineExceeded>(e.as_ref()).is_some()
            {
                StockError::DeadlineExceeded
            } else {
                StockError::Unavailable(format!("{outcome}: {e}"))
            }
        })
    }
}

/// The outcome label of a failed call.
fn outcome_of(e: &(dyn std::error::Error + 'static)) -> &'static str {
    use shopeasy_resilience::error::{CircuitOpen, Overloaded, find, is_timeout};
    if find::<CircuitOpen>(e).is_some() {
        "circuit_open"
    } else if find::<Overloaded>(e).is_some() {
        "overloaded"
    } else if is_timeout(e)
        || find::<Status>(e).is_some_and(|s| {
            s.code() == Code::DeadlineExceeded || shopeasy_resilience::error::is_grpc_timeout(s)
        })
    {
        "timeout"
    } else if find::<Status>(e).is_some_and(|s| s.code() == Code::Unavailable) {
        "unavailable"
    } else {
        "error"
    }
}

/// The Inventory stack, read outer to inner (each layer sees what the
/// layers above it decided):
fn stack(
    channel: Channel,
    edge: &EdgeSettings,
    budget: RetryBudget,
    breaker: BreakerHandle,
) -> Stack {
    let per_attempt = edge.timeout_seconds.get();
    let backoff = Backoff::default();
    // A call without a caller's deadline still ends: every attempt plus
    // the pauses between them.
    let cap = per_attempt * (edge.max_retries + 1) + Duration::from_secs(1);
    let max_concurrency = usize::try_from(edge.max_concurrency).unwrap_or(usize::MAX);
    let service = ServiceBuilder::new()
        // 1. Deadline: the caller's remaining time, capped; an expired
        //    call is not sent at all.
        .layer(DeadlineLayer::new(cap))
        // 2. Retry: only UNAVAILABLE (connection failures), jittered
        //    exponential backoff, each retry from the shared budget, never
        //    after a timeout or a local refusal, never past the deadline.
        //    Above the breaker, so every attempt is judged by it.
        .layer(RetryLayer::new(
            GrpcUnavailablePolicy,
            budget,
            backoff,
            edge.max_retries,
            TARGET,
        ))
        // 3. Circuit breaker: fails fast while Inventory keeps failing;
        //    one trial after the break. Timeouts (including tonic's
        //    client-side CANCELLED) count as failures.
        .layer(BreakerLayer::new(breaker, GrpcClassifier))
        // 4. Bulkhead: at most `max_concurrency` calls in flight; more are
        //    shed, so a hung Inventory cannot hold every task.
        .layer(BulkheadLayer::new(max_concurrency))
        // 5. Attempt timeout: min(timeout_seconds, time left), sent to
        //    Inventory as grpc-timeout.
        .layer(AttemptTimeoutLayer::new(per_attempt))
        // 6. Transport: one tonic channel (3 s connect timeout, HTTP/2
        //    keep-alive pings).
        .service(Transport {
            client: InventoryServiceClient::new(channel),
        });
    BoxCloneSyncService::new(service)
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
        self.breaker.is_refusing()
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
