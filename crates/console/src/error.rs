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
    /// No such thing to start (a scene's name).
    #[error("{0}")]
    NotFound(String),
    /// Something already breaks the system on purpose (a scene, or
    /// presentation mode): one at a time (see [`crate::stage`]).
    #[error("{0}")]
    Busy(String),
    /// The path is a control, but not for this method (`allow` is its
    /// method).
    #[error("{detail}")]
    WrongMethod {
        /// The method the path takes, for the `Allow` header.
        allow: &'static str,
        /// What was refused and what to send instead.
        detail: String,
    },
    /// The gateway refused a purchase: its status and public `detail`
    /// (out of stock, overloaded), passed on as a 502.
    #[error("{0}")]
    Refused(String),
    /// A part of the system behind the console (the fault API, the
    /// gateway, the load generator) failed. Its `cause` may name internal
    /// addresses, so it is logged and never returned: the detail names only
    /// which part failed.
    #[error("{upstream} failed; the console's log says why")]
    Upstream {
        /// Which part, as the page names it (`"the fault API"`).
        upstream: &'static str,
        /// What went wrong (logged only).
        cause: String,
    },
}

impl ConsoleError {
    /// [`ConsoleError::Upstream`]: `upstream` failed because of `cause`.
    pub fn upstream(upstream: &'static str, cause: impl std::fmt::Display) -> Self {
        Self::Upstream {
            upstream,
            cause: cause.to_string(),
        }
    }
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
            Self::NotFound(_) => Problem::not_found(detail),
            Self::Busy(_) => Problem::new(StatusCode::CONFLICT, "busy", "Busy", detail),
            Self::NotAvailable(_) => Problem::new(
                StatusCode::NOT_IMPLEMENTED,
                "not-available",
                "Not available here",
                detail,
            ),
            Self::WrongMethod { allow, .. } => {
                let mut res = Problem::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method-not-allowed",
                    "Method not allowed",
                    detail,
                )
                .into_response();
                res.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
                return res;
            }
            Self::Refused(_) => Problem::new(
                StatusCode::BAD_GATEWAY,
                "upstream",
                "Upstream refused",
                detail,
            ),
            Self::Upstream { upstream, cause } => {
                tracing::warn!(upstream = *upstream, %cause, "console upstream failed");
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
