//! The gRPC adapter: `shopeasy.inventory.v1.InventoryService` over the
//! [`Store`].
//!
//! Each method is an adapter only: read the deadline (and, for `SetStock`,
//! the bearer token) from the metadata, parse the message into domain types,
//! call the store, map the answer. Errors become statuses in one place,
//! `status`.

mod deadline;
pub mod observe;
mod status;

use std::time::Duration;

use shopeasy_proto::inventory::v1::{
    self as pb, GetStockRequest, GetStockResponse, ReleaseStockRequest, ReleaseStockResponse,
    ReserveStockRequest, ReserveStockResponse, SetStockRequest, SetStockResponse,
    inventory_service_server::InventoryService,
};
use shopeasy_runtime::settings::Secret;
use tokio::time::Instant;
use tonic::{Request, Response, Status, metadata::MetadataMap};

use crate::{
    Error,
    domain::{self, Line, ProductId, Reservation, ReservationId},
    store::Store,
};

/// The Inventory gRPC service.
#[derive(Debug, Clone)]
pub struct InventoryApi {
    store: Store,
    admin_token: Secret,
    cap: Duration,
}

impl InventoryApi {
    /// Serves `store`; `SetStock` requires `admin_token`; no call works
    /// longer than `cap`, or the caller's `grpc-timeout` if shorter.
    pub fn new(store: Store, admin_token: Secret, cap: Duration) -> Self {
        Self {
            store,
            admin_token,
            cap,
        }
    }

    /// When this call's work must end: now plus the shorter of the caller's
    /// `grpc-timeout` and the server's cap.
    fn deadline(&self, metadata: &MetadataMap) -> Instant {
        let budget = deadline::grpc_timeout(metadata).map_or(self.cap, |t| t.min(self.cap));
        Instant::now() + budget
    }

    /// Checks `authorization: Bearer <admin token>` in constant time.
    fn authorize(&self, metadata: &MetadataMap) -> Result<(), Error> {
        let token = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .unwrap_or_default();
        if self.admin_token.matches(token) {
            Ok(())
        } else {
            Err(Error::Unauthenticated)
        }
    }
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
        let deadline = self.deadline(request.metadata());
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
        let deadline = self.deadline(request.metadata());
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
        let deadline = self.deadline(request.metadata());
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
        self.authorize(request.metadata())?;
        let deadline = self.deadline(request.metadata());
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
