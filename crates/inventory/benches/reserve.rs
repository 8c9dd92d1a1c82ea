//! `ReserveStock` throughput on Postgres, through the real gRPC server.
//!
//! Needs `SHOPEASY_TEST_POSTGRES` (a fresh database is created and dropped);
//! without it the benchmark prints a skip line and measures nothing.
//!
//! Each iteration sends `CONCURRENCY` reservations of one line at once over
//! a few HTTP/2 connections and waits for all of them; criterion reports the
//! throughput in reservations per second. Two shapes:
//! - `spread`: lines spread over 100 products (little row contention);
//! - `hot`: every line on one product (every reservation queues on one row).
//!
//! Run: `cargo bench -p shopeasy-inventory --bench reserve`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shopeasy_inventory::{App, InventorySettings};
use shopeasy_proto::inventory::v1::{
    ReserveStockRequest, SetStockRequest, StockLine,
    inventory_service_client::InventoryServiceClient,
};
use shopeasy_runtime::{
    lifecycle,
    settings::{Secret, SecretUrl},
};
use tokio::time::Instant;
use tonic::transport::Channel;

const CONCURRENCY: usize = 32;
const CONNECTIONS: usize = 4;
const TOKEN: &str = "bench-token";

fn product(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

async fn reserve_batch(clients: &[InventoryServiceClient<Channel>], products: usize) {
    let calls = (0..CONCURRENCY).map(|i| {
        let mut client = clients[i % clients.len()].clone();
        let mut request = tonic::Request::new(ReserveStockRequest {
            reservation_id: uuid::Uuid::new_v4().to_string(),
            lines: vec![StockLine {
                product_id: product(i % products),
                quantity: 1,
            }],
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        tokio::spawn(async move { client.reserve_stock(request).await })
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap().unwrap();
    }
}

fn bench(c: &mut Criterion) {
    if std::env::var(shopeasy_testkit::POSTGRES_VAR).is_err() {
        eprintln!(
            "SKIPPED reserve benchmark: needs {}",
            shopeasy_testkit::POSTGRES_VAR
        );
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (db, clients, stop) = runtime.block_on(async {
        let db = shopeasy_testkit::postgres().await.unwrap();
        let mut settings = InventorySettings {
            admin_token: Secret::new(TOKEN),
            service_token: Secret::new(TOKEN),
            ..InventorySettings::default()
        };
        settings.process.ephemeral();
        settings.storage.database_url = SecretUrl::new(db.url());
        let stop = lifecycle::spawn::<App>(settings).await.unwrap();
        let url = format!("http://{}", stop.local_addr());
        let mut clients = Vec::new();
        for _ in 0..CONNECTIONS {
            let channel = Channel::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            clients.push(InventoryServiceClient::new(channel));
        }
        for i in 0..100 {
            let mut request = tonic::Request::new(SetStockRequest {
                product_id: product(i),
                available: 1_000_000_000,
            });
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            clients[0].set_stock(request).await.unwrap();
        }
        (db, clients, stop)
    });

    let mut group = c.benchmark_group("reserve_stock");
    group
        .throughput(Throughput::Elements(CONCURRENCY as u64))
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    for (name, products) in [("spread", 100), ("hot", 1)] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let clients = clients.clone();
                async move {
                    let started = Instant::now();
                    for _ in 0..iters {
                        reserve_batch(&clients, products).await;
                    }
                    started.elapsed()
                }
            });
        });
    }
    group.finish();
    drop(stop);
    drop(runtime);
    drop(db);
}

criterion_group!(benches, bench);
criterion_main!(benches);
