//! RFC 9457 problem details: the only error body ShopEasy's HTTP services
//! send.
//!
//! Each service maps its own error enum onto a [`Problem`] in one place; this
//! module supplies the type, its response, and the mapping of axum's
//! extractor rejections (malformed JSON → 400, wrong content type → 415, body
//! over the limit → 413, wrong field types → 422) so no rejection ever leaks
//! axum's plain-text body.

use axum::{
    extract::{FromRequest, FromRequestParts, Request, rejection::JsonRejection},
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use serde::{Serialize, de::DeserializeOwned};

/// The media type of a problem body.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// The prefix of every problem `type` (a URN: it names the problem and is not
/// meant to be fetched).
pub const TYPE_PREFIX: &str = "urn:shopeasy:problem:";

/// One invalid field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// The field's path, for example `items[2].quantity`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// An RFC 9457 problem.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// `urn:shopeasy:problem:<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary, the same for every occurrence of this type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened this time (never internal details).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Each invalid field, for validation problems.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// Extension members (for example the products out of stock).
    #[serde(flatten, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extensions: serde_json::Map<String, serde_json::Value>,
    /// Seconds for a `Retry-After` header.
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem of type `slug` with `status` and `title`.
    pub fn new(status: StatusCode, slug: &str, title: impl Into<String>) -> Self {
        Self {
            kind: format!("{TYPE_PREFIX}{slug}"),
            title: title.into(),
            status: status.as_u16(),
            detail: None,
            errors: Vec::new(),
            extensions: serde_json::Map::new(),
            retry_after: None,
        }
    }

    /// Sets the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds field errors.
    pub fn errors(mut self, errors: impl IntoIterator<Item = FieldError>) -> Self {
        self.errors.extend(errors);
        self
    }

    /// Adds an extension member.
    pub fn extension(mut self, name: &str, value: impl Serialize) -> Self {
        if let Ok(v) = serde_json::to_value(value) {
            self.extensions.insert(name.to_owned(), v);
        }
        self
    }

    /// Adds a `Retry-After` header of `seconds`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// 400: the request could not be read.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad-request", "Malformed request").detail(detail)
    }

    /// 401: no or wrong credentials (never says which).
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Authentication required",
        )
    }

    /// 404: no such resource or route.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found")
    }

    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
        )
    }

    /// 413: the body is over the limit.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Request body too large",
        )
        .detail(format!("the body must be at most {limit} bytes"))
    }

    /// 415: not `application/json`.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
        )
        .detail("expected Content-Type: application/json")
    }

    /// 422: the request is well-formed but some fields are invalid.
    pub fn validation(errors: impl IntoIterator<Item = FieldError>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation",
            "The request has invalid fields",
        )
        .errors(errors)
    }

    /// 503 with `Retry-After`: a dependency is unavailable.
    pub fn unavailable(detail: impl Into<String>, retry_after: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service temporarily unavailable",
        )
        .detail(detail)
        .retry_after(retry_after)
    }

    /// 500 — for bugs only; the cause is logged, never sent.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<JsonRejection> for Problem {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => Self::unsupported_media_type(),
            JsonRejection::JsonSyntaxError(e) => Self::bad_request(e.body_text()),
            JsonRejection::JsonDataError(e) => {
                // serde's message names the path ("items[0].quantity: invalid type …").
                let text = e.body_text();
                let message = text
                    .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                    .unwrap_or(&text)
                    .to_owned();
                let field = message
                    .split_once(": ")
                    .map(|(path, _)| path.to_owned())
                    .filter(|p| !p.contains(' '))
                    .unwrap_or_else(|| "body".to_owned());
                Self::validation([FieldError::new(field, message)])
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Request body too large",
            ),
            other => Self::bad_request(other.body_text()),
        }
    }
}

/// `axum::Json` whose rejections are problems.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::Json::<T>::from_request(req, state)
            .await
            .map(|axum::Json(v)| Self(v))
            .map_err(Problem::from)
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Query` whose rejections are 422 problems naming the query.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Self(v))
            .map_err(|e| {
                let text = e.body_text();
                let message = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text)
                    .to_owned();
                Problem::validation([FieldError::new("query", message)])
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{Router, body::Body, routing::post};
    use tower::ServiceExt;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Body1 {
        quantity: u32,
    }

    async fn call(req: http::Request<Body>) -> (StatusCode, String, serde_json::Value) {
        let app = Router::new()
            .route("/", post(|Json(_b): Json<Body1>| async { "ok" }))
            .layer(axum::extract::DefaultBodyLimit::max(64));
        let res = app.oneshot(req).await.unwrap();
        let status = res.status();
        let ct = res
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            ct,
            serde_json::from_slice(&bytes).unwrap_or_default(),
        )
    }

    fn json(body: &str) -> http::Request<Body> {
        http::Request::post("/")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    #[tokio::test]
    async fn rejections_become_problems() {
        let (s, ct, b) = call(json("{not json")).await;
        assert_eq!((s, ct.as_str()), (StatusCode::BAD_REQUEST, CONTENT_TYPE));
        assert_eq!(b["type"], "urn:shopeasy:problem:bad-request");

        let (s, _, b) = call(json(r#"{"quantity":"x"}"#)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(b["errors"][0]["field"], "quantity", "{b}");

        let req = http::Request::post("/")
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("{}"))
            .unwrap();
        assert_eq!(call(req).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);

        let (s, ct, _) = call(json(&format!(
            r#"{{"quantity":1,"pad":"{}"}}"#,
            "x".repeat(100)
        )))
        .await;
        assert_eq!(
            (s, ct.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, CONTENT_TYPE)
        );
    }

    #[test]
    fn retry_after_becomes_a_header() {
        let res = Problem::unavailable("inventory unavailable", 2).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "2");
    }
}
