//! The generated client and server talk over an in-memory channel.

use shopeasy_proto::inventory::v1::{
    GetStockRequest, GetStockResponse, ReleaseStockRequest, ReleaseStockResponse,
    ReserveStockRequest, ReserveStockResponse, SetStockRequest, SetStockResponse,
    inventory_service_client::InventoryServiceClient,
    inventory_service_server::{InventoryService, InventoryServiceServer},
};
use tonic::{Request, Response, Status, transport::Endpoint};

struct Fixed;

#[tonic::async_trait]
impl InventoryService for Fixed {
    async fn get_stock(
        &self,
        r: Request<GetStockRequest>,
    ) -> Result<Response<GetStockResponse>, Status> {
        let product_id = r.into_inner().product_id;
        if product_id == "unknown" {
            return Err(Status::not_found("no such product"));
        }
        Ok(Response::new(GetStockResponse {
            product_id,
            available: 7,
        }))
    }
    async fn reserve_stock(
        &self,
        _: Request<ReserveStockRequest>,
    ) -> Result<Response<ReserveStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn release_stock(
        &self,
        _: Request<ReleaseStockRequest>,
    ) -> Result<Response<ReleaseStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn set_stock(
        &self,
        _: Request<SetStockRequest>,
    ) -> Result<Response<SetStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
}

#[tokio::test]
async fn client_and_server_talk_in_memory() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(InventoryServiceServer::new(Fixed))
            .serve_with_incoming(tokio_stream::once(Ok::<_, std::io::Error>(server_io))),
    );
    let mut client_io = Some(client_io);
    let channel = Endpoint::from_static("http://in-memory")
        .connect_with_connector(tower::service_fn(move |_| {
            let io = client_io.take();
            async move {
                io.map(hyper_util::rt::TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("one connection only"))
            }
        }))
        .await
        .unwrap();
    let mut client = InventoryServiceClient::new(channel);

    let stock = client
        .get_stock(GetStockRequest {
            product_id: "p1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((stock.product_id.as_str(), stock.available), ("p1", 7));

    let err = client
        .get_stock(GetStockRequest {
            product_id: "unknown".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[test]
fn descriptor_set_names_the_service() {
    use prost::Message;
    let fds = prost_types::FileDescriptorSet::decode(shopeasy_proto::FILE_DESCRIPTOR_SET).unwrap();
    let services: Vec<&str> = fds
        .file
        .iter()
        .flat_map(|f| f.service.iter().map(|s| s.name()))
        .collect();
    assert_eq!(services, ["InventoryService"]);
}
