//! The one place where Inventory's [`Error`] becomes a gRPC status.
//!
//! Structured details travel in the status details (`grpc-status-details-bin`)
//! as the encoded message itself, readable with `prost::Message::decode` on
//! `Status::details()`:
//! - FAILED_PRECONDITION from `ReserveStock`: `InsufficientStock`;
//! - INVALID_ARGUMENT: `FieldViolations`, one per bad field (the message
//!   names the fields too).
//!
//! Internal causes are logged here and never sent.

use prost::{Message, bytes::Bytes};
use shopeasy_proto::inventory::v1 as pb;
use tonic::{Code, Status};

use crate::Error;

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::InvalidArgument(violations) => {
                let details = pb::FieldViolations {
                    violations: violations
                        .into_iter()
                        .map(|v| pb::FieldViolation {
                            field: v.field,
                            description: v.description,
                        })
                        .collect(),
                };
                Status::with_details(
                    Code::InvalidArgument,
                    message,
                    Bytes::from(details.encode_to_vec()),
                )
            }
            Error::Unauthenticated => Status::unauthenticated(message),
            Error::UnknownProduct(_) => Status::not_found(message),
            Error::InsufficientStock(shortages) => {
                let details = pb::InsufficientStock {
                    lines: shortages
                        .into_iter()
                        .map(|s| pb::ShortLine {
                            product_id: s.product_id.to_string(),
                            requested: s.requested,
                            available: s.available,
                        })
                        .collect(),
                };
                Status::with_details(
                    Code::FailedPrecondition,
                    message,
                    Bytes::from(details.encode_to_vec()),
                )
            }
            Error::ReservationConflict(_) => Status::already_exists(message),
            Error::ReservationReleased(_) => Status::failed_precondition(message),
            Error::DeadlineExceeded => Status::deadline_exceeded(message),
            Error::Unavailable(cause) => {
                tracing::warn!(error = %cause, "database unavailable");
                Status::unavailable("database unavailable; safe to retry")
            }
            Error::Internal(cause) => {
                tracing::error!(error = %cause, "internal error");
                Status::internal("internal error")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ProductId, Shortage, Violation};

    const P: &str = "6f1c7a52-2c1e-4b8e-9d6a-0b7f6f0e7c11";

    #[test]
    fn insufficient_stock_carries_decodable_details() {
        let status = Status::from(Error::InsufficientStock(vec![Shortage {
            product_id: ProductId::parse("p", P).unwrap(),
            requested: 3,
            available: 1,
        }]));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(status.message().contains(P), "{}", status.message());
        let details = pb::InsufficientStock::decode(status.details()).unwrap();
        assert_eq!(details.lines[0].product_id, P);
        assert_eq!(
            (details.lines[0].requested, details.lines[0].available),
            (3, 1)
        );
    }

    #[test]
    fn invalid_argument_names_the_fields() {
        let status = Status::from(Error::from(vec![Violation {
            field: "lines[0].quantity".into(),
            description: "must be between 1 and 1000, got 0".into(),
        }]));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("lines[0].quantity"));
        let details = pb::FieldViolations::decode(status.details()).unwrap();
        assert_eq!(details.violations[0].field, "lines[0].quantity");
    }

    #[test]
    fn internal_causes_are_not_sent() {
        let status = Status::from(Error::Internal(sqlx::Error::Protocol(
            "secret detail".into(),
        )));
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("secret"));
        let status = Status::from(Error::Unavailable(sqlx::Error::PoolTimedOut));
        assert_eq!(status.code(), Code::Unavailable);
    }
}
