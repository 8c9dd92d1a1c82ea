//! What every HTTP service's OpenAPI document shares (feature `openapi`):
//! the schema of the [`problem`](crate::problem) body, the bearer security
//! scheme its operations name, and the route that serves the document.
//!
//! Why here: the problem body is built by [`crate::problem::Problem`] for
//! every service alike, so its schema belongs beside it, written once; a
//! service documenting its own copy could drift from what is sent. Each
//! service keeps what is its own: its operations (the `#[utoipa::path]`
//! annotations of its handlers), its answers, and its document's text.

use axum::{
    http::header,
    response::IntoResponse,
    routing::{MethodRouter, get},
};
use bytes::Bytes;
use utoipa::{
    Modify, ToSchema,
    openapi::{
        OpenApi,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

/// An RFC 9457 problem, as every error is sent (documentation only: the
/// body is built by [`crate::problem::Problem`]). A service's operations
/// say which problem types add members of their own.
#[derive(Debug, ToSchema)]
#[schema(
    description = "An RFC 9457 problem, as every error is sent. Some problem types add \
members of their own; the operation that answers them says which."
)]
#[allow(dead_code)]
pub struct ProblemDetails {
    /// `urn:shopeasy:problem:<slug>`, for example
    /// `urn:shopeasy:problem:overloaded`.
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

/// One invalid field of a validation problem (documentation only: the
/// field is built by [`crate::problem::FieldError`]).
#[derive(Debug, ToSchema)]
#[schema(description = "One invalid field of a validation problem.")]
#[allow(dead_code)]
pub struct FieldErrorDoc {
    /// The field's path, for example `items[2].quantity` or `limit`.
    field: String,
    /// What is wrong with it.
    message: String,
}

/// Declares an HTTP bearer security scheme under `name`, the name the
/// operations' `security(...)` requirements use (a document modifier:
/// `#[openapi(modifiers(&SCHEME))]`).
#[derive(Debug, Clone, Copy)]
pub struct BearerScheme {
    /// The scheme's name in `components.securitySchemes`.
    pub name: &'static str,
    /// `bearerFormat`, when the token has one (`JWT`).
    pub format: Option<&'static str>,
    /// What the token is and where a client gets one.
    pub description: Option<&'static str>,
}

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut OpenApi) {
        let mut scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer);
        if let Some(format) = self.format {
            scheme = scheme.bearer_format(format);
        }
        let scheme = scheme.description(self.description).build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(self.name, SecurityScheme::Http(scheme));
    }
}

/// `GET`, anonymously, of `document` as JSON, rendered once here: the
/// document describes the API and reveals no data, and serving it costs a
/// reference count, not a serialisation, per request.
pub fn route<S>(document: &OpenApi) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let text = Bytes::from(document.to_json().unwrap_or_else(|_| "{}".to_owned()));
    get(move || {
        let text = text.clone();
        async move { ([(header::CONTENT_TYPE, "application/json")], text).into_response() }
    })
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi as _;

    use super::*;

    const SCHEME: BearerScheme = BearerScheme {
        name: "bearerAuth",
        format: Some("JWT"),
        description: Some("An access token."),
    };

    #[derive(utoipa::OpenApi)]
    #[openapi(modifiers(&SCHEME), components(schemas(ProblemDetails, FieldErrorDoc)))]
    struct Doc;

    #[test]
    fn the_scheme_and_the_problem_schema_are_declared_once_as_named() {
        let doc = serde_json::to_value(Doc::openapi()).unwrap();
        let scheme = &doc["components"]["securitySchemes"]["bearerAuth"];
        assert_eq!(scheme["type"], "http", "{scheme}");
        assert_eq!(scheme["scheme"], "bearer", "{scheme}");
        assert_eq!(scheme["bearerFormat"], "JWT", "{scheme}");
        assert_eq!(scheme["description"], "An access token.", "{scheme}");
        let problem = &doc["components"]["schemas"]["ProblemDetails"];
        let required: Vec<&str> = problem["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for member in ["type", "title", "status", "detail"] {
            assert!(required.contains(&member), "{member} required: {problem}");
        }
        assert!(!required.contains(&"errors"), "{problem}");
        assert!(
            doc["components"]["schemas"]["FieldErrorDoc"]["properties"]["field"].is_object(),
            "{doc}"
        );
    }

    #[test]
    fn a_scheme_without_a_format_declares_none() {
        let mut doc = utoipa::openapi::OpenApiBuilder::new().build();
        BearerScheme {
            name: "bearer",
            format: None,
            description: None,
        }
        .modify(&mut doc);
        let doc = serde_json::to_value(doc).unwrap();
        let scheme = &doc["components"]["securitySchemes"]["bearer"];
        assert_eq!(scheme["scheme"], "bearer", "{scheme}");
        assert!(scheme.get("bearerFormat").is_none(), "{scheme}");
        assert!(scheme.get("description").is_none(), "{scheme}");
    }

    #[tokio::test]
    async fn the_route_serves_the_document_as_json() {
        use tower::ServiceExt as _;
        let doc = Doc::openapi();
        let app = axum::Router::new().route("/doc.json", route(&doc));
        let response = app
            .oneshot(
                axum::http::Request::get("/doc.json")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let served: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(served, serde_json::to_value(&doc).unwrap());
    }
}
