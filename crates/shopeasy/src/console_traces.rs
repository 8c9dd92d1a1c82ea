//! The console's "recent order's path", in embedded mode: an OpenTelemetry
//! span processor that keeps the spans of the last [`KEEP`] orders in
//! memory, and the [`TraceSource`] that turns the newest into hops.
//!
//! Every service of the embedded system runs in this process, so every span
//! of an order (gateway → order → inventory and product) ends here. Spans
//! are gathered per trace while it is open; when a trace's gateway span
//! ends and it was a `POST` on the order route, it joins the ring of
//! finished orders (the oldest leaves), where late spans still join it
//! (Order's own span can end after the gateway's, when one of its children
//! outlives the answer). The newest with Order's `POST /api/orders` server
//! span is the one drawn. Open traces are bounded
//! too ([`OPEN`] traces of at most [`SPANS`] spans), so traces that never
//! finish (the outbox worker's) cannot grow memory.
//!
//! The processor is process-wide, as the tracing subscriber is: the
//! launcher adds [`processor`] to its tracer provider
//! (`telemetry::init_with_spans`), a test adds [`recorder`] to its own; the
//! console reads [`global`] either way. In a process without either the
//! panel says no order was traced.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    Value,
    trace::{SpanId, TraceId},
};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    trace::{Span, SpanData, SpanProcessor, TracerProviderBuilder},
};
use shopeasy_console::{AttemptView, Hop, OrderPath, TraceSource};

/// Finished orders kept.
pub const KEEP: usize = 20;
/// Open traces kept at most (the oldest is dropped beyond).
pub const OPEN: usize = 256;
/// Spans kept per trace at most.
pub const SPANS: usize = 256;

/// The process's recent orders.
pub fn global() -> &'static RecentOrders {
    static ORDERS: OnceLock<RecentOrders> = OnceLock::new();
    ORDERS.get_or_init(RecentOrders::default)
}

/// A span processor that feeds [`global`].
pub fn recorder() -> Recorder {
    Recorder(global().clone())
}

/// [`recorder`], as the launcher's telemetry set-up takes it.
pub fn processor() -> shopeasy_runtime::telemetry::ExtraSpanProcessor {
    Box::new(|builder: TracerProviderBuilder| builder.with_span_processor(recorder()))
}

/// The spans of recent orders. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct RecentOrders {
    inner: Arc<Mutex<Store>>,
}

#[derive(Debug, Default)]
struct Store {
    open: HashMap<TraceId, Vec<SpanData>>,
    /// `open`'s traces, oldest first.
    opened: VecDeque<TraceId>,
    /// Finished orders, oldest first.
    finished: VecDeque<(TraceId, Vec<SpanData>)>,
}

impl RecentOrders {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one finished span.
    pub fn record(&self, span: SpanData) {
        let trace = span.span_context.trace_id();
        let mut store = self.store();
        // Late spans of a finished order (a detached fetch) still join it.
        if let Some((_, spans)) = store.finished.iter_mut().find(|(t, _)| *t == trace) {
            if spans.len() < SPANS {
                spans.push(span);
            }
            return;
        }
        let root = span.name == "gateway.request";
        if !store.open.contains_key(&trace) {
            if store.opened.len() >= OPEN
                && let Some(oldest) = store.opened.pop_front()
            {
                store.open.remove(&oldest);
            }
            store.opened.push_back(trace);
        }
        let spans = store.open.entry(trace).or_default();
        if spans.len() < SPANS {
            spans.push(span);
        }
        if !root {
            return;
        }
        let Some(spans) = store.open.remove(&trace) else {
            return;
        };
        store.opened.retain(|t| *t != trace);
        // Order's server span may end after the gateway's (a child of it
        // outlives the answer): a POST on the order route is kept, and
        // [`TraceSource::recent_order`] looks for Order's span then.
        if spans
            .iter()
            .any(|s| is_order_post(s) || is_order_route_post(s))
        {
            if store.finished.len() >= KEEP {
                store.finished.pop_front();
            }
            store.finished.push_back((trace, spans));
        }
    }

    /// How many finished order traces are kept.
    pub fn len(&self) -> usize {
        self.store().finished.len()
    }

    /// No finished order is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl TraceSource for RecentOrders {
    fn recent_order(&self) -> Option<OrderPath> {
        let spans = self
            .store()
            .finished
            .iter()
            .rev()
            .find(|(_, spans)| spans.iter().any(is_order_post))?
            .1
            .clone();
        path_of(&spans)
    }
}

/// The span processor: every finished span goes to its [`RecentOrders`].
#[derive(Debug, Clone)]
pub struct Recorder(RecentOrders);

impl SpanProcessor for Recorder {
    fn on_start(&self, _span: &mut Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        self.0.record(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

fn number(span: &SpanData, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Value::I64(n) => Some(*n),
        Value::F64(f) => Some(f.round() as i64),
        other => other.as_str().parse().ok(),
    }
}

/// Order's `POST /api/orders` server span.
fn is_order_post(span: &SpanData) -> bool {
    span.name == "http.server"
        && text(span, "service").as_deref() == Some("shopeasy-order")
        && text(span, "http.request.method").as_deref() == Some("POST")
        && text(span, "http.route").as_deref() == Some("/api/orders")
}

/// The gateway's span of a `POST` on its order route.
fn is_order_route_post(span: &SpanData) -> bool {
    span.name == "gateway.request"
        && text(span, "http.request.method").as_deref() == Some("POST")
        && text(span, "route").as_deref() == Some("order")
}

/// The service a server span belongs to, and what it did; `None` for a
/// span that is no hop.
fn hop_of(span: &SpanData) -> Option<(String, String)> {
    let method = text(span, "http.request.method").unwrap_or_default();
    match span.name.as_ref() {
        "gateway.request" => Some((
            "gateway".into(),
            format!("{method} → {}", text(span, "route").unwrap_or_default()),
        )),
        "http.server" => {
            let service = text(span, "service").unwrap_or_default();
            let service = service.strip_prefix("shopeasy-").unwrap_or(&service);
            let route = text(span, "http.route").unwrap_or_default();
            Some((service.to_owned(), format!("{method} {route}")))
        }
        "grpc.server" => {
            // `shopeasy.inventory.v1.InventoryService/GetStock` → its last
            // two parts, short enough to label a row.
            let method = text(span, "rpc.method").unwrap_or_default();
            let short = method.rsplit_once('.').map_or(method.as_str(), |(_, m)| m);
            Some(("inventory".into(), short.to_owned()))
        }
        _ => None,
    }
}

/// Whether `span` serves a shared cache fill (`single_flight.fetch`) rather
/// than its trace's own request.
fn under_shared_fetch(span: &SpanData, by_id: &HashMap<SpanId, &SpanData>) -> bool {
    let mut parent = span.parent_span_id;
    for _ in 0..16 {
        match by_id.get(&parent) {
            Some(p) if p.name == "single_flight.fetch" => return true,
            Some(p) if hop_of(p).is_none() => parent = p.parent_span_id,
            _ => return false,
        }
    }
    false
}

fn ms_between(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The hops of one order's spans, in the order they started.
///
/// A hop is a server span; its attempts are the caller's `attempt` spans it
/// descends from. Attempts that reached no server (a refused connection, a
/// hang) make a `not reached` hop per callee.
pub fn path_of(spans: &[SpanData]) -> Option<OrderPath> {
    let start = spans.iter().map(|s| s.start_time).min()?;
    let end = spans.iter().map(|s| s.end_time).max()?;
    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let attempt = |s: &SpanData| AttemptView {
        number: number(s, "attempt")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        outcome: text(s, "outcome").unwrap_or_default(),
        start_ms: ms_between(start, s.start_time),
        duration_ms: ms_between(s.start_time, s.end_time),
    };
    let mut reached = Vec::new();
    let mut hops: Vec<(SystemTime, Hop)> = Vec::new();
    for span in spans {
        let Some((service, operation)) = hop_of(span) else {
            continue;
        };
        // The nearest `attempt` above this server span: the try that led here.
        let mut attempts = Vec::new();
        let mut parent = span.parent_span_id;
        for _ in 0..8 {
            match by_id.get(&parent) {
                Some(p) if p.name == "attempt" => {
                    reached.push(p.span_context.span_id());
                    attempts.push(attempt(p));
                    break;
                }
                Some(p) if hop_of(p).is_none() => parent = p.parent_span_id,
                _ => break,
            }
        }
        let shared = under_shared_fetch(span, &by_id);
        let status =
            text(span, "http.response.status_code").or_else(|| text(span, "rpc.grpc.status_code"));
        hops.push((
            span.start_time,
            Hop {
                service,
                operation,
                start_ms: ms_between(start, span.start_time),
                duration_ms: ms_between(span.start_time, span.end_time),
                deadline_left_ms: number(span, "deadline_left_ms")
                    .and_then(|n| u64::try_from(n).ok()),
                status,
                shared,
                attempts,
            },
        ));
    }
    // Attempts whose trace context was injected outside their span (so the
    // server span is not below them): the callee's hop that started within
    // the attempt. The rest no server saw: one hop per callee.
    let mut unreached: Vec<(String, SystemTime, Vec<AttemptView>)> = Vec::new();
    for s in spans.iter().filter(|s| s.name == "attempt") {
        if reached.contains(&s.span_context.span_id()) {
            continue;
        }
        let callee = text(s, "peer.service").unwrap_or_default();
        if let Some((_, hop)) = hops.iter_mut().find(|(at, hop)| {
            hop.service == callee
                && hop.attempts.is_empty()
                && *at >= s.start_time
                && *at <= s.end_time
        }) {
            hop.attempts.push(attempt(s));
            continue;
        }
        match unreached.iter_mut().find(|(c, _, _)| *c == callee) {
            Some((_, first, list)) => {
                *first = (*first).min(s.start_time);
                list.push(attempt(s));
            }
            None => unreached.push((callee, s.start_time, vec![attempt(s)])),
        }
    }
    for (service, first, mut attempts) in unreached {
        attempts.sort_by_key(|a| a.number);
        let last_end = attempts
            .iter()
            .map(|a| a.start_ms + a.duration_ms)
            .fold(0.0, f64::max);
        let start_ms = ms_between(start, first);
        hops.push((
            first,
            Hop {
                service,
                operation: "not reached".into(),
                start_ms,
                duration_ms: last_end - start_ms,
                deadline_left_ms: None,
                status: None,
                shared: false,
                attempts,
            },
        ));
    }
    hops.sort_by_key(|(at, _)| *at);
    for (_, hop) in &mut hops {
        hop.attempts.sort_by_key(|a| a.number);
    }
    Some(OrderPath {
        trace_id: spans[0].span_context.trace_id().to_string(),
        started_unix_ms: start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        duration_ms: ms_between(start, end),
        hops: hops.into_iter().map(|(_, h)| h).collect(),
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry::{
        KeyValue,
        trace::{SpanContext, SpanKind, Status, TraceFlags, TraceState},
    };
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    fn span(
        trace: u128,
        id: u64,
        parent: u64,
        name: &'static str,
        attrs: Vec<KeyValue>,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(trace),
                SpanId::from(id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(parent),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: name.into(),
            start_time: UNIX_EPOCH + Duration::from_millis(id),
            end_time: UNIX_EPOCH + Duration::from_millis(id + 10),
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: opentelemetry::InstrumentationScope::default(),
        }
    }

    /// One order's spans: order's server span (under an attempt the gateway
    /// has none of), a failed attempt to inventory that reached nothing,
    /// then the gateway's root span, which ends last.
    fn order(recent: &RecentOrders, trace: u128) {
        recent.record(span(
            trace,
            2,
            1,
            "http.server",
            vec![
                KeyValue::new("service", "shopeasy-order"),
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", "/api/orders"),
                KeyValue::new("deadline_left_ms", 900_i64),
            ],
        ));
        recent.record(span(
            trace,
            3,
            2,
            "attempt",
            vec![
                KeyValue::new("peer.service", "inventory"),
                KeyValue::new("attempt", 1_i64),
                KeyValue::new("outcome", "retryable"),
            ],
        ));
        recent.record(span(
            trace,
            1,
            0,
            "gateway.request",
            vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("route", "order"),
                KeyValue::new("deadline_left_ms", 1000_i64),
            ],
        ));
    }

    #[test]
    fn an_orders_hops_keep_their_deadline_and_unreached_attempts_show() {
        let recent = RecentOrders::default();
        assert_eq!(recent.recent_order(), None);
        order(&recent, 7);
        let path = recent.recent_order().unwrap();
        let hops: Vec<(&str, &str, Option<u64>)> = path
            .hops
            .iter()
            .map(|h| (h.service.as_str(), h.operation.as_str(), h.deadline_left_ms))
            .collect();
        assert_eq!(
            hops,
            [
                ("gateway", "POST → order", Some(1000)),
                ("order", "POST /api/orders", Some(900)),
                ("inventory", "not reached", None),
            ]
        );
        assert_eq!(path.hops[2].attempts[0].outcome, "retryable");
        assert_eq!(path.trace_id, format!("{:032x}", 7));
    }

    #[test]
    fn an_order_whose_span_ends_after_the_gateways_is_still_found() {
        let recent = RecentOrders::default();
        let root = span(
            9,
            1,
            0,
            "gateway.request",
            vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("route", "order"),
            ],
        );
        recent.record(root);
        assert_eq!(recent.recent_order(), None, "no order span yet");
        recent.record(span(
            9,
            2,
            1,
            "http.server",
            vec![
                KeyValue::new("service", "shopeasy-order"),
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", "/api/orders"),
            ],
        ));
        let path = recent.recent_order().unwrap();
        assert_eq!(path.hops.len(), 2);
        assert_eq!(path.hops[1].service, "order");
    }

    #[test]
    fn memory_is_bounded_and_only_orders_are_kept() {
        let recent = RecentOrders::default();
        // A trace that is no order (a catalogue read) is not kept.
        recent.record(span(1, 1, 0, "gateway.request", Vec::new()));
        assert!(recent.is_empty());
        for trace in 0..(KEEP as u128 + 5) {
            order(&recent, 100 + trace);
        }
        assert_eq!(recent.len(), KEEP, "the oldest orders leave");
        // Traces that never finish (the outbox worker's) are bounded too.
        for trace in 0..(OPEN as u128 * 2) {
            recent.record(span(10_000 + trace, 5, 4, "outbox.task", Vec::new()));
        }
        assert_eq!(recent.store().open.len(), OPEN);
        assert_eq!(recent.store().opened.len(), OPEN);
    }
}
