//! The Product client (SPEC §5): `GET /api/products/{id}` over HTTP behind
//! the edge stack of `shopeasy_resilience::edge`, exposed as the
//! [`Catalog`] port. The
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
    breaker::{BreakerHandle, HttpClassifier},
    budget::RetryBudget,
    deadline::{Deadline, HasDeadline},
    edge::{EdgeClient, EdgeConfig, EdgeError},
    error::{BoxError, find},
    outcome::Outcome,
    retry::HttpRetryPolicy,
    throttle::{ThrottleConfig, ThrottleHandle},
};
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

/// The Product client. Cheap to clone.
#[derive(Clone)]
pub struct ProductClient {
    base: String,
    edge: EdgeClient<http::Request<()>, http::Response<Bytes>>,
}

impl fmt::Debug for ProductClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProductClient")
            .field("base", &self.base)
            .field("breaker", &self.edge.breaker().state())
            .finish_non_exhaustive()
    }
}

impl ProductClient {
    /// A client of the Product service at `url`, behind the edge stack of
    /// `shopeasy_resilience::edge`: retries connection failures, 502/503/504
    /// and 429 (no earlier than `Retry-After`), never other 4xx or a
    /// timeout; errors, 5xx and 429 count against the breaker; each
    /// attempt's timeout covers the body and is sent on as the deadline
    /// header.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(url: &str, edge: &EdgeSettings, budget: RetryBudget) -> anyhow::Result<Self> {
        Self::with_throttle(url, edge, budget, ThrottleConfig::default())
    }

    /// As [`Self::new`], its client-side throttle configured by `throttle`
    /// (`resilience.throttle.*`): while the callee refuses calls for
    /// overload, the excess is refused here without being sent.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_throttle(
        url: &str,
        edge: &EdgeSettings,
        budget: RetryBudget,
        throttle: ThrottleConfig,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(edge.connect_timeout_seconds.get())
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            edge: EdgeClient::new(
                &EdgeConfig {
                    throttle,
                    ..edge.config(TARGET)
                },
                budget,
                HttpRetryPolicy::new().with_connection_error(is_connection_failure),
                HttpClassifier,
                Transport { client },
            ),
        })
    }

    /// The breaker.
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
        let response = self
            .edge
            .call(request, |r| {
                if r.status().is_success() || r.status() == StatusCode::NOT_FOUND {
                    Outcome::Ok
                } else {
                    Outcome::ErrorStatus
                }
            })
            .await
            .map_err(|e| match e {
                EdgeError::DeadlineExceeded => CatalogError::DeadlineExceeded,
                failed @ EdgeError::Failed { .. } => CatalogError::Unavailable(failed.to_string()),
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
