//! Logs, traces and metrics for one process.
//!
//! - Logs: `tracing`, human-readable on a terminal, JSON otherwise (or as
//!   the `log.format` setting says).
//! - Traces: when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are exported
//!   over OTLP/gRPC. The W3C trace-context propagator is always installed, so
//!   `traceparent` travels even when nothing is exported. [`init_with_spans`]
//!   adds span processors of the caller's (the launcher keeps its recent
//!   orders' spans in memory for the console).
//! - Metrics: one Prometheus recorder per process, rendered by the admin
//!   listener. In the embedded launcher the four services share it.
//! - Failing quietly: the OpenTelemetry SDK reports its own trouble (an
//!   unreachable collector: one ERROR per batch, every few seconds) as
//!   `tracing` events with an `opentelemetry*` target. Those are not logged
//!   as they come; [`quiet_exporter_errors`] turns them into one WARN at
//!   most every [`EXPORT_TROUBLE_EVERY`], which says how many it held back.
//!   A missing Jaeger must not drown a demo's logs.

use std::{
    io::IsTerminal,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::{global, trace::TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{SdkTracerProvider, TracerProviderBuilder},
};
use tokio::time::Instant;
use tracing::{Event, Level, Metadata, Subscriber, field::Field};
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::FilterFn,
    layer::{Context, SubscriberExt},
    util::SubscriberInitExt,
};

use crate::settings::common::LogSettings;

/// Buckets (seconds) of every request-duration histogram: 1 ms to 30 s.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Keeps the trace exporter alive; flushes it on drop.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("trace exporter shutdown: {e}");
        }
    }
}

/// Sets up logging and tracing for the process named `service`.
///
/// Call once, early in `main`. A second call (tests, the embedded launcher)
/// keeps the first subscriber.
///
/// # Errors
/// When the OTLP exporter cannot be built from `otlp_endpoint`.
pub fn init(
    service: &'static str,
    log: &LogSettings,
    otlp_endpoint: &str,
) -> anyhow::Result<TelemetryGuard> {
    init_with_spans(service, log, otlp_endpoint, Vec::new())
}

/// A span processor that sees every finished span of the process, beside
/// (or without) the OTLP exporter.
pub type ExtraSpanProcessor = Box<dyn FnOnce(TracerProviderBuilder) -> TracerProviderBuilder>;

/// [`init`], with `extra` span processors added to the tracer provider: the
/// embedded launcher keeps its recent orders' spans in memory this way, for
/// the console. With an extra processor, spans are made (and trace context
/// travels) even when nothing is exported.
///
/// # Errors
/// When the OTLP exporter cannot be built from `otlp_endpoint`.
pub fn init_with_spans(
    service: &'static str,
    log: &LogSettings,
    otlp_endpoint: &str,
    extra: Vec<ExtraSpanProcessor>,
) -> anyhow::Result<TelemetryGuard> {
    global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_new(&log.level).unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match log.format.as_str() {
        "json" => true,
        "text" => false,
        _ => !std::io::stderr().is_terminal(),
    };
    let fmt = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed()
    };

    let provider = if otlp_endpoint.is_empty() && extra.is_empty() {
        None
    } else {
        let mut builder = SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name(service).build());
        if !otlp_endpoint.is_empty() {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(otlp_endpoint)
                .build()?;
            builder = builder.with_batch_exporter(exporter);
        }
        for add in extra {
            builder = add(builder);
        }
        Some(builder.build())
    };
    // The SDK's own events are neither spans' events nor exported.
    let otel = provider.as_ref().map(|p| {
        global::set_tracer_provider(p.clone());
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            .with_filter(FilterFn::new(not_export_trouble))
    });

    // A second initialisation in one process keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(quiet_exporter_errors(fmt))
        .with(otel)
        .try_init();
    Ok(TelemetryGuard { provider })
}

/// How often trouble of the trace exporter is logged at most.
pub const EXPORT_TROUBLE_EVERY: Duration = Duration::from_secs(60);

/// Wraps the log output layer `output` so the OpenTelemetry SDK's own
/// warnings and errors (targets `opentelemetry*`) do not reach it one by
/// one: at most one WARN per [`EXPORT_TROUBLE_EVERY`] says the exporter is
/// in trouble, with the SDK's message and how many were held back.
///
/// Export is best effort: a collector that is down (Jaeger left out of a
/// demo, say) costs traces, not service, so it is worth a warning, not an
/// error every batch.
pub fn quiet_exporter_errors<S, L>(output: L) -> impl Layer<S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    L: Layer<S>,
{
    output
        .with_filter(FilterFn::new(not_export_trouble))
        .and_then(ExportTrouble {
            throttle: Mutex::new(Throttle::new(EXPORT_TROUBLE_EVERY)),
        })
}

/// Whether an event is not the SDK reporting its own trouble.
fn not_export_trouble(metadata: &Metadata<'_>) -> bool {
    !(metadata.target().starts_with("opentelemetry") && *metadata.level() <= Level::WARN)
}

/// Lets one report through per period and counts the ones it holds back.
#[derive(Debug)]
struct Throttle {
    period: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl Throttle {
    fn new(period: Duration) -> Self {
        Self {
            period,
            last: None,
            held_back: 0,
        }
    }

    /// `Some(held back since the last report)` when a report may go out at
    /// `now`; `None` (and one more held back) otherwise.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

/// The layer that logs the SDK's trouble as a throttled WARN.
#[derive(Debug)]
struct ExportTrouble {
    throttle: Mutex<Throttle>,
}

impl<S: Subscriber> Layer<S> for ExportTrouble {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if not_export_trouble(event.metadata()) {
            return;
        }
        let admitted = self
            .throttle
            .lock()
            .map_or(None, |mut t| t.admit(Instant::now()));
        let Some(held_back) = admitted else { return };
        let mut said = Said::default();
        event.record(&mut said);
        tracing::warn!(
            sdk_event = %said.name,
            sdk_message = %said.message,
            held_back,
            "trace export is failing (traces are dropped; the services are fine); \
             repeated at most once a minute"
        );
    }
}

/// What an SDK event says: its `name` and its error or message fields.
#[derive(Debug, Default)]
struct Said {
    name: String,
    message: String,
}

impl tracing::field::Visit for Said {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "name" => value.clone_into(&mut self.name),
            _ => {
                if !self.message.is_empty() {
                    self.message.push_str("; ");
                }
                self.message.push_str(field.name());
                self.message.push('=');
                self.message.push_str(value);
            }
        }
    }
}

/// How often histogram observations are folded into their histograms when
/// nobody scrapes (memory stays bounded by what arrives in this interval).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use.
///
/// Every request-duration histogram (names ending in `_duration_seconds`)
/// gets [`DURATION_BUCKETS`].
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_duration_seconds".into()),
                    DURATION_BUCKETS,
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only when another recorder was installed first (a test
            // harness, say); the handle still renders what it records.
            let _ = metrics::set_global_recorder(recorder);
            // The recorder keeps every histogram observation in a bucket
            // until it is folded into the histogram: by a scrape, or by
            // upkeep. `build_recorder` (unlike `install`) runs no upkeep, so
            // a process nobody scrapes held every request's latency sample
            // forever (issue 14: the launcher's RSS grew under steady load
            // and stayed there). One small thread, runtime-independent,
            // folds them every few seconds.
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        // Its own thread, not a runtime worker, and no
                        // test's clock is involved: a plain sleep is right.
                        #[allow(clippy::disallowed_methods)]
                        std::thread::sleep(UPKEEP_INTERVAL);
                        upkeep.run_upkeep();
                    }
                });
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;
    use tower::ServiceExt;

    use super::Throttle;

    #[test]
    fn the_throttle_admits_one_report_per_period_and_counts_the_rest() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut throttle = Throttle::new(Duration::from_secs(60));
        assert_eq!(throttle.admit(at(0)), Some(0), "the first goes out");
        // One SDK error per 5 s batch: held back for the rest of the minute.
        for secs in (5..60).step_by(5) {
            assert_eq!(throttle.admit(at(secs)), None, "at {secs} s");
        }
        assert_eq!(
            throttle.admit(at(60)),
            Some(11),
            "a minute later: one report, saying eleven were held back"
        );
        assert_eq!(throttle.admit(at(61)), None);
        assert_eq!(throttle.admit(at(200)), Some(1));
    }

    #[test]
    fn only_the_sdks_warnings_and_errors_count_as_export_trouble() {
        use tracing::{Level, Metadata, callsite::Identifier, field::FieldSet, metadata::Kind};
        struct Site;
        impl tracing::Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!()
            }
        }
        static SITE: Site = Site;
        let meta = |target: &'static str, level: Level| {
            Metadata::new(
                "event",
                target,
                level,
                None,
                None,
                None,
                FieldSet::new(&[], Identifier(&SITE)),
                Kind::EVENT,
            )
        };
        assert!(!super::not_export_trouble(&meta(
            "opentelemetry_sdk",
            Level::ERROR
        )));
        assert!(!super::not_export_trouble(&meta(
            "opentelemetry-otlp",
            Level::WARN
        )));
        assert!(super::not_export_trouble(&meta(
            "opentelemetry_sdk",
            Level::DEBUG
        )));
        assert!(super::not_export_trouble(&meta(
            "shopeasy_order",
            Level::ERROR
        )));
    }

    #[tokio::test]
    async fn observe_http_counts_by_matched_route_and_status() {
        let handle = super::prometheus();
        let app = axum::Router::new()
            .route("/items/{id}", axum::routing::get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                "selftest",
                super::observe_http,
            ));
        for path in ["/items/1", "/items/2", "/missing"] {
            let req = http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            app.clone().oneshot(req).await.unwrap();
        }
        let text = handle.render();
        assert!(
            text.contains("shopeasy_http_server_requests_total{service=\"selftest\",route=\"/items/{id}\",method=\"GET\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("route=\"unmatched\",method=\"GET\",status=\"404\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn standard_methods_are_named_and_made_up_ones_are_other() {
        assert_eq!(super::method_label(&http::Method::PATCH), "PATCH");
        assert_eq!(super::method_label(&http::Method::GET), "GET");
        let made_up = http::Method::from_bytes(b"FOO1").unwrap();
        assert_eq!(super::method_label(&made_up), super::OTHER_METHOD);
    }

    #[test]
    fn series_registered_at_zero_render_before_any_event() {
        let handle = super::prometheus();
        super::register_at_zero(
            "shopeasy_telemetry_zero_total",
            Some("shopeasy_telemetry_zero_duration_seconds"),
            &[&[("outcome", "ok")], &[("outcome", "failed")]],
        );
        super::register_http_routes("zero-selftest", &[("GET", "/zero/{id}", "200")]);
        let text = handle.render();
        for line in [
            "shopeasy_telemetry_zero_total{outcome=\"ok\"} 0",
            "shopeasy_telemetry_zero_total{outcome=\"failed\"} 0",
            "shopeasy_telemetry_zero_duration_seconds_bucket{outcome=\"ok\",le=\"0.001\"} 0",
            "shopeasy_telemetry_zero_duration_seconds_count{outcome=\"failed\"} 0",
            "shopeasy_http_server_requests_total{service=\"zero-selftest\",route=\"/zero/{id}\",method=\"GET\",status=\"200\"} 0",
            "shopeasy_http_server_requests_total{service=\"zero-selftest\",route=\"/zero/{id}\",method=\"GET\",status=\"500\"} 0",
            "shopeasy_http_server_request_duration_seconds_count{service=\"zero-selftest\",route=\"/zero/{id}\",method=\"GET\",status=\"200\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(
            !text.contains("shopeasy_http_server_request_duration_seconds_count{service=\"zero-selftest\",route=\"/zero/{id}\",method=\"GET\",status=\"500\"}"),
            "no histogram for the failure counter: {text}"
        );
        // Registering again counts nothing.
        metrics::counter!("shopeasy_telemetry_zero_total", "outcome" => "ok").increment(2);
        super::register_at_zero(
            "shopeasy_telemetry_zero_total",
            None,
            &[&[("outcome", "ok")]],
        );
        assert!(
            handle
                .render()
                .contains("shopeasy_telemetry_zero_total{outcome=\"ok\"} 2")
        );
    }

    #[test]
    fn prometheus_renders_recorded_metrics() {
        let handle = super::prometheus();
        metrics::counter!("shopeasy_telemetry_selftest_total").increment(3);
        metrics::histogram!("shopeasy_telemetry_selftest_duration_seconds").record(0.004);
        let text = handle.render();
        assert!(
            text.contains("shopeasy_telemetry_selftest_total 3"),
            "{text}"
        );
        assert!(
            text.contains("shopeasy_telemetry_selftest_duration_seconds_bucket{le=\"0.005\"} 1"),
            "{text}"
        );
    }
}

/// Registers series at zero, before anything happened: for each label set
/// of `label_sets`, the counter `counter` (incremented by 0) and, when
/// given, the histogram `histogram` (rendered with no observations).
///
/// Why: the Prometheus exporter renders a series only once it is
/// registered, so a counter that is first touched by its first event is
/// missing — a dashboard shows "No data" on a healthy, freshly started
/// system (and a ratio over a missing numerator shows nothing at all).
/// Call it at start-up, after the recorder is installed ([`prometheus`];
/// the lifecycle installs it before `Service::build`), with every label
/// value known then. Calling it again changes no count.
pub fn register_at_zero(
    counter: &'static str,
    histogram: Option<&'static str>,
    label_sets: &[&[(&'static str, &'static str)]],
) {
    for labels in label_sets {
        let labels: Vec<metrics::Label> = labels
            .iter()
            .map(|(k, v)| metrics::Label::new(*k, *v))
            .collect();
        metrics::counter!(counter, labels.clone()).increment(0);
        if let Some(histogram) = histogram {
            let _ = metrics::histogram!(histogram, labels);
        }
    }
}

/// [`register_at_zero`] for the request metrics of [`observe_http`]:
/// `shopeasy_http_server_requests_total` and its duration histogram for
/// `service` (the name given to [`observe_http`]) and each
/// `(method, route, status)` of `routes` — a route as the router matches it
/// (`/api/orders/{id}`) with the status it answers when all is well
/// (`"200"`, `"201"`), plus one `status="500"` counter per route so an
/// error-ratio query has a numerator (0) from the start.
///
/// ```ignore
/// telemetry::register_http_routes("shopeasy-order", &[
///     ("POST", "/api/orders", "201"),
///     ("GET", "/api/orders/{id}", "200"),
/// ]);
/// ```
pub fn register_http_routes(
    service: &'static str,
    routes: &[(&'static str, &'static str, &'static str)],
) {
    for &(method, route, status) in routes {
        let ok = [
            ("service", service),
            ("route", route),
            ("method", method),
            ("status", status),
        ];
        register_at_zero(HTTP_REQUESTS_TOTAL, Some(HTTP_REQUEST_DURATION), &[&ok]);
        let failed = [
            ("service", service),
            ("route", route),
            ("method", method),
            ("status", "500"),
        ];
        register_at_zero(HTTP_REQUESTS_TOTAL, None, &[&failed]);
    }
}

/// The label of a method outside RFC 9110's set (OpenTelemetry's HTTP
/// conventions' name for it).
pub const OTHER_METHOD: &str = "_OTHER";

/// The method as a bounded label (metric labels, span fields): its name if
/// it is one of RFC 9110's (§9: GET HEAD POST PUT DELETE CONNECT OPTIONS
/// TRACE) or PATCH (RFC 5789), [`OTHER_METHOD`] otherwise.
///
/// Why: a method is a token any client may make up (`FOO1`, `FOO2`, …).
/// Labelled as sent, each made-up method would add a counter and a
/// histogram series that live as long as the process: a client could grow
/// the metrics without bound. Every listener labels through this one
/// function, so the services and the gateway bound it alike.
pub fn method_label(method: &http::Method) -> &'static str {
    use http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => OTHER_METHOD,
    }
}

/// The request counter of [`observe_http`].
pub const HTTP_REQUESTS_TOTAL: &str = "shopeasy_http_server_requests_total";
/// The request-duration histogram of [`observe_http`].
pub const HTTP_REQUEST_DURATION: &str = "shopeasy_http_server_request_duration_seconds";

/// Reads W3C trace context from HTTP headers (for the propagator).
#[derive(Debug)]
pub struct HeaderExtractor<'a>(pub &'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Writes W3C trace context into HTTP headers (for the propagator).
#[derive(Debug)]
pub struct HeaderInjector<'a>(pub &'a mut http::HeaderMap);

impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes `span`'s parent the trace context carried by `headers`
/// (`traceparent`), if any.
pub fn set_parent_from(span: &tracing::Span, headers: &http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let parent = global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    let _ = span.set_parent(parent);
}

/// Writes the current span's trace context (`traceparent`) into `headers`,
/// for an outgoing request.
pub fn inject_current(headers: &mut http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    global::get_text_map_propagator(|p| p.inject_context(&context, &mut HeaderInjector(headers)));
}

/// axum middleware for every public HTTP listener: a server span whose parent
/// is the caller's `traceparent`, and the request metrics
/// `shopeasy_http_server_requests_total{service,route,method,status}` and
/// `shopeasy_http_server_request_duration_seconds{service,route,method,status}`.
/// `method` is [`method_label`]'s (a made-up method is `_OTHER`), so no
/// client can add series by inventing methods.
///
/// ```ignore
/// router.layer(axum::middleware::from_fn_with_state("shopeasy-product", telemetry::observe_http))
/// ```
pub async fn observe_http(
    axum::extract::State(service): axum::extract::State<&'static str>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument;
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let span = tracing::info_span!(
        "http.server",
        otel.kind = "server",
        service,
        http.request.method = method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        deadline_left_ms = tracing::field::Empty,
    );
    set_parent_from(&span, request.headers());
    // The deadline that travels, as this hop got it (the console draws it).
    if let Some(d) = shopeasy_resilience::deadline::Deadline::from_headers(request.headers()) {
        span.record(
            "deadline_left_ms",
            u64::try_from(d.remaining().as_millis()).unwrap_or(u64::MAX),
        );
    }
    let started = tokio::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16().to_string();
    span.record("http.response.status_code", status.as_str());
    let labels = [
        ("service", service.to_owned()),
        ("route", route),
        ("method", method.to_owned()),
        ("status", status),
    ];
    metrics::counter!(HTTP_REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION, &labels).record(started.elapsed().as_secs_f64());
    response
}
