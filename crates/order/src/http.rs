//! The public HTTP API (SPEC §3): thin adapters that authenticate the
//! caller, extract, parse into domain types, call [`Orders`], and map the
//! result. Every order route acts for the bearer token's `sub` (issue 15):
//! the token is verified before the body is read or the database is
//! touched, and who may see what is decided in [`Orders`], not here. Errors
//! become problems in [`crate::error`]; successful placements are rendered
//! here, once, so that what is stored for an idempotent replay is exactly
//! what was sent. `GET /api/stock/{product_id}` is the one anonymous API
//! route (stock is not personal; issue 18). Each handler carries its
//! OpenAPI operation (the shared parts are in [`crate::openapi`]);
//! `utoipa-axum` registers the two together.

use std::time::Duration;

use axum::{
    Router,
    extract::{DefaultBodyLimit, FromRef, State},
    response::{IntoResponse, Response},
};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use shopeasy_identity::{AuthError, Authenticated, Claims, Verifier};
use shopeasy_resilience::deadline::Deadline;
use shopeasy_runtime::problem::{FieldError, Json, Path, Problem, Query, page_limit};
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use crate::{
    domain::{Customer, NewOrder, Order, OrderRequest},
    error::Error,
    idempotency::{self, valid_key},
    openapi::{ApiDoc, BodyProblems, CommonProblems, ProblemDetails, RateLimited},
    saga::{MAX_PAGE, Orders, Placed},
    stock::StockLevel,
    store::{PageCursor, StoredResponse},
};

/// Largest accepted request body (SPEC §3).
pub const BODY_LIMIT: usize = 64 * 1024;
/// The request header carrying the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The response header marking a replay.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// What the handlers share.
#[derive(Debug, Clone)]
struct Api {
    orders: Orders,
    key_lock: Duration,
    verifier: Verifier,
}

/// Where the [`Authenticated`] extractor finds the verifier.
impl FromRef<Api> for Verifier {
    fn from_ref(api: &Api) -> Self {
        api.verifier.clone()
    }
}

/// The customer a verified token acts for. A `sub` that cannot be a
/// customer id here (longer than 128 characters, padded with spaces) is
/// answered 401 `invalid_token`, as for any other unusable claim: the
/// token, not the request, is at fault.
fn customer(claims: &Claims) -> Result<Customer, Error> {
    Customer::from_subject(claims.customer_id())
        .ok_or(Error::Unauthenticated(AuthError::InvalidClaim("sub")))
}

/// The public router: `/api/orders…` for the callers `verifier` accepts,
/// and `/api/stock/{product_id}` and the OpenAPI document at
/// [`crate::openapi::PATH`] for anyone, with
/// request telemetry and the body limit; anything else is a 404 problem.
pub fn router(orders: Orders, key_lock: Duration, verifier: Verifier) -> Router {
    // Every route's series exist at 0 before its first request, so a board
    // on a healthy, fresh system shows 0 rather than "No data".
    shopeasy_runtime::telemetry::register_http_routes(
        "shopeasy-order",
        &[
            ("POST", "/api/orders", "201"),
            ("GET", "/api/orders", "200"),
            ("GET", "/api/orders/{id}", "200"),
            ("POST", "/api/orders/{id}/cancel", "200"),
            ("GET", "/api/stock/{product_id}", "200"),
        ],
    );
    let (router, document) = api_router().split_for_parts();
    router
        // A static segment: matched before `/api/orders/{id}`.
        .route(
            crate::openapi::PATH,
            shopeasy_runtime::openapi::route(&document),
        )
        .fallback(|| async { Problem::no_route() })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .with_state(Api {
            orders,
            key_lock,
            verifier,
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            "shopeasy-order",
            shopeasy_runtime::telemetry::observe_http,
        ))
}

/// The OpenAPI document of the order API, as served at
/// [`crate::openapi::PATH`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().into_openapi()
}

/// Every operation, registered with its handler.
fn api_router() -> OpenApiRouter<Api> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(place, list))
        .routes(routes!(show))
        .routes(routes!(cancel))
        .routes(routes!(stock))
}

/// `POST /api/orders`. The token is checked before the body (the
/// extractors run in this order), so an anonymous request reads nothing.
#[utoipa::path(
    post,
    path = "/api/orders",
    tag = "orders",
    operation_id = "placeOrder",
    summary = "Place an order for the signed-in customer",
    description = "The customer is the bearer token's `sub`. The body's `customer_id` is optional and accepted only when it equals `sub` (else 422 naming `customer_id`). With an `Idempotency-Key` the request is safe to repeat: the same key and body replay the first answer byte for byte (with `Idempotent-Replayed: true`), whatever its status; keys are scoped to the customer.",
    security(("bearerAuth" = [])),
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, in one field (a key sent twice is 422); scoped to the signed-in customer, kept at least 24 h. Another body under the same key is 422 `idempotency-key-reused`; while the first request runs, 409 `request-in-progress`.")
    ),
    request_body(content = OrderRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Stock reserved: the order is `confirmed`", body = Order,
            headers(
                ("Location" = String, description = "`/api/orders/{id}` of the order"),
                ("Idempotent-Replayed" = String, description = "`true` when this is the stored answer of an earlier request with the same key")
            )),
        (status = 202, description = "Inventory is unavailable but the cached stock says yes: the order is `pending` and is reserved later", body = Order,
            headers(
                ("Location" = String, description = "`/api/orders/{id}` of the order"),
                ("Idempotent-Replayed" = String, description = "`true` when this is the stored answer of an earlier request with the same key")
            )),
        BodyProblems,
        (status = 404, description = "`unknown-product`: some products do not exist (named in `products`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`out-of-stock` (the short products in `products`), or `request-in-progress` with `Retry-After` while a request with the same key runs", body = ProblemDetails, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "For `request-in-progress`: seconds to wait"))),
        (status = 422, description = "Invalid fields, each named in `errors` (a `customer_id` other than the token's `sub`, a bad `Idempotency-Key` included), or `idempotency-key-reused`", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "`too-many-open-orders`: the customer already has `orders.max_open_per_customer` pending orders (nothing created); or, at the gateway, the customer's placement rate limit (with `RateLimit-Policy` and `RateLimit`)", body = ProblemDetails, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        CommonProblems,
    )
)]
async fn place(
    State(api): State<Api>,
    Authenticated(claims): Authenticated,
    headers: HeaderMap,
    Json(request): Json<OrderRequest>,
) -> Result<Response, Error> {
    let customer = customer(&claims)?;
    let deadline = Deadline::from_headers(&headers);
    let key = idempotency_key(&headers)?;
    let request = NewOrder::parse(request, &customer).map_err(Error::Validation)?;
    // The signed-in customer scopes the key (Stripe's keys are scoped to
    // the account): alice can neither replay nor block bob's key.
    let reply = idempotency::place_once(
        &api.orders,
        customer.as_str(),
        key.as_deref(),
        &request,
        deadline,
        api.key_lock,
        render,
    )
    .await?;
    let mut response = replay(&reply.response);
    if reply.replayed {
        response.headers_mut().insert(
            HeaderName::from_static(IDEMPOTENT_REPLAYED),
            HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// The request's `Idempotency-Key`, if it has one. A key sent twice is
/// refused rather than one of them picked: a client (or a proxy that added
/// one) could not tell which key its order was stored under, and a retry
/// with the other would place the order again. RFC 8941, whose Item field
/// the idempotency draft makes the key, fails such a field too.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Error> {
    let invalid = |message| Error::Validation(vec![FieldError::new("Idempotency-Key", message)]);
    let mut keys = headers.get_all(IDEMPOTENCY_KEY).iter();
    match (keys.next(), keys.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(invalid("must be sent once")),
        (Some(v), None) => v
            .to_str()
            .ok()
            .filter(|k| valid_key(k))
            .map(|k| Some(k.to_owned()))
            .ok_or_else(|| invalid("must be 1 to 255 visible ASCII characters")),
    }
}

/// Renders the outcome of placing an order: 201/202 with `Location` and
/// the order, or the error's problem.
fn render(outcome: &Result<Placed, Error>) -> StoredResponse {
    let (status, order) = match outcome {
        Ok(Placed::Confirmed(order)) => (StatusCode::CREATED, order),
        Ok(Placed::Pending(order)) => (StatusCode::ACCEPTED, order),
        Err(e) => {
            let problem = e.to_problem();
            let mut headers = vec![(
                header::CONTENT_TYPE.to_string(),
                shopeasy_runtime::problem::CONTENT_TYPE.to_owned(),
            )];
            if let Some(secs) = problem.retry_after {
                headers.push((header::RETRY_AFTER.to_string(), secs.to_string()));
            }
            if let Error::Internal(e) = e {
                tracing::error!(error = format!("{e:#}"), "placing an order failed");
            }
            return StoredResponse {
                status: problem.status,
                headers,
                body: serde_json::to_string(&problem).unwrap_or_default(),
            };
        }
    };
    StoredResponse {
        status: status.as_u16(),
        headers: vec![
            (
                header::CONTENT_TYPE.to_string(),
                "application/json".to_owned(),
            ),
            (
                header::LOCATION.to_string(),
                format!("/api/orders/{}", order.id),
            ),
        ],
        body: serde_json::to_string(order).unwrap_or_default(),
    }
}

/// Turns a stored response back into a response, byte for byte.
fn replay(stored: &StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, stored.body.clone()).into_response();
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    response
}

/// `GET /api/orders/{id}`: one of the caller's orders; anyone else's is
/// the same 404 as an unknown id.
#[utoipa::path(
    get,
    path = "/api/orders/{id}",
    tag = "orders",
    operation_id = "getOrder",
    summary = "One of the signed-in customer's orders",
    security(("bearerAuth" = [])),
    params(("id" = Uuid, Path, description = "The order id")),
    responses(
        (status = 200, description = "The order", body = Order),
        (status = 400, description = "The id is a percent-escape that does not decode to UTF-8", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such order, or another customer's (the same answer)", body = ProblemDetails, content_type = "application/problem+json"),
        RateLimited,
        CommonProblems,
    )
)]
async fn show(
    State(api): State<Api>,
    Authenticated(claims): Authenticated,
    Path(id): Path<String>,
) -> Result<Json<Order>, Error> {
    let customer = customer(&claims)?;
    let id = Uuid::try_parse(&id).map_err(|_| Error::NotFound)?;
    Ok(Json(api.orders.get(id, &customer).await?))
}

/// `GET /api/orders?limit=&cursor=`: the caller's orders, `limit` 1..=100
/// (default 100, as before paging), `cursor` the `next_cursor` of the page
/// before. `customer_id` is accepted for older clients, only when it is
/// the caller.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Optional, for clients written before tokens: accepted only when it
    /// equals the token's `sub` (else 422 naming `customer_id`); the list
    /// is always the caller's own.
    customer_id: Option<String>,
    /// Page size, 1 to 100 (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    limit: Option<String>,
    /// `next_cursor` of the previous page; absent for the first page.
    cursor: Option<String>,
}

/// A page of the caller's orders, newest first.
#[derive(Debug, Serialize, ToSchema)]
struct OrderList {
    /// The orders of this page.
    items: Vec<Order>,
    /// Pass as `cursor` for the next page; absent on the last page. Opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// `GET /api/orders`: see [`ListQuery`].
#[utoipa::path(
    get,
    path = "/api/orders",
    tag = "orders",
    operation_id = "listOrders",
    summary = "List the signed-in customer's own orders, paged",
    description = "Lists the caller's own orders (the token's `sub`), never anyone else's. Page with `limit` (1 to 100) and `cursor` (the `next_cursor` of the page before).",
    security(("bearerAuth" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of the caller's orders", body = OrderList),
        (status = 422, description = "A bad `limit` or `cursor`, or a `customer_id` other than the token's `sub`, each named in `errors`", body = ProblemDetails, content_type = "application/problem+json"),
        RateLimited,
        CommonProblems,
    )
)]
async fn list(
    State(api): State<Api>,
    Authenticated(claims): Authenticated,
    Query(query): Query<ListQuery>,
) -> Result<Json<OrderList>, Error> {
    let customer = customer(&claims)?;
    let mut errors = Vec::new();
    let named = query
        .customer_id
        .as_deref()
        .filter(|c| !c.trim().is_empty());
    if let Err(e) = customer.check_named(named) {
        errors.push(e);
    }
    let limit = page_limit(query.limit.as_deref(), MAX_PAGE, MAX_PAGE).unwrap_or_else(|e| {
        errors.push(e);
        0
    });
    let cursor = match query.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => {
            let parsed = PageCursor::parse(c);
            if parsed.is_none() {
                errors.push(FieldError::new(
                    "cursor",
                    "must be a next_cursor of an earlier page",
                ));
            }
            parsed
        }
    };
    if !errors.is_empty() {
        return Err(Error::Validation(errors));
    }
    let page = api
        .orders
        .of_customer(&customer, limit, cursor.as_ref())
        .await?;
    Ok(Json(OrderList {
        items: page.orders,
        next_cursor: page.next.map(|c| c.encode()),
    }))
}

/// `POST /api/orders/{id}/cancel`: only the caller's own orders; anyone
/// else's is the same 404 as an unknown id, and nothing is changed.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/cancel",
    tag = "orders",
    operation_id = "cancelOrder",
    summary = "Cancel one of the signed-in customer's orders",
    description = "Releases the reserved stock; idempotent (cancelling a cancelled order answers it again). Another customer's order is 404 like an unknown id, and nothing changes.",
    security(("bearerAuth" = [])),
    params(("id" = Uuid, Path, description = "The order id")),
    responses(
        (status = 200, description = "The order, now `cancelled`", body = Order),
        (status = 400, description = "The id is a percent-escape that does not decode to UTF-8", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No such order, or another customer's (the same answer)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`not-cancellable`: a rejected order holds no stock", body = ProblemDetails, content_type = "application/problem+json"),
        RateLimited,
        CommonProblems,
    )
)]
async fn cancel(
    State(api): State<Api>,
    Authenticated(claims): Authenticated,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Order>, Error> {
    let customer = customer(&claims)?;
    let id = Uuid::try_parse(&id).map_err(|_| Error::NotFound)?;
    Ok(Json(
        api.orders
            .cancel(id, &customer, Deadline::from_headers(&headers))
            .await?,
    ))
}

/// A product's stock, as `GET /api/stock/{product_id}` answers it.
#[derive(Debug, Serialize, ToSchema)]
struct Stock {
    /// The product.
    product_id: Uuid,
    /// Units available: what an order placed now is checked against.
    available: i64,
    /// True when Inventory is unavailable and this is an older, cached
    /// count (the response's `Age` header then says how old).
    stale: bool,
    /// When the count was Inventory's answer, in Unix milliseconds.
    as_of: i64,
    /// How old the count is, in whole seconds.
    age_seconds: u64,
}

impl From<StockLevel> for Stock {
    fn from(level: StockLevel) -> Self {
        Self {
            product_id: level.product_id,
            available: level.available,
            stale: level.stale,
            as_of: level.as_of_ms,
            age_seconds: level.age.as_secs(),
        }
    }
}

/// `GET /api/stock/{product_id}`: anonymous (stock is not personal), read
/// through the orders' own stock cache, so it is single-flight and keeps
/// answering a stale count while Inventory is down. Never stored by a
/// cache (`no-store`): the count changes with every order.
#[utoipa::path(
    get,
    path = "/api/stock/{product_id}",
    tag = "stock",
    operation_id = "getStock",
    summary = "A product's available stock (anonymous)",
    description = "No token needed. The count is the one orders are checked against: served from the order service's stock cache (fresh for `resilience.stock_cache.ttl_seconds`), and, while Inventory is unavailable, the last count with `stale: true`, its age in `age_seconds` and the `Age` header. A product never cached while Inventory is down is 503 with `Retry-After`.",
    security(()),
    params(("product_id" = Uuid, Path, description = "The product id")),
    responses(
        (status = 200, description = "The product's stock", body = Stock,
            headers(
                ("Cache-Control" = String, description = "`no-store`: the count changes with every order"),
                ("Age" = u64, description = "Only when `stale`: the count's age in seconds")
            )),
        (status = 400, description = "The id is a percent-escape that does not decode to UTF-8", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No stock is known for this product (Inventory has no record of it), or the id is not a product id", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "Inventory is unavailable and no cached count can answer", body = ProblemDetails, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 504, description = "The request's deadline passed first (`deadline-exceeded`)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
async fn stock(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(product_id): Path<String>,
) -> Result<Response, Error> {
    let product = Uuid::try_parse(&product_id).map_err(|_| Error::UnknownStock)?;
    let level = api
        .orders
        .stock(product, Deadline::from_headers(&headers))
        .await?;
    let mut response = Json(Stock::from(level)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if level.stale {
        headers.insert(header::AGE, HeaderValue::from(level.age.as_secs()));
    }
    Ok(response)
}
