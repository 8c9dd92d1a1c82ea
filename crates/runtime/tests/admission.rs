//! Admission control of a public listener, over real sockets: a service
//! started by the lifecycle with `ADMISSION__*` settings, whose handler is
//! held on a semaphore, refuses the excess with 503 `overloaded` +
//! `Retry-After` at once while the admitted requests complete when
//! released, refuses a request whose deadline cannot be met without
//! queueing it, and shows it all in `/admin/resilience`. The admin listener
//! keeps answering while the public one is full.

// A failed set-up should panic on the spot, as in the tests themselves.
#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::State, routing::get};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Bound, Service},
    settings::{ProcessSettings, Settings, Validator},
    topology::Node,
};
use shopeasy_testkit::eventually;
use tokio::{net::TcpListener, sync::Semaphore, time::Instant};
use tokio_util::sync::CancellationToken;

const HELD: Node = Node {
    name: "held",
    binary: "shopeasy-held",
    protocol: "http",
    public_port: 8091,
    admin_port: 9091,
    calls: &[],
};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
struct HeldSettings {
    #[serde(flatten)]
    process: ProcessSettings,
}

impl Default for HeldSettings {
    fn default() -> Self {
        Self {
            process: ProcessSettings::new(&HELD),
        }
    }
}

impl AsRef<ProcessSettings> for HeldSettings {
    fn as_ref(&self) -> &ProcessSettings {
        &self.process
    }
}

impl Settings for HeldSettings {
    fn validate(&self, v: &mut Validator) {
        self.process.validate(v);
    }
}

/// `/held` waits for a permit of the semaphore; `/slow` takes 300 ms.
#[derive(Debug)]
struct Held {
    gate: Arc<Semaphore>,
}

impl Service for Held {
    type Settings = HeldSettings;
    const NAME: &'static str = HELD.binary;

    async fn build(_settings: HeldSettings, _admin: &Admin) -> anyhow::Result<Self> {
        Ok(Self {
            gate: Arc::new(Semaphore::new(0)),
        })
    }

    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        let router = Router::new()
            .route(
                "/held",
                get(|State(gate): State<Arc<Semaphore>>| async move {
                    gate.acquire().await.map(|p| p.forget()).ok();
                    "done"
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    "slow"
                }),
            )
            .with_state(self.gate);
        lifecycle::serve_admitted(public, router, shutdown, Self::DRAIN).await?;
        Ok(())
    }
}

async fn start(env: &[(&str, &str)]) -> (lifecycle::Running, Arc<Semaphore>) {
    let bound = Bound::<Held>::from_env(env).await.unwrap();
    let gate = bound.service().gate.clone();
    (bound.start(), gate)
}

async fn admission_report(http: &reqwest::Client, running: &lifecycle::Running) -> Value {
    let url = format!("http://{}/admin/resilience", running.admin_addr());
    http.get(url)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["admission"]
        .clone()
}

#[tokio::test]
async fn excess_requests_get_a_fast_503_while_the_admitted_ones_complete() {
    let (running, gate) = start(&[
        ("ADMISSION__INITIAL_LIMIT", "2"),
        ("ADMISSION__MIN_LIMIT", "2"),
        ("ADMISSION__MAX_LIMIT", "2"),
        ("ADMISSION__QUEUE_SIZE", "0"),
        ("ADMISSION__RETRY_AFTER_SECONDS", "3"),
    ])
    .await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/held", running.local_addr());

    let admitted: Vec<_> = (0..2)
        .map(|_| tokio::spawn(http.get(&url).send()))
        .collect();
    assert!(
        eventually(Duration::from_secs(5), async || {
            admission_report(&http, &running).await["in_flight"] == 2
        })
        .await,
        "both held requests are in flight"
    );

    for _ in 0..5 {
        let started = Instant::now();
        let refused = http.get(&url).send().await.unwrap();
        let took = started.elapsed();
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.headers()["retry-after"], "3");
        assert_eq!(
            refused.headers()["content-type"],
            "application/problem+json"
        );
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["type"], "urn:shopeasy:problem:overloaded");
        assert_eq!(body["reason"], "refused_full");
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("concurrency limit"),
            "{body}"
        );
        // Bounded, not a speed claim: a refusal does not wait for a slot.
        assert!(took < Duration::from_secs(1), "refused after {took:?}");
    }

    // The admin listener is not admission-controlled.
    let ready = http
        .get(format!("http://{}/health/live", running.admin_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    let report = admission_report(&http, &running).await;
    assert_eq!(report["listener"], "held");
    assert_eq!(report["limit"], 2);
    assert_eq!(report["in_flight"], 2);
    assert_eq!(report["queued"], 0);
    assert_eq!(report["requests"]["admitted"], 2);
    assert_eq!(report["requests"]["refused_full"], 5);

    gate.add_permits(2);
    for a in admitted {
        let res = a.await.unwrap().unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.text().await.unwrap(), "done");
    }
    assert!(
        eventually(Duration::from_secs(5), async || {
            admission_report(&http, &running).await["in_flight"] == 0
        })
        .await
    );
    gate.add_permits(1);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    let metrics = http
        .get(format!("http://{}/metrics", running.admin_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let m = shopeasy_testkit::Metrics::parse(&metrics);
    assert!(
        m.sum(
            "shopeasy_admission_requests_total",
            &[("listener", "held"), ("outcome", "refused_full")]
        ) >= 5.0,
        "{metrics}"
    );
    assert!(m.has("shopeasy_admission_limit", &[("listener", "held")]));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_request_whose_deadline_cannot_be_met_is_refused_without_queueing() {
    let (running, gate) = start(&[
        ("ADMISSION__INITIAL_LIMIT", "1"),
        ("ADMISSION__MIN_LIMIT", "1"),
        ("ADMISSION__MAX_LIMIT", "1"),
        ("ADMISSION__QUEUE_SIZE", "8"),
        ("ADMISSION__QUEUE_TIMEOUT_SECONDS", "5"),
    ])
    .await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", running.local_addr());

    // Teach it that requests take about 300 ms.
    for _ in 0..2 {
        let res = http.get(format!("{base}/slow")).send().await.unwrap();
        assert_eq!(res.status(), 200);
    }
    let held = tokio::spawn(http.get(format!("{base}/held")).send());
    assert!(
        eventually(Duration::from_secs(5), async || {
            admission_report(&http, &running).await["in_flight"] == 1
        })
        .await
    );

    // 200 ms left, 300 ms of work expected: refused at once, although the
    // queue has room and would let it wait up to 5 s.
    let started = Instant::now();
    let refused = http
        .get(format!("{base}/held"))
        .header("shopeasy-deadline-ms", "200")
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "refused_deadline", "{body}");
    assert!(took < Duration::from_millis(150), "refused after {took:?}");

    let report = admission_report(&http, &running).await;
    assert_eq!(report["requests"]["refused_deadline"], 1);
    assert!(report["expected_ms"].as_f64().unwrap() >= 250.0, "{report}");

    gate.add_permits(1);
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_queued_request_is_served_when_a_slot_frees_within_its_wait() {
    let (running, gate) = start(&[
        ("ADMISSION__INITIAL_LIMIT", "1"),
        ("ADMISSION__MIN_LIMIT", "1"),
        ("ADMISSION__MAX_LIMIT", "1"),
        ("ADMISSION__QUEUE_SIZE", "4"),
        ("ADMISSION__QUEUE_TIMEOUT_SECONDS", "5"),
    ])
    .await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/held", running.local_addr());
    let first = tokio::spawn(http.get(&url).send());
    assert!(
        eventually(Duration::from_secs(5), async || {
            admission_report(&http, &running).await["in_flight"] == 1
        })
        .await
    );
    let second = tokio::spawn(http.get(&url).send());
    assert!(
        eventually(Duration::from_secs(5), async || {
            admission_report(&http, &running).await["queued"] == 1
        })
        .await,
        "the second waits in the queue"
    );
    gate.add_permits(2);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    let report = admission_report(&http, &running).await;
    assert_eq!(report["requests"]["queued"], 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn disabled_admission_serves_everything_and_reports_nothing() {
    let (running, gate) = start(&[("ADMISSION__ENABLED", "false")]).await;
    let http = reqwest::Client::new();
    assert!(admission_report(&http, &running).await.is_null());
    gate.add_permits(1);
    let url = format!("http://{}/held", running.local_addr());
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn inconsistent_admission_settings_are_refused_naming_each_key() {
    let err = Bound::<Held>::from_env(&[
        ("ADMISSION__MIN_LIMIT", "50"),
        ("ADMISSION__MAX_LIMIT", "10"),
        ("ADMISSION__QUEUE_TIMEOUT_SECONDS", "-1"),
        ("ADMISSION__RETRY_AFTER_SECONDS", "0"),
    ])
    .await
    .unwrap_err();
    let text = format!("{err:#}");
    for key in [
        "admission.min_limit",
        "admission.initial_limit",
        "admission.queue_timeout_seconds",
        "admission.retry_after_seconds",
    ] {
        assert!(text.contains(key), "{key} in {text}");
    }
    assert!(text.contains("must not exceed max_limit (10)"), "{text}");
}

#[test]
fn the_descriptor_limit_is_raised_to_the_hard_limit() {
    let (before, after, hard) = lifecycle::raise_fd_limit().unwrap();
    assert!(after >= before);
    assert!(after <= hard);
    // Linux allows raising the soft limit up to the hard one (capped by
    // the kernel's nr_open, which `rlimit` respects).
    let (soft_now, hard_now) = rlimit::Resource::NOFILE.get().unwrap();
    assert_eq!((soft_now, hard_now), (after, hard));
}
