//! The console's one error enum, mapped onto problem+json in one place.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::Problem;

/// Everything a console route can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No or wrong admin token (never says which).
    #[error("this change requires the admin token")]
    Unauthorized,
    /// The console was started without an admin token: nothing can change.
    #[error(
        "this console is read-only: it was started without an admin token (ADMIN_TOKEN), \
         so it shows everything and changes nothing"
    )]
    ReadOnly,
    /// The browser says the request comes from another site.
    #[error("cross-origin request refused ({0})")]
    CrossOrigin(String),
    /// A `Host` that is not loopback while the console is loopback-only.
    #[error("the console answers only loopback hosts, not {0:?}")]
    ForeignHost(String),
    /// The request is malformed (the detail says how).
    #[error("{0}")]
    BadRequest(String),
    /// This console has no such part (no load generator, no gateway).
    #[error("{0}")]
    NotAvailable(String),
    /// The fault API or the gateway did not answer.
    #[error("{0}")]
    Upstream(String),
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let detail = self.to_string();
        let problem = match &self {
            Self::Unauthorized => {
                let mut res = Problem::unauthorized().into_response();
                res.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"shopeasy-console\""),
                );
                return res;
            }
            Self::CrossOrigin(_) | Self::ForeignHost(_) | Self::ReadOnly => {
                Problem::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
            }
            Self::BadRequest(_) => Problem::bad_request(detail),
            Self::NotAvailable(_) => Problem::new(
                StatusCode::NOT_IMPLEMENTED,
                "not-available",
                "Not available here",
                detail,
            ),
            Self::Upstream(_) => {
                tracing::warn!(error = %detail, "console upstream failed");
                Problem::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream",
                    "Upstream failed",
                    detail,
                )
            }
        };
        problem.into_response()
    }
}
