//! The proxy: one caller request in, one response out, never a hang.
//!
//! [`Shared::handle`] routes the request and records how it ended;
//! [`Shared::forward`] reads as its phases, one small function each:
//!
//! 1. **admit** ([`Shared::admit`]) — checks before anything is sent:
//!    framing and route (in `handle`), the method (RFC 9110's set only, and
//!    the route's own if it serves one), header and body caps, then
//!    **authentication** on a route that needs a customer (the bearer
//!    token verified; 401 without contacting the service), the client's
//!    rate limit (429; by customer once authenticated, with a placement
//!    budget of its own), the route's
//!    in-flight cap (503), whose slot the exchange holds until its response
//!    body ends;
//! 2. **prepare the head** ([`prepare_head`]) — hop-by-hop out,
//!    `X-Forwarded-*` in, the trace context on; the caller's remaining
//!    deadline is written per attempt, as the request goes on the wire;
//! 3. **prepare the body** ([`Shared::request_body`]) — empty, buffered (a
//!    keyed POST that may be re-sent) or streamed, as [`Replay`] says,
//!    under the activity timer and the whole-body deadline; then the
//!    listener's **admission control** ([`Shared::admission`];
//!    `shopeasy_resilience::admission`, 503 `overloaded`: an adaptive
//!    limit with a short deadline-aware queue, its permit completed when
//!    response headers arrive), after a buffered body is in, so that a
//!    client trickling its body holds a route slot but no admission
//!    permit, and the limit learns the service's time, not the upload's;
//! 4. **send with retries** ([`Shared::send_with_retries`]) — each
//!    [`Shared::attempt`] races the shared [`Activity`] timer and the
//!    caller's deadline; [`Retries`] asks the retry decision, counts it and
//!    sleeps the backoff (only connection failures of replayable requests
//!    are retried);
//! 5. **relay the response** ([`relay`]) — hop-by-hop out, body wrapped in a
//!    [`ResponseBody`] that aborts on silence and records the request when
//!    it really ends.
//!
//! Every failure is a [`ProxyError`], turned into a response in one place
//! (its `IntoResponse`). The phases are plain `async fn`s awaited in line:
//! no boxed future and no allocation beyond the exchange's two shared
//! cells and what hyper needs.

use std::{
    convert::Infallible,
    future::Future,
    sync::{Arc, OnceLock},
    time::Duration,
};

use axum::{body::Body, response::IntoResponse};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, Version, header, request::Parts};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use shopeasy_resilience::{
    admission::{Admission, Permit},
    backoff::{Backoff, Jitter},
    budget::RetryBudget,
    deadline::{Deadline, HTTP_HEADER},
    registry::Registry,
};
use shopeasy_runtime::telemetry;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tracing::Instrument;

use crate::{
    activity::{Activity, BoxError, ClientSide, Ending, RequestBody, ResponseBody},
    error::ProxyError,
    error::{RATELIMIT, RATELIMIT_POLICY},
    headers,
    observe::{self, RouteMetrics},
    ratelimit::{ClientKey, RateLimiter, Verdict},
    retry::{self, Replay, Retries, RetryPolicy},
    routes::{Access, NoRoute, Route, RouteTable},
    server::ClientConnection,
    settings::GatewaySettings,
    storefront,
    upstream::{self, Origin, Pooled, UpstreamBody, UpstreamError},
};

/// Longest backoff between two retries.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The proxy, as the listener calls it (cheap to clone: one `Arc`).
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    routes: RouteTable,
    /// Per-route state, in `routes.all()` order.
    lanes: Vec<Lane>,
    activity_timeout: Duration,
    /// How long a whole request body may take.
    body_timeout: Duration,
    max_header_bytes: u64,
    max_body_bytes: u64,
    max_buffered_body_bytes: u64,
    /// Per-client token buckets (by address, or by customer).
    limiter: RateLimiter,
    /// Per-customer placement buckets (`POST /api/orders`).
    placements: RateLimiter,
    /// Checks the bearer token of routes that need a customer.
    verifier: shopeasy_identity::Verifier,
    /// The public listener's admission control, set once when serving
    /// starts (the lifecycle lends it to `serve`, after `build`); unset when
    /// `admission.enabled` is false.
    admission: OnceLock<Admission>,
}

impl Proxy {
    /// Builds the proxy and its connection pool from validated settings.
    ///
    /// # Errors
    /// When a route URL cannot be parsed, or the `auth` settings give no
    /// usable verifier (validation rejects those first).
    pub(crate) fn new(settings: &GatewaySettings) -> anyhow::Result<Self> {
        let routes = RouteTable::new(&settings.routes)?;
        let verifier = shopeasy_identity::Verifier::from_settings(&settings.auth)
            .map_err(|e| anyhow::anyhow!("auth: {e}"))?;
        let g = &settings.resilience.gateway;
        let l = &settings.limits;
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
                    settings.limits.max_upstream_connections_per_origin,
                )?),
            };
            let budget = RetryBudget::new(settings.resilience.budget());
            lanes.push(Lane {
                name: route.name,
                route: route.clone(),
                only: route.only,
                policy: RetryPolicy::new(g.get_retries, backoff, budget),
                metrics: Arc::new(RouteMetrics::new(route.name)),
                origin,
                in_flight: Arc::new(Semaphore::new(
                    usize::try_from(l.max_in_flight_per_route).unwrap_or(usize::MAX),
                )),
                max_in_flight: l.max_in_flight_per_route,
            });
        }
        Ok(Self {
            shared: Arc::new(Shared {
                routes,
                lanes,
                activity_timeout: g.activity_timeout_seconds.get(),
                body_timeout: l.request_body_timeout_seconds.get(),
                max_header_bytes: l.max_header_bytes,
                max_body_bytes: l.max_body_bytes,
                max_buffered_body_bytes: l.max_buffered_body_bytes,
                limiter: RateLimiter::new(
                    l.client_requests_per_second,
                    l.client_burst,
                    l.max_tracked_clients,
                ),
                placements: RateLimiter::per_minute(
                    l.customer_orders_per_minute,
                    l.customer_order_burst,
                    l.max_tracked_clients,
                ),
                verifier,
                admission: OnceLock::new(),
            }),
        })
    }

    /// Puts the listener's admission control in the admit phase (the
    /// lifecycle reports it on `/admin/resilience` as `admission`).
    pub(crate) fn admit_with(&self, admission: Option<Admission>) {
        if let Some(admission) = admission {
            let _ = self.shared.admission.set(admission);
        }
    }

    /// Fetches the verifier's keys in the background (a JWKS; a fixed key
    /// needs nothing), so the first order request does not wait for them;
    /// a failure is logged and the first token fetches again.
    pub(crate) fn warm_up(&self) {
        let verifier = self.shared.verifier.clone();
        tokio::spawn(async move {
            if let Err(e) = verifier.warm_up().await {
                tracing::warn!(error = %e, "could not fetch the token signing keys at start-up");
            }
        });
    }

    /// Registers each route's retry budget for `/admin/resilience`.
    pub(crate) fn register(&self, registry: &Registry) {
        for lane in &self.shared.lanes {
            registry.budget(lane.name, lane.policy.budget());
        }
    }

    /// Serves one request that came on `connection` (what the listener
    /// calls: no boxing, no request extension per request).
    pub(crate) fn serve<B>(
        &self,
        connection: Arc<ClientConnection>,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static + use<B>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let shared = self.shared.clone();
        async move { Ok(shared.handle(&connection, request).await) }
    }
}

/// What the proxy keeps per route.
#[derive(Debug)]
struct Lane {
    name: &'static str,
    /// Its entry in the route table: who may call it, and how.
    route: Route,
    /// The methods it serves, if not all.
    only: Option<crate::routes::Methods>,
    /// The route's retry policy and budget.
    policy: RetryPolicy,
    /// Pre-registered metric handles.
    metrics: Arc<RouteMetrics>,
    /// Where its requests go.
    origin: Arc<Origin>,
    /// One permit per request in flight on the route.
    in_flight: Arc<Semaphore>,
    max_in_flight: u32,
}

/// What admission gives an exchange to keep.
struct Admitted {
    has_body: bool,
    /// The route's in-flight slot, held until the response body ends.
    slot: OwnedSemaphorePermit,
    /// The client's rate limit after this request, for its `RateLimit`.
    rate: Verdict,
    /// The customer's placement limit, for a placement.
    placement: Option<Verdict>,
    /// The admission slot, taken once the body is ready
    /// ([`Shared::admission`]), completed when response headers arrive.
    permit: Option<Permit>,
}

impl Shared {
    async fn handle<B>(&self, connection: &ClientConnection, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        let lane = match self.route(connection, request.uri().path()) {
            Ok(lane) => lane,
            // No API route: the storefront's pages, or 404.
            Err(ProxyError::NoRoute) => {
                let (method, path) = (request.method(), request.uri().path());
                return storefront::serve(method, path, request.headers())
                    .unwrap_or_else(|| fail("unmatched", ProxyError::NoRoute, started));
            }
            Err(error) => return fail("unmatched", error, started),
        };
        let span = request_span(lane.name, telemetry::method_label(request.method()));
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
        let result = self
            .forward(lane, connection, request, started, traced)
            .instrument(span.clone())
            .await;
        waiting.armed = false;
        let status = match &result {
            Ok(response) => response.status(),
            Err(error) => error.status(),
        };
        if traced {
            span.record("http.response.status_code", status.as_u16());
        }
        result.unwrap_or_else(|error| fail(lane.name, error, started))
    }

    /// The route's lane, after the connection's framing note for this
    /// request (taken first, so notes stay in step with requests).
    fn route(&self, connection: &ClientConnection, path: &str) -> Result<&Lane, ProxyError> {
        if connection.framing.next_is_ambiguous() {
            return Err(ProxyError::AmbiguousFraming);
        }
        match self.routes.resolve(path) {
            Ok(route) => Ok(self.lane(route.name)),
            Err(NoRoute::NotFound) => Err(ProxyError::NoRoute),
            Err(NoRoute::DotSegment) => Err(ProxyError::DotSegment),
        }
    }

    /// One routed exchange, phase by phase (see the module docs).
    async fn forward<B>(
        &self,
        lane: &Lane,
        connection: &ClientConnection,
        request: Request<B>,
        started: Instant,
        traced: bool,
    ) -> Result<Response<Body>, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = request.into_parts();
        let deadline = Deadline::from_headers(&parts.headers);
        // The deadline that travels, as this hop got it (the console draws it).
        if let Some(d) = deadline {
            tracing::Span::current().record(
                "deadline_left_ms",
                u64::try_from(d.remaining().as_millis()).unwrap_or(u64::MAX),
            );
        }
        let mut admitted = self.admit(lane, connection.client, &parts).await?;
        let has_body = admitted.has_body;
        prepare_head(&mut parts, connection.forwarded_for.clone(), traced);
        // Classified on the head as the service gets it: an
        // `Idempotency-Key` named in `Connection` is stripped above, and a
        // POST sent without its key must never be sent twice.
        let replay = Replay::of(&parts.method, &parts.headers, has_body);
        let exchange = Exchange::new(self.activity_timeout, started + self.body_timeout);
        let body = self
            .request_body(body, replay, has_body, &exchange, deadline)
            .await?;
        admitted.permit = self.admission(deadline).await?;
        let mut outbound = Outbound { parts, body };
        let (response, pooled) = self
            .send_with_retries(lane, &mut outbound, replay, &exchange, deadline)
            .await?;
        // As the admission layer does: served once headers are in, unless
        // the answer is a refusal further on (a 503 or 429 is no service
        // time); a failed or cancelled exchange drops its permit and
        // teaches nothing.
        if let Some(permit) = admitted.permit.take() {
            permit.answered(response.status());
        }
        let mut response = relay(
            response,
            pooled,
            admitted.slot,
            lane.metrics.clone(),
            exchange.activity,
            started,
        );
        let headers = response.headers_mut();
        match admitted.placement {
            None => {
                headers.insert(RATELIMIT_POLICY, self.limiter.policy().clone());
                headers.insert(RATELIMIT, admitted.rate.header());
            }
            placement => {
                let (policy, current) = admitted.rate.fields(placement);
                headers.insert(RATELIMIT_POLICY, policy);
                headers.insert(RATELIMIT, current);
            }
        }
        Ok(response)
    }

    /// Phase 1: the method, the header and body caps, the caller's token
    /// where the route needs a customer, then the client's rate limit and
    /// the route's in-flight cap (refusals that cost nothing downstream, and
    /// never take a place in the admission queue). Says whether the request
    /// has a body (HTTP/1.1: without `Content-Length` or `Transfer-Encoding`
    /// it has none).
    ///
    /// Authentication comes before the rate limit so that a signed-in
    /// customer's budget is theirs wherever they connect from, and a
    /// placement takes from the customer's own placement bucket too.
    async fn admit(
        &self,
        lane: &Lane,
        client: ClientKey,
        parts: &Parts,
    ) -> Result<Admitted, ProxyError> {
        if !observe::is_standard_method(&parts.method) {
            return Err(ProxyError::MethodNotAllowed);
        }
        if let Some(only) = lane.only
            && !only.allows(&parts.method)
        {
            return Err(ProxyError::WrongMethod {
                allow: only.allow(),
            });
        }
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        headers::check_request(&parts.headers, target.len(), self.max_header_bytes)?;
        let declared = headers::content_length(&parts.headers)?;
        if declared.is_some_and(|n| n > self.max_body_bytes) {
            return Err(ProxyError::BodyTooLarge(self.max_body_bytes));
        }
        let has_body = declared.is_some_and(|n| n > 0)
            || parts.headers.contains_key(header::TRANSFER_ENCODING);
        let (client, placing) = match lane.route.access_for(&parts.method, parts.uri.path()) {
            Access::Anonymous => (client, false),
            Access::Customer => (
                self.authenticate(client, &parts.headers).await?,
                parts.method == http::Method::POST && parts.uri.path() == "/api/orders",
            ),
        };
        let rate = self.limiter.check(client);
        if !rate.allowed {
            return Err(ProxyError::RateLimited(rate));
        }
        let placement = if placing {
            let verdict = self.placements.check(client);
            if !verdict.allowed {
                return Err(ProxyError::RateLimited(verdict));
            }
            Some(verdict)
        } else {
            None
        };
        let slot =
            lane.in_flight
                .clone()
                .try_acquire_owned()
                .map_err(|_| ProxyError::Overloaded {
                    route: lane.name,
                    limit: lane.max_in_flight,
                })?;
        Ok(Admitted {
            has_body,
            slot,
            rate,
            placement,
            permit: None,
        })
    }

    /// The listener's admission control, once the body is ready to send:
    /// a permit, a wait in its short queue, or the 503 `overloaded`.
    ///
    /// After the body, not in phase 1: a buffered body is read in full
    /// first, and a client that trickles it (up to the whole-body deadline)
    /// then holds only its route's slot, not one of the few admission
    /// permits every route shares, and adds no upload time to the latency
    /// the limit learns from. A streamed body is sent as it comes, so its
    /// exchange still holds the permit while the client uploads.
    async fn admission(&self, deadline: Option<Deadline>) -> Result<Option<Permit>, ProxyError> {
        match self.admission.get() {
            Some(admission) => admission
                .acquire(deadline)
                .await
                .map(Some)
                .map_err(ProxyError::Shed),
            None => Ok(None),
        }
    }

    /// The authentication step of phase 1: the bearer token verified (the
    /// same checks the order service makes again), and the rate-limit key
    /// of its customer. The `Authorization` header itself is left in place
    /// and forwarded unchanged.
    ///
    /// A refused token is charged to `address`'s (the connection's) bucket,
    /// so that trying forged or guessed tokens is rate-limited like any
    /// anonymous traffic: over it, the answer is the 429 instead of the 401.
    async fn authenticate(
        &self,
        address: ClientKey,
        headers: &http::HeaderMap,
    ) -> Result<ClientKey, ProxyError> {
        match self.verifier.authenticate(headers).await {
            Ok(claims) => Ok(ClientKey::of_customer(claims.customer_id())),
            Err(error) => {
                tracing::debug!(%error, "bearer token refused");
                let rate = self.limiter.check(address);
                if !rate.allowed {
                    return Err(ProxyError::RateLimited(rate));
                }
                Err(ProxyError::Unauthenticated(error))
            }
        }
    }

    /// Phase 3: the body every attempt sends, as `replay` says.
    async fn request_body<B>(
        &self,
        body: B,
        replay: Replay,
        has_body: bool,
        exchange: &Exchange,
        deadline: Option<Deadline>,
    ) -> Result<Outgoing, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        Ok(match replay {
            Replay::Bodiless => Outgoing::Replayable(Bytes::new()),
            Replay::Buffered => Outgoing::Replayable(self.buffer(body, exchange, deadline).await?),
            Replay::Never if !has_body => {
                Outgoing::Once(Empty::new().map_err(|e| match e {}).boxed_unsync())
            }
            Replay::Never => Outgoing::Once(
                RequestBody::new(
                    body,
                    exchange.activity.clone(),
                    exchange.client.clone(),
                    self.max_body_bytes,
                    exchange.body_deadline,
                )
                .boxed_unsync(),
            ),
        })
    }

    /// Reads a body that may have to be sent more than once, under the
    /// activity timer (a stalled client gets 408) and the buffered cap.
    async fn buffer<B>(
        &self,
        body: B,
        exchange: &Exchange,
        deadline: Option<Deadline>,
    ) -> Result<Bytes, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let limit = self.max_buffered_body_bytes;
        let client = &exchange.client;
        let body = RequestBody::new(
            body,
            exchange.activity.clone(),
            client.clone(),
            limit,
            exchange.body_deadline,
        );
        tokio::select! {
            collected = body.collect() => match collected {
                Ok(c) => Ok(c.to_bytes()),
                Err(_) if client.too_large() => Err(ProxyError::BodyTooLarge(limit)),
                Err(_) if client.late() => Err(self.body_late()),
                Err(_) => Err(ProxyError::ClientBody),
            },
            () = exchange.activity.idle() => Err(ProxyError::ClientStalled),
            () = until(deadline) => Err(ProxyError::DeadlineExceeded),
        }
    }

    /// Phase 4: attempts until one gets response headers or the retry
    /// decision gives up.
    async fn send_with_retries(
        &self,
        lane: &Lane,
        outbound: &mut Outbound,
        replay: Replay,
        exchange: &Exchange,
        deadline: Option<Deadline>,
    ) -> Result<(Response<Incoming>, Pooled), ProxyError> {
        let mut retries = Retries::start(&lane.policy, replay);
        // An earlier attempt whose connection closed after the request was
        // sent: the service may have acted on it.
        let mut maybe_done = None;
        loop {
            let request = outbound.next(deadline)?;
            match self
                .attempt(lane, request, exchange, deadline, retries.made())
                .await
            {
                Ok(answer) => {
                    retries.succeeded();
                    if let Some(earlier) = maybe_done
                        && retry::refuses(answer.0.status())
                    {
                        // A refusal (503, 429) says "nothing was done" for
                        // the attempt it answers, not for the request: the
                        // keyed POST before it may have placed the order.
                        // The caller is told the outcome is unknown (502)
                        // and retries with the same key, which replays.
                        return Err(earlier);
                    }
                    return Ok(answer);
                }
                Err(error) => {
                    if error.may_have_reached_the_service() {
                        maybe_done = Some(error);
                    }
                    retries.after_failure(error, deadline).await?;
                }
            }
        }
    }

    /// One attempt, up to the response headers, raced against the activity
    /// timer and the caller's deadline, and recorded.
    async fn attempt(
        &self,
        lane: &Lane,
        request: Request<UpstreamBody>,
        exchange: &Exchange,
        deadline: Option<Deadline>,
        retries: u32,
    ) -> Result<(Response<Incoming>, Pooled), ProxyError> {
        let sent = Instant::now();
        exchange.activity.touch();
        let result = tokio::select! {
            r = lane.origin.request(request, deadline) => {
                r.map_err(|e| self.attempt_failed(lane, &e, &exchange.client, retries))
            }
            () = exchange.activity.idle() => Err(exchange.silence()),
            () = until(deadline) => Err(ProxyError::DeadlineExceeded),
        };
        let outcome = match &result {
            Ok(_) => observe::RESPONSE,
            Err(error) => error.outcome(),
        };
        lane.metrics.attempt(outcome, sent);
        result
    }

    /// What a failed attempt tells the caller: the client's own body is
    /// blamed first (it is why the upstream request failed), then the
    /// transport.
    fn attempt_failed(
        &self,
        lane: &Lane,
        error: &UpstreamError,
        client: &ClientSide,
        retries: u32,
    ) -> ProxyError {
        tracing::debug!(
            error = %upstream::error_chain(error),
            retries,
            "attempt to {} failed",
            lane.name
        );
        if client.too_large() {
            ProxyError::BodyTooLarge(self.max_body_bytes)
        } else if client.late() {
            self.body_late()
        } else if client.failed() {
            ProxyError::ClientBody
        } else {
            upstream::classify(error)
        }
    }

    fn body_late(&self) -> ProxyError {
        ProxyError::BodyTimeout(u64::try_from(self.body_timeout.as_millis()).unwrap_or(u64::MAX))
    }

    fn lane(&self, route: &str) -> &Lane {
        self.lanes
            .iter()
            .find(|l| l.name == route)
            .unwrap_or(&self.lanes[0])
    }
}

/// The `gateway.request` span of one routed request.
fn request_span(route: &'static str, method: &str) -> tracing::Span {
    tracing::info_span!(
        "gateway.request",
        otel.kind = "server",
        route,
        http.request.method = method,
        http.response.status_code = tracing::field::Empty,
        retries = tracing::field::Empty,
        deadline_left_ms = tracing::field::Empty,
    )
}

/// What one exchange shares between its phases and its body wrappers: the
/// idle clock, the request body's deadline and what the client side is
/// doing.
struct Exchange {
    activity: Arc<Activity>,
    client: Arc<ClientSide>,
    body_deadline: Instant,
}

impl Exchange {
    fn new(timeout: Duration, body_deadline: Instant) -> Self {
        Self {
            activity: Arc::new(Activity::new(timeout)),
            client: Arc::new(ClientSide::default()),
            body_deadline,
        }
    }

    /// Who is to blame when the activity timer fires before response
    /// headers: the client if it is stalling its body (408), else the
    /// service (504).
    fn silence(&self) -> ProxyError {
        if self.client.stalled() {
            ProxyError::ClientStalled
        } else {
            ProxyError::ResponseTimeout
        }
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

/// The request as it goes out: its prepared head and the body of the next
/// attempt.
struct Outbound {
    parts: Parts,
    body: Outgoing,
}

impl Outbound {
    /// The next attempt, unless the caller's deadline has passed (what is
    /// left of it is written as the attempt goes on the wire, in
    /// [`Origin::request`](crate::upstream::Origin::request)).
    fn next(&mut self, deadline: Option<Deadline>) -> Result<Request<UpstreamBody>, ProxyError> {
        let Some(body) = self.body.next() else {
            tracing::error!("a streamed request body was about to be sent twice");
            return Err(ProxyError::Internal);
        };
        // A request that can never be re-sent takes the parts themselves.
        let parts = match self.body {
            Outgoing::Spent => {
                let mut spent = std::mem::replace(&mut self.parts, empty_parts());
                spent.extensions.clear();
                spent
            }
            _ => clone_parts(&self.parts),
        };
        if deadline.is_some_and(|d| d.is_expired()) {
            return Err(ProxyError::DeadlineExceeded);
        }
        Ok(Request::from_parts(parts, body))
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

/// Phase 2: rewrites the caller's head for the service.
fn prepare_head(parts: &mut Parts, peer: Option<HeaderValue>, traced: bool) {
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
    parts.version = Version::HTTP_11;
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

/// Phase 5: the service's response, on its way back.
fn relay(
    response: Response<Incoming>,
    pooled: Pooled,
    slot: OwnedSemaphorePermit,
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
        drop(slot);
        metrics.request(status, ending.outcome(), started);
    });
    Response::from_parts(parts, Body::new(body))
}

/// A gateway-made error response, recorded.
fn fail(route: &'static str, error: ProxyError, started: Instant) -> Response<Body> {
    observe::request(route, error.status(), error.outcome(), started);
    error.into_response()
}
