//! The trace exporter fails quietly: with the OTLP collector unreachable,
//! the OpenTelemetry SDK reports an ERROR for every failed batch; what the
//! log shows is one WARN (at most once a minute), no ERROR.
//!
//! Its own test binary because it installs the process-wide subscriber: the
//! SDK's export thread logs through the global dispatcher, not a scoped one.

#![allow(clippy::unwrap_used)]

use std::{
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::{
    Layer,
    layer::{Context, SubscriberExt},
};

/// The log output, as text.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<u8>>>);

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counts the SDK's own ERROR events, before any quieting: proof that the
/// exporter really failed again and again.
struct SdkErrors(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for SdkErrors {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target().starts_with("opentelemetry") && *meta.level() == Level::ERROR {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_one_warning_not_an_error_per_batch() {
    let output = Output::default();
    let sdk_errors = Arc::new(AtomicUsize::new(0));
    let writer = output.clone();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(move || writer.clone());
    let subscriber = tracing_subscriber::registry()
        .with(shopeasy_runtime::telemetry::quiet_exporter_errors(fmt))
        .with(SdkErrors(sdk_errors.clone()));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    // A port nobody listens on: every export is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("telemetry-test");
    for batch in 0..4 {
        tracer.start(format!("span {batch}")).end();
        // Each flush exports one batch (and fails), like the 5 s timer would.
        let flushing = provider.clone();
        let flushed = tokio::task::spawn_blocking(move || flushing.force_flush())
            .await
            .unwrap();
        assert!(flushed.is_err(), "batch {batch} cannot have been exported");
    }
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;

    assert!(
        sdk_errors.load(Ordering::SeqCst) >= 4,
        "the SDK reported each failed batch"
    );
    let text = String::from_utf8(output.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        !lines.iter().any(|l| l.contains("ERROR")),
        "no ERROR line:\n{text}"
    );
    let warnings: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("trace export is failing"))
        .collect();
    assert_eq!(warnings.len(), 1, "one WARN for four failures:\n{text}");
    assert!(
        warnings[0].contains("BatchSpanProcessor"),
        "it names the SDK's event: {}",
        warnings[0]
    );
}
