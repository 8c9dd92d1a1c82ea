//! Retries: policies, budget, backoff and deadline, on a paused clock with
//! in-memory services.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shopeasy_resilience::backoff::{Backoff, Jitter};
use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
use shopeasy_resilience::deadline::{Call, Deadline, DeadlineLayer};
use shopeasy_resilience::outcome::Outcome;
use shopeasy_resilience::retry::{
    Decision, GrpcUnavailablePolicy, HttpRetryPolicy, RetryLayer, RetryPolicy,
};
use shopeasy_resilience::timeout::AttemptTimeoutLayer;
use shopeasy_resilience::{AttemptTimedOut, BoxError};
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

fn roomy_budget() -> RetryBudget {
    RetryBudget::new(BudgetConfig {
        ratio: 1.0,
        min_retries_per_window: 1000,
        window: Duration::from_secs(10),
    })
}

/// Inventory's retry layer as the tests use it: two retries, a budget
/// that never refuses, a fixed `backoff_ms` pause.
fn inventory_retry(backoff_ms: u64) -> RetryLayer<GrpcUnavailablePolicy> {
    RetryLayer::new(
        GrpcUnavailablePolicy,
        roomy_budget(),
        fixed(backoff_ms),
        2,
        "inventory",
    )
}

fn fixed(ms: u64) -> Backoff {
    Backoff::new(
        Duration::from_millis(ms),
        Duration::from_millis(ms),
        Jitter::None,
    )
}

/// One scripted answer.
type Step = fn() -> Result<u32, tonic::Status>;
/// When each attempt arrived.
type Arrivals = Arc<Mutex<Vec<Instant>>>;

/// An in-memory gRPC-ish dependency: answers each attempt from `script`
/// (the last entry repeats), recording when each attempt arrived.
#[derive(Clone)]
struct Scripted {
    script: Arc<Vec<Step>>,
    arrivals: Arrivals,
    hang: bool,
}

impl Scripted {
    fn new(script: Vec<Step>) -> Self {
        Self {
            script: Arc::new(script),
            arrivals: Arc::default(),
            hang: false,
        }
    }

    fn attempts(&self) -> usize {
        self.arrivals.lock().expect("lock").len()
    }

    fn service(
        &self,
    ) -> impl tower::Service<
        Call<u32>,
        Response = u32,
        Error = BoxError,
        Future = impl Future<Output = Result<u32, BoxError>> + Send,
    > + Clone
    + Send
    + 'static {
        let this = self.clone();
        tower::service_fn(move |_call: Call<u32>| {
            let this = this.clone();
            async move {
                let n = {
                    let mut a = this.arrivals.lock().expect("lock");
                    a.push(Instant::now());
                    a.len() - 1
                };
                if this.hang {
                    std::future::pending::<()>().await;
                }
                let step = this.script[n.min(this.script.len() - 1)];
                step().map_err(BoxError::from)
            }
        })
    }
}

fn unavailable() -> Result<u32, tonic::Status> {
    Err(tonic::Status::unavailable("connection refused"))
}

fn ok() -> Result<u32, tonic::Status> {
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn unavailable_is_retried_up_to_max_retries_then_the_last_error_returns() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);
    let dep = Scripted::new(vec![unavailable]);
    let svc = ServiceBuilder::new()
        .layer(inventory_retry(100))
        .service(dep.service());
    let err = svc.oneshot(Call::new(1)).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<tonic::Status>().unwrap().code(),
        tonic::Code::Unavailable
    );
    assert_eq!(dep.attempts(), 3);
    assert_eq!(
        rec.counter("shopeasy_downstream_retries_total{outcome=retried,target=inventory}"),
        2
    );
    assert_eq!(
        rec.counter(
            "shopeasy_downstream_retries_total{outcome=attempts_exhausted,target=inventory}"
        ),
        1
    );

    let dep = Scripted::new(vec![unavailable, ok]);
    let svc = inventory_retry(100);
    let svc = ServiceBuilder::new().layer(svc).service(dep.service());
    assert_eq!(svc.oneshot(Call::new(1)).await.unwrap(), 7);
    assert_eq!(dep.attempts(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_inventory_attempt_is_never_retried() {
    let mut dep = Scripted::new(vec![ok]);
    dep.hang = true;
    let svc = ServiceBuilder::new()
        .layer(inventory_retry(10))
        .layer(AttemptTimeoutLayer::new(Duration::from_secs(3)))
        .service(dep.service());
    let start = Instant::now();
    let err = svc.oneshot(Call::new(1)).await.unwrap_err();
    assert!(err.is::<AttemptTimedOut>(), "{err}");
    assert_eq!(dep.attempts(), 1);
    assert_eq!(start.elapsed(), Duration::from_secs(3));

    // Nor are the timeouts gRPC itself reports, nor other codes.
    for status in [
        tonic::Status::cancelled("Timeout expired"),
        tonic::Status::deadline_exceeded("slow"),
        tonic::Status::failed_precondition("short"),
        tonic::Status::resource_exhausted("busy"),
        tonic::Status::internal("bug"),
    ] {
        let result: Result<u32, BoxError> = Err(status.into());
        assert_eq!(
            RetryPolicy::<Call<u32>, u32, BoxError>::classify(&GrpcUnavailablePolicy, &result),
            Decision::Stop
        );
    }
}

#[tokio::test(start_paused = true)]
async fn grpc_pushback_is_honoured_and_a_negative_one_stops() {
    fn pushback() -> Result<u32, tonic::Status> {
        let mut s = tonic::Status::unavailable("shedding");
        s.metadata_mut()
            .insert("grpc-retry-pushback-ms", "750".parse().unwrap());
        Err(s)
    }
    fn refuse() -> Result<u32, tonic::Status> {
        let mut s = tonic::Status::unavailable("go away");
        s.metadata_mut()
            .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
        Err(s)
    }
    let dep = Scripted::new(vec![pushback, ok]);
    let svc = ServiceBuilder::new()
        .layer(inventory_retry(10))
        .service(dep.service());
    assert_eq!(svc.oneshot(Call::new(1)).await.unwrap(), 7);
    let a = dep.arrivals.lock().expect("lock").clone();
    assert_eq!(
        a[1] - a[0],
        Duration::from_millis(750),
        "waited for the pushback, not 10 ms"
    );

    let dep = Scripted::new(vec![refuse, ok]);
    let svc = ServiceBuilder::new()
        .layer(inventory_retry(10))
        .service(dep.service());
    assert!(svc.oneshot(Call::new(1)).await.is_err());
    assert_eq!(dep.attempts(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_backoff_would_pass_the_deadline_is_not_made() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);
    let dep = Scripted::new(vec![unavailable, ok]);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(Duration::from_millis(500)))
        .layer(inventory_retry(600))
        .service(dep.service());
    let start = Instant::now();
    let err = svc.oneshot(Call::new(1)).await.unwrap_err();
    assert!(err.is::<tonic::Status>());
    assert_eq!(dep.attempts(), 1);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "gave up at once, did not sleep"
    );
    assert_eq!(
        rec.counter(
            "shopeasy_downstream_retries_total{outcome=deadline_exhausted,target=inventory}"
        ),
        1
    );

    // With room before the deadline the same retry is made.
    let dep = Scripted::new(vec![unavailable, ok]);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(Duration::from_millis(700)))
        .layer(inventory_retry(600))
        .service(dep.service());
    assert_eq!(svc.oneshot(Call::new(1)).await.unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn the_budget_refuses_retries_past_ratio_plus_floor() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);
    let budget = RetryBudget::new(BudgetConfig {
        ratio: 0.1,
        min_retries_per_window: 2,
        window: Duration::from_secs(10),
    });
    let dep = Scripted::new(vec![unavailable]);
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new(
            GrpcUnavailablePolicy,
            budget.clone(),
            fixed(1),
            1,
            "inventory",
        ))
        .service(dep.service());
    for i in 0..30 {
        let _ = svc.clone().oneshot(Call::new(i)).await;
    }
    // 30 requests: 2 + 0.1 × 30 = 5 retries allowed, each request wanting one.
    assert_eq!(dep.attempts(), 35);
    assert_eq!(
        rec.counter("shopeasy_downstream_retries_total{outcome=retried,target=inventory}"),
        5
    );
    assert_eq!(
        rec.counter("shopeasy_downstream_retries_total{outcome=budget_exhausted,target=inventory}"),
        25
    );
    assert!(budget.balance() < 1.0);
}

#[tokio::test(start_paused = true)]
async fn seeded_full_jitter_delays_lie_in_their_ranges() {
    let dep = Scripted::new(vec![unavailable]);
    let backoff = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(1),
        Jitter::Full,
    );
    let svc = ServiceBuilder::new()
        .layer(
            RetryLayer::new(
                GrpcUnavailablePolicy,
                roomy_budget(),
                backoff,
                4,
                "inventory",
            )
            .with_seed(7),
        )
        .service(dep.service());
    let _ = svc.oneshot(Call::new(1)).await;
    let a = dep.arrivals.lock().expect("lock").clone();
    assert_eq!(a.len(), 5);
    for (n, pair) in a.windows(2).enumerate() {
        let waited = pair[1] - pair[0];
        assert!(
            waited <= backoff.ceiling(n as u32),
            "retry {n} waited {waited:?}"
        );
    }
}

/// An in-memory HTTP dependency.
type HttpDep =
    tower::util::BoxCloneService<http::Request<String>, http::Response<String>, BoxError>;

/// Answers attempt `n` with `responses[n]` (status 0 = connection refused;
/// the last entry repeats).
fn http_dep(responses: Vec<(u16, Option<&'static str>)>) -> (HttpDep, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let log = arrivals.clone();
    let responses = Arc::new(responses);
    let svc = tower::service_fn(move |_req: http::Request<String>| {
        let log = log.clone();
        let responses = responses.clone();
        async move {
            let n = {
                let mut a = log.lock().expect("lock");
                a.push(Instant::now());
                a.len() - 1
            };
            let (status, retry_after) = responses[n.min(responses.len() - 1)];
            if status == 0 {
                return Err(BoxError::from(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                )));
            }
            let mut b = http::Response::builder().status(status);
            if let Some(ra) = retry_after {
                b = b.header(http::header::RETRY_AFTER, ra);
            }
            Ok(b.body(String::new())?)
        }
    });
    (HttpDep::new(svc), arrivals)
}

fn http_stack<S>(
    dep: S,
    deadline: Duration,
) -> impl tower::Service<http::Request<String>, Response = http::Response<String>, Error = BoxError>
where
    S: tower::Service<http::Request<String>, Response = http::Response<String>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    ServiceBuilder::new()
        .layer(DeadlineLayer::new(deadline))
        .layer(RetryLayer::new(
            HttpRetryPolicy::new(),
            roomy_budget(),
            fixed(50),
            2,
            "product",
        ))
        .service(dep)
}

#[tokio::test(start_paused = true)]
async fn http_retries_connection_failures_and_5xx_but_never_4xx() {
    for (script, attempts, status) in [
        (vec![(0, None), (200, None)], 2, 200),
        (vec![(502, None), (503, None), (200, None)], 3, 200),
        (vec![(504, None)], 3, 504),
        (vec![(500, None)], 1, 500),
        (vec![(404, None)], 1, 404),
        (vec![(400, None)], 1, 400),
        (vec![(409, None)], 1, 409),
    ] {
        let (dep, arrivals) = http_dep(script.clone());
        let resp = http_stack(dep, Duration::from_secs(30))
            .oneshot(http::Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{script:?}");
        assert_eq!(arrivals.lock().expect("lock").len(), attempts, "{script:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn http_honours_retry_after_capped_by_the_time_left() {
    let (dep, arrivals) = http_dep(vec![(429, Some("2")), (200, None)]);
    let resp = http_stack(dep, Duration::from_secs(30))
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let a = arrivals.lock().expect("lock").clone();
    assert_eq!(
        a[1] - a[0],
        Duration::from_secs(2),
        "no retry earlier than Retry-After"
    );

    // Retry-After beyond the deadline: the 503 is the answer, at once.
    let (dep, arrivals) = http_dep(vec![(503, Some("5")), (200, None)]);
    let start = Instant::now();
    let resp = http_stack(dep, Duration::from_secs(3))
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(arrivals.lock().expect("lock").len(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn http_repeats_only_requests_that_are_safe_to_repeat() {
    let request = |method: http::Method, key: Option<&str>| {
        let mut b = http::Request::builder().method(method).uri("/orders");
        if let Some(key) = key {
            b = b.header("Idempotency-Key", key);
        }
        b.body(String::from("{}")).unwrap()
    };
    for (req, attempts) in [
        (request(http::Method::POST, None), 1),
        (request(http::Method::POST, Some("k-1")), 3),
        (request(http::Method::GET, None), 3),
        (request(http::Method::HEAD, None), 3),
        (request(http::Method::OPTIONS, None), 3),
        (request(http::Method::PUT, None), 3),
        (request(http::Method::DELETE, None), 3),
        (request(http::Method::PATCH, None), 1),
        (request(http::Method::PATCH, Some("k-2")), 1),
        (request(http::Method::CONNECT, None), 1),
        (
            request(http::Method::from_bytes(b"PURGE").unwrap(), None),
            1,
        ),
    ] {
        let what = format!(
            "{} {:?}",
            req.method(),
            req.headers().get("idempotency-key")
        );
        let (dep, arrivals) = http_dep(vec![(503, None)]);
        let resp = http_stack(dep, Duration::from_secs(30))
            .oneshot(req)
            .await
            .unwrap();
        assert_eq!(resp.status(), 503, "{what}");
        assert_eq!(arrivals.lock().expect("lock").len(), attempts, "{what}");
    }
}

#[tokio::test(start_paused = true)]
async fn http_does_not_retry_a_timed_out_attempt() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let dep = tower::service_fn(move |_req: http::Request<String>| {
        seen.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<http::Response<String>, BoxError>>()
    });
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new(
            HttpRetryPolicy::new(),
            roomy_budget(),
            fixed(50),
            2,
            "product",
        ))
        .layer(AttemptTimeoutLayer::new(Duration::from_millis(300)))
        .service(dep);
    let mut req = http::Request::new(String::new());
    shopeasy_resilience::deadline::HasDeadline::set_deadline(
        &mut req,
        Deadline::after(Duration::from_secs(5)),
    );
    let err = svc.oneshot(req).await.unwrap_err();
    assert!(err.is::<AttemptTimedOut>());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_connection_reset_mid_call_is_retried_but_other_unknown_errors_are_not() {
    // What tonic answers when the connection is reset after the request
    // went out (seen through the fault proxy's `reset_peer` downstream).
    let mut reset = tonic::Status::unknown("transport error");
    reset.set_source(std::sync::Arc::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    )));
    assert_eq!(
        GrpcUnavailablePolicy::classify_error(&reset),
        Decision::Retry
    );
    let other = tonic::Status::unknown("the server said something odd");
    assert_eq!(
        GrpcUnavailablePolicy::classify_error(&other),
        Decision::Stop
    );
    let internal = tonic::Status::internal("boom");
    assert_eq!(
        GrpcUnavailablePolicy::classify_error(&internal),
        Decision::Stop
    );
}

/// hyper's "canceled", made for real: a request handed to a connection
/// whose peer has gone and whose task has ended, so it is never written.
async fn unsent_request_error() -> hyper::Error {
    let (ours, theirs) = tokio::io::duplex(1024);
    drop(theirs);
    let (mut send, connection) =
        hyper::client::conn::http1::handshake::<_, String>(hyper_util::rt::TokioIo::new(ours))
            .await
            .expect("handshake");
    let _ = connection.await;
    send.send_request(http::Request::new(String::new()))
        .await
        .expect_err("the connection has ended")
}

#[tokio::test]
async fn a_call_never_written_to_a_closed_connection_is_retried_and_counted_unavailable() {
    // What tonic answers when a call is queued for a connection that closes
    // before writing it: a retry right after a reset, say (seen through the
    // fault proxy's `reset_peer` downstream on a loaded machine).
    let unsent = unsent_request_error().await;
    assert!(unsent.is_canceled(), "{unsent:?}");
    let status = tonic::Status::from_error(Box::new(unsent));
    assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
    assert_eq!(
        GrpcUnavailablePolicy::classify_error(&status),
        Decision::Retry
    );
    assert_eq!(Outcome::of_error(&status), Outcome::Unavailable);
    // A CANCELLED the server sent carries no transport error: final.
    let sent = tonic::Status::cancelled("operation was canceled");
    assert_eq!(GrpcUnavailablePolicy::classify_error(&sent), Decision::Stop);
    assert_eq!(Outcome::of_error(&sent), Outcome::Error);
}
