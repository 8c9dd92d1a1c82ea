//! The fault windows: each toxic from added to removed (or updated), each
//! disabled period, recorded with their times, served by the API
//! (`GET /proxies/{proxy}/windows`, `GET /windows`), bounded, and traced as
//! one `toxic_window` span each.
#![allow(clippy::unwrap_used)]

mod support;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde_json::{Value, json};
use shopeasy_faults::{
    FaultProxy, Proxies, Stream, Toxic, ToxicKind, ToxicWindow, WindowEnd, api, windows::DISABLED,
};
use support::{Api, echo};
use tracing::{
    Event, Metadata, Subscriber,
    field::{Field, Visit},
    span::{Attributes, Id, Record},
};

async fn start_api() -> Api {
    support::start_api(Proxies::with_seed(7)).await
}

impl Api {
    async fn get(&self, path: &str) -> (u16, Value) {
        self.exchange(self.http.get(format!("{}{path}", self.base)))
            .await
    }
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.exchange(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }
    async fn delete(&self, path: &str) -> u16 {
        self.exchange(self.http.delete(format!("{}{path}", self.base)))
            .await
            .0
    }
    /// `GET path`, expecting 200 and a list; the list and the dropped count.
    async fn windows(&self, path: &str) -> (Vec<Value>, u64) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let dropped = response
            .headers()
            .get(api::WINDOWS_DROPPED)
            .expect("the dropped count is a header")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let list: Value = response.json().await.unwrap();
        (list.as_array().unwrap().clone(), dropped)
    }
    async fn edge(&self, name: &str) {
        let upstream = echo().await;
        let (status, _) = self
            .post(
                "/proxies",
                json!({"name": name, "listen": "127.0.0.1:0", "upstream": upstream.addr.to_string()}),
            )
            .await;
        assert_eq!(status, 201);
    }
}

/// Now, Unix ms, rounded down (what a window's start may equal at least).
fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Asserts `at` (Unix ms) lies within `[before, after + 1]`: a start is
/// rounded down, an end up.
#[track_caller]
fn within(at: &Value, before: u64, after: u64) -> u64 {
    let at = at.as_u64().unwrap_or_else(|| panic!("not a time: {at}"));
    assert!(
        (before..=after + 1).contains(&at),
        "{at} is not within [{before}, {after} + 1]"
    );
    at
}

/// Add, hold, update, remove, disable with a toxic on, reset: every
/// transition is a window edge at the time it happened, with the toxic's
/// values, in the order it happened.
#[tokio::test]
async fn windows_record_add_update_remove_disable_and_reset_with_their_times() {
    let api = start_api().await;
    api.edge("order-inventory").await;

    let t0 = now_ms();
    let (status, _) = api
        .post(
            "/proxies/order-inventory/toxics",
            json!({"name": "slow", "type": "latency", "stream": "upstream", "toxicity": 0.5,
                   "attributes": {"latency": 40}}),
        )
        .await;
    assert_eq!(status, 200);
    let t1 = now_ms();
    let (open, dropped) = api.windows("/proxies/order-inventory/windows").await;
    assert_eq!(dropped, 0);
    assert_eq!(open.len(), 1, "{open:?}");
    let w = &open[0];
    assert_eq!(w["proxy"], "order-inventory");
    assert_eq!(w["toxic"], "slow");
    assert_eq!(w["type"], "latency");
    assert_eq!(w["stream"], "upstream");
    assert_eq!(w["toxicity"], 0.5);
    assert_eq!(w["attributes"], json!({"latency": 40, "jitter": 0}));
    assert_eq!(w["ended_unix_ms"], Value::Null, "still open");
    assert_eq!(w["ended_by"], Value::Null);
    let first_start = within(&w["started_unix_ms"], t0, t1);

    // The fault lasts a while (what the window must measure).
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t2 = now_ms();
    let (status, _) = api
        .post(
            "/proxies/order-inventory/toxics/slow",
            json!({"attributes": {"latency": 200}}),
        )
        .await;
    assert_eq!(status, 200);
    let t3 = now_ms();
    assert_eq!(
        api.delete("/proxies/order-inventory/toxics/slow").await,
        204
    );
    let t4 = now_ms();

    let (status, _) = api
        .post(
            "/proxies/order-inventory/toxics",
            json!({"name": "hang", "type": "timeout", "attributes": {"timeout": 0}}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .post("/proxies/order-inventory", json!({"enabled": false}))
        .await;
    assert_eq!(status, 200);
    // Disabling twice is one disabled period.
    let (status, _) = api
        .post("/proxies/order-inventory", json!({"enabled": false}))
        .await;
    assert_eq!(status, 200);
    let t5 = now_ms();
    let (status, _) = api.post("/reset", json!({})).await;
    assert_eq!(status, 204);
    let t6 = now_ms();

    let (all, dropped) = api.windows("/proxies/order-inventory/windows").await;
    assert_eq!(dropped, 0);
    let summary: Vec<(&str, &str, &str)> = all
        .iter()
        .map(|w| {
            (
                w["toxic"].as_str().unwrap(),
                w["type"].as_str().unwrap(),
                w["ended_by"].as_str().unwrap_or("open"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("slow", "latency", "updated"),
            ("slow", "latency", "removed"),
            ("hang", "timeout", "reset"),
            (DISABLED, DISABLED, "reset"),
        ]
    );
    let ids: Vec<u64> = all.iter().map(|w| w["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    // A client reads the answer back into the crate's own type.
    let typed: Vec<ToxicWindow> = serde_json::from_value(Value::Array(all.clone())).unwrap();
    assert_eq!(typed[0].ended_by, Some(WindowEnd::Updated));
    assert_eq!(typed[3].stream, None);

    let (before, after) = (&all[0], &all[1]);
    assert_eq!(before["started_unix_ms"].as_u64().unwrap(), first_start);
    let first_end = within(&before["ended_unix_ms"], t2, t3);
    assert!(
        first_end - first_start >= 30,
        "the first window lasted the 30 ms held: {before}"
    );
    assert_eq!(before["attributes"]["latency"], 40);
    let second_start = within(&after["started_unix_ms"], t2, t3);
    assert_eq!(
        after["started_monotonic_us"], before["ended_monotonic_us"],
        "no gap between an update's windows"
    );
    assert!(second_start <= first_end);
    assert_eq!(after["attributes"]["latency"], 200);
    assert_eq!(after["stream"], "upstream", "an update keeps the stream");
    within(&after["ended_unix_ms"], t3, t4);

    let disabled = &all[3];
    assert_eq!(disabled["stream"], Value::Null);
    assert_eq!(disabled["attributes"], json!({}));
    within(&disabled["started_unix_ms"], t4, t5);
    within(&disabled["ended_unix_ms"], t5, t6);
    for w in &all {
        let (start, end) = (
            w["started_monotonic_us"].as_u64().unwrap(),
            w["ended_monotonic_us"].as_u64().unwrap(),
        );
        assert!(start <= end, "{w}");
        assert!(
            w["started_unix_ms"].as_u64() <= w["ended_unix_ms"].as_u64(),
            "{w}"
        );
    }
}

/// `GET /windows` merges every edge by opening time; `since` keeps what
/// was open at or after it; a removed proxy's history stays readable.
#[tokio::test]
async fn all_windows_merge_edges_and_since_keeps_what_was_open_after_it() {
    let api = start_api().await;
    api.edge("order-inventory").await;
    api.edge("gateway-order").await;
    let toxic = json!({"name": "rst", "type": "reset_peer", "attributes": {"timeout": 0}});
    api.post("/proxies/order-inventory/toxics", toxic.clone())
        .await;
    assert_eq!(api.delete("/proxies/order-inventory/toxics/rst").await, 204);
    api.post("/proxies/gateway-order/toxics", toxic.clone())
        .await;
    // Windows ending before `since` are left out: step past the first end.
    let ended = api.windows("/proxies/order-inventory/windows").await.0[0]["ended_unix_ms"]
        .as_u64()
        .unwrap();
    while now_ms() <= ended {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let since = now_ms();
    api.post("/proxies/order-inventory/toxics", toxic.clone())
        .await;

    let (all, _) = api.windows("/windows").await;
    let edges: Vec<&str> = all.iter().map(|w| w["proxy"].as_str().unwrap()).collect();
    assert_eq!(
        edges,
        ["order-inventory", "gateway-order", "order-inventory"],
        "by opening time: {all:?}"
    );
    let (recent, _) = api.windows(&format!("/windows?since={since}")).await;
    let open: Vec<(&str, u64)> = recent
        .iter()
        .map(|w| (w["proxy"].as_str().unwrap(), w["id"].as_u64().unwrap()))
        .collect();
    assert_eq!(open, [("gateway-order", 1), ("order-inventory", 2)]);
    let (one, _) = api
        .windows(&format!("/proxies/order-inventory/windows?since={since}"))
        .await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["id"], 2);

    // Removing the proxy closes its windows; its history stays.
    assert_eq!(api.delete("/proxies/order-inventory").await, 204);
    let (kept, _) = api.windows("/proxies/order-inventory/windows").await;
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[1]["ended_by"], "stopped");
    // Created again, the edge continues its history.
    api.edge("order-inventory").await;
    api.post("/proxies/order-inventory/toxics", toxic).await;
    let (continued, _) = api.windows("/proxies/order-inventory/windows").await;
    assert_eq!(continued.len(), 3);
    assert_eq!(continued[2]["id"], 3);
}

/// Bad queries and unknown proxies are problems with a `detail`; the
/// guard applies to the window routes like every other.
#[tokio::test]
async fn bad_queries_unknown_proxies_and_foreign_hosts_are_refused() {
    let api = start_api().await;
    api.edge("order-inventory").await;
    for path in [
        "/windows?since=yesterday",
        "/windows?since=-1",
        "/windows?sinse=1",
        "/proxies/order-inventory/windows?since=1.5",
    ] {
        let response = api
            .http
            .get(format!("{}{path}", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
        let body: Value = response.json().await.unwrap();
        assert!(body["detail"].as_str().unwrap().contains("since"), "{body}");
    }
    let (status, body) = api.get("/proxies/nope/windows").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "proxy not found");
    let (status, _) = api
        .exchange(
            api.http
                .get(format!("{}/windows", api.base))
                .header("host", "evil.example"),
        )
        .await;
    assert_eq!(status, 403, "DNS rebinding cannot read the windows either");
}

/// 1,100 toxics added and removed: the last 1,000 windows are kept, the
/// 100 oldest dropped and counted.
#[tokio::test]
async fn the_history_keeps_the_last_thousand_windows_and_counts_the_rest() {
    let api = start_api().await;
    api.edge("order-inventory").await;
    for i in 0..1100 {
        let (status, _) = api
            .post(
                "/proxies/order-inventory/toxics",
                json!({"name": format!("t{i}"), "type": "latency", "attributes": {"latency": i}}),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(
            api.delete(&format!("/proxies/order-inventory/toxics/t{i}"))
                .await,
            204
        );
    }
    let (kept, dropped) = api.windows("/proxies/order-inventory/windows").await;
    assert_eq!(kept.len(), 1000);
    assert_eq!(dropped, 100);
    assert_eq!(kept[0]["toxic"], "t100", "the oldest are the ones dropped");
    assert_eq!(kept[999]["toxic"], "t1099");
    let (_, total) = api.windows("/windows").await;
    assert_eq!(total, 100);
}

/// A restart (new upstream) keeps the toxics and their windows open: the
/// fault goes on, so its window does too.
#[tokio::test]
async fn a_restarted_proxy_continues_its_open_windows() {
    let proxies = Proxies::with_seed(3);
    let upstream = echo().await;
    let edge = proxies
        .create(shopeasy_faults::ProxyConfig::new(
            "order-inventory",
            upstream.addr.to_string(),
        ))
        .await
        .unwrap();
    edge.add_toxic(Toxic::new(
        ToxicKind::Timeout { timeout: 0 },
        Stream::Downstream,
    ))
    .unwrap();
    edge.set_enabled(false).await;
    let other = echo().await;
    let restarted = proxies
        .update(
            "order-inventory",
            shopeasy_faults::ProxyUpdate {
                upstream: Some(other.addr.to_string()),
                enabled: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(restarted.toxics().len(), 1);
    let history = restarted.windows();
    let state: Vec<(&str, Option<WindowEnd>)> = history
        .windows
        .iter()
        .map(|w| (w.kind.as_str(), w.ended_by))
        .collect();
    assert_eq!(
        state,
        [("timeout", None), (DISABLED, Some(WindowEnd::Enabled))],
        "the toxic's window goes on; enabling on restart ends the disabled one"
    );
    proxies.shutdown().await;
    let after = proxies.windows("order-inventory", None).unwrap();
    assert!(
        after
            .windows
            .iter()
            .all(|w| w.ended_by.is_some() && w.ended_unix_ms >= Some(w.started_unix_ms))
    );
}

// ---------------------------------------------------------------------------
// Spans, seen through a small capturing subscriber (no OTLP needed).

#[derive(Debug, Default)]
struct SpanSeen {
    name: &'static str,
    fields: BTreeMap<String, String>,
    refs: usize,
    closed: bool,
    parent: Option<u64>,
    /// Messages of the events inside it.
    events: Vec<String>,
}

#[derive(Debug, Default)]
struct Seen {
    next: u64,
    spans: BTreeMap<u64, SpanSeen>,
    entered: Vec<u64>,
}

/// Records spans, their fields, their closing and the events inside them.
#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A `toxic_window` span as the capture saw it.
#[derive(Debug)]
struct WindowSpan {
    fields: BTreeMap<String, String>,
    closed: bool,
    parent: Option<u64>,
    events: Vec<String>,
}

impl Capture {
    fn windows(&self) -> Vec<WindowSpan> {
        self.0
            .lock()
            .unwrap()
            .spans
            .values()
            .filter(|s| s.name == "toxic_window")
            .map(|s| WindowSpan {
                fields: s.fields.clone(),
                closed: s.closed,
                parent: s.parent,
                events: s.events.clone(),
            })
            .collect()
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut seen = self.0.lock().unwrap();
        seen.next += 1;
        let id = seen.next;
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let parent = if span.is_root() {
            None
        } else {
            span.parent()
                .map(Id::into_u64)
                .or_else(|| seen.entered.last().copied())
        };
        seen.spans.insert(
            id,
            SpanSeen {
                name: span.metadata().name(),
                fields,
                refs: 1,
                parent,
                ..SpanSeen::default()
            },
        );
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(s) = seen.spans.get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut seen = self.0.lock().unwrap();
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        if let Some(current) = seen.entered.last().copied()
            && let Some(s) = seen.spans.get_mut(&current)
        {
            s.events.push(fields.remove("message").unwrap_or_default());
        }
    }
    fn enter(&self, span: &Id) {
        self.0.lock().unwrap().entered.push(span.into_u64());
    }
    fn exit(&self, span: &Id) {
        let mut seen = self.0.lock().unwrap();
        if let Some(at) = seen.entered.iter().rposition(|&id| id == span.into_u64()) {
            seen.entered.remove(at);
        }
    }
    fn clone_span(&self, span: &Id) -> Id {
        if let Some(s) = self.0.lock().unwrap().spans.get_mut(&span.into_u64()) {
            s.refs += 1;
        }
        span.clone()
    }
    fn try_close(&self, span: Id) -> bool {
        let mut seen = self.0.lock().unwrap();
        let Some(s) = seen.spans.get_mut(&span.into_u64()) else {
            return false;
        };
        s.refs -= 1;
        if s.refs == 0 {
            s.closed = true;
        }
        s.closed
    }
}

/// Each window is one `toxic_window` span, a root with the edge and the
/// toxic's values, open exactly while the window is: created at add,
/// closed at removal; an update closes one and opens the next; a disabled
/// period is one too. An event inside marks each transition.
#[tokio::test]
async fn each_window_is_a_toxic_window_span_open_exactly_while_it_lasts() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let upstream = echo().await;
    let proxy = FaultProxy::start("order-inventory", upstream.addr.to_string())
        .await
        .unwrap();

    // Added inside a request's span: the window is still a root.
    let request = tracing::info_span!("request");
    request.in_scope(|| {
        proxy
            .add_toxic(
                Toxic::new(
                    ToxicKind::Latency {
                        latency: 100,
                        jitter: 0,
                    },
                    Stream::Downstream,
                )
                .named("slow")
                .with_toxicity(0.25),
            )
            .unwrap();
    });
    drop(request);
    let windows = capture.windows();
    assert_eq!(windows.len(), 1);
    let WindowSpan {
        fields,
        closed,
        parent,
        events,
    } = &windows[0];
    assert!(!closed, "open while the toxic is on");
    assert_eq!(*parent, None, "a root span: it outlives the request");
    assert_eq!(fields["edge"], "order-inventory");
    assert_eq!(fields["toxic"], "slow");
    assert_eq!(fields["toxic.type"], "latency");
    assert_eq!(fields["toxic.stream"], "downstream");
    assert_eq!(fields["toxic.toxicity"], "0.25");
    assert_eq!(fields["toxic.attributes"], r#"{"jitter":0,"latency":100}"#);
    assert_eq!(events, &["fault window opened"]);

    proxy
        .update_toxic(
            Toxic::new(
                ToxicKind::Latency {
                    latency: 300,
                    jitter: 0,
                },
                Stream::Downstream,
            )
            .named("slow"),
        )
        .unwrap();
    let windows = capture.windows();
    assert_eq!(windows.len(), 2);
    assert!(
        windows[0].closed,
        "the update closed the first window's span"
    );
    assert_eq!(windows[0].fields["window.ended_by"], "updated");
    assert_eq!(
        windows[0].events,
        ["fault window opened", "fault window closed"]
    );
    assert!(!windows[1].closed, "and opened the next");
    assert_eq!(
        windows[1].fields["toxic.attributes"],
        r#"{"jitter":0,"latency":300}"#
    );

    proxy.remove_toxic("slow").unwrap();
    let windows = capture.windows();
    assert!(windows[1].closed, "removal closed it");
    assert_eq!(windows[1].fields["window.ended_by"], "removed");

    proxy.set_enabled(false).await;
    let windows = capture.windows();
    assert_eq!(windows.len(), 3);
    assert_eq!(windows[2].fields["toxic.type"], DISABLED);
    assert_eq!(windows[2].fields["toxic.stream"], "both");
    assert!(!windows[2].closed, "open while disabled");
    proxy.set_enabled(true).await;
    assert!(capture.windows()[2].closed, "closed when enabled again");

    // A window open when the proxy stops ends with it.
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Upstream,
        ))
        .unwrap();
    proxy.stop().await;
    let windows = capture.windows();
    assert_eq!(windows.len(), 4);
    assert!(windows[3].closed);
    assert_eq!(windows[3].fields["window.ended_by"], "stopped");
}
