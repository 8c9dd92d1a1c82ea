//! RFC 9457 problem details: the only error body ShopEasy's HTTP services
//! send.
//!
//! Each service maps its own error enum onto a [`Problem`] in one place; this
//! module supplies the type, its response, and the mapping of axum's
//! extractor rejections (malformed JSON → 400, wrong content type → 415, body
//! over the limit → 413, wrong field types → 422 in JSON's words rather than
//! Rust's, a path segment that is not UTF-8 once decoded → 400) so no
//! rejection ever leaks axum's plain-text body.

use axum::{
    extract::{
        FromRequest, FromRequestParts, Request,
        rejection::{JsonRejection, PathRejection, QueryRejection},
    },
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use serde::{Serialize, de::DeserializeOwned};

mod object;
mod wording;

pub use object::{FromJsonObject, JsonMembers, only_object};

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

/// A list's `limit` query parameter: absent is `default`, anything else
/// must be a whole number from 1 to `max`; present but empty is not a
/// number (the documents say integer). Product and order page with it, so
/// their lists answer alike.
///
/// # Errors
/// A field error naming `limit`.
pub fn page_limit(raw: Option<&str>, default: u32, max: u32) -> Result<u32, FieldError> {
    let Some(text) = raw else {
        return Ok(default);
    };
    match text.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(FieldError::new(
            "limit",
            format!("must be a whole number from 1 to {max}"),
        )),
    }
}

/// An RFC 9457 problem.
///
/// Every problem is complete (SPEC §3): `type`, `title`, `status` and
/// `detail`. [`Problem::new`] takes the detail as an argument and every
/// shorthand supplies one, so a problem without a detail cannot be built.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// `urn:shopeasy:problem:<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary, the same for every occurrence of this type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened this time (never internal details, never empty).
    pub detail: String,
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
    /// A problem of type `slug` with `status`, `title` and what happened
    /// this time (`detail`; an empty one is replaced by the title, so the
    /// member is never blank).
    pub fn new(
        status: StatusCode,
        slug: &str,
        title: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        let title = title.into();
        let mut detail = detail.into();
        if detail.trim().is_empty() {
            detail.clone_from(&title);
        }
        Self {
            kind: format!("{TYPE_PREFIX}{slug}"),
            title,
            status: status.as_u16(),
            detail,
            errors: Vec::new(),
            extensions: serde_json::Map::new(),
            retry_after: None,
        }
    }

    /// Adds field errors.
    #[must_use]
    pub fn errors(mut self, errors: impl IntoIterator<Item = FieldError>) -> Self {
        self.errors.extend(errors);
        self
    }

    /// Adds an extension member.
    #[must_use]
    pub fn extension(mut self, name: &str, value: impl Serialize) -> Self {
        if let Ok(v) = serde_json::to_value(value) {
            self.extensions.insert(name.to_owned(), v);
        }
        self
    }

    /// Adds a `Retry-After` header of `seconds`.
    #[must_use]
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
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad-request",
            "Malformed request",
            detail,
        )
    }

    /// 401: no or wrong credentials. The detail is the same for every cause
    /// (no header, another scheme, a wrong token), so it never hints which.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Authentication required",
            "this operation requires a valid bearer token",
        )
    }

    /// 404: no such resource (`detail` says which kind).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    /// 404 for a path no route serves (every router's fallback).
    pub fn no_route() -> Self {
        Self::not_found("nothing is served at this path")
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this path does not accept this method",
        )
    }

    /// 413: the body is over `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::too_large(format!("the body must be at most {limit} bytes"))
    }

    /// 413 when the limit is not known here (axum's body-limit rejection
    /// does not carry it).
    fn too_large(detail: String) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Request body too large",
            detail,
        )
    }

    /// 415: not `application/json`.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "expected Content-Type: application/json",
        )
    }

    /// 422: the request is well-formed but some fields are invalid. The
    /// detail names the first field (and how many more there are); `errors`
    /// names each.
    pub fn validation(errors: impl IntoIterator<Item = FieldError>) -> Self {
        let errors: Vec<FieldError> = errors.into_iter().collect();
        let detail = match errors.as_slice() {
            [] => "the request has invalid fields".to_owned(),
            [one] => format!("invalid field: {}", one.field),
            many => format!(
                "invalid fields: {}",
                many.iter()
                    .map(|e| e.field.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation",
            "The request has invalid fields",
            detail,
        )
        .errors(errors)
    }

    /// 503 with `Retry-After`: a dependency is unavailable.
    pub fn unavailable(detail: impl Into<String>, retry_after: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service temporarily unavailable",
            detail,
        )
        .retry_after(retry_after)
    }

    /// 503 `overloaded` with `Retry-After`: admission control refused the
    /// request before any work was done for it (SPEC §11).
    pub fn overloaded(detail: impl Into<String>, retry_after: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "Service overloaded",
            detail,
        )
        .retry_after(retry_after)
    }

    /// 500 — for bugs only; the cause is logged, never sent.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "the request could not be completed; the cause has been logged",
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

/// The HTTP writer of admission control's refusals: a 503 `overloaded`
/// problem with `Retry-After` — what [`crate::lifecycle::serve`] puts in
/// front of every public router.
#[derive(Debug, Clone, Copy, Default)]
pub struct OverloadedProblem;

impl shopeasy_resilience::admission::RefusalResponse<axum::body::Body> for OverloadedProblem {
    fn respond(&self, refusal: &shopeasy_resilience::admission::Refusal) -> Response {
        Problem::overloaded(refusal.detail(), refusal.retry_after_seconds())
            .extension("reason", refusal.reason.as_str())
            .into_response()
    }
}

impl From<JsonRejection> for Problem {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => Self::unsupported_media_type(),
            JsonRejection::JsonSyntaxError(e) => Self::bad_request(e.body_text()),
            JsonRejection::JsonDataError(e) => {
                // serde's message starts with the path ("items[0].quantity:
                // invalid type …"): the path becomes the field, the rest its
                // message, in the wire's words; one without a path is about
                // the whole body.
                let text = e.body_text();
                let message = text
                    .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                    .unwrap_or(&text);
                let (path, message) = match message.split_once(": ") {
                    Some((path, rest)) if !path.contains(' ') => (path, rest),
                    _ => ("", message),
                };
                Self::validation([wording::data_error("body", path, message)])
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Self::too_large("the body is larger than this endpoint accepts".to_owned())
            }
            other => Self::bad_request(other.body_text()),
        }
    }
}

impl From<QueryRejection> for Problem {
    /// A query that does not parse is a 422 naming the query.
    fn from(rejection: QueryRejection) -> Self {
        let text = rejection.body_text();
        let message = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text);
        Self::validation([wording::data_error("query", "", message)])
    }
}

impl From<PathRejection> for Problem {
    /// A segment that does not decode (`%FF`) is a 400 saying which; a
    /// route whose handler asks for a parameter it lacks is a bug (500).
    fn from(rejection: PathRejection) -> Self {
        if rejection.status().is_server_error() {
            tracing::error!(error = %rejection.body_text(), "path extractor misconfigured");
            return Self::internal();
        }
        Self::bad_request(rejection.body_text())
    }
}

/// `axum::Json` whose rejections are problems.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

/// `axum::extract::Path` whose rejections are problems.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

/// `axum::extract::Query` whose rejections are 422 problems naming the query.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let axum::Json(value) = axum::Json::from_request(req, state).await?;
        Ok(Self(value))
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let axum::extract::Query(value) =
            axum::extract::Query::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let axum::extract::Path(value) =
            axum::extract::Path::from_request_parts(parts, state).await?;
        Ok(Self(value))
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
        call_app(app, req).await
    }

    /// `req` answered by `app`: status, content type, JSON body (`null`
    /// when not JSON).
    async fn call_app(
        app: Router,
        req: http::Request<Body>,
    ) -> (StatusCode, String, serde_json::Value) {
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

    fn assert_complete(b: &serde_json::Value) {
        for member in ["type", "title", "detail"] {
            assert!(
                b[member].as_str().is_some_and(|v| !v.trim().is_empty()),
                "{member} in {b}"
            );
        }
        assert!(b["status"].is_u64(), "{b}");
    }

    #[tokio::test]
    async fn rejections_become_problems() {
        let (s, ct, b) = call(json("{not json")).await;
        assert_eq!((s, ct.as_str()), (StatusCode::BAD_REQUEST, CONTENT_TYPE));
        assert_eq!(b["type"], "urn:shopeasy:problem:bad-request");
        assert_complete(&b);

        let (s, _, b) = call(json(r#"{"quantity":"x"}"#)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(b["errors"][0]["field"], "quantity", "{b}");
        assert_eq!(b["detail"], "invalid field: quantity", "{b}");
        assert_eq!(
            b["errors"][0]["message"], "must be an integer, found a string",
            "{b}"
        );

        let (s, _, b) = call(json("{}")).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(b["errors"][0]["field"], "quantity", "{b}");
        assert_eq!(b["errors"][0]["message"], "is required", "{b}");
        assert_eq!(b["detail"], "invalid field: quantity", "{b}");

        let (s, _, b) = call(json("[]")).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(b["errors"][0]["field"], "body", "{b}");
        assert_eq!(b["errors"][0]["message"], "must be a JSON object", "{b}");

        let req = http::Request::post("/")
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("{}"))
            .unwrap();
        let (s, _, b) = call(req).await;
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_complete(&b);

        let (s, ct, b) = call(json(&format!(
            r#"{{"quantity":1,"pad":"{}"}}"#,
            "x".repeat(100)
        )))
        .await;
        assert_eq!(
            (s, ct.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, CONTENT_TYPE)
        );
        assert_complete(&b);
    }

    /// serde's real messages, through the extractor, come out in JSON's
    /// words (the shapes are `wording`'s; this holds them to serde_json's
    /// text).
    #[tokio::test]
    async fn field_errors_speak_json_not_rust() {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Line {
            quantity: i64,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Order {
            items: Vec<Line>,
            #[serde(default)]
            note: Option<String>,
            #[serde(default)]
            gift: bool,
            #[serde(default)]
            size: u8,
        }
        let app = Router::new().route("/", post(|Json(_o): Json<Order>| async { "ok" }));
        let cases = [
            (
                r#"{"items":[{"quantity":"2"}]}"#,
                "items[0].quantity",
                "must be an integer, found a string",
            ),
            (
                r#"{"items":[{"quantity":1.5}]}"#,
                "items[0].quantity",
                "must be an integer, found 1.5",
            ),
            (r#"{"items":[{}]}"#, "items[0].quantity", "is required"),
            (
                r#"{"items":[null]}"#,
                "items[0]",
                "must be a JSON object, found null",
            ),
            (
                r#"{"items":{}}"#,
                "items",
                "must be an array, found an object",
            ),
            (
                r#"{"items":[],"note":true}"#,
                "note",
                "must be a string, found true",
            ),
            (
                r#"{"items":[],"gift":"yes"}"#,
                "gift",
                "must be a boolean, found a string",
            ),
            (
                r#"{"items":[],"size":256}"#,
                "size",
                "must be an integer from 0 to 255, found 256",
            ),
            (r#"{"items":[],"items":[]}"#, "items", "must be sent once"),
            (
                r#"{"items":[],"colour":1}"#,
                "colour",
                "is not a known field",
            ),
            (r#"{}"#, "items", "is required"),
            (r#"[]"#, "body", "must be a JSON object"),
            (
                r#""order""#,
                "body",
                "must be a JSON object, found a string",
            ),
        ];
        for (body, field, message) in cases {
            let (s, _, b) = call_app(app.clone(), json(body)).await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
            assert_complete(&b);
            assert_eq!(
                (&b["errors"][0]["field"], &b["errors"][0]["message"]),
                (&field.into(), &message.into()),
                "{body}"
            );
        }
    }

    #[tokio::test]
    async fn a_bad_query_is_a_complete_422_naming_the_query() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Page {
            limit: u32,
        }
        let app = Router::new().route(
            "/",
            axum::routing::get(|Query(_p): Query<Page>| async { "ok" }),
        );
        let ask = |uri: &'static str| {
            let app = app.clone();
            async move {
                let req = http::Request::get(uri).body(Body::empty()).unwrap();
                let (s, _, b) = call_app(app, req).await;
                assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{uri}");
                assert_complete(&b);
                b
            }
        };
        let b = ask("/?limit=lots").await;
        assert_eq!(b["errors"][0]["field"], "query", "{b}");
        // A field the query lacks or repeats is named as itself.
        let b = ask("/?limit=1&limit=2").await;
        assert_eq!(b["errors"][0]["field"], "limit", "{b}");
        assert_eq!(b["errors"][0]["message"], "must be sent once", "{b}");
        let b = ask("/").await;
        assert_eq!(b["errors"][0]["field"], "limit", "{b}");
        assert_eq!(b["errors"][0]["message"], "is required", "{b}");
    }

    #[tokio::test]
    async fn a_path_segment_that_is_not_utf8_is_a_complete_400() {
        let app = Router::new().route(
            "/items/{id}",
            axum::routing::get(|Path(id): Path<String>| async move { id }),
        );
        let call = |uri: &'static str| {
            let app = app.clone();
            async move {
                let req = http::Request::get(uri).body(Body::empty()).unwrap();
                app.oneshot(req).await.unwrap()
            }
        };
        let res = call("/items/%FF").await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(res.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        let b: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(b["type"], "urn:shopeasy:problem:bad-request", "{b}");
        assert!(b["detail"].as_str().unwrap().contains("UTF-8"), "{b}");
        assert_complete(&b);
        assert_eq!(call("/items/%C3%A9").await.status(), StatusCode::OK);
    }

    #[test]
    fn a_page_limit_is_its_default_or_a_whole_number_in_range() {
        assert_eq!(page_limit(None, 20, 100), Ok(20));
        assert_eq!(page_limit(Some("1"), 20, 100), Ok(1));
        assert_eq!(page_limit(Some("100"), 20, 100), Ok(100));
        for bad in ["", "0", "101", "-1", "x", "1.5", "99999999999"] {
            assert_eq!(
                page_limit(Some(bad), 20, 100),
                Err(FieldError::new(
                    "limit",
                    "must be a whole number from 1 to 100"
                )),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_shorthand_has_type_title_status_and_detail() {
        let problems = [
            Problem::bad_request("unreadable"),
            Problem::unauthorized(),
            Problem::not_found("no such thing"),
            Problem::no_route(),
            Problem::method_not_allowed(),
            Problem::payload_too_large(64),
            Problem::unsupported_media_type(),
            Problem::validation([]),
            Problem::validation([FieldError::new("a", "bad"), FieldError::new("b", "bad")]),
            Problem::unavailable("the database is unavailable", 1),
            Problem::overloaded("at its concurrency limit", 1),
            Problem::internal(),
        ];
        for p in problems {
            assert_complete(&serde_json::to_value(&p).unwrap());
        }
        assert_eq!(
            Problem::validation([FieldError::new("a", "x"), FieldError::new("b", "y")]).detail,
            "invalid fields: a, b"
        );
    }

    #[test]
    fn an_empty_detail_is_replaced_by_the_title() {
        let p = Problem::new(StatusCode::CONFLICT, "clash", "Clash", " ");
        assert_eq!(p.detail, "Clash");
    }

    #[test]
    fn unauthorized_never_says_why() {
        // One constructor without arguments: a caller cannot pass the cause.
        let body = serde_json::to_string(&Problem::unauthorized()).unwrap();
        for hint in ["missing", "wrong", "invalid", "expired"] {
            assert!(!body.contains(hint), "{body}");
        }
    }

    #[test]
    fn retry_after_becomes_a_header() {
        let res = Problem::unavailable("inventory unavailable", 2).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "2");
    }
}
