//! Shared by the integration tests: a real Inventory server on 127.0.0.1:0,
//! a tonic client to it, and a TCP forwarder that can be switched off to
//! make the database unreachable.

// Test support: each test binary uses part of it, and a failed set-up
// should panic on the spot.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use shopeasy_inventory::{App, InventorySettings, Store};
use shopeasy_proto::inventory::v1::{
    SetStockRequest, inventory_service_client::InventoryServiceClient,
};
use shopeasy_runtime::{
    lifecycle::{self, Bound},
    settings::{Seconds, Secret, SecretUrl},
};
use tokio::{net::TcpListener, sync::Mutex};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// The admin token every test server uses.
pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The service token (order's credential) every test server uses.
pub const SERVICE_TOKEN: &str = "test-service-token-of-32-characters!";

/// `message` as a request carrying the service token, as order sends it.
pub fn as_service<T>(message: T) -> tonic::Request<T> {
    with_bearer(message, SERVICE_TOKEN)
}

/// `message` as a request carrying `Authorization: Bearer <token>`.
pub fn with_bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// A running server, stopped on drop.
pub struct Running {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub store: Store,
    server: lifecycle::Running,
}

impl Running {
    /// A client on a fresh connection.
    pub async fn client(&self) -> InventoryServiceClient<Channel> {
        InventoryServiceClient::new(self.channel().await)
    }

    /// A fresh channel to the server.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// GET on the admin listener: status and body.
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("http://{}{path}", self.admin_addr))
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// Sets a product's stock as the admin.
    pub async fn set_stock(&self, product_id: &str, available: i64) {
        let mut request = tonic::Request::new(SetStockRequest {
            product_id: product_id.into(),
            available,
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
        );
        self.client().await.set_stock(request).await.unwrap();
    }

    /// Stops the server and waits for it (bounded).
    pub async fn stop(self) {
        tokio::time::timeout(Duration::from_secs(15), self.server.stop())
            .await
            .expect("server stops")
            .unwrap();
    }
}

/// Settings for a test server on `database_url`.
pub fn settings(database_url: &str) -> InventorySettings {
    let mut s = InventorySettings {
        admin_token: Secret::new(ADMIN_TOKEN),
        service_token: Secret::new(SERVICE_TOKEN),
        ..InventorySettings::default()
    };
    s.process.ephemeral();
    s.storage.database_url = SecretUrl::new(database_url);
    s.storage.database.startup_timeout_seconds = Seconds::new(5.0);
    s
}

/// Builds and starts a server with `settings`.
pub async fn start(settings: InventorySettings) -> Running {
    let bound = Bound::<App>::build(settings).await.expect("app builds");
    let store = bound.service().store().clone();
    let server = bound.start();
    Running {
        addr: server.local_addr(),
        admin_addr: server.admin_addr(),
        store,
        server,
    }
}

/// A fresh product id.
pub fn product() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Forwards TCP from its own port to `upstream` while up; when taken down
/// it stops listening and cuts every open connection, so the port refuses.
pub struct Forwarder {
    pub port: u16,
    upstream: SocketAddr,
    state: Arc<Mutex<Option<CancellationToken>>>,
}

impl Forwarder {
    /// Starts forwarding on a fresh port.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let fwd = Self {
            port,
            upstream,
            state: Arc::default(),
        };
        fwd.serve(listener).await;
        fwd
    }

    async fn serve(&self, listener: TcpListener) {
        let token = CancellationToken::new();
        *self.state.lock().await = Some(token.clone());
        let upstream = self.upstream;
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    () = token.cancelled() => return,
                    r = listener.accept() => match r { Ok(c) => c, Err(_) => return },
                };
                let token = token.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        () = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
    }

    /// Stops listening and cuts every forwarded connection.
    pub async fn down(&self) {
        if let Some(token) = self.state.lock().await.take() {
            token.cancel();
        }
        // Wait until the port refuses (the accept loop has dropped it).
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let refused = tokio::time::timeout(Duration::from_secs(5), async {
            while tokio::net::TcpStream::connect(addr).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(refused.is_ok(), "forwarder port still accepts");
    }

    /// Listens again on the same port.
    pub async fn up(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serve(listener).await;
    }

    /// The database URL `url` rewritten to go through this forwarder.
    pub fn url(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).unwrap();
        u.set_host(Some("127.0.0.1")).unwrap();
        u.set_port(Some(self.port)).unwrap();
        u.to_string()
    }
}

/// The host:port of a Postgres URL.
pub fn postgres_addr(url: &str) -> SocketAddr {
    let u = url::Url::parse(url).unwrap();
    let host = match u.host_str().unwrap() {
        "localhost" => "127.0.0.1",
        h => h,
    };
    format!("{host}:{}", u.port().unwrap_or(5432))
        .parse()
        .unwrap()
}
