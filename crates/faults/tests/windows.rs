//! The fault windows: each toxic from added to removed (or updated), each
//! disabled period, recorded with their times, served by the API
//! (`GET /proxies/{proxy}/windows`, `GET /windows`), bounded, and traced as
//! one `toxic_window` span each (`window_spans.rs`).
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use shopeasy_faults::{
    Proxies, Stream, Toxic, ToxicKind, ToxicWindow, WindowEnd, api, windows::DISABLED,
};
use support::{Api, Upstream, echo};

/// Proxy `order-inventory` of `proxies`, to `upstream`.
async fn order_inventory(proxies: &Proxies, upstream: &Upstream) -> shopeasy_faults::FaultProxy {
    proxies
        .create(shopeasy_faults::ProxyConfig::new(
            "order-inventory",
            upstream.addr.to_string(),
        ))
        .await
        .unwrap()
}

/// Restarts `order-inventory` of `proxies` towards `upstream` (a new
/// upstream is a restart); the handle of the proxy that replaced it.
async fn restart(proxies: &Proxies, upstream: &Upstream) -> shopeasy_faults::FaultProxy {
    proxies
        .update(
            "order-inventory",
            shopeasy_faults::ProxyUpdate {
                upstream: Some(upstream.addr.to_string()),
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

/// The windows of `order-inventory` still open.
fn open_windows(proxies: &Proxies) -> Vec<ToxicWindow> {
    proxies
        .windows("order-inventory", None)
        .unwrap()
        .windows
        .into_iter()
        .filter(|w| w.ended_by.is_none())
        .collect()
}

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
    let edge = order_inventory(&proxies, &upstream).await;
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

/// A handle kept across a restart (or a removal) points at a stopped
/// proxy: a toxic change through it is refused, where it used to land on
/// the stopped proxy and be lost (an add, its window left open for ever)
/// or undo nothing on the successor while closing its window (a removal).
/// The API's handlers hold such a handle between looking the proxy up and
/// changing it, so a change racing a restart hit this.
#[tokio::test]
async fn a_stale_handle_cannot_change_the_toxics_of_a_restarted_or_removed_proxy() {
    let proxies = Proxies::with_seed(5);
    let upstream = echo().await;
    let old = order_inventory(&proxies, &upstream).await;
    let slow = Toxic::new(
        ToxicKind::Latency {
            latency: 1,
            jitter: 0,
        },
        Stream::Downstream,
    )
    .named("slow");
    old.add_toxic(slow.clone()).unwrap();
    let other = echo().await;
    let restarted = restart(&proxies, &other).await;

    let hang = Toxic::new(ToxicKind::Timeout { timeout: 0 }, Stream::Upstream).named("hang");
    assert!(matches!(
        old.add_toxic(hang.clone()),
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    assert!(matches!(
        old.update_toxic(slow.clone()),
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    assert!(matches!(
        old.remove_toxic("slow"),
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    old.remove_all_toxics();
    assert_eq!(
        restarted.toxics(),
        std::slice::from_ref(&slow),
        "the toxic goes on"
    );
    let open: Vec<String> = open_windows(&proxies)
        .into_iter()
        .map(|w| w.toxic)
        .collect();
    assert_eq!(open, ["slow"], "its window too, and no other opened");

    proxies.remove("order-inventory").await.unwrap();
    assert!(matches!(
        restarted.add_toxic(hang),
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    let history = proxies.windows("order-inventory", None).unwrap();
    assert!(
        history.windows.iter().all(|w| w.ended_by.is_some()),
        "a removed proxy opens no window: {:?}",
        history.windows
    );
}

/// Enabling or disabling through a handle kept across a restart is refused
/// as a toxic change is: it used to flip the stopped proxy's flag and
/// record into the history it shares with its successor, opening a
/// `disabled` window for an edge that was up, or ending the one of an edge
/// still down.
#[tokio::test]
async fn a_stale_handle_cannot_enable_or_disable_a_restarted_proxy() {
    let proxies = Proxies::with_seed(6);
    let upstream = echo().await;
    let old = order_inventory(&proxies, &upstream).await;
    let other = echo().await;
    let restarted = restart(&proxies, &other).await;

    assert!(matches!(
        old.try_set_enabled(false).await,
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    old.set_enabled(false).await; // ignored, as `remove_all_toxics` is
    assert!(restarted.enabled());
    let history = proxies.windows("order-inventory", None).unwrap();
    assert!(
        history.windows.is_empty(),
        "the edge is up, no window: {:?}",
        history.windows
    );
    let mut client = support::connect(restarted.listen_addr()).await;
    support::round_trip(&mut client, b"ping", Duration::from_secs(5))
        .await
        .unwrap();

    restarted.set_enabled(false).await;
    assert!(matches!(
        old.try_set_enabled(true).await,
        Err(shopeasy_faults::Error::ProxyNotFound)
    ));
    assert!(!restarted.enabled());
    let open: Vec<String> = open_windows(&proxies).into_iter().map(|w| w.kind).collect();
    assert_eq!(open, [DISABLED], "the edge is down, its window open");
}
