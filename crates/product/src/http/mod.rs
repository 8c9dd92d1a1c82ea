//! The public HTTP API (SPEC §3) and its OpenAPI document.
//!
//! The router is built from the annotated handlers with `utoipa-axum`, which
//! registers each handler and its OpenAPI operation together: the document
//! served at `/api/products/openapi.json` cannot drift from the routes.
//!
//! Layers, outer to inner: request metrics and the server span
//! (`telemetry::observe_http`), then the 64 KiB body limit (413 as
//! problem+json via `problem::Json`). Unknown paths and methods answer
//! problem+json 404 / 405.

mod auth;
mod error;
mod handlers;

use axum::{Router, extract::DefaultBodyLimit};
use shopeasy_product_api::paths;
use shopeasy_runtime::{
    openapi::{self, BearerScheme},
    problem::Problem,
    settings::Secret,
    telemetry,
};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::catalogue::Catalogue;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// What every handler shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The catalogue.
    pub catalogue: Catalogue,
    /// The admin bearer token.
    pub admin_token: Secret,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ShopEasy Product API",
        description = "The catalogue. Errors are RFC 9457 problem details (`application/problem+json`)."
    ),
    modifiers(&BEARER),
    tags((name = "products", description = "The product catalogue"))
)]
struct ApiDoc;

/// Declares the `bearer` security scheme the admin operations name.
const BEARER: BearerScheme = BearerScheme {
    name: "bearer",
    format: None,
    description: Some("The admin token (setting `admin_token`, `ADMIN_TOKEN`); reads need none."),
};

/// The public router with its OpenAPI document at
/// [`paths::OPENAPI`].
pub fn router(state: AppState) -> Router {
    // Every route's series exist at 0 before its first request, so a board
    // on a healthy, fresh system shows 0 rather than "No data".
    telemetry::register_http_routes(
        crate::NAME,
        &[
            ("GET", "/api/products", "200"),
            ("POST", "/api/products", "201"),
            ("GET", "/api/products/{id}", "200"),
            ("PUT", "/api/products/{id}", "200"),
            ("DELETE", "/api/products/{id}", "204"),
        ],
    );
    let (router, api) = api_router().split_for_parts();
    router
        .route(paths::OPENAPI, openapi::route(&api))
        .fallback(|| async { Problem::no_route() })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            crate::NAME,
            telemetry::observe_http,
        ))
        .with_state(state)
}

/// The OpenAPI document, as served.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().into_openapi()
}

/// Every operation, registered with its handler.
fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(handlers::list_products, handlers::create_product))
        .routes(routes!(
            handlers::get_product,
            handlers::update_product,
            handlers::delete_product
        ))
}
