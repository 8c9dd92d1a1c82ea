//! The order API's OpenAPI 3.1 document (issue 15: "the README and OpenAPI
//! say so"), served anonymously at [`PATH`] as product serves its own.
//!
//! The operations are the `#[utoipa::path]` annotations of the handlers in
//! [`crate::http`], registered together with their routes by `utoipa-axum`,
//! so a route cannot be served without being documented. What they share —
//! the bearer scheme, the problem body, the answers every operation can give
//! — is declared here once, so the handlers stay thin.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::header;
use utoipa::{
    IntoResponses, Modify, OpenApi, ToSchema,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

/// Where the document is served (anonymously: it describes the API, it
/// reveals no order).
pub const PATH: &str = "/api/orders/openapi.json";

/// The name of the security scheme every order operation requires: an
/// HTTP bearer JWT access token (RFC 9068) whose `sub` is the customer.
pub const SECURITY_SCHEME: &str = "bearerAuth";

/// The document's fixed part; the operations are added by the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ShopEasy Order API",
        description = "Orders of the signed-in customer, and the stock they are checked \
against. Every order operation needs \
`Authorization: Bearer <JWT>` (an access token from the shop's issuer); the stock of a \
product (`GET /api/stock/{product_id}`) is anonymous. The customer \
is the token's `sub`, never a field the client chooses. A customer sees, lists and \
cancels only their own orders: another customer's order id is answered 404 exactly \
like an unknown id. Errors are RFC 9457 problem details (`application/problem+json`) \
with `type`, `title`, `status`, `detail` and, for validation problems, `errors`."
    ),
    modifiers(&BearerAuth),
    components(schemas(ProblemDetails, FieldErrorDoc)),
    tags(
        (name = "orders", description = "The signed-in customer's orders"),
        (name = "stock", description = "Available stock per product, for anyone")
    )
)]
pub(crate) struct ApiDoc;

/// Declares the [`SECURITY_SCHEME`] the operations name.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SECURITY_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A JWT access token (RFC 9068) from the shop's issuer: issuer, \
                         audience, expiry and signature are checked; `sub` is the customer. \
                         The embedded demo signs in with `POST /api/session` \
                         `{\"customer\":\"alice\"}` through the gateway.",
                    ))
                    .build(),
            ),
        );
    }
}

/// An RFC 9457 problem, as every error is sent (documentation only: the
/// body is built by `shopeasy_runtime::problem::Problem`). Some types add
/// members: `products` (`unknown-product`, `out-of-stock`), `order_id`
/// (`out-of-stock` when a rejected order was recorded), `max_open`
/// (`too-many-open-orders`).
#[derive(ToSchema)]
#[schema(
    description = "An RFC 9457 problem, as every error is sent. Some types add members: \
`products` (`unknown-product`, `out-of-stock`), `order_id` (`out-of-stock` when a rejected \
order was recorded), `max_open` (`too-many-open-orders`)."
)]
#[allow(dead_code)]
pub(crate) struct ProblemDetails {
    /// `urn:shopeasy:problem:<slug>`, for example
    /// `urn:shopeasy:problem:too-many-open-orders`.
    r#type: String,
    /// Short summary of the problem type.
    title: String,
    /// The HTTP status.
    status: u16,
    /// What happened this time (always present).
    detail: String,
    /// For validation problems: each invalid field.
    errors: Option<Vec<FieldErrorDoc>>,
}

/// One invalid field of a validation problem (documentation only).
#[derive(ToSchema)]
#[schema(description = "One invalid field of a validation problem.")]
#[allow(dead_code)]
pub(crate) struct FieldErrorDoc {
    /// The field's path, for example `items[2].quantity` or `customer_id`.
    field: String,
    /// What is wrong with it.
    message: String,
}

/// The answers every order operation can give (documentation only).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum CommonProblems {
    /// No bearer token, or one that is expired, wrongly signed, for another
    /// issuer or audience, or whose `sub` cannot be a customer id. Nothing
    /// was read or changed.
    #[response(
        status = 401,
        content_type = "application/problem+json",
        headers(
            ("WWW-Authenticate" = String, description = "The RFC 6750 challenge: `Bearer realm=\"shopeasy\"`, with `error=\"invalid_token\"` and an `error_description` when a token was sent but is unusable")
        )
    )]
    Unauthorized(ProblemDetails),
    /// A dependency (the order database, Inventory with no cached stock,
    /// Product, the issuer's keys) is unavailable, or the service is
    /// overloaded (`overloaded`): retry after `Retry-After` seconds.
    #[response(
        status = 503,
        content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))
    )]
    Unavailable(ProblemDetails),
    /// The request's deadline passed before it could be completed
    /// (`deadline-exceeded`).
    #[response(status = 504, content_type = "application/problem+json")]
    DeadlineExceeded(ProblemDetails),
}

/// The answers of a request body the server could not read
/// (documentation only).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum BodyProblems {
    /// Malformed JSON, or JSON of the wrong shape.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(ProblemDetails),
    /// The body is over 64 KiB.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(ProblemDetails),
    /// The body is not `application/json`.
    #[response(status = 415, content_type = "application/problem+json")]
    UnsupportedMediaType(ProblemDetails),
}

/// `GET` [`PATH`]: the document, rendered once at start-up.
pub(crate) fn handler(
    document: &utoipa::openapi::OpenApi,
) -> impl Fn() -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    let text: Arc<str> = document
        .to_json()
        .unwrap_or_else(|_| "{}".to_owned())
        .into();
    move || {
        std::future::ready(
            (
                [(header::CONTENT_TYPE, "application/json")],
                text.to_string(),
            )
                .into_response(),
        )
    }
}
