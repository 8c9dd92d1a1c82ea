//! Circuit breaker: the pure state machine and the tower middleware, on a
//! paused clock with `tower_test::mock`.

mod support;

use std::time::Duration;

use shopeasy_resilience::breaker::{
    Admission, BreakerConfig, BreakerHandle, BreakerLayer, CircuitBreaker, ErrorsAreFailures,
    GrpcClassifier, Outcome, State,
};
use shopeasy_resilience::bulkhead::BulkheadLayer;
use shopeasy_resilience::deadline::{Call, Deadline};
use shopeasy_resilience::timeout::AttemptTimeoutLayer;
use shopeasy_resilience::{AttemptTimedOut, BoxError, CircuitOpen, DeadlineExceeded, Overloaded};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_test::mock;

const BREAK: Duration = Duration::from_secs(15);

fn config() -> BreakerConfig {
    BreakerConfig::default()
}

/// Feeds `pattern` (`true` = failure) through the pure machine, counting as
/// the data path does; returns the state after each call.
fn run_pure(pattern: &[bool]) -> Vec<State> {
    let now = Instant::now();
    let mut m = CircuitBreaker::new(config());
    let (mut failures, mut total) = (0, 0);
    pattern
        .iter()
        .map(|&failed| {
            let (admission, _) = m.admit(now);
            assert_eq!(admission, Admission::Call);
            total += 1;
            if failed {
                failures += 1;
                m.on_failure(now, failures, total);
            }
            m.state()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn state_machine_opens_at_three_failures_of_six_but_not_at_four_of_four() {
    let states = run_pure(&[false, false, false, true, true, true]);
    assert_eq!(states[4], State::Closed, "2 of 5 is below the ratio");
    assert_eq!(states[5], State::Open, "3 of 6 reaches 0.5");

    let states = run_pure(&[true, true, true, true]);
    assert_eq!(
        states.last(),
        Some(&State::Closed),
        "4 of 4 is under the minimum throughput of 5"
    );
}

#[tokio::test(start_paused = true)]
async fn state_machine_half_open_allows_one_trial_and_its_outcome_decides() {
    let mut m = CircuitBreaker::new(config());
    let t0 = Instant::now();
    assert_eq!(m.on_failure(t0, 5, 5), Some(State::Open));
    assert_eq!(
        m.admit(t0 + BREAK - Duration::from_millis(1)).0,
        Admission::Reject
    );
    let t1 = t0 + BREAK;
    assert_eq!(m.admit(t1), (Admission::Trial, Some(State::HalfOpen)));
    assert_eq!(m.admit(t1).0, Admission::Reject, "only one trial");
    // A cancelled trial hands the permit back.
    assert_eq!(m.on_trial(t1, Outcome::Ignore), None);
    assert_eq!(m.admit(t1).0, Admission::Trial);
    // A failed trial re-opens for a full break.
    assert_eq!(m.on_trial(t1, Outcome::Failure), Some(State::Open));
    assert_eq!(m.open_until(), Some(t1 + BREAK));
    let t2 = t1 + BREAK;
    assert_eq!(m.admit(t2).0, Admission::Trial);
    assert_eq!(m.on_trial(t2, Outcome::Success), Some(State::Closed));
    assert_eq!(m.admit(t2).0, Admission::Call);
}

fn record(handle: &BreakerHandle, pattern: &[bool]) {
    for &failed in pattern {
        let permit = handle.try_acquire().expect("closed");
        permit.record(if failed {
            Outcome::Failure
        } else {
            Outcome::Success
        });
    }
}

#[tokio::test(start_paused = true)]
async fn opens_at_three_failures_of_six_but_not_at_four_of_four() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);

    let b = BreakerHandle::new("six", config());
    record(&b, &[false, false, false, true, true]);
    assert_eq!(b.state(), State::Closed);
    record(&b, &[true]);
    assert_eq!(b.state(), State::Open);
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err, CircuitOpen::new("six"));
    assert_eq!(
        rec.counter("shopeasy_downstream_circuit_transitions_total{state=open,target=six}"),
        1
    );
    assert_eq!(
        rec.gauge("shopeasy_downstream_circuit_state{target=six}"),
        Some(1.0)
    );

    let b = BreakerHandle::new("four", config());
    record(&b, &[true, true, true, true]);
    assert_eq!(b.state(), State::Closed, "minimum throughput not reached");
    // Failures older than the sampling window do not count.
    tokio::time::advance(Duration::from_secs(31)).await;
    record(&b, &[true]);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot()["failures_in_window"], 1);
}

/// A snapshot's state and transition counts agree, however fast the
/// breaker moves: every episode starts with a trip out of `closed`, every
/// trial with a move to `half_open`, and a trial ends in `closed` or
/// `open`, so the half-open count equals the open count less one while
/// open. The console counts trials from exactly that; the counts were read
/// after the lock, and a transition in between tore the two apart.
#[test]
fn a_snapshot_never_tears_state_from_its_transition_counts() {
    let b = BreakerHandle::new(
        "torn",
        BreakerConfig {
            minimum_throughput: 1,
            break_duration: Duration::ZERO,
            ..config()
        },
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let driver = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                // Closed: a failure trips it; open with no break: the next
                // caller is the trial, which fails every third time.
                if let Ok(permit) = b.try_acquire() {
                    let outcome = if permit.is_trial() && !n.is_multiple_of(3) {
                        Outcome::Success
                    } else {
                        Outcome::Failure
                    };
                    permit.record(outcome);
                }
            }
        })
    };
    let mut seen = std::collections::HashSet::new();
    let started = Instant::now();
    let mut reads = 0;
    // At least 200,000 reads, and on until every state was read (bounded:
    // a busy machine may starve the driver for a while).
    while reads < 200_000 || (seen.len() < 3 && started.elapsed() < Duration::from_secs(20)) {
        reads += 1;
        let snap = b.snapshot();
        let count = |state: &str| snap["transitions"][state].as_u64().expect("a count");
        let state = snap["state"].as_str().expect("a state").to_owned();
        let expected = count("open") - u64::from(state == "open");
        assert_eq!(
            count("half_open"),
            expected,
            "a {state} breaker with counts {}",
            snap["transitions"]
        );
        seen.insert(state);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    driver.join().expect("driver");
    assert_eq!(seen.len(), 3, "every state was read: {seen:?}");
}

async fn open(handle: &BreakerHandle) {
    record(handle, &[true; 5]);
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn is_refusing_only_while_open_and_the_break_lasts() {
    let b = BreakerHandle::new("refusing", config());
    assert!(!b.is_refusing(), "closed");
    open(&b).await;
    assert!(b.is_refusing(), "open");
    tokio::time::advance(BREAK - Duration::from_millis(1)).await;
    assert!(b.is_refusing(), "the break lasts");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        !b.is_refusing(),
        "break over: the next call may be the trial"
    );
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_100_concurrent_callers_reaches_the_service_in_half_open() {
    let rec = support::TestRecorder::default();
    let _guard = metrics::set_default_local_recorder(&rec);
    let (svc, mut handle) = mock::pair::<u32, u32>();
    let breaker = BreakerHandle::new("inventory", config());
    let svc = BreakerLayer::new(breaker.clone(), ErrorsAreFailures).layer(svc);
    open(&breaker).await;

    // While open, calls fail fast and never reach the service.
    let err = svc.clone().oneshot(0).await.unwrap_err();
    assert!(err.is::<CircuitOpen>());
    assert!(handle.poll_request().is_pending());

    tokio::time::advance(BREAK).await;
    let mut calls: Vec<_> = (0..100)
        .map(|i| tokio::spawn(svc.clone().oneshot(i)))
        .collect();
    let (trial, respond) = handle.next_request().await.expect("the trial");
    assert_eq!(breaker.state(), State::HalfOpen);

    let mut rejected = 0;
    let mut pending = Vec::new();
    for call in calls.drain(..) {
        let mut call = call;
        match tokio::time::timeout(Duration::from_millis(1), &mut call).await {
            Ok(result) => {
                let err = result.unwrap().unwrap_err();
                assert!(err.is::<CircuitOpen>(), "{err}");
                rejected += 1;
            }
            Err(_) => pending.push(call),
        }
    }
    assert_eq!(rejected, 99);
    assert_eq!(pending.len(), 1);
    assert!(
        handle.poll_request().is_pending(),
        "no second call reached the service"
    );

    respond.send_response(trial);
    assert_eq!(pending.pop().unwrap().await.unwrap().unwrap(), trial);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.snapshot()["failures_in_window"], 0, "counts reset");
    assert_eq!(
        rec.counter(
            "shopeasy_downstream_circuit_transitions_total{state=half_open,target=inventory}"
        ),
        1
    );
    assert_eq!(
        rec.counter("shopeasy_downstream_circuit_transitions_total{state=closed,target=inventory}"),
        1
    );
    assert_eq!(
        rec.gauge("shopeasy_downstream_circuit_state{target=inventory}"),
        Some(0.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_trial_returns_the_permit() {
    let (svc, mut handle) = mock::pair::<u32, u32>();
    let breaker = BreakerHandle::new("inventory", config());
    let svc = BreakerLayer::new(breaker.clone(), ErrorsAreFailures).layer(svc);
    open(&breaker).await;
    tokio::time::advance(BREAK).await;

    let trial = tokio::spawn(svc.clone().oneshot(1));
    let (_req, _respond) = handle.next_request().await.unwrap();
    let err = svc.clone().oneshot(2).await.unwrap_err();
    assert!(err.is::<CircuitOpen>(), "the trial is out");

    trial.abort(); // the caller cancelled
    assert!(trial.await.unwrap_err().is_cancelled());
    assert_eq!(
        breaker.state(),
        State::HalfOpen,
        "cancellation decides nothing"
    );

    let next = tokio::spawn(svc.clone().oneshot(3));
    let (req, respond) = handle.next_request().await.expect("the permit came back");
    assert_eq!(req, 3);
    respond.send_response(30);
    assert_eq!(next.await.unwrap().unwrap(), 30);
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_hung_trial_is_bounded_by_its_timeout_and_reopens() {
    let (svc, mut handle) = mock::pair::<u32, u32>();
    let cfg = BreakerConfig {
        trial_timeout: Duration::from_secs(2),
        ..config()
    };
    let breaker = BreakerHandle::new("inventory", cfg);
    let svc = BreakerLayer::new(breaker.clone(), ErrorsAreFailures).layer(svc);
    open(&breaker).await;
    tokio::time::advance(BREAK).await;

    let start = Instant::now();
    let trial = tokio::spawn(svc.clone().oneshot(1));
    let (_req, _never_answered) = handle.next_request().await.unwrap();
    let err = trial.await.unwrap().unwrap_err();
    assert_eq!(
        err.downcast_ref::<AttemptTimedOut>(),
        Some(&AttemptTimedOut(Duration::from_secs(2)))
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(breaker.state(), State::Open, "a hung trial is a failure");
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_failures_and_cancellation_is_not_counted() {
    let (svc, mut handle) = mock::pair::<Call<u32>, u32>();
    let breaker = BreakerHandle::new("inventory", config());
    let svc = tower::ServiceBuilder::new()
        .layer(BreakerLayer::new(breaker.clone(), ErrorsAreFailures))
        .layer(AttemptTimeoutLayer::new(Duration::from_secs(1)))
        .service(svc);

    // Ten calls the caller gives up on: not counted at all.
    for i in 0..10 {
        let call = tokio::spawn(svc.clone().oneshot(Call::new(i)));
        let _req = handle.next_request().await.unwrap();
        call.abort();
        let _ = call.await;
    }
    let snap = breaker.snapshot();
    assert_eq!(snap["failures_in_window"], 0);
    assert_eq!(snap["successes_in_window"], 0);
    assert_eq!(breaker.state(), State::Closed);

    // Five calls that time out: failures, the breaker opens.
    for i in 0..5 {
        let call = tokio::spawn(svc.clone().oneshot(Call::new(i)));
        let _req = handle.next_request().await.unwrap();
        let err = call.await.unwrap().unwrap_err();
        assert!(err.is::<AttemptTimedOut>());
    }
    assert_eq!(breaker.state(), State::Open);
}

#[test]
fn grpc_classifier_counts_timeouts_but_not_cancellation_or_answers() {
    let c = GrpcClassifier;
    let classify = |status: tonic::Status| {
        let result: Result<(), BoxError> = Err(status.into());
        shopeasy_resilience::breaker::Classify::classify(&c, &result)
    };
    assert_eq!(
        classify(tonic::Status::unavailable("down")),
        Outcome::Failure
    );
    assert_eq!(
        classify(tonic::Status::cancelled("Timeout expired")),
        Outcome::Failure,
        "tonic's client-side timeout"
    );
    assert_eq!(
        classify(tonic::Status::cancelled("client went away")),
        Outcome::Ignore
    );
    assert_eq!(
        classify(tonic::Status::deadline_exceeded("slow")),
        Outcome::Failure
    );
    assert_eq!(classify(tonic::Status::not_found("sku")), Outcome::Success);
    assert_eq!(
        classify(tonic::Status::failed_precondition("short")),
        Outcome::Success
    );
    let timed_out: Result<(), BoxError> = Err(AttemptTimedOut(Duration::from_secs(3)).into());
    assert_eq!(
        shopeasy_resilience::breaker::Classify::classify(&c, &timed_out),
        Outcome::Failure
    );
}

/// A breaker that opens on two calls in the window, half of them failed:
/// a couple of miscounted calls are enough to open it.
fn touchy() -> BreakerConfig {
    BreakerConfig {
        minimum_throughput: 2,
        ..config()
    }
}

#[tokio::test(start_paused = true)]
async fn calls_the_bulkhead_sheds_were_never_sent_and_do_not_open_the_breaker() {
    let (svc, mut handle) = mock::pair::<u32, u32>();
    let breaker = BreakerHandle::new("shed", touchy());
    let svc = tower::ServiceBuilder::new()
        .layer(BreakerLayer::new(breaker.clone(), ErrorsAreFailures))
        .layer(BulkheadLayer::new(1))
        .service(svc);

    // One call holds the only slot of a healthy dependency.
    let held = tokio::spawn(svc.clone().oneshot(1));
    let (req, respond) = handle.next_request().await.expect("the held call");
    assert_eq!(req, 1);

    // A burst above the limit: every call shed, none sent.
    for i in 10..20 {
        let err = svc.clone().oneshot(i).await.unwrap_err();
        assert!(
            err.is::<Overloaded>(),
            "shed, not refused by the breaker: {err}"
        );
    }
    assert!(handle.poll_request().is_pending(), "nothing more was sent");
    assert_eq!(breaker.state(), State::Closed, "a shed call is no failure");
    assert_eq!(breaker.snapshot()["failures_in_window"], 0);

    respond.send_response(10);
    assert_eq!(held.await.unwrap().unwrap(), 10);
    let next = tokio::spawn(svc.clone().oneshot(2));
    let (req, respond) = handle.next_request().await.expect("sent");
    assert_eq!(req, 2);
    respond.send_response(20);
    assert_eq!(next.await.unwrap().unwrap(), 20);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.snapshot()["successes_in_window"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_call_with_no_time_left_was_never_sent_and_is_not_counted() {
    let (svc, mut handle) = mock::pair::<Call<u32>, u32>();
    let breaker = BreakerHandle::new("late", touchy());
    let svc = tower::ServiceBuilder::new()
        .layer(BreakerLayer::new(breaker.clone(), ErrorsAreFailures))
        .layer(AttemptTimeoutLayer::new(Duration::from_secs(1)))
        .service(svc);

    for i in 0..5 {
        let call = Call::with_deadline(i, Some(Deadline::after(Duration::ZERO)));
        let err = svc.clone().oneshot(call).await.unwrap_err();
        assert!(err.is::<DeadlineExceeded>(), "not sent: {err}");
    }
    assert!(handle.poll_request().is_pending(), "nothing was sent");
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.snapshot()["failures_in_window"], 0);
}

#[tokio::test(start_paused = true)]
async fn a_trial_the_bulkhead_sheds_hands_the_trial_to_the_next_caller() {
    let (svc, mut handle) = mock::pair::<u32, u32>();
    let bulkhead = BulkheadLayer::new(1);
    let breaker = BreakerHandle::new("shed-trial", config());
    let svc = BreakerLayer::new(breaker.clone(), ErrorsAreFailures).layer(bulkhead.layer(svc));
    // Another path into the same bulkhead, not through the breaker.
    let (other, mut other_handle) = mock::pair::<u32, u32>();
    let other = bulkhead.layer(other);
    open(&breaker).await;
    tokio::time::advance(BREAK).await;

    let held = tokio::spawn(other.oneshot(0));
    let (_req, respond) = other_handle.next_request().await.expect("holds the slot");
    assert_eq!(bulkhead.in_flight(), 1);

    let err = svc.clone().oneshot(1).await.unwrap_err();
    assert!(err.is::<Overloaded>(), "the trial was shed: {err}");
    assert!(handle.poll_request().is_pending(), "the trial was not sent");
    assert_eq!(
        breaker.state(),
        State::HalfOpen,
        "a trial never sent decides nothing"
    );

    respond.send_response(0);
    assert_eq!(held.await.unwrap().unwrap(), 0);
    let trial = tokio::spawn(svc.clone().oneshot(2));
    let (req, respond) = handle.next_request().await.expect("the trial came back");
    assert_eq!(req, 2);
    respond.send_response(20);
    assert_eq!(trial.await.unwrap().unwrap(), 20);
    assert_eq!(breaker.state(), State::Closed);
}
