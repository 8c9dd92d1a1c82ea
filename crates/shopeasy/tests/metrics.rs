//! Metrics that exist before anything goes wrong (issue 18, point 3).
//!
//! The Grafana board (`deploy/grafana/dashboards/shopeasy.json`) must show
//! 0, not "No data", on a healthy system that has just started: every
//! series it queries is registered at start-up with its known label values.
//! This test starts the embedded system, sends no request to any service,
//! reads every admin listener's `/metrics` and checks that every metric
//! name the board's queries use is there, and every metric the console
//! reads (`shopeasy_console::observe::METRICS`), and that the counters whose
//! label values are known up front (breaker transitions, retry decisions,
//! cache results, outbox outcomes) are there for each value, at 0.
//!
//! Histograms: the `metrics` Prometheus exporter (0.18) renders a
//! registered histogram with zero observations (`_bucket … 0`, `_count 0`),
//! so the board's histogram queries (`…_bucket`, `…_count`) are checked
//! like the rest; none is exempt.
//!
//! The only wait is for the outbox's backlog gauge, which is set from the
//! outbox's first count (at once after start, not before: a gauge set to 0
//! before counting would be a lie after a restart with a backlog).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{collections::BTreeSet, net::SocketAddr, path::Path, time::Duration};

use serde_json::Value;
use shopeasy::system::{Options, System};
use shopeasy_testkit::{Metrics, eventually};

/// The board, from the repository.
fn board() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/dashboards/shopeasy.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every PromQL query of the board: the `expr` of each target, at any depth
/// (panels in rows included).
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The metric names a query uses: every identifier starting `shopeasy_`
/// (label names and functions never do).
fn metric_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("shopeasy_") {
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        if !preceded {
            names.push(tail[..len].to_owned());
        }
        rest = &tail[len..];
    }
    names
}

/// Every metric name the board queries.
fn board_metric_names() -> BTreeSet<String> {
    let mut exprs = Vec::new();
    queries(&board(), &mut exprs);
    exprs.iter().flat_map(|q| metric_names(q)).collect()
}

#[test]
fn the_board_queries_are_read_and_their_metric_names_found() {
    assert_eq!(
        metric_names(
            "sum by (target, outcome) (rate(shopeasy_downstream_retries_total{a=\"b\"}[1m])) \
             / sum(shopeasy_outbox_backlog) + not_shopeasy_x"
        ),
        [
            "shopeasy_downstream_retries_total",
            "shopeasy_outbox_backlog"
        ]
    );
    let names = board_metric_names();
    // A parse that found nothing would make the test below pass vacuously.
    assert!(names.len() > 10, "only {} names: {names:?}", names.len());
    for known in [
        "shopeasy_downstream_circuit_transitions_total",
        "shopeasy_http_server_request_duration_seconds_bucket",
        "shopeasy_outbox_processed_total",
    ] {
        assert!(names.contains(known), "{known} not found in {names:?}");
    }
}

/// Every admin listener of the system, by service.
fn admins(system: &System) -> [(&'static str, SocketAddr); 4] {
    let a = &system.addresses;
    [
        ("gateway", a.gateway_admin),
        ("product", a.product_admin),
        ("order", a.order_admin),
        ("inventory", a.inventory_admin),
    ]
}

/// Every admin listener's `/metrics`, parsed, as one page (in the embedded
/// system the services share one recorder; in full mode each has its own,
/// and the board reads them all).
async fn scrape(http: &reqwest::Client, system: &System) -> Metrics {
    let mut text = String::new();
    for (service, addr) in admins(system) {
        let res = http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{service} admin {addr}: {e}"));
        assert_eq!(res.status(), 200, "{service} /metrics");
        text.push_str(&res.text().await.unwrap());
        text.push('\n');
    }
    Metrics::parse(&text)
}

/// The board's names missing from `page`.
fn missing(page: &Metrics, names: &BTreeSet<String>) -> Vec<String> {
    names
        .iter()
        .filter(|name| !page.has(name, &[]))
        .cloned()
        .collect()
}

/// `(labels)` series of `name` that `page` lacks or that are not 0.
fn not_at_zero(page: &Metrics, name: &str, label_sets: &[Vec<(&str, &str)>]) -> Vec<String> {
    label_sets
        .iter()
        .filter(|labels| page.get(name, labels) != Some(0.0))
        .map(|labels| format!("{name}{labels:?} = {:?}", page.get(name, labels)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_board_and_the_console_query_exists_before_any_request() {
    let mut names = board_metric_names();
    names.extend(
        shopeasy_console::observe::METRICS
            .iter()
            .map(|&name| name.to_owned()),
    );
    let dir = tempfile::tempdir().unwrap();
    let system = System::start(Options::for_tests(dir.path()))
        .await
        .expect("the embedded system starts");
    let http = reqwest::Client::new();

    // Nothing but the admin listeners is asked; the wait is bounded and
    // only the outbox's first count can take it.
    let mut page = Metrics::default();
    eventually(Duration::from_secs(10), async || {
        page = scrape(&http, &system).await;
        missing(&page, &names).is_empty()
    })
    .await;
    let absent = missing(&page, &names);

    // The counters whose label values are known at start-up: every value,
    // at 0 on a healthy system nobody has called yet.
    let mut wrong = Vec::new();
    for target in ["inventory", "product"] {
        let states = ["closed", "open", "half_open"]
            .map(|s| vec![("target", target), ("state", s)])
            .to_vec();
        wrong.extend(not_at_zero(
            &page,
            "shopeasy_downstream_circuit_transitions_total",
            &states,
        ));
        let outcomes = shopeasy_resilience::retry::RETRY_OUTCOMES
            .map(|o| vec![("target", target), ("outcome", o.as_str())])
            .to_vec();
        wrong.extend(not_at_zero(
            &page,
            "shopeasy_downstream_retries_total",
            &outcomes,
        ));
        wrong.extend(not_at_zero(
            &page,
            "shopeasy_downstream_circuit_state",
            &[vec![("target", target)]],
        ));
    }
    let gateway_retries = [
        "retried",
        "success_after_retry",
        "exhausted",
        "deadline",
        "budget_exhausted",
    ]
    .map(|o| vec![("outcome", o)])
    .to_vec();
    wrong.extend(not_at_zero(
        &page,
        "shopeasy_gateway_retries_total",
        &gateway_retries,
    ));
    let cache_results = ["hit", "miss", "stale", "coalesced", "rejected"]
        .map(|r| vec![("result", r)])
        .to_vec();
    wrong.extend(not_at_zero(
        &page,
        "shopeasy_stock_cache_requests_total",
        &cache_results,
    ));
    let processed = ["confirmed", "rejected", "deferred"]
        .map(|o| vec![("outcome", o)])
        .to_vec();
    wrong.extend(not_at_zero(
        &page,
        "shopeasy_outbox_processed_total",
        &processed,
    ));
    assert!(
        absent.is_empty() && wrong.is_empty(),
        "a freshly started system lacks series the board queries\n\
         missing from every admin /metrics: {absent:#?}\n\
         not registered at 0: {wrong:#?}\n(board names: {names:?})"
    );

    system.stop().await.unwrap();
}
