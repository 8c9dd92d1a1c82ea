//! The handlers: extract, parse into domain types, call the catalogue, map
//! the result. Each carries its OpenAPI operation.

use axum::{
    extract::{Path, State, rejection::PathRejection},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use serde::Deserialize;
use shopeasy_product_api::{NewProduct, Product, ProductPage, ProductUpdate, paths};
use shopeasy_runtime::openapi::ProblemDetails;
use shopeasy_runtime::problem::{Json, JsonMembers, Query, page_limit};
use utoipa::{IntoParams, IntoResponses};
use uuid::Uuid;

use super::{AppState, auth::AdminAuth};
use crate::{
    Error,
    cursor::Cursor,
    domain::{FieldIssue, Invalid, ProductDraft},
};

/// The query of the list operation. Read as text so each bad value is named
/// in a 422 (an empty value counts as absent).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Page size, 1 to 100 (default 20).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    limit: Option<String>,
    /// `next_cursor` of the previous page; absent for the first page.
    cursor: Option<String>,
}

/// The problems both admin writes (create, replace) can answer, listed once
/// for their OpenAPI operations (documentation only).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum WriteProblems {
    /// Malformed JSON.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(ProblemDetails),
    /// Missing or wrong bearer token.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(ProblemDetails),
    /// Another product has this SKU.
    #[response(status = 409, content_type = "application/problem+json")]
    DuplicateSku(ProblemDetails),
    /// Body over 64 KiB.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(ProblemDetails),
    /// Not application/json.
    #[response(status = 415, content_type = "application/problem+json")]
    UnsupportedMediaType(ProblemDetails),
    /// Invalid fields, each named.
    #[response(status = 422, content_type = "application/problem+json")]
    Invalid(ProblemDetails),
}

/// A page of the catalogue, in a stable order.
#[utoipa::path(
    get,
    path = "/api/products",
    tag = "products",
    params(ListParams),
    responses(
        (status = 200, description = "A page of products", body = ProductPage),
        (status = 422, description = "Invalid limit or cursor", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list_products(
    State(state): State<AppState>,
    Query(params): Query<ListParams>,
) -> Result<Response, Error> {
    let mut errors = Vec::new();
    let limit = page_limit(
        params.limit.as_deref(),
        paths::DEFAULT_LIMIT,
        paths::MAX_LIMIT,
    )
    .unwrap_or_else(|e| {
        errors.push(FieldIssue {
            field: "limit",
            message: e.message,
        });
        0
    });
    let cursor = match params.cursor.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Cursor::parse(text)
            .map_err(|message| {
                errors.push(FieldIssue {
                    field: "cursor",
                    message,
                });
            })
            .ok(),
    };
    if !errors.is_empty() {
        return Err(Invalid(errors).into());
    }
    let page = state.catalogue.list(cursor, limit).await?;
    Ok(json_bytes(page))
}

/// One product.
#[utoipa::path(
    get,
    path = "/api/products/{id}",
    tag = "products",
    params(("id" = Uuid, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The product", body = Product),
        (status = 404, description = "No product has this id", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get_product(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    let id = product_id(id)?;
    let product = state.catalogue.get(id).await?;
    Ok(json_bytes(product))
}

/// Adds a product (admin).
#[utoipa::path(
    post,
    path = "/api/products",
    tag = "products",
    request_body = NewProduct,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created; `Location` names it", body = Product),
        WriteProblems,
    )
)]
pub(crate) async fn create_product(
    _admin: AdminAuth,
    State(state): State<AppState>,
    Json(JsonMembers(body)): Json<JsonMembers>,
) -> Result<Response, Error> {
    let draft = ProductDraft::parse(&body.into())?;
    let product = state.catalogue.create(&draft).await?;
    let mut response = (StatusCode::CREATED, Json(&product)).into_response();
    if let Ok(location) = HeaderValue::from_str(&paths::product(product.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Replaces every field of a product (admin).
#[utoipa::path(
    put,
    path = "/api/products/{id}",
    tag = "products",
    params(("id" = Uuid, Path, description = "The product's id")),
    request_body = ProductUpdate,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The updated product", body = Product),
        (status = 404, description = "No product has this id", body = ProblemDetails, content_type = "application/problem+json"),
        WriteProblems,
    )
)]
pub(crate) async fn update_product(
    _admin: AdminAuth,
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    Json(JsonMembers(body)): Json<JsonMembers>,
) -> Result<Response, Error> {
    let id = product_id(id)?;
    let draft = ProductDraft::parse(&body.into())?;
    let product = state.catalogue.update(id, &draft).await?;
    Ok(Json(product).into_response())
}

/// Deletes a product (admin).
#[utoipa::path(
    delete,
    path = "/api/products/{id}",
    tag = "products",
    params(("id" = Uuid, Path, description = "The product's id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "No product has this id", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn delete_product(
    _admin: AdminAuth,
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    let id = product_id(id)?;
    state.catalogue.delete(id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The id of the path; anything that is not a UUID names no product (404).
fn product_id(path: Result<Path<String>, PathRejection>) -> Result<Uuid, Error> {
    path.ok()
        .and_then(|Path(text)| Uuid::try_parse(&text).ok())
        .ok_or(Error::NotFound)
}

/// Already-serialized JSON (a cache hit is sent as stored).
fn json_bytes(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
