//! Server metrics and spans for every gRPC call, as a tower layer around the
//! whole tonic router (so health, reflection and calls tonic itself rejects
//! are counted too):
//!
//! - `shopeasy_grpc_server_requests_total{method,code}`;
//! - `shopeasy_grpc_server_request_duration_seconds{method,code}`;
//! - a `grpc.server` span whose parent is the caller's `traceparent`.
//!
//! `method` is `package.Service/Method` for the methods this server has;
//! anything else is `unknown`, so a client cannot grow the label set: a
//! path outside the services below, and any call answered `Unimplemented`
//! (a made-up method of a known service, `/…InventoryService/x1`, `/x2`, …,
//! has a known prefix; the code is what says the method does not exist);
//! `code` is the status code's name as gRPC libraries print it (`Ok`,
//! `InvalidArgument`, `DeadlineExceeded`, …). A unary error comes back in the
//! response headers (trailers-only); a response without `grpc-status` in its
//! headers is a unary success and counts as `Ok`.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::time::Instant;
use tower::{Layer, Service};
use tracing::Instrument;

/// Services whose methods are named in the `method` label.
const KNOWN_SERVICES: &[&str] = &[
    "shopeasy.inventory.v1.InventoryService/",
    "grpc.health.v1.Health/",
    "grpc.reflection.v1.ServerReflection/",
    "grpc.reflection.v1alpha.ServerReflection/",
];

/// Adds [`ObserveGrpc`] to a service.
#[derive(Debug, Clone, Copy, Default)]
pub struct ObserveGrpcLayer;

impl<S> Layer<S> for ObserveGrpcLayer {
    type Service = ObserveGrpc<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ObserveGrpc { inner }
    }
}

/// Records the metrics and span of the module docs around `inner`.
#[derive(Debug, Clone)]
pub struct ObserveGrpc<S> {
    inner: S,
}

impl<S, B, R> Service<http::Request<B>> for ObserveGrpc<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path().trim_start_matches('/');
        let method = if KNOWN_SERVICES.iter().any(|s| path.starts_with(s)) {
            path.to_owned()
        } else {
            "unknown".to_owned()
        };
        let span = tracing::info_span!(
            "grpc.server",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
            deadline_left_ms = tracing::field::Empty,
        );
        shopeasy_runtime::telemetry::set_parent_from(&span, request.headers());
        // The deadline that travels, as this hop got it (the console draws it).
        if let Some(d) = shopeasy_resilience::deadline::Deadline::from_headers(request.headers()) {
            span.record(
                "deadline_left_ms",
                u64::try_from(d.remaining().as_millis()).unwrap_or(u64::MAX),
            );
        }
        let started = Instant::now();
        let response = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(async move {
            let result = response.instrument(span.clone()).await;
            let code = match &result {
                Ok(response) => code_of(response.headers()),
                Err(_) => tonic::Code::Unknown,
            };
            span.record("rpc.grpc.status_code", code as i32);
            // A method this server does not have: its path is the client's.
            let method = if code == tonic::Code::Unimplemented {
                "unknown".to_owned()
            } else {
                method
            };
            let labels = [("method", method), ("code", format!("{code:?}"))];
            metrics::counter!("shopeasy_grpc_server_requests_total", &labels).increment(1);
            metrics::histogram!("shopeasy_grpc_server_request_duration_seconds", &labels)
                .record(started.elapsed().as_secs_f64());
            result
        })
    }
}

/// The status of a response from its headers: trailers-only responses
/// (every unary error) carry `grpc-status` there.
fn code_of(headers: &http::HeaderMap) -> tonic::Code {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(tonic::Code::Ok, tonic::Code::from_i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_comes_from_the_headers_or_is_ok() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(code_of(&headers), tonic::Code::Ok);
        headers.insert("grpc-status", http::HeaderValue::from_static("4"));
        assert_eq!(code_of(&headers), tonic::Code::DeadlineExceeded);
        assert_eq!(format!("{:?}", code_of(&headers)), "DeadlineExceeded");
    }
}
