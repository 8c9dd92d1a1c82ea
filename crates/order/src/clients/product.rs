//! The Product client (SPEC §5): `GET /api/products/{id}` over HTTP behind
//! a tower stack built in `stack`, exposed as the [`Catalog`] port. The
//! wire types are the Product service's own (`shopeasy-product-api`).
//!
//! Each attempt's timeout covers the whole response, body included: the
//! transport reads the body inside the attempt, so a product trickling its
//! answer is cut off like one that never answers.

use std::{
    fmt,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::StatusCode;
use shopeasy_product_api::{Product, paths};
use shopeasy_resilience::{
    backoff::Backoff,
    breaker::{BreakerConfig, BreakerHandle, BreakerLayer, HttpClassifier},
    budget::RetryBudget,
    bulkhead::BulkheadLayer,
    deadline::{Deadline, DeadlineLayer, HasDeadline},
    error::{BoxError, DeadlineExceeded, find},
    retry::{HttpRetryPolicy, RetryLayer},
    timeout::AttemptTimeoutLayer,
};
use tower::{ServiceBuilder, ServiceExt, util::BoxCloneSyncService};
use uuid::Uuid;

use crate::{
    catalog::{Catalog, CatalogError},
    settings::EdgeSettings,
};

/// The target name in metrics, spans and `/admin/resilience`.
pub const TARGET: &str = "product";

/// Largest product body read.
const MAX_BODY: usize = 256 * 1024;

/// Too large a response body.
#[derive(Debug, thiserror::Error)]
#[error("response body over {MAX_BODY} bytes")]
struct BodyTooLarge;

/// The innermost service: one HTTP request per call, read to the end.
#[derive(Debug, Clone)]
struct Transport {
    client: reqwest::Client,
}

impl tower::Service<http::Request<()>> for Transport {
    type Response = http::Response<Bytes>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<http::Response<Bytes>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<()>) -> Self::Future {
        let client = self.client.clone();
        shopeasy_runtime::telemetry::inject_current(request.headers_mut());
        Box::pin(async move {
            let request = reqwest::Request::try_from(request.map(|()| reqwest::Body::from("")))?;
            let mut response = client.execute(request).await?;
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(BodyTooLarge.into());
                }
                body.extend_from_slice(&chunk);
            }
            let mut out = http::Response::new(Bytes::from(body));
            *out.status_mut() = response.status();
            *out.headers_mut() = response.headers().clone();
            Ok(out)
        })
    }
}

type Stack = BoxCloneSyncService<http::Request<()>, http::Response<Bytes>, BoxError>;

/// The Product client. Cheap to clone.
#[derive(Clone)]
pub struct ProductClient {
    base: String,
    stack: Stack,
    breaker: BreakerHandle,
    budget: RetryBudget,
}

impl fmt::Debug for ProductClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProductClient")
            .field("base", &self.base)
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl ProductClient {
    /// A client of the Product service at `url`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(url: &str, edge: &EdgeSettings, budget: RetryBudget) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(edge.connect_timeout_seconds.get())
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
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
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            stack: stack(Transport { client }, edge, budget.clone(), breaker.clone()),
            breaker,
            budget,
        })
    }

    /// The breaker.
    pub fn breaker(&self) -> &BreakerHandle {
        &self.breaker
    }

    /// The retry budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    async fn product(
        &self,
        id: Uuid,
        deadline: Option<Deadline>,
    ) -> Result<Option<Product>, CatalogError> {
        let mut request = http::Request::get(format!("{}{}", self.base, paths::product(id)))
            .header(http::header::ACCEPT, "application/json")
            .body(())
            .map_err(|e| CatalogError::Unavailable(e.to_string()))?;
        if let Some(d) = deadline {
            request.set_deadline(d);
        }
        let started = tokio::time::Instant::now();
        let result = self.stack.clone().oneshot(request).await;
        let outcome = match &result {
            Ok(r) if r.status().is_success() || r.status() == StatusCode::NOT_FOUND => "ok",
            Ok(_) => "error_status",
            Err(e) if shopeasy_resilience::error::is_timeout(e.as_ref()) => "timeout",
            Err(e) if shopeasy_resilience::error::is_rejected(e.as_ref()) => "rejected",
            Err(_) => "error",
        };
        metrics::histogram!(
            "shopeasy_downstream_request_duration_seconds",
            "target" => TARGET,
            "outcome" => outcome,
        )
        .record(started.elapsed().as_secs_f64());
        let response = result.map_err(|e| {
            if deadline.is_some_and(Deadline::is_expired)
                && find::<DeadlineExceeded>(e.as_ref()).is_some()
            {
                CatalogError::DeadlineExceeded
            } else {
                CatalogError::Unavailable(e.to_string())
            }
        })?;
        match response.status() {
            StatusCode::OK => serde_json::from_slice(response.body())
                .map(Some)
                .map_err(|e| CatalogError::Unavailable(format!("malformed product: {e}"))),
            StatusCode::NOT_FOUND => Ok(None),
            other => Err(CatalogError::Unavailable(format!(
                "product answered {other}"
            ))),
        }
    }
}

/// Whether `e` means the connection failed before any answer: reqwest's
/// "could not connect", or the connection closed before the response
/// began (hyper's incomplete message: typically a pooled connection the
/// server closed, hyper#2136). Both are safe to retry: the lookup is a
/// GET.
fn is_connection_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    find::<reqwest::Error>(e).is_some_and(reqwest::Error::is_connect)
        || find::<hyper::Error>(e).is_some_and(hyper::Error::is_incomplete_message)
}

/// The Product stack, read outer to inner:
fn stack(
    transport: Transport,
    edge: &EdgeSettings,
    budget: RetryBudget,
    breaker: BreakerHandle,
) -> Stack {
    let per_attempt = edge.timeout_seconds.get();
    let cap = per_attempt * (edge.max_retries + 1) + Duration::from_secs(1);
    let max_concurrency = usize::try_from(edge.max_concurrency).unwrap_or(usize::MAX);
    let service = ServiceBuilder::new()
        // 1. Deadline: the caller's remaining time, capped.
        .layer(DeadlineLayer::new(cap))
        // 2. Retry: connection failures, 502/503/504 and 429 (no earlier
        //    than Retry-After), never other 4xx or a timeout; each retry
        //    from the budget, never past the deadline.
        .layer(RetryLayer::new(
            HttpRetryPolicy::new().with_connection_error(is_connection_failure),
            budget,
            Backoff::default(),
            edge.max_retries,
            TARGET,
        ))
        // 3. Circuit breaker: errors, 5xx and 429 are failures.
        .layer(BreakerLayer::new(breaker, HttpClassifier))
        // 4. Bulkhead: Product's own concurrency limit.
        .layer(BulkheadLayer::new(max_concurrency))
        // 5. Attempt timeout: min(timeout_seconds, time left), covering
        //    the body; sent on as the deadline header.
        .layer(AttemptTimeoutLayer::new(per_attempt))
        // 6. Transport: reqwest (connect timeout, pooled connections).
        .service(transport);
    BoxCloneSyncService::new(service)
}

impl Catalog for ProductClient {
    fn price_cents(
        &self,
        product: Uuid,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'_, Result<Option<i64>, CatalogError>> {
        Box::pin(async move {
            Ok(self
                .product(product, deadline)
                .await?
                .map(|p| p.price_cents))
        })
    }
}
