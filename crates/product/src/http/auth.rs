//! The admin guard: `Authorization: Bearer <admin_token>`, compared in
//! constant time. Every failure (no header, another scheme, a wrong token,
//! no token configured) is the same 401, so a caller learns nothing about
//! which part was wrong.

use axum::{
    extract::FromRequestParts,
    http::{HeaderValue, header, request::Parts},
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::Problem;

use super::AppState;

/// Proof that the request carries the admin token; take it as the first
/// extractor of an admin handler so 401 comes before any body parsing.
#[derive(Debug)]
pub(crate) struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        match token {
            Some(token) if state.admin_token.matches(token) => Ok(Self),
            _ => Err(unauthorized()),
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
