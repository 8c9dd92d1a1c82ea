//! The tower layer that puts an [`Admission`] in front of an
//! `http::Request` → `http::Response` service (an axum router, a tonic
//! server's routes), and the refusal writers.
//!
//! Backpressure: `poll_ready` is always ready and never reserves anything;
//! the gate is in the response future, so a full service answers each
//! excess request with its refusal instead of parking the connection in
//! `poll_ready`. The inner service is cloned per request (tower's
//! clone-and-call pattern) and driven to readiness inside the future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(feature = "grpc")]
use http::HeaderValue;
use http::Response;
use tower::{Layer, Service, ServiceExt};

use super::{Admission, Refusal};
use crate::deadline::HasDeadline;

/// How a listener writes a [`Refusal`] in its protocol. The runtime
/// supplies the HTTP one (a 503 problem+json); [`GrpcRefusal`] is gRPC's.
pub trait RefusalResponse<B>: Clone + Send + Sync + 'static {
    /// The response for `refusal`.
    fn respond(&self, refusal: &Refusal) -> Response<B>;
}

/// gRPC's refusal: a trailers-only response (HTTP 200, no body) with
/// `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a `grpc-message` and
/// `grpc-retry-pushback-ms` (which callers honour as their backoff, see
/// [`retry`](crate::retry)).
#[cfg(feature = "grpc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcRefusal;

#[cfg(feature = "grpc")]
impl<B: Default> RefusalResponse<B> for GrpcRefusal {
    fn respond(&self, refusal: &Refusal) -> Response<B> {
        let mut response = Response::new(B::default());
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", HeaderValue::from_static("8"));
        // ASCII without `%`, so no percent-encoding is needed.
        let message = format!("overloaded: {}", refusal.detail());
        if let Ok(v) = HeaderValue::try_from(message) {
            headers.insert("grpc-message", v);
        }
        let ms = u64::try_from(refusal.retry_after.as_millis()).unwrap_or(u64::MAX);
        headers.insert(
            crate::retry::GRPC_PUSHBACK_HEADER,
            HeaderValue::from(ms.max(1)),
        );
        response
    }
}

/// Applies an [`Admission`] to every request, refusing with `R`.
#[derive(Debug, Clone)]
pub struct AdmissionLayer<R> {
    admission: Admission,
    refusal: R,
    bypass: &'static [&'static str],
}

impl<R> AdmissionLayer<R> {
    /// Every request passes `admission`; refusals are written by `refusal`.
    pub fn new(admission: Admission, refusal: R) -> Self {
        Self {
            admission,
            refusal,
            bypass: &[],
        }
    }

    /// Requests whose path starts with one of `prefixes` skip the gate (a
    /// health service on the public port must answer under overload).
    #[must_use]
    pub fn bypass(mut self, prefixes: &'static [&'static str]) -> Self {
        self.bypass = prefixes;
        self
    }

    /// The admission it applies.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }
}

impl<S, R: Clone> Layer<S> for AdmissionLayer<R> {
    type Service = AdmissionService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionService {
            inner,
            layer: self.clone(),
        }
    }
}

/// [`AdmissionLayer`]'s service.
#[derive(Debug, Clone)]
pub struct AdmissionService<S, R> {
    inner: S,
    layer: AdmissionLayer<R>,
}

impl<S, R, B, ResB> Service<http::Request<B>> for AdmissionService<S, R>
where
    S: Service<http::Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    ResB: Send + 'static,
    R: RefusalResponse<ResB>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The clone is the one that was polled ready by nobody: drive the
        // original's readiness in the future (clone-and-swap keeps a ready
        // service ready for the next call).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let path = req.uri().path();
        if self.layer.bypass.iter().any(|p| path.starts_with(p)) {
            return Box::pin(inner.oneshot(req));
        }
        let admission = self.layer.admission.clone();
        let refusal = self.layer.refusal.clone();
        let deadline = req.deadline();
        Box::pin(async move {
            match admission.acquire(deadline).await {
                Ok(permit) => {
                    let response = inner.oneshot(req).await;
                    match &response {
                        // With the headers: a gRPC refusal is an HTTP 200.
                        Ok(r) => permit.answered_head(r.status(), r.headers()),
                        Err(_) => permit.complete(),
                    }
                    response
                }
                Err(refused) => Ok(refusal.respond(&refused)),
            }
        })
    }
}
