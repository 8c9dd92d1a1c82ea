//! The public HTTP API (SPEC §3): thin adapters that extract, parse into
//! domain types, call [`Orders`], and map the result. Errors become
//! problems in [`crate::error`]; successful placements are rendered here,
//! once, so that what is stored for an idempotent replay is exactly what
//! was sent.

use std::time::Duration;

use axum::{
    Router,
    extract::{DefaultBodyLimit, Path, State},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use shopeasy_resilience::deadline::Deadline;
use shopeasy_runtime::problem::{FieldError, Json, Problem, Query};
use uuid::Uuid;

use crate::{
    domain::{NewOrder, Order, OrderRequest},
    error::Error,
    idempotency::{self, valid_key},
    saga::{MAX_PAGE, Orders, Placed},
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
}

/// The public router: `/api/orders…`, with request telemetry and the body
/// limit; anything else is a 404 problem.
pub fn router(orders: Orders, key_lock: Duration) -> Router {
    Router::new()
        .route("/api/orders", post(place).get(list))
        .route("/api/orders/{id}", get(show))
        .route("/api/orders/{id}/cancel", post(cancel))
        .fallback(|| async { Problem::no_route() })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .with_state(Api { orders, key_lock })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            "shopeasy-order",
            shopeasy_runtime::telemetry::observe_http,
        ))
}

async fn place(
    State(api): State<Api>,
    headers: HeaderMap,
    Json(request): Json<OrderRequest>,
) -> Result<Response, Error> {
    let deadline = Deadline::from_headers(&headers);
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => match v.to_str().ok().filter(|k| valid_key(k)) {
            Some(k) => Some(k.to_owned()),
            None => {
                return Err(Error::Validation(vec![FieldError::new(
                    "Idempotency-Key",
                    "must be 1 to 255 visible ASCII characters",
                )]));
            }
        },
    };
    let request = NewOrder::parse(request).map_err(Error::Validation)?;
    // The customer scopes the key; today it is the body's `customer_id`
    // (identity will pass the token's `sub` here).
    let customer = request.customer_id().to_owned();
    let reply = idempotency::place_once(
        &api.orders,
        &customer,
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

async fn show(State(api): State<Api>, Path(id): Path<String>) -> Result<Json<Order>, Error> {
    let id = Uuid::try_parse(&id).map_err(|_| Error::NotFound)?;
    Ok(Json(api.orders.get(id).await?))
}

/// `GET /api/orders?customer_id=&limit=&cursor=`: `limit` 1..=100
/// (default 100, as before paging), `cursor` the `next_cursor` of the page
/// before.
#[derive(Debug, Deserialize)]
struct ListQuery {
    customer_id: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// A page of orders; `next_cursor` is absent on the last page.
#[derive(Debug, Serialize)]
struct OrderList {
    items: Vec<Order>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

async fn list(
    State(api): State<Api>,
    Query(query): Query<ListQuery>,
) -> Result<Json<OrderList>, Error> {
    let mut errors = Vec::new();
    let customer = query.customer_id.filter(|c| !c.trim().is_empty());
    if customer.is_none() {
        errors.push(FieldError::new("customer_id", "is required"));
    }
    let limit = match query.limit.as_deref().map(str::parse::<i64>) {
        None => MAX_PAGE,
        Some(Ok(n)) if (1..=MAX_PAGE).contains(&n) => n,
        Some(_) => {
            errors.push(FieldError::new(
                "limit",
                format!("must be an integer from 1 to {MAX_PAGE}"),
            ));
            0
        }
    };
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
    let Some(customer) = customer.filter(|_| errors.is_empty()) else {
        return Err(Error::Validation(errors));
    };
    let page = api
        .orders
        .of_customer(customer.trim(), limit, cursor.as_ref())
        .await?;
    Ok(Json(OrderList {
        items: page.orders,
        next_cursor: page.next.map(|c| c.encode()),
    }))
}

async fn cancel(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Order>, Error> {
    let id = Uuid::try_parse(&id).map_err(|_| Error::NotFound)?;
    Ok(Json(
        api.orders
            .cancel(id, Deadline::from_headers(&headers))
            .await?,
    ))
}
