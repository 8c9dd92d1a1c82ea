//! Compatibility: a third-party Toxiproxy client (`toxiproxy_rust`, which
//! speaks Toxiproxy 2.x's API with blocking reqwest) drives our API, and the
//! effects show on real connections.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use shopeasy_faults::{Proxies, ToxicKind, api};
use support::{connect, echo, round_trip};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toxiproxy_rust::{client::Client, proxy::ProxyPack};

const LIMIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toxiproxy_rust_client_drives_the_api() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = listener.local_addr().unwrap();
    let proxies = Proxies::with_seed(3);
    let stop = CancellationToken::new();
    tokio::spawn(api::serve(listener, proxies.clone(), stop.clone()));
    let _stop = stop.drop_guard();
    let upstream = echo().await;
    let upstream_addr = upstream.addr.to_string();

    // The client is blocking: run it off the runtime's workers.
    let blocking = move |f: Box<dyn FnOnce(&Client) + Send>| {
        tokio::task::spawn_blocking(move || f(&Client::new(api_addr)))
    };

    blocking(Box::new(move |client| {
        assert!(client.is_running());
        assert!(client.version().unwrap().contains("2."));
        let created = client
            .populate(vec![ProxyPack::new(
                "edge".into(),
                "127.0.0.1:0".into(),
                upstream_addr,
            )])
            .unwrap();
        assert_eq!(created.len(), 1);
        let proxy = client.find_and_reset_proxy("edge").unwrap();
        proxy
            .with_latency("downstream".into(), 500, 0, 1.0)
            .with_limit_data("upstream".into(), 1_000_000, 1.0);
        let toxics = proxy.toxics().unwrap();
        assert_eq!(toxics.len(), 2);
        assert_eq!(toxics[0].name, "latency_downstream");
        assert_eq!(toxics[0].attributes["latency"], 500);
        assert_eq!(client.all().unwrap().len(), 1);
    }))
    .await
    .unwrap();

    // What the client set is what the proxy does.
    let edge = proxies.get("edge").await.unwrap();
    assert_eq!(
        edge.toxics()[0].kind,
        ToxicKind::Latency {
            latency: 500,
            jitter: 0
        }
    );
    let mut conn = connect(edge.listen_addr()).await;
    let took = round_trip(&mut conn, b"ping", LIMIT).await.unwrap();
    assert!(took >= Duration::from_millis(500), "took {took:?}");

    blocking(Box::new(|client| {
        let proxy = client.find_proxy("edge").unwrap();
        proxy.delete_all_toxics().unwrap();
        proxy.disable().unwrap();
    }))
    .await
    .unwrap();
    assert!(edge.toxics().is_empty());
    assert!(!edge.enabled());
    assert!(
        tokio::net::TcpStream::connect(edge.listen_addr())
            .await
            .is_err()
    );

    blocking(Box::new(|client| {
        client.reset().unwrap();
    }))
    .await
    .unwrap();
    assert!(edge.enabled());
    let mut conn = connect(edge.listen_addr()).await;
    let took = round_trip(&mut conn, b"ping", LIMIT).await.unwrap();
    assert!(took < Duration::from_millis(400), "took {took:?}");

    blocking(Box::new(|client| {
        client.find_proxy("edge").unwrap().delete().unwrap();
        assert!(client.find_proxy("edge").is_err(), "404 after delete");
    }))
    .await
    .unwrap();
    assert!(proxies.list().await.is_empty());
}
