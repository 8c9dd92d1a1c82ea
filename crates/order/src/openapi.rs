//! The order API's OpenAPI 3.1 document (issue 15: "the README and OpenAPI
//! say so"), served anonymously at [`PATH`] as product serves its own.
//!
//! The operations are the `#[utoipa::path]` annotations of the handlers in
//! [`crate::http`], registered together with their routes by `utoipa-axum`,
//! so a route cannot be served without being documented. What they share —
//! the bearer scheme, the answers every operation can give — is declared
//! here once, so the handlers stay thin; the problem body's schema and the
//! document's route are every HTTP service's, in `shopeasy_runtime::openapi`.

use shopeasy_runtime::openapi::BearerScheme;
pub(crate) use shopeasy_runtime::openapi::{FieldErrorDoc, ProblemDetails};
use utoipa::{IntoResponses, OpenApi};

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
with `type`, `title`, `status`, `detail` and, for validation problems, `errors`. Some \
types add members: `products` (`unknown-product`, `out-of-stock`), `order_id` \
(`out-of-stock` when a rejected order was recorded), `max_open` (`too-many-open-orders`)."
    ),
    modifiers(&BEARER),
    components(schemas(ProblemDetails, FieldErrorDoc)),
    tags(
        (name = "orders", description = "The signed-in customer's orders"),
        (name = "stock", description = "Available stock per product, for anyone")
    )
)]
pub(crate) struct ApiDoc;

/// Declares the [`SECURITY_SCHEME`] the operations name.
const BEARER: BearerScheme = BearerScheme {
    name: SECURITY_SCHEME,
    format: Some("JWT"),
    description: Some(
        "A JWT access token (RFC 9068) from the shop's issuer: issuer, \
         audience, expiry and signature are checked; `sub` is the customer. \
         The embedded demo signs in with `POST /api/session` \
         `{\"customer\":\"alice\"}` through the gateway.",
    ),
};

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

/// The gateway's answer to a customer over their rate limit, for the
/// operations that order itself never answers 429 (documentation only).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum RateLimited {
    /// At the gateway: the customer's rate limit (with `RateLimit-Policy`
    /// and `RateLimit`).
    #[response(
        status = 429,
        content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))
    )]
    RateLimited(ProblemDetails),
}
