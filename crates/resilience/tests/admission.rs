//! Admission control with tokio's paused clock: the limit follows latency,
//! the queue is short, LIFO and deadline-aware, and the layer refuses in
//! the listener's protocol without calling the service.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shopeasy_resilience::admission::{
    Admission, AdmissionConfig, AdmissionLayer, GrpcRefusal, LimitConfig, Outcome, Permit, Phase,
};
use shopeasy_resilience::deadline::Deadline;
use tokio::sync::Semaphore;
use tokio::time::{Instant, advance};
use tower::{Layer, ServiceExt};

fn fixed(limit: usize, queue_size: usize) -> AdmissionConfig {
    AdmissionConfig {
        limit: LimitConfig {
            initial: limit,
            min: limit,
            max: limit,
            ..LimitConfig::default()
        },
        queue_size,
        queue_timeout: Duration::from_millis(50),
        standing_queue_timeout: Duration::from_millis(5),
        default_deadline: Duration::from_secs(10),
        retry_after: Duration::from_secs(2),
    }
}

/// Runs `rounds` rounds of `limit()` requests in flight at once, each taking
/// `rtt`; returns the limit afterwards.
async fn load(a: &Admission, rounds: usize, rtt: Duration) -> usize {
    for _ in 0..rounds {
        let n = a.snapshot().limit;
        let mut permits = Vec::new();
        for _ in 0..n {
            permits.push(a.acquire(None).await.expect("under the limit"));
        }
        advance(rtt).await;
        for p in permits {
            p.complete();
        }
    }
    a.snapshot().limit
}

#[tokio::test(start_paused = true)]
async fn the_limit_drops_when_latency_rises_and_comes_back_after_the_load_drops() {
    let a = Admission::new(
        "t",
        AdmissionConfig {
            limit: LimitConfig {
                initial: 20,
                min: 2,
                max: 100,
                ..LimitConfig::default()
            },
            ..AdmissionConfig::default()
        },
    );
    let normal = load(&a, 40, Duration::from_millis(5)).await;
    assert!(normal > 20, "grew at normal latency under load: {normal}");
    let slow = load(&a, 3, Duration::from_millis(80)).await;
    assert!(
        slow < normal / 2,
        "latency ×16 must shrink it: {normal} → {slow}"
    );
    let back = load(&a, 40, Duration::from_millis(5)).await;
    assert!(back >= normal, "back up: {slow} → {back} (was {normal})");
    let s = a.snapshot();
    assert_eq!((s.in_flight, s.queued), (0, 0));
    assert!(s.requests.admitted > 1000);
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_and_a_full_queue_refuse_at_once() {
    let a = Admission::new("t", fixed(1, 0));
    let held = a.acquire(None).await.unwrap();
    let started = Instant::now();
    let refused = a.acquire(None).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO, "no waiting");
    assert_eq!(refused.reason, Outcome::RefusedFull);
    assert_eq!(refused.retry_after_seconds(), 2);
    drop(held);
    assert!(
        a.acquire(None).await.is_ok(),
        "a dropped permit frees its slot"
    );
    assert_eq!(a.snapshot().requests.refused_full, 1);
}

#[tokio::test(start_paused = true)]
async fn the_queue_wait_is_bounded_by_the_queue_timeout() {
    let a = Admission::new("t", fixed(1, 8));
    let _held = a.acquire(None).await.unwrap();
    let started = Instant::now();
    let refused = a.acquire(None).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert_eq!(refused.reason, Outcome::RefusedFull);
    let s = a.snapshot();
    assert_eq!((s.queued, s.in_flight, s.requests.refused_full), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_whose_deadline_cannot_be_met_is_refused_at_once() {
    let a = Admission::new("t", fixed(1, 8));
    // Teach it that requests take 100 ms.
    for _ in 0..30 {
        let p = a.acquire(None).await.unwrap();
        advance(Duration::from_millis(100)).await;
        p.complete();
    }
    let _held = a.acquire(None).await.unwrap();
    let started = Instant::now();
    let refused = a
        .acquire(Some(Deadline::after(Duration::from_millis(60))))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
    assert_eq!(refused.reason, Outcome::RefusedDeadline);
    assert!(
        refused.detail().contains("60 ms left"),
        "{}",
        refused.detail()
    );
    assert!(refused.expected >= Duration::from_millis(99));

    // With 120 ms left it may wait, but only 20 ms (so 100 ms remain to be
    // served): then it is refused for its deadline too.
    let started = Instant::now();
    let refused = a
        .acquire(Some(Deadline::after(Duration::from_millis(120))))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(20));
    assert_eq!(refused.reason, Outcome::RefusedDeadline);
    assert_eq!(a.snapshot().requests.refused_deadline, 2);
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_goes_to_the_newest_waiter() {
    let a = Admission::new("t", fixed(1, 8));
    let held = a.acquire(None).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (a, order) = (a.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let p: Permit = a.acquire(None).await.expect("admitted from the queue");
            order.lock().unwrap().push(i);
            advance(Duration::from_millis(1)).await;
            p.complete();
        }));
        tokio::task::yield_now().await;
    }
    assert_eq!(a.snapshot().queued, 3);
    drop(held);
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [2, 1, 0], "LIFO");
    let s = a.snapshot();
    assert_eq!((s.requests.admitted, s.requests.queued), (1, 3));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_goes_away_leaves_the_queue_and_its_slot_to_others() {
    let a = Admission::new("t", fixed(1, 8));
    let held = a.acquire(None).await.unwrap();
    let gone = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire(None).await.map(drop) })
    };
    tokio::task::yield_now().await;
    assert_eq!(a.snapshot().queued, 1);
    gone.abort();
    let _ = gone.await;
    assert_eq!(a.snapshot().queued, 0, "cancelled waiter removed");
    drop(held);
    assert_eq!(
        a.snapshot().in_flight,
        0,
        "no slot leaked to the cancelled waiter"
    );
    assert!(a.acquire(None).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_layer_refuses_excess_grpc_calls_without_calling_the_service() {
    let a = Admission::new("t", fixed(1, 0));
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = {
        let (gate, calls) = (gate.clone(), calls.clone());
        tower::service_fn(move |_req: http::Request<()>| {
            let (gate, calls) = (gate.clone(), calls.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let _ = gate.acquire().await;
                Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
            }
        })
    };
    let svc = AdmissionLayer::new(a.clone(), GrpcRefusal)
        .bypass(&["/grpc.health.v1.Health/"])
        .layer(inner);

    let first = tokio::spawn(svc.clone().oneshot(http::Request::new(())));
    tokio::task::yield_now().await;
    assert_eq!(a.snapshot().in_flight, 1);

    let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(refused.status(), http::StatusCode::OK, "trailers-only");
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["grpc-retry-pushback-ms"], "2000");
    assert!(
        refused.headers()["grpc-message"]
            .to_str()
            .unwrap()
            .starts_with("overloaded")
    );
    assert_eq!(refused.body(), "", "no body");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the refused call never ran"
    );

    // The health service bypasses the gate.
    let health = http::Request::builder()
        .uri("/grpc.health.v1.Health/Check")
        .body(())
        .unwrap();
    let h = tokio::spawn(svc.clone().oneshot(health));
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    gate.add_permits(2);
    assert_eq!(first.await.unwrap().unwrap().body(), "ok");
    assert_eq!(h.await.unwrap().unwrap().body(), "ok");
    assert_eq!(a.snapshot().in_flight, 0);
    let s = a.snapshot();
    assert_eq!((s.requests.admitted, s.requests.refused_full), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn the_layer_reads_the_callers_deadline_from_its_headers() {
    let a = Admission::new("t", fixed(1, 8));
    for _ in 0..30 {
        let p = a.acquire(None).await.unwrap();
        advance(Duration::from_millis(100)).await;
        p.complete();
    }
    let _held = a.acquire(None).await.unwrap();
    let svc = AdmissionLayer::new(a.clone(), GrpcRefusal).layer(tower::service_fn(
        |_req: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        },
    ));
    for (header, value) in [("shopeasy-deadline-ms", "10"), ("grpc-timeout", "10m")] {
        let req = http::Request::builder()
            .header(header, value)
            .body(())
            .unwrap();
        let started = Instant::now();
        let res = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "{header}: refused at once"
        );
        assert_eq!(res.headers()["grpc-status"], "8");
    }
    assert_eq!(a.snapshot().requests.refused_deadline, 2);
}

/// A request [`arrive`] spawned: when it was answered (from `t0`), and
/// whether it was admitted.
type Answered = tokio::task::JoinHandle<(Duration, Result<(), Outcome>)>;

/// Spawns a request arriving `at` after `t0`; it resolves to when it was
/// answered (from `t0`) and whether it was admitted (its permit is held
/// for `hold`, then completed).
fn arrive(a: &Admission, t0: Instant, at: Duration, hold: Duration) -> Answered {
    let a = a.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(t0 + at).await;
        let r = a.acquire(None).await;
        let answered = t0.elapsed();
        match r {
            Ok(p) => {
                tokio::time::sleep(hold).await;
                p.complete();
                (answered, Ok(()))
            }
            Err(refusal) => (answered, Err(refusal.reason)),
        }
    })
}

/// What became of the requests [`arrive`] spawned: `admitted` of them all;
/// the longest wait and the refusals (and those refused on arrival) of the
/// ones that arrived from `standing` on.
struct Tally {
    admitted: usize,
    refused: usize,
    refused_at_once: usize,
    longest: Duration,
}

async fn tally(calls: Vec<(Duration, Answered)>, standing: Duration) -> Tally {
    let mut t = Tally {
        admitted: 0,
        refused: 0,
        refused_at_once: 0,
        longest: Duration::ZERO,
    };
    for (at, call) in calls {
        let (answered, r) = call.await.expect("the request's task");
        t.admitted += usize::from(r.is_ok());
        if at >= standing {
            t.longest = t.longest.max(answered - at);
            if r.is_err() {
                t.refused += 1;
                t.refused_at_once += usize::from(answered == at);
            }
        }
    }
    t
}

#[tokio::test(start_paused = true)]
async fn a_standing_queue_cuts_every_wait_to_its_target_and_an_emptied_queue_is_good_again() {
    // One slot, a 50 ms good-queue wait, a 5 ms standing-queue wait.
    let a = Admission::new("t", fixed(1, 64));
    let t0 = Instant::now();
    let held = a.acquire(None).await.unwrap();
    let ms = Duration::from_millis;
    let first = arrive(&a, t0, ms(0), ms(0));
    let second = arrive(&a, t0, ms(30), ms(0));
    // At 50 ms `first` leaves at its (good-queue) timeout, but `second` is
    // still waiting: the queue has not been empty for 50 ms — standing.
    let third = arrive(&a, t0, ms(55), ms(0));
    let (at, r) = first.await.unwrap();
    assert_eq!(
        (at, r),
        (ms(50), Err(Outcome::RefusedFull)),
        "a burst waits the full 50 ms"
    );
    assert!(a.snapshot().standing, "not empty for 50 ms: standing");
    // `third`'s arrival at 55 ms cuts `second`, who had been granted 50 ms
    // (until 80 ms), to its 5 ms target: refused at once, at 55 ms.
    let (at, r) = second.await.unwrap();
    assert_eq!(
        (at, r),
        (ms(55), Err(Outcome::RefusedFull)),
        "an old wait is cut"
    );
    // `third` itself may wait only 5 ms: a slot freed within them admits it.
    tokio::time::sleep_until(t0 + ms(57)).await;
    drop(held);
    let (at, r) = third.await.unwrap();
    assert_eq!(
        (at, r),
        (ms(57), Ok(())),
        "admitted within the standing target"
    );
    // The queue emptied, but for a moment only: a queue refilled within
    // the standing target was not drained, it still stands.
    assert!(a.snapshot().standing, "emptied a moment ago");
    // Empty for the standing target, it is a good queue again, and a
    // waiter may wait the full 50 ms once more — while a waiter in a
    // standing queue gets 5.
    tokio::time::sleep(ms(5)).await;
    assert!(!a.snapshot().standing);
    let held = a.acquire(None).await.unwrap();
    let now = t0.elapsed();
    let fourth = arrive(&a, t0, now, ms(0));
    let (at, r) = fourth.await.unwrap();
    assert_eq!((at - now, r), (ms(50), Err(Outcome::RefusedFull)));
    drop(held);
    let s = a.snapshot();
    assert_eq!((s.requests.refused_full, s.requests.queued), (3, 1));
    assert_eq!((s.queue_timeout_ms, s.standing_queue_timeout_ms), (50, 5.0));
}

#[tokio::test(start_paused = true)]
async fn under_lasting_overload_every_answer_comes_within_the_standing_target() {
    // One slot held 10 ms per request; a request every 2 ms for a second:
    // five times what it can serve.
    let a = Admission::new("t", fixed(1, 64));
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let calls: Vec<_> = (0..500u64)
        .map(|i| (ms(i * 2), arrive(&a, t0, ms(i * 2), ms(10))))
        .collect();
    // After the first good-queue timeout has passed with the queue never
    // empty, no one waits longer than the target.
    let t = tally(calls, ms(200)).await;
    assert!(
        t.longest <= ms(5),
        "longest wait in a standing queue: {:?}",
        t.longest
    );
    // The standing queue holds only what drains within the target (one
    // slot × 5 ms ÷ 10 ms: one waiter); the rest are refused on arrival,
    // not at the target.
    assert!(
        t.refused_at_once * 2 >= t.refused && t.refused > 200,
        "{} of {} refusals at once",
        t.refused_at_once,
        t.refused
    );
    assert!(
        t.admitted >= 90,
        "the one slot stays busy: {} admitted of 500",
        t.admitted
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_standing_target_below_the_timer_tick_still_bounds_every_wait() {
    // The default target (0.5 ms) is below tokio's 1 ms timer tick. Two
    // slots held 4 ms each; five requests arrive on every tick for 300 ms:
    // ten times what they can serve. Each tick's arrivals cut the waiters
    // of the tick before, so no wait outlasts one tick.
    let target = AdmissionConfig::default().standing_queue_timeout;
    assert!(
        target < Duration::from_millis(1),
        "the default is {target:?}"
    );
    let a = Admission::new(
        "t",
        AdmissionConfig {
            standing_queue_timeout: target,
            ..fixed(2, 64)
        },
    );
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let calls: Vec<_> = (0..300u64)
        .flat_map(|tick| (0..5).map(move |_| tick))
        .map(|tick| (ms(tick), arrive(&a, t0, ms(tick), ms(4))))
        .collect();
    // Standing since the first 50 ms good-queue wait ran out.
    let t = tally(calls, ms(100)).await;
    assert!(
        t.longest <= ms(1),
        "longest wait in a standing queue: {:?}",
        t.longest
    );
    assert!(
        t.refused_at_once * 4 >= t.refused * 3 && t.refused > 800,
        "{} of {} refusals at once",
        t.refused_at_once,
        t.refused
    );
    assert!(
        t.admitted >= 130,
        "both slots stay busy: {} admitted of 1,500",
        t.admitted
    );
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_shows_the_minimum_rtt_being_measured_and_the_limit_held_meanwhile() {
    let a = Admission::new(
        "t",
        AdmissionConfig {
            limit: LimitConfig {
                initial: 20,
                min: 2,
                max: 100,
                ..LimitConfig::default()
            },
            ..AdmissionConfig::default()
        },
    );
    let s = a.snapshot();
    assert_eq!(
        (s.phase, s.limit, s.min_rtt_ms),
        (Phase::Tracking, 20, None)
    );
    // A window's worth under load (4 rounds of 20: a window has at least
    // 64 samples): the limit binds, so the minimum RTT is measured, the
    // limit held at its floor meanwhile.
    load(&a, 4, Duration::from_millis(5)).await;
    let s = a.snapshot();
    assert_eq!((s.phase, s.limit), (Phase::Measuring, 2), "{s:?}");
    assert_eq!(s.next_min_rtt_measurement_ms, None);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["phase"], "measuring");
    assert!(json["min_rtt_ms"].is_null(), "{json}");
    // Two at a time until enough have been served.
    while a.snapshot().phase == Phase::Measuring {
        load(&a, 1, Duration::from_millis(5)).await;
    }
    let s = a.snapshot();
    assert_eq!(s.limit, 20, "back where it was: {s:?}");
    assert_eq!(s.min_rtt_ms, Some(5.0));
    let next = s.next_min_rtt_measurement_ms.unwrap();
    assert!((5000..=6250).contains(&next), "jittered interval: {next}");
    assert_eq!(
        s.requests.admitted,
        80 + 26,
        "4 rounds of 20, then 13 rounds of 2 until 25 were measured"
    );
}

/// Runs `rounds` rounds of `limit()` requests in flight at once, each
/// answered with `status` after 1 ms; returns the snapshot afterwards.
async fn answered_with(a: &Admission, rounds: usize, status: http::StatusCode) -> usize {
    for _ in 0..rounds {
        let n = a.snapshot().limit;
        let mut permits = Vec::new();
        for _ in 0..n {
            permits.push(a.acquire(None).await.expect("under the limit"));
        }
        advance(Duration::from_millis(1)).await;
        for p in permits {
            p.answered(status);
        }
    }
    a.snapshot().limit
}

/// A limit starting at 20, free to move between 2 and 1,000.
fn starting_at_20() -> AdmissionConfig {
    AdmissionConfig {
        limit: LimitConfig {
            initial: 20,
            min: 2,
            max: 1000,
            ..LimitConfig::default()
        },
        ..AdmissionConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_further_on_is_no_service_time() {
    let config = starting_at_20();
    // Fast answers that are refusals (503 from a service further on, 429)
    // teach the limit nothing: no minimum RTT, the limit where it was.
    for status in [
        http::StatusCode::SERVICE_UNAVAILABLE,
        http::StatusCode::TOO_MANY_REQUESTS,
    ] {
        let a = Admission::new("t", config);
        assert_eq!(answered_with(&a, 50, status).await, 20, "{status}");
        let s = a.snapshot();
        assert_eq!(s.min_rtt_ms, None, "{status}: {s:?}");
        assert_eq!((s.in_flight, s.requests.admitted), (0, 1000));
    }
    // The same answers as successes are service times: measured, and the
    // limit moves (it would keep growing on fast refusals).
    let a = Admission::new("t", config);
    let limit = answered_with(&a, 50, http::StatusCode::OK).await;
    let s = a.snapshot();
    assert_eq!(s.min_rtt_ms, Some(1.0), "{s:?}");
    assert!(limit > 20, "fast successes raise the limit: {limit}");
}

/// Runs `rounds` rounds of `limit()` gRPC calls at once through the layer,
/// each answered after 1 ms the way tonic answers a handler's error: HTTP
/// 200, trailers-only, `grpc-status: code`. Returns the limit afterwards.
async fn grpc_answered_with(a: &Admission, rounds: usize, code: &'static str) -> usize {
    let gate = Arc::new(Semaphore::new(0));
    let inner = {
        let gate = gate.clone();
        tower::service_fn(move |_req: http::Request<()>| {
            let gate = gate.clone();
            async move {
                // Each call takes for good one of the permits a round adds.
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
                let mut response = http::Response::new(String::new());
                response
                    .headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static(code));
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let svc = AdmissionLayer::new(a.clone(), GrpcRefusal).layer(inner);
    for _ in 0..rounds {
        let n = a.snapshot().limit;
        let calls: Vec<_> = (0..n)
            .map(|_| tokio::spawn(svc.clone().oneshot(http::Request::new(()))))
            .collect();
        while a.snapshot().in_flight < n {
            tokio::task::yield_now().await;
        }
        advance(Duration::from_millis(1)).await;
        gate.add_permits(n);
        for call in calls {
            let response = call.await.expect("the call's task").expect("answered");
            assert_eq!(response.status(), http::StatusCode::OK);
            assert_eq!(response.headers()["grpc-status"], code);
        }
    }
    a.snapshot().limit
}

#[tokio::test(start_paused = true)]
async fn a_grpc_refusal_further_on_is_no_service_time() {
    let config = starting_at_20();
    // Fast trailers-only `RESOURCE_EXHAUSTED` and `UNAVAILABLE` (gRPC's 429
    // and 503, though HTTP 200) teach the limit nothing.
    for code in ["8", "14"] {
        let a = Admission::new("t", config);
        assert_eq!(
            grpc_answered_with(&a, 50, code).await,
            20,
            "grpc-status {code}"
        );
        let s = a.snapshot();
        assert_eq!(s.min_rtt_ms, None, "grpc-status {code}: {s:?}");
        assert_eq!((s.in_flight, s.requests.admitted), (0, 1000));
    }
    // Fast answers (`OK`) are service times: measured, and the limit moves.
    let a = Admission::new("t", config);
    let limit = grpc_answered_with(&a, 50, "0").await;
    let s = a.snapshot();
    assert_eq!(s.min_rtt_ms, Some(1.0), "{s:?}");
    assert!(limit > 20, "fast answers raise the limit: {limit}");
}
