//! The one place where the service's [`Error`] becomes an HTTP answer.
//! Internal details are logged here and never sent.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use shopeasy_runtime::problem::{FieldError, Problem};

use crate::Error;

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        problem(&self).into_response()
    }
}

/// The problem for `error`.
pub(crate) fn problem(error: &Error) -> Problem {
    match error {
        Error::NotFound => Problem::not_found("no product has this id"),
        Error::DuplicateSku => Problem::new(
            StatusCode::CONFLICT,
            "duplicate-sku",
            "Duplicate SKU",
            "another product already has this SKU",
        )
        .errors([FieldError::new("sku", "is already used by another product")]),
        Error::Invalid(invalid) => Problem::validation(
            invalid
                .0
                .iter()
                .map(|i| FieldError::new(i.field, i.message.clone())),
        ),
        Error::Unavailable(cause) => {
            tracing::warn!(error = %cause, "database unavailable");
            Problem::unavailable("the catalogue database is unavailable", 1)
        }
        Error::Internal(cause) => {
            tracing::error!(error = %cause, "internal error");
            Problem::internal()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::{FieldIssue, Invalid};

    use super::*;

    #[test]
    fn every_error_has_its_status_and_no_internals() {
        let internal = Error::Internal(std::sync::Arc::new(std::io::Error::other("secret")));
        let cases = [
            (Error::NotFound, 404),
            (Error::DuplicateSku, 409),
            (
                Error::Invalid(Invalid(vec![FieldIssue {
                    field: "sku",
                    message: "bad".into(),
                }])),
                422,
            ),
            (
                Error::Unavailable(std::sync::Arc::new(sqlx::Error::PoolTimedOut)),
                503,
            ),
            (internal, 500),
        ];
        for (error, status) in cases {
            let p = problem(&error);
            assert_eq!(p.status, status);
            assert!(!p.detail.trim().is_empty(), "{error:?} has a detail");
            let text = serde_json::to_string(&p).unwrap();
            assert!(!text.contains("secret") && !text.contains("pool"), "{text}");
        }
    }
}
