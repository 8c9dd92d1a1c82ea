//! The proxy service: one caller request in, one response out, never a hang.
//!
//! Read top to bottom, a request goes through:
//!
//! 1. routing ([`RouteTable`]) — nothing outside `/api/products*` and
//!    `/api/orders*` is forwarded;
//! 2. checks before anything is sent — framing, header and body caps;
//! 3. header rewriting ([`headers`]) — hop-by-hop out, `X-Forwarded-*` in,
//!    the trace context and the caller's remaining deadline on;
//! 4. the body — empty, buffered (a keyed POST that may be re-sent) or
//!    streamed ([`RequestBody`]);
//! 5. attempts ([`RetryPolicy`]) — each raced against the shared
//!    [`Activity`] timer and the caller's deadline; only connection failures
//!    of replayable requests are retried;
//! 6. the response — hop-by-hop out, body wrapped in a [`ResponseBody`] that
//!    aborts on silence and records the request when it really ends.
//!
//! Every failure is a [`ProxyError`], turned into a response in one place
//! (its `IntoResponse`).

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{body::Body, response::IntoResponse};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, Version, header, request::Parts};
use http_body_util::{BodyExt, Empty, Full};
use shopeasy_resilience::{
    backoff::{Backoff, Jitter},
    budget::{BudgetConfig, RetryBudget},
    deadline::{Deadline, HTTP_HEADER},
    registry::Registry,
};
use shopeasy_runtime::telemetry;
use tokio::time::Instant;
use tracing::Instrument;

use crate::{
    activity::{Activity, BoxError, ClientSide, Ending, RequestBody, ResponseBody},
    error::ProxyError,
    headers,
    observe::{self, RouteMetrics},
    retry::{Decision, Replay, RetryPolicy},
    routes::{NoRoute, RouteTable},
    server::ClientConnection,
    settings::GatewaySettings,
    upstream::{self, Origin, Pooled, UpstreamBody},
};

/// Longest backoff between two retries.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The proxy as a tower service (cheap to clone: one `Arc`).
#[derive(Debug, Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    routes: RouteTable,
    /// Per-route state, in `routes.all()` order.
    lanes: Vec<Lane>,
    activity_timeout: Duration,
    max_header_bytes: u64,
    max_body_bytes: u64,
    max_buffered_body_bytes: u64,
}

impl Proxy {
    /// Builds the proxy and its connection pool from validated settings.
    ///
    /// # Errors
    /// When a route URL cannot be parsed.
    pub fn new(settings: &GatewaySettings) -> anyhow::Result<Self> {
        let routes = RouteTable::new(&settings.routes)?;
        let g = &settings.resilience.gateway;
        let b = &settings.resilience.retry_budget;
        let backoff = Backoff::new(g.retry_backoff_seconds.get(), MAX_BACKOFF, Jitter::Full);
        let mut lanes: Vec<Lane> = Vec::new();
        for route in routes.all() {
            // Routes to the same address share one origin, so one pool.
            let origin = match lanes
                .iter()
                .find(|l| l.origin.authority() == &route.authority)
            {
                Some(lane) => lane.origin.clone(),
                None => Arc::new(Origin::new(
                    route.authority.clone(),
                    g.connect_timeout_seconds.get(),
                    g.pooled_connection_lifetime_seconds.get(),
                )?),
            };
            let budget = RetryBudget::new(BudgetConfig {
                ratio: b.ratio,
                min_retries_per_window: b.min_retries_per_window,
                window: b.window_seconds.get(),
            });
            lanes.push(Lane {
                name: route.name,
                policy: RetryPolicy::new(g.get_retries, backoff, budget),
                metrics: Arc::new(RouteMetrics::new(route.name)),
                origin,
            });
        }
        Ok(Self {
            shared: Arc::new(Shared {
                routes,
                lanes,
                activity_timeout: g.activity_timeout_seconds.get(),
                max_header_bytes: settings.limits.max_header_bytes,
                max_body_bytes: settings.limits.max_body_bytes,
                max_buffered_body_bytes: settings.limits.max_buffered_body_bytes,
            }),
        })
    }

    /// Registers each route's retry budget for `/admin/resilience`.
    pub fn register(&self, registry: &Registry) {
        for lane in &self.shared.lanes {
            registry.budget(lane.name, lane.policy.budget());
        }
    }

    /// Serves one request that came on `connection` (what the listener
    /// calls: no boxing, no request extension per request).
    pub fn serve<B>(
        &self,
        connection: Arc<ClientConnection>,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static + use<B>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let shared = self.shared.clone();
        async move { Ok(shared.handle(Some(&connection), request).await) }
    }
}

/// What the proxy keeps per route.
#[derive(Debug)]
struct Lane {
    name: &'static str,
    /// The route's retry policy and budget.
    policy: RetryPolicy,
    /// Pre-registered metric handles.
    metrics: Arc<RouteMetrics>,
    /// Where its requests go.
    origin: Arc<Origin>,
}

impl<B> tower::Service<Request<B>> for Proxy
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Every request is bounded by the activity timeout; the listener's
        // accept loop is the only queue.
        Poll::Ready(Ok(()))
    }

    /// For embedding: the client connection's details, if any, come from
    /// a [`ClientConnection`] request extension.
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        let connection = request.extensions().get::<ClientConnection>().cloned();
        Box::pin(async move { Ok(shared.handle(connection.as_ref(), request).await) })
    }
}

impl Shared {
    async fn handle<B>(
        &self,
        connection: Option<&ClientConnection>,
        request: Request<B>,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        // One framing note per request, taken first so notes stay in step.
        if connection.is_some_and(|c| c.framing.next_is_ambiguous()) {
            return fail("unmatched", ProxyError::AmbiguousFraming, started);
        }
        let lane = match self.routes.resolve(request.uri().path()) {
            Ok(route) => self.lane(route.name),
            Err(no) => {
                let error = match no {
                    NoRoute::NotFound => ProxyError::NoRoute,
                    NoRoute::DotSegment => ProxyError::DotSegment,
                };
                return fail("unmatched", error, started);
            }
        };
        let span = tracing::info_span!(
            "gateway.request",
            otel.kind = "server",
            route = lane.name,
            http.request.method = %request.method(),
            http.response.status_code = tracing::field::Empty,
            retries = tracing::field::Empty,
        );
        // With no subscriber interested (the usual `warn` level), skip the
        // trace-context work altogether: there is no span to parent or send.
        let traced = !span.is_disabled();
        if traced {
            telemetry::set_parent_from(&span, request.headers());
        }
        // Records the request if the client goes away before the answer.
        let mut waiting = Waiting {
            route: lane.name,
            started,
            armed: true,
        };
        let peer = connection.and_then(|c| c.forwarded_for.clone());
        let result = self
            .forward(lane, peer, request, started, traced)
            .instrument(span.clone())
            .await;
        waiting.armed = false;
        match result {
            Ok(response) => {
                if traced {
                    span.record("http.response.status_code", response.status().as_u16());
                }
                response
            }
            Err(error) => {
                if traced {
                    span.record("http.response.status_code", error.status().as_u16());
                }
                fail(lane.name, error, started)
            }
        }
    }

    async fn forward<B>(
        &self,
        lane: &Lane,
        peer: Option<HeaderValue>,
        request: Request<B>,
        started: Instant,
        traced: bool,
    ) -> Result<Response<Body>, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = request.into_parts();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        headers::check_request(&parts.headers, target.len(), self.max_header_bytes)?;
        let declared = headers::content_length(&parts.headers)?;
        if declared.is_some_and(|n| n > self.max_body_bytes) {
            return Err(ProxyError::BodyTooLarge(self.max_body_bytes));
        }
        // HTTP/1.1: without either header there is no body.
        let has_body = declared.is_some_and(|n| n > 0)
            || parts.headers.contains_key(header::TRANSFER_ENCODING);
        let replay = Replay::of(&parts.method, &parts.headers, has_body);
        let deadline = Deadline::from_headers(&parts.headers);
        prepare_headers(&mut parts, peer, traced);
        parts.version = Version::HTTP_11;

        let activity = Arc::new(Activity::new(self.activity_timeout));
        let client = Arc::new(ClientSide::default());
        let mut outgoing = match replay {
            Replay::Bodiless => Outgoing::Replayable(Bytes::new()),
            Replay::Buffered => {
                Outgoing::Replayable(self.buffer(body, &activity, &client, deadline).await?)
            }
            Replay::Never if !has_body => {
                Outgoing::Once(Empty::new().map_err(|e| match e {}).boxed_unsync())
            }
            Replay::Never => Outgoing::Once(
                RequestBody::new(body, activity.clone(), client.clone(), self.max_body_bytes)
                    .boxed_unsync(),
            ),
        };

        let policy = &lane.policy;
        let metrics = &lane.metrics;
        policy.deposit();
        let mut retries = 0u32;
        let mut previous_delay = Duration::ZERO;
        loop {
            let Some(body) = outgoing.next() else {
                tracing::error!("a streamed request body was about to be sent twice");
                return Err(ProxyError::Internal);
            };
            // A request that can never be re-sent takes the parts themselves.
            let attempt_parts = match outgoing {
                Outgoing::Spent => {
                    let mut spent = std::mem::replace(&mut parts, empty_parts());
                    spent.extensions.clear();
                    spent
                }
                _ => clone_parts(&parts),
            };
            let mut attempt = Request::from_parts(attempt_parts, body);
            if let Some(d) = deadline {
                if d.is_expired() {
                    return Err(ProxyError::DeadlineExceeded);
                }
                d.write_http(attempt.headers_mut());
            }
            let sent = Instant::now();
            activity.touch();
            let result = tokio::select! {
                r = lane.origin.request(attempt) => r,
                () = activity.idle() => {
                    let error = if client.stalled() {
                        ProxyError::ClientStalled
                    } else {
                        ProxyError::ResponseTimeout
                    };
                    metrics.attempt(error.outcome(), sent);
                    return Err(error);
                }
                () = until(deadline) => {
                    metrics.attempt(ProxyError::DeadlineExceeded.outcome(), sent);
                    return Err(ProxyError::DeadlineExceeded);
                }
            };
            let error = match result {
                Ok((response, pooled)) => {
                    metrics.attempt(observe::RESPONSE, sent);
                    if retries > 0 {
                        observe::retry("success_after_retry");
                        tracing::Span::current().record("retries", retries);
                    }
                    return Ok(respond(
                        response,
                        pooled,
                        metrics.clone(),
                        activity,
                        started,
                    ));
                }
                Err(e) => {
                    let error = if client.too_large() {
                        ProxyError::BodyTooLarge(self.max_body_bytes)
                    } else if client.failed() {
                        ProxyError::ClientBody
                    } else {
                        upstream::classify(&e)
                    };
                    tracing::debug!(
                        error = %upstream::error_chain(&e),
                        retries,
                        "attempt to {} failed",
                        lane.name
                    );
                    metrics.attempt(error.outcome(), sent);
                    error
                }
            };
            let remaining = deadline.map(Deadline::remaining);
            let decision = policy.decide(
                replay,
                error,
                retries,
                previous_delay,
                remaining,
                &mut rand::rng(),
            );
            match decision {
                Decision::Retry(delay) => {
                    observe::retry("retried");
                    tokio::time::sleep(delay).await;
                    retries += 1;
                    previous_delay = delay;
                }
                Decision::GiveUp(why) => {
                    if let Some(why) = why {
                        observe::retry(why);
                    }
                    return Err(error);
                }
            }
        }
    }

    /// Reads a body that may have to be sent more than once, under the
    /// activity timer (a stalled client gets 408) and the buffered cap.
    async fn buffer<B>(
        &self,
        body: B,
        activity: &Arc<Activity>,
        client: &Arc<ClientSide>,
        deadline: Option<Deadline>,
    ) -> Result<Bytes, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let limit = self.max_buffered_body_bytes;
        let body = RequestBody::new(body, activity.clone(), client.clone(), limit);
        tokio::select! {
            collected = body.collect() => match collected {
                Ok(c) => Ok(c.to_bytes()),
                Err(_) if client.too_large() => Err(ProxyError::BodyTooLarge(limit)),
                Err(_) => Err(ProxyError::ClientBody),
            },
            () = activity.idle() => Err(ProxyError::ClientStalled),
            () = until(deadline) => Err(ProxyError::DeadlineExceeded),
        }
    }

    fn lane(&self, route: &str) -> &Lane {
        self.lanes
            .iter()
            .find(|l| l.name == route)
            .unwrap_or(&self.lanes[0])
    }
}

/// Records a request whose client went away before it was answered (hyper
/// drops the handler's future; that drop also cancels the upstream request).
struct Waiting {
    route: &'static str,
    started: Instant,
    armed: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed {
            // 499, as nginx logs it: the client closed the request.
            let status = http::StatusCode::from_u16(499).unwrap_or(http::StatusCode::BAD_REQUEST);
            observe::request(self.route, status, "client_gone", self.started);
        }
    }
}

/// The body of the next attempt.
enum Outgoing {
    /// May be sent any number of times.
    Replayable(Bytes),
    /// Sent once; `None` after.
    Once(UpstreamBody),
    Spent,
}

impl Outgoing {
    fn next(&mut self) -> Option<UpstreamBody> {
        match std::mem::replace(self, Self::Spent) {
            Self::Replayable(bytes) => {
                let body = Full::new(bytes.clone())
                    .map_err(|e| match e {})
                    .boxed_unsync();
                *self = Self::Replayable(bytes);
                Some(body)
            }
            Self::Once(body) => Some(body),
            Self::Spent => None,
        }
    }
}

/// Rewrites the caller's headers for the service.
fn prepare_headers(parts: &mut Parts, peer: Option<HeaderValue>, traced: bool) {
    let host = parts.headers.get(header::HOST).cloned().or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    headers::strip_hop_by_hop(&mut parts.headers);
    headers::set_forwarded(&mut parts.headers, peer, host);
    // The caller's deadline is re-written per attempt with what remains.
    parts.headers.remove(HTTP_HEADER);
    if traced {
        telemetry::inject_current(&mut parts.headers);
    }
}

fn empty_parts() -> Parts {
    Request::new(()).into_parts().0
}

fn clone_parts(parts: &Parts) -> Parts {
    let mut clone = empty_parts();
    clone.method = parts.method.clone();
    clone.uri = parts.uri.clone();
    clone.version = parts.version;
    clone.headers = parts.headers.clone();
    clone
}

/// Resolves at the caller's deadline, or never.
async fn until(deadline: Option<Deadline>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.instant()).await,
        None => std::future::pending().await,
    }
}

/// The service's response, on its way back.
fn respond(
    response: Response<hyper::body::Incoming>,
    pooled: Pooled,
    metrics: Arc<RouteMetrics>,
    activity: Arc<Activity>,
    started: Instant,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    parts.extensions = http::Extensions::new();
    let status = parts.status;
    let body = ResponseBody::new(body, activity, move |ending| {
        // Only a connection whose response was read to the end can carry
        // another request; any other ending closes it.
        if ending == Ending::Completed {
            pooled.release();
        }
        metrics.request(status, ending.outcome(), started);
    });
    Response::from_parts(parts, Body::new(body))
}

/// A gateway-made error response, recorded.
fn fail(route: &'static str, error: ProxyError, started: Instant) -> Response<Body> {
    observe::request(route, error.status(), error.outcome(), started);
    error.into_response()
}
