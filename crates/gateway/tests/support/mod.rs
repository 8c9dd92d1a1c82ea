//! Shared by the gateway's tests: the one signing key every test trusts,
//! the `auth` settings that trust it, and tokens signed with it locally (no
//! issuer process needed); the gateway under test with the settings that
//! point it at a test's upstreams; an HTTP client; and raw HTTP/1.1 reading
//! for the tests whose fakes speak TCP.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use shopeasy_gateway::{App, GatewaySettings};
use shopeasy_identity::{AuthSettings, DemoIssuer, DemoIssuerConfig, DemoKey};
use shopeasy_runtime::{
    lifecycle::{self, Running},
    settings::Seconds,
};
use shopeasy_testkit::Metrics;
use tokio::io::{AsyncRead, AsyncReadExt};

// ---------------------------------------------------------------- identity

/// The test signing key (a fixed seed, so every run signs alike).
pub fn key() -> DemoKey {
    DemoKey::from_seed([42; 32]).unwrap()
}

/// An issuer with [`key`] and the default issuer, audience and lifetime,
/// which the default `auth` settings expect.
pub fn issuer() -> DemoIssuer {
    DemoIssuer::new(key(), DemoIssuerConfig::default())
}

/// `auth` settings trusting [`key`] through a configured public key.
pub fn auth() -> AuthSettings {
    AuthSettings {
        public_key_pem: key().public_key_pem(),
        ..AuthSettings::default()
    }
}

/// A valid access token for `customer`.
pub fn token(customer: &str) -> String {
    issuer().issue(customer).unwrap().access_token
}

/// `Authorization` for `customer`: `Bearer <token>`.
pub fn bearer(customer: &str) -> String {
    format!("Bearer {}", token(customer))
}

// ---------------------------------------------------------------- gateway

/// Ephemeral settings routing `/api/products*` to `product` and
/// `/api/orders*` to `order`, with the given activity and connect timeouts
/// and `auth` trusting [`key`].
pub fn settings(
    product: SocketAddr,
    order: SocketAddr,
    activity: Seconds,
    connect: Seconds,
) -> GatewaySettings {
    let mut s = GatewaySettings::default();
    s.process.ephemeral();
    s.routes.product_url = format!("http://{product}");
    s.routes.order_url = format!("http://{order}");
    s.resilience.gateway.activity_timeout_seconds = activity;
    s.resilience.gateway.connect_timeout_seconds = connect;
    s.auth = auth();
    s
}

/// The gateway under test; stopped when dropped.
pub struct Gateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    _server: Running,
}

/// Starts the gateway with `settings`.
pub async fn gateway(settings: GatewaySettings) -> Gateway {
    let server = lifecycle::spawn::<App>(settings).await.unwrap();
    Gateway {
        addr: server.local_addr(),
        admin: server.admin_addr(),
        _server: server,
    }
}

impl Gateway {
    /// `path` on the gateway's public listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET path` with `http` as `customer`, with a fresh token.
    pub async fn get_as(
        &self,
        http: &reqwest::Client,
        path: &str,
        customer: &str,
    ) -> reqwest::Response {
        http.get(self.url(path))
            .bearer_auth(token(customer))
            .send()
            .await
            .unwrap()
    }

    /// The admin listener's `/metrics`, as text.
    pub async fn metrics_text(&self) -> String {
        http()
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The admin listener's `/metrics`, parsed.
    pub async fn metrics(&self) -> Metrics {
        Metrics::parse(&self.metrics_text().await)
    }

    /// The gateway's open-connections gauge (0 before it is set).
    pub async fn open_connections(&self) -> f64 {
        self.metrics()
            .await
            .get("shopeasy_gateway_open_connections", &[])
            .unwrap_or(0.0)
    }
}

// ---------------------------------------------------------------- clients

/// A client giving up after 10 s.
pub fn http() -> reqwest::Client {
    client(reqwest::Client::builder())
}

/// [`http`], connecting from `local`.
pub fn http_from(local: IpAddr) -> reqwest::Client {
    client(reqwest::Client::builder().local_address(local))
}

fn client(builder: reqwest::ClientBuilder) -> reqwest::Client {
    builder.timeout(Duration::from_secs(10)).build().unwrap()
}

// ---------------------------------------------------------------- raw HTTP

/// Reads one HTTP/1.1 message with a `Content-Length` (or no) body: its
/// head and its body; `None` at EOF or on an error. A peer that stalls its
/// body leaves this read waiting.
pub async fn read_message<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let length = header(&head, "content-length").and_then(|v| v.parse::<usize>().ok());
    let mut body = vec![0u8; length.unwrap_or(0)];
    stream.read_exact(&mut body).await.ok()?;
    Some((head, body))
}

/// A header's value from a raw head, case-insensitively.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}
