//! The gRPC adapter: `shopeasy.inventory.v1.InventoryService` over the
//! [`Store`].
//!
//! Each method is an adapter only: read the deadline (and, for `SetStock`,
//! the admin token; for `ReserveStock` and `ReleaseStock`, the service
//! token) from the metadata, parse the message into domain types,
//! call the store, map the answer. Errors become statuses in one place,
//! `status`. The metadata is read by the workspace's shared pieces: the
//! `grpc-timeout` by `shopeasy_resilience::deadline` (the parser order's
//! clients write it with), the bearer token by `shopeasy_runtime::auth` (the
//! check product's admin routes use).

pub mod observe;
mod status;

use std::time::Duration;

use shopeasy_proto::inventory::v1::{
    self as pb, GetStockRequest, GetStockResponse, ReleaseStockRequest, ReleaseStockResponse,
    ReserveStockRequest, ReserveStockResponse, SetStockRequest, SetStockResponse,
    inventory_service_server::InventoryService,
};
use shopeasy_resilience::deadline::{Deadline, HasDeadline};
use shopeasy_runtime::{auth, settings::Secret};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::{
    Error,
    domain::{self, Line, ProductId, Reservation, ReservationId},
    store::Store,
};

/// The bearer tokens the service admits, by who may call what.
///
/// Two tokens rather than one: the service credential is held by every
/// order replica and may only move stock through reservations; the admin
/// token (`SetStock`, which sets any level) stays with operators.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `SetStock`'s token (`admin_token`).
    pub admin: Secret,
    /// `ReserveStock` and `ReleaseStock`'s token (`service_token`), held by
    /// the order service (`inventory.service_token`).
    pub service: Secret,
}

/// The Inventory gRPC service.
#[derive(Debug, Clone)]
pub struct InventoryApi {
    store: Store,
    credentials: Credentials,
    cap: Duration,
}

impl InventoryApi {
    /// Serves `store`; `SetStock` requires the admin token, `ReserveStock`
    /// and `ReleaseStock` the service token, `GetStock` neither (reads stay
    /// open inside the cluster); no call works longer than `cap`, or the
    /// caller's `grpc-timeout` if shorter.
    pub fn new(store: Store, credentials: Credentials, cap: Duration) -> Self {
        Self {
            store,
            credentials,
            cap,
        }
    }

    /// When this call's work must end (see [`work_deadline`]).
    fn deadline<T>(&self, request: &Request<T>) -> Instant {
        work_deadline(request, self.cap)
    }

    /// Checks `authorization: Bearer <expected>` (constant time, the
    /// same UNAUTHENTICATED answer for every failure).
    fn authorize<T>(request: &Request<T>, expected: &Secret) -> Result<(), Error> {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if auth::is_authorized(expected, authorization) {
            Ok(())
        } else {
            Err(Error::Unauthenticated)
        }
    }
}

/// The earlier of the caller's `grpc-timeout` (none, or a malformed one, is
/// no deadline, as gRPC says) and `cap` from now: no call works longer than
/// either (tonic's server does the same, SPEC §4).
fn work_deadline<T>(request: &Request<T>, cap: Duration) -> Instant {
    let cap = Deadline::after(cap);
    HasDeadline::deadline(request)
        .map_or(cap, |caller| caller.earliest(cap))
        .instant()
}

fn to_pb(lines: Vec<Line>) -> Vec<pb::StockLine> {
    lines
        .into_iter()
        .map(|l| pb::StockLine {
            product_id: l.product_id.to_string(),
            quantity: l.quantity,
        })
        .collect()
}

#[tonic::async_trait]
impl InventoryService for InventoryApi {
    async fn get_stock(
        &self,
        request: Request<GetStockRequest>,
    ) -> Result<Response<GetStockResponse>, Status> {
        let deadline = self.deadline(&request);
        let product_id = request.into_inner().product_id;
        let product = ProductId::parse("product_id", &product_id).map_err(Error::from)?;
        let available = self.store.get_stock(&product, deadline).await?;
        Ok(Response::new(GetStockResponse {
            product_id,
            available,
        }))
    }

    async fn reserve_stock(
        &self,
        request: Request<ReserveStockRequest>,
    ) -> Result<Response<ReserveStockResponse>, Status> {
        Self::authorize(&request, &self.credentials.service)?;
        let deadline = self.deadline(&request);
        let message = request.into_inner();
        let reservation = Reservation::parse(
            &message.reservation_id,
            message
                .lines
                .iter()
                .map(|l| (l.product_id.as_str(), l.quantity)),
        )
        .map_err(Error::from)?;
        let reserved = self.store.reserve(&reservation, deadline).await?;
        Ok(Response::new(ReserveStockResponse {
            reservation_id: message.reservation_id,
            lines: to_pb(reserved.lines),
            replayed: reserved.replayed,
        }))
    }

    async fn release_stock(
        &self,
        request: Request<ReleaseStockRequest>,
    ) -> Result<Response<ReleaseStockResponse>, Status> {
        Self::authorize(&request, &self.credentials.service)?;
        let deadline = self.deadline(&request);
        let raw = request.into_inner().reservation_id;
        let id = ReservationId::parse("reservation_id", &raw).map_err(Error::from)?;
        let released = self.store.release(&id, deadline).await?;
        Ok(Response::new(ReleaseStockResponse {
            released: to_pb(released),
        }))
    }

    async fn set_stock(
        &self,
        request: Request<SetStockRequest>,
    ) -> Result<Response<SetStockResponse>, Status> {
        Self::authorize(&request, &self.credentials.admin)?;
        let deadline = self.deadline(&request);
        let message = request.into_inner();
        let mut violations = Vec::new();
        let product = ProductId::parse("product_id", &message.product_id)
            .map_err(|v| violations.push(v))
            .ok();
        let available = domain::parse_available(message.available)
            .map_err(|v| violations.push(v))
            .ok();
        let (Some(product), Some(available)) = (product, available) else {
            return Err(Error::InvalidArgument(violations).into());
        };
        let available = self.store.set_stock(&product, available, deadline).await?;
        Ok(Response::new(SetStockResponse {
            product_id: message.product_id,
            available,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timeout(value: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(value) = value {
            request
                .metadata_mut()
                .insert("grpc-timeout", value.parse().unwrap());
        }
        request
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_grpc_timeout_of_any_unit_bounds_the_work() {
        let cap = Duration::from_secs(7200);
        let now = Instant::now();
        for (value, budget) in [
            ("1000000u", Duration::from_secs(1)),
            ("250m", Duration::from_millis(250)),
            ("2S", Duration::from_secs(2)),
            ("1M", Duration::from_secs(60)),
            ("1H", Duration::from_secs(3600)),
            ("5n", Duration::from_nanos(5)),
        ] {
            assert_eq!(
                work_deadline(&with_timeout(Some(value)), cap),
                now + budget,
                "{value}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_missing_or_malformed_grpc_timeout_leaves_the_cap() {
        let cap = Duration::from_secs(2);
        let capped = Instant::now() + cap;
        assert_eq!(work_deadline(&with_timeout(None), cap), capped);
        assert_eq!(work_deadline(&with_timeout(Some("5S")), cap), capped);
        for bad in ["", "m", "123456789m", "12x", "-1m", "1.5S"] {
            assert_eq!(
                work_deadline(&with_timeout(Some(bad)), cap),
                capped,
                "{bad:?}"
            );
        }
    }
}
