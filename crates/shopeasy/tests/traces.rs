//! One order through the gateway is one trace: gateway → order → inventory
//! and product, with correct parent links, and one span per attempt that
//! shows retries only while a fault is active.
//!
//! This file holds one test on purpose: it installs the process's global
//! tracing subscriber (an in-memory OpenTelemetry exporter).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::collections::HashMap;

use opentelemetry::{
    KeyValue, global,
    trace::{SpanId, TraceId, TracerProvider as _},
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{InMemorySpanExporter, SdkTracerProvider, SpanData},
};
use serde_json::Value;
use shopeasy::system::{Options, System};
use tracing_subscriber::layer::SubscriberExt;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

fn service_of(span: &SpanData) -> String {
    attr(span, "service")
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

/// The `attempt` attribute (exported as a number or as its text).
fn attempt_number(span: &SpanData) -> Option<i64> {
    match attr(span, "attempt")? {
        opentelemetry::Value::I64(n) => Some(*n),
        other => other.as_str().parse().ok(),
    }
}

/// True when `span` descends from `ancestor` through recorded parents.
fn descends(spans: &HashMap<SpanId, &SpanData>, span: &SpanData, ancestor: SpanId) -> bool {
    let mut parent = span.parent_span_id;
    for _ in 0..64 {
        if parent == ancestor {
            return true;
        }
        match spans.get(&parent) {
            Some(p) => parent = p.parent_span_id,
            None => return false,
        }
    }
    false
}

async fn order(http: &reqwest::Client, gw: &str, token: &str, product: &str) -> Value {
    let res = support::place_as(http, gw, token, product).await;
    assert!(res.status().is_success(), "{}", res.status());
    res.json().await.unwrap()
}

/// The spans of the trace whose root is the gateway span of the latest
/// order request.
fn trace_of_last_order(finished: &[SpanData]) -> (TraceId, Vec<&SpanData>) {
    let root = finished
        .iter()
        .filter(|s| {
            s.name == "gateway.request"
                && attr(s, "http.request.method").is_some_and(|m| m.as_str() == "POST")
        })
        .max_by_key(|s| s.start_time)
        .expect("a gateway span for the order");
    let trace = root.span_context.trace_id();
    (
        trace,
        finished
            .iter()
            .filter(|s| s.span_context.trace_id() == trace)
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_order_is_one_trace_with_a_span_per_attempt() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_text_map_propagator(TraceContextPropagator::new());
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::for_tests(dir.path());
    options.env = vec![(
        "RESILIENCE__INVENTORY__TIMEOUT_SECONDS".into(),
        "0.3".into(),
    )];
    let system = System::start(options).await.unwrap();
    let http = reqwest::Client::new();
    let gw = format!("http://{}", system.addresses.gateway);
    let product = support::first_product(&http, &gw).await;
    // Signed in before the spans are collected: the sign-in's own trace is
    // not the order's.
    let token = support::sign_in(&http, &gw, "trace").await;

    // Healthy: one trace, every service in it, one attempt per call.
    exporter.reset();
    assert_eq!(
        order(&http, &gw, &token, &product).await["status"],
        "confirmed"
    );
    provider.force_flush().unwrap();
    let finished = exporter.get_finished_spans().unwrap();
    let (trace, spans) = trace_of_last_order(&finished);
    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), *s))
        .collect();
    let root = spans.iter().find(|s| s.name == "gateway.request").unwrap();
    assert_eq!(
        root.parent_span_id,
        SpanId::INVALID,
        "the gateway starts the trace"
    );
    let server = |name: &str, service: &str| {
        spans
            .iter()
            .find(|s| s.name == name && (service.is_empty() || service_of(s) == service))
            .unwrap_or_else(|| {
                panic!(
                    "no {name} span of {service:?} in trace {trace}: {:?}",
                    spans
                        .iter()
                        .map(|s| (&s.name, service_of(s)))
                        .collect::<Vec<_>>()
                )
            })
    };
    let order_span = server("http.server", "shopeasy-order");
    let product_span = server("http.server", "shopeasy-product");
    let inventory_span = server("grpc.server", "");
    for (what, span) in [
        ("order", order_span),
        ("product", product_span),
        ("inventory", inventory_span),
    ] {
        assert!(
            descends(&by_id, span, root.span_context.span_id()),
            "{what}'s server span descends from the gateway span"
        );
    }
    assert!(
        descends(&by_id, inventory_span, order_span.span_context.span_id()),
        "inventory under order"
    );
    assert!(
        descends(&by_id, product_span, order_span.span_context.span_id()),
        "product under order"
    );
    let attempts: Vec<i64> = spans
        .iter()
        .filter(|s| {
            s.name == "attempt"
                && attr(s, "peer.service").is_some_and(|t| t.as_str() == "inventory")
        })
        .filter_map(|s| attempt_number(s))
        .collect();
    assert!(
        !attempts.is_empty() && attempts.iter().all(|n| *n == 1),
        "no retries while healthy: {attempts:?}"
    );
    // The stock cache was cold: its detached, shared fetch (single
    // flight) is in the trace of the order that started it, under the
    // order's span, with its GetStock attempt inside. (Product's cache has
    // a fetch span of its own, with no attempt: it reads its database.)
    let fetch = spans
        .iter()
        .find(|f| {
            f.name == "single_flight.fetch"
                && spans
                    .iter()
                    .any(|a| a.name == "attempt" && a.parent_span_id == f.span_context.span_id())
        })
        .expect("the stock fetch and its GetStock attempt are in the order's trace");
    assert!(
        descends(&by_id, fetch, order_span.span_context.span_id()),
        "the fetch descends from the order's span"
    );

    // Inventory refused (the stock cache is still fresh, so only the
    // reservation calls it): one span per attempt, numbered, with outcomes.
    system
        .proxies
        .get("order-inventory")
        .await
        .unwrap()
        .set_enabled(false)
        .await;
    exporter.reset();
    let pending = order(&http, &gw, &token, &product).await;
    assert_eq!(pending["status"], "pending");
    provider.force_flush().unwrap();
    let finished = exporter.get_finished_spans().unwrap();
    let (_, spans) = trace_of_last_order(&finished);
    let mut attempts: Vec<(i64, String)> = spans
        .iter()
        .filter(|s| {
            s.name == "attempt"
                && attr(s, "peer.service").is_some_and(|t| t.as_str() == "inventory")
        })
        .filter_map(|s| {
            Some((
                attempt_number(s)?,
                attr(s, "outcome")?.as_str().into_owned(),
            ))
        })
        .collect();
    attempts.sort();
    assert!(
        attempts.len() >= 3,
        "retries show as attempt spans: {attempts:?}"
    );
    // 1 + max_retries (2) attempts; the last one's outcome is its error's
    // class (the retry layer then stops: attempts exhausted).
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert_eq!(
        &attempts[..2],
        &[(1, "retryable".into()), (2, "retryable".into())],
        "{attempts:?}"
    );
    assert_eq!(attempts[2].0, 3);
    assert_ne!(attempts[2].1, "ok", "{attempts:?}");

    system.stop().await.unwrap();
}
