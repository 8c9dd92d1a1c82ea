//! The admin guard: `Authorization: Bearer <admin_token>`, checked by the
//! runtime's one bearer-token check (`shopeasy_runtime::auth`, constant
//! time; inventory's `SetStock` uses the same). Every failure (no header,
//! another scheme, a wrong token, no token configured) is the same 401, so a
//! caller learns nothing about which part was wrong.

use axum::{
    extract::FromRequestParts,
    http::{HeaderValue, header, request::Parts},
    response::{IntoResponse, Response},
};
use shopeasy_runtime::{auth, problem::Problem};

use super::AppState;

/// Proof that the request carries the admin token; take it as the first
/// extractor of an admin handler so 401 comes before any body parsing.
#[derive(Debug)]
pub(crate) struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if auth::is_authorized(&state.admin_token, authorization) {
            Ok(Self)
        } else {
            Err(unauthorized())
        }
    }
}

fn unauthorized() -> Response {
    let mut response = Problem::unauthorized().into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"shopeasy\""),
    );
    response
}
