//! The Toxiproxy-compatible HTTP API: paths, JSON and status codes, and that
//! what it changes reaches the proxies.
#![allow(clippy::unwrap_used)]

mod support;

use std::{io::ErrorKind, time::Duration};

use serde_json::{Value, json};
use shopeasy_faults::Proxies;
use support::{Api, connect, echo, round_trip};
use tokio::net::TcpListener;

async fn start_api() -> Api {
    support::start_api(Proxies::with_seed(1)).await
}

impl Api {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.exchange(request).await
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }
    async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }
    /// Creates the proxy `edge` on a free loopback port in front of
    /// `upstream`; returns its view.
    async fn create_edge(&self, upstream: &str) -> Value {
        let edge = json!({"name": "edge", "listen": "127.0.0.1:0", "upstream": upstream});
        let (status, created) = self.post("/proxies", edge).await;
        assert_eq!(status, 201, "{created}");
        created
    }
}

#[tokio::test]
async fn proxy_lifecycle_with_toxiproxy_status_codes() {
    let api = start_api().await;
    let upstream = echo().await;
    let spec =
        json!({"name": "edge", "listen": "127.0.0.1:0", "upstream": upstream.addr.to_string()});

    let (status, created) = api.post("/proxies", spec.clone()).await;
    assert_eq!(status, 201);
    assert_eq!(created["name"], "edge");
    assert_eq!(created["enabled"], true);
    assert_eq!(created["toxics"], json!([]));
    let listen: std::net::SocketAddr = created["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(listen.port(), 0, "the real port is reported");

    let (status, body) = api.post("/proxies", spec).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"], "proxy already exists");
    assert_eq!(body["status"], 409);

    let (status, all) = api.get("/proxies").await;
    assert_eq!(status, 200);
    assert_eq!(all["edge"]["upstream"], upstream.addr.to_string());

    let (status, shown) = api.get("/proxies/edge").await;
    assert_eq!((status, &shown["name"]), (200, &json!("edge")));
    assert_eq!(api.get("/proxies/nope").await.0, 404);

    // Disable through the API: new connections are refused.
    let (status, updated) = api.post("/proxies/edge", json!({"enabled": false})).await;
    assert_eq!((status, &updated["enabled"]), (200, &json!(false)));
    assert_eq!(
        tokio::net::TcpStream::connect(listen)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::ConnectionRefused
    );
    let (status, _) = api
        .send(
            reqwest::Method::PATCH,
            "/proxies/edge",
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(status, 200);
    let mut client = connect(listen).await;
    round_trip(&mut client, b"ping", Duration::from_secs(5))
        .await
        .unwrap();

    assert_eq!(api.delete("/proxies/edge").await.0, 204);
    assert_eq!(api.delete("/proxies/edge").await.0, 404);
    assert!(api.proxies.list().await.is_empty());
}

#[tokio::test]
async fn toxic_crud_with_toxiproxy_json() {
    let api = start_api().await;
    let upstream = echo().await;
    let (status, _) = api
        .post(
            "/proxies",
            json!({"name": "edge", "upstream": upstream.addr.to_string()}),
        )
        .await;
    assert_eq!(status, 201);

    let (status, toxic) = api
        .post(
            "/proxies/edge/toxics",
            json!({"type": "latency", "attributes": {"latency": 100}}),
        )
        .await;
    assert_eq!(status, 200, "Toxiproxy answers 200 to a new toxic: {toxic}");
    assert_eq!(
        toxic,
        json!({"name": "latency_downstream", "type": "latency", "stream": "downstream",
               "toxicity": 1.0, "attributes": {"latency": 100, "jitter": 0}})
    );
    let (status, body) = api
        .post("/proxies/edge/toxics", json!({"type": "latency"}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("toxic already exists"))
    );

    let (status, list) = api.get("/proxies/edge/toxics").await;
    assert_eq!((status, list.as_array().unwrap().len()), (200, 1));
    let (status, one) = api.get("/proxies/edge/toxics/latency_downstream").await;
    assert_eq!((status, &one["attributes"]["latency"]), (200, &json!(100)));
    assert_eq!(api.get("/proxies/edge/toxics/nope").await.0, 404);
    assert_eq!(api.get("/proxies/nope/toxics").await.0, 404);

    let (status, updated) = api
        .post(
            "/proxies/edge/toxics/latency_downstream",
            json!({"attributes": {"jitter": 5}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(updated["attributes"], json!({"latency": 100, "jitter": 5}));
    let proxy = api.proxies.get("edge").await.unwrap();
    assert_eq!(proxy.toxics().len(), 1);

    for bad in [
        json!({"type": "earthquake"}),
        json!({"type": "latency", "stream": "sideways", "name": "x"}),
        json!({"type": "latency", "name": "y", "attributes": {"latency": "slow"}}),
        json!({"type": "latency", "name": "z", "toxicity": 2.0}),
    ] {
        let (status, body) = api.post("/proxies/edge/toxics", bad.clone()).await;
        assert_eq!(status, 400, "{bad} → {body}");
        assert!(body["error"].is_string());
    }

    assert_eq!(
        api.delete("/proxies/edge/toxics/latency_downstream")
            .await
            .0,
        204
    );
    assert_eq!(
        api.delete("/proxies/edge/toxics/latency_downstream")
            .await
            .0,
        404
    );
    assert!(proxy.toxics().is_empty());
}

#[tokio::test]
async fn populate_reset_version_and_bad_bodies() {
    let api = start_api().await;
    let upstream = echo().await;
    let (status, body) = api
        .post(
            "/populate",
            json!([{"name": "a", "upstream": upstream.addr.to_string()},
                   {"name": "b", "upstream": upstream.addr.to_string(), "enabled": false}]),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(body["proxies"].as_array().unwrap().len(), 2);
    let b = api.proxies.get("b").await.unwrap();
    assert!(!b.enabled());

    let (status, _) = api
        .post(
            "/proxies/a/toxics",
            json!({"type": "timeout", "attributes": {"timeout": 0}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(api.post("/reset", Value::Null).await.0, 204);
    assert!(b.enabled(), "reset enables every proxy");
    assert!(
        api.proxies.get("a").await.unwrap().toxics().is_empty(),
        "reset removes toxics"
    );

    let (status, version) = api.get("/version").await;
    assert_eq!(status, 200);
    assert!(version["version"].as_str().unwrap().starts_with("2."));

    // `curl -d '...'` sends a form content type: refused (a web page can
    // send that without a preflight); JSON must say so.
    let response = api
        .http
        .post(format!("{}/proxies", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(r#"{{"name":"c","upstream":"{}"}}"#, upstream.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    assert!(api.proxies.get("c").await.is_err(), "nothing was created");

    let response = api
        .http
        .post(format!("{}/proxies", api.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let (status, _) = api.post("/proxies", json!({"name": "d"})).await;
    assert_eq!(status, 400, "upstream is required");
    let (status, _) = api.post("/populate", json!({"not": "a list"})).await;
    assert_eq!(status, 400);
    let (status, _) = api.get("/nothing/here").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_listen_address_in_use_is_a_clear_conflict_not_a_500() {
    let api = start_api().await;
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (status, body) = api
        .post(
            "/proxies",
            json!({"name": "x", "listen": taken.local_addr().unwrap().to_string(), "upstream": "127.0.0.1:1"}),
        )
        .await;
    assert_eq!(status, 409);
    assert!(
        body["error"].as_str().unwrap().contains("cannot listen"),
        "{body}"
    );
}

/// A path segment that does not decode is a 400 in the API's own dialect
/// (problem+json with Toxiproxy's `error`), not axum's plain text.
#[tokio::test]
async fn a_name_that_does_not_decode_is_a_bad_request() {
    let api = start_api().await;
    for (method, path) in [
        (reqwest::Method::GET, "/proxies/%FF"),
        (reqwest::Method::DELETE, "/proxies/%FF"),
        (reqwest::Method::GET, "/proxies/%FF/toxics/%FE"),
    ] {
        let (status, body) = api.send(method, path, None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["type"], "urn:shopeasy:problem:bad-request", "{body}");
        assert!(body["error"].as_str().unwrap().contains("UTF-8"), "{body}");
    }
}

/// Go's decoder, Toxiproxy's, takes only an object for a proxy or a toxic;
/// serde's derive would read an array as the fields in order. Each is 400
/// and changes nothing.
#[tokio::test]
async fn an_array_is_not_a_proxy_or_a_toxic() {
    let api = start_api().await;
    let upstream = echo().await.addr.to_string();
    api.create_edge(&upstream).await;
    let (_, before) = api.get("/proxies").await;
    for (path, body) in [
        ("/proxies", json!(["other", "127.0.0.1:0", upstream, true])),
        (
            "/populate",
            json!([["other", "127.0.0.1:0", upstream, true]]),
        ),
        ("/proxies/edge", json!(["127.0.0.1:0", null, false])),
        (
            "/proxies/edge/toxics",
            json!(["slow", "latency", "downstream", 1.0, {"latency": 1}]),
        ),
    ] {
        let (status, problem) = api.post(path, body).await;
        assert_eq!(status, 400, "{path}: {problem}");
        assert!(
            problem["error"]
                .as_str()
                .unwrap()
                .contains("expected a JSON object"),
            "{path}: {problem}"
        );
    }
    let toxic = json!({"name": "slow", "type": "latency", "attributes": {"latency": 1}});
    assert_eq!(api.post("/proxies/edge/toxics", toxic).await.0, 200);
    let (status, problem) = api
        .post("/proxies/edge/toxics/slow", json!([0.5, {"latency": 9}]))
        .await;
    assert_eq!(status, 400, "{problem}");
    let (_, after) = api.get("/proxies").await;
    let toxics = &after["edge"]["toxics"];
    assert_eq!(toxics[0]["attributes"]["latency"], 1, "{after}");
    assert_eq!(
        after.as_object().unwrap().keys().collect::<Vec<_>>(),
        before.as_object().unwrap().keys().collect::<Vec<_>>(),
        "no proxy was added"
    );
}

/// A restart that cannot listen leaves the proxy as it was: still listed,
/// on its old address, with its toxics, and forwarding.
#[tokio::test]
async fn a_listen_change_that_fails_keeps_the_proxy_as_it_was() {
    let api = start_api().await;
    let upstream = echo().await;
    let created = api.create_edge(&upstream.addr.to_string()).await;
    let toxic = json!({"name": "slow", "type": "latency", "attributes": {"latency": 1}});
    assert_eq!(api.post("/proxies/edge/toxics", toxic).await.0, 200);
    let (_, before) = api.get("/proxies/edge").await;

    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let move_to = json!({"listen": taken.local_addr().unwrap().to_string()});
    let (status, body) = api.post("/proxies/edge", move_to).await;
    assert_eq!(status, 409, "{body}");

    let (status, after) = api.get("/proxies/edge").await;
    assert_eq!(status, 200, "the proxy is still there: {after}");
    assert_eq!(after, before, "address, upstream and toxics unchanged");
    let listen = created["listen"].as_str().unwrap().parse().unwrap();
    let mut client = connect(listen).await;
    round_trip(&mut client, b"ping", Duration::from_secs(5))
        .await
        .unwrap();
}

/// The names of the proxies and the toxics of each, as the API lists them.
async fn snapshot(api: &Api) -> Value {
    let (status, proxies) = api.get("/proxies").await;
    assert_eq!(status, 200);
    proxies
}

/// What a web page could send is refused before anything changes: a
/// foreign `Host` (DNS rebinding) or `Origin` is 403, a body that is not
/// JSON is 415, and a proxy may not listen beyond loopback (400).
#[tokio::test]
async fn requests_a_web_page_could_send_are_refused_and_change_nothing() {
    let api = start_api().await;
    let upstream = echo().await;
    api.create_edge(&upstream.addr.to_string()).await;
    let before = snapshot(&api).await;

    let toxic = json!({"name": "hang", "type": "timeout", "attributes": {"timeout": 0}});
    let url = format!("{}/proxies/edge/toxics", api.base);
    let refused = [
        (
            "foreign Host",
            api.http
                .post(&url)
                .header("host", "evil.example:8474")
                .json(&toxic),
            403,
        ),
        (
            "no loopback Host for GET either",
            api.http.get(format!("{}/proxies", api.base)).header("host", "evil.example"),
            403,
        ),
        (
            "foreign Origin",
            api.http
                .post(&url)
                .header("origin", "http://evil.example")
                .json(&toxic),
            403,
        ),
        (
            "null Origin",
            api.http.post(&url).header("origin", "null").json(&toxic),
            403,
        ),
        (
            "text/plain body",
            api.http
                .post(&url)
                .header("content-type", "text/plain")
                .body(toxic.to_string()),
            415,
        ),
        (
            "body without a type",
            api.http.post(&url).body(toxic.to_string()),
            415,
        ),
        (
            "reset from a foreign Origin",
            api.http
                .post(format!("{}/reset", api.base))
                .header("origin", "https://evil.example"),
            403,
        ),
        (
            "a proxy on every interface",
            api.http.post(format!("{}/proxies", api.base)).json(
                &json!({"name": "open", "listen": "0.0.0.0:0", "upstream": upstream.addr.to_string()}),
            ),
            400,
        ),
        (
            "a proxy moved to every interface",
            api.http
                .post(format!("{}/proxies/edge", api.base))
                .json(&json!({"listen": "[::]:0"})),
            400,
        ),
        (
            "populate with another host's address",
            api.http.post(format!("{}/populate", api.base)).json(&json!([
                {"name": "other", "listen": "10.1.2.3:0", "upstream": upstream.addr.to_string()}
            ])),
            400,
        ),
    ];
    for (what, request, want) in refused {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), want, "{what}");
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "application/problem+json",
            "{what}"
        );
        let body: Value = response.json().await.unwrap();
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: {body}"
        );
        assert_eq!(snapshot(&api).await, before, "{what} changed nothing");
    }

    // The same requests from this machine, as JSON, are served.
    let response = api
        .http
        .post(&url)
        .header("origin", "http://localhost:8474")
        .header("host", "localhost:8474")
        .json(&toxic)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_ne!(snapshot(&api).await, before);
}

/// A body over the API's limit is a 413 problem before anything is
/// parsed or created (axum's default would have read 2 MB, and answered
/// a bigger one in plain text).
#[tokio::test]
async fn a_body_over_the_limit_is_a_413_problem_and_changes_nothing() {
    let api = start_api().await;
    let upstream = echo().await.addr.to_string();
    api.create_edge(&upstream).await;
    let before = snapshot(&api).await;
    let padding = "x".repeat(shopeasy_faults::api::BODY_LIMIT);
    for (path, body) in [
        (
            "/proxies",
            json!({"name": "big", "upstream": upstream, "padding": padding}),
        ),
        (
            "/proxies/edge/toxics",
            json!({"name": "big", "type": "latency", "padding": padding}),
        ),
    ] {
        let response = api
            .http
            .post(format!("{}{path}", api.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 413, "{path}");
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "application/problem+json",
            "{path}"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "urn:shopeasy:problem:payload-too-large");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(&shopeasy_faults::api::BODY_LIMIT.to_string())),
            "{path}: {problem}"
        );
    }
    assert_eq!(snapshot(&api).await, before, "nothing was created");
}

/// Attribute values beyond the bounds (24 h, 10^9 KB/s) are a 400 naming
/// the attribute, not a toxic whose arithmetic overflows in the proxy.
#[tokio::test]
async fn attributes_beyond_their_bounds_are_a_bad_request_naming_them() {
    let api = start_api().await;
    api.create_edge(&echo().await.addr.to_string()).await;
    for (toxic, attribute) in [
        (
            json!({"type": "bandwidth", "attributes": {"rate": u64::MAX}}),
            "rate",
        ),
        (
            json!({"type": "latency", "attributes": {"latency": 1, "jitter": u64::MAX}}),
            "jitter",
        ),
        (
            json!({"type": "slow_close", "attributes": {"delay": 86_400_001}}),
            "delay",
        ),
    ] {
        let (status, problem) = api.post("/proxies/edge/toxics", toxic.clone()).await;
        assert_eq!(status, 400, "{toxic}: {problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("{attribute} must be at most"))),
            "{toxic}: {problem}"
        );
    }
    let slow = json!({"name": "slow", "type": "latency", "attributes": {"latency": 1}});
    assert_eq!(api.post("/proxies/edge/toxics", slow).await.0, 200);
    let (status, problem) = api
        .post(
            "/proxies/edge/toxics/slow",
            json!({"attributes": {"latency": u64::MAX}}),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    let (_, toxic) = api.get("/proxies/edge/toxics/slow").await;
    assert_eq!(toxic["attributes"]["latency"], 1, "unchanged: {toxic}");
}

/// `connect_timeout_ms` (ours, like `seed`) is read from a proxy's JSON and
/// bounded as durations are: 0 would fail every connection, beyond 24 h is
/// a typo.
#[tokio::test]
async fn a_connect_timeout_is_read_from_the_json_and_bounded() {
    let api = start_api().await;
    let upstream = echo().await.addr.to_string();
    for ms in [0, 86_400_001_u64] {
        let proxy = json!({"name": "edge", "upstream": upstream, "connect_timeout_ms": ms});
        let (status, problem) = api.post("/proxies", proxy).await;
        assert_eq!(status, 400, "{ms}: {problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("connect_timeout_ms")),
            "{problem}"
        );
    }
    let proxy = json!({"name": "edge", "upstream": upstream, "connect_timeout_ms": 250});
    let (status, created) = api.post("/proxies", proxy).await;
    assert_eq!(status, 201, "{created}");
    let edge = api.proxies.get("edge").await.unwrap();
    assert_eq!(edge.connect_timeout(), Duration::from_millis(250));
}
