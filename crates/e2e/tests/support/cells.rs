//! The assertions a FAULTS.md cell is made of, one function a code: L
//! (latency bound), the problem answer, CB (fails fast while open), and
//! the Redis columns' "degrade" (reads and orders go on without Redis).
//! A matrix test calls them in the order its cell lists the codes.

use std::time::Duration;

use shopeasy_e2e::Answer;

use super::fixture::{Fixture, key};

/// Asserts a problem+json answer with `status`, and `Retry-After` when
/// `retry_after`.
pub fn assert_problem(answer: &Answer, status: u16, retry_after: bool) {
    assert_eq!(answer.status, Some(status), "{}", answer.describe());
    assert!(
        answer.is_problem(),
        "not problem+json: {}",
        answer.describe()
    );
    if retry_after {
        assert!(
            answer.header("retry-after").is_some(),
            "no Retry-After: {:?}",
            answer.headers
        );
    }
}

/// L: asserts the answer came within `bound`; `what` names the bound in
/// the failure ("L(acquire + 100 ms)").
pub fn assert_within(answer: &Answer, bound: Duration, what: &str) {
    assert!(
        answer.elapsed < bound,
        "{what}: not within {bound:?}: {}",
        answer.describe()
    );
}

/// Asserts `status` within `bound` (L): the cell's expected answer, on
/// time.
pub fn assert_answers(answer: &Answer, status: u16, bound: Duration) {
    assert_eq!(answer.status, Some(status), "{}", answer.describe());
    assert_within(answer, bound, "L");
}

/// Asserts a problem+json `status` (with `Retry-After` when
/// `retry_after`) within `bound`: a fault answered, not waited out.
pub fn assert_problem_within(answer: &Answer, status: u16, retry_after: bool, bound: Duration) {
    assert_problem(answer, status, retry_after);
    assert_within(answer, bound, "L");
}

/// CB: asserts that an answer given while the breaker is open came within
/// `bound` (no call to the dependency was waited for).
pub fn assert_fails_fast(answer: &Answer, bound: Duration) {
    assert_within(answer, bound, "CB open: fails fast");
}

/// Asserts one answer through the gateway is a problem 502 with
/// `Proxy-Status` within `bound` (F1/F2 at gateway → service).
pub fn assert_bad_gateway_within(answer: &Answer, bound: Duration) {
    assert_problem_within(answer, 502, false, bound);
    assert!(
        answer.header("proxy-status").is_some(),
        "no Proxy-Status: {:?}",
        answer.headers
    );
}

/// L for an order while Redis is faulted, whatever the fault (FAULTS.md
/// F1 × Redis: L(base + Redis timeout)): every Redis call is cut at its
/// own timeout (50 ms), and a failed one makes Redis rest for a second, so
/// an order pays a timeout or two; the rest of 1 s is a loaded machine's.
pub const REDIS_FAULT_ORDER_BOUND: Duration = Duration::from_secs(1);

/// The Redis columns (F1, F3–F5 × service → Redis): three rounds of a
/// product read (200 within `read_bound`) and an order of it (201 within
/// `order_bound`): a Redis fault degrades to Postgres and the in-process
/// cache, it never fails a request nor holds it past its Redis timeout.
pub async fn assert_reads_and_orders_degrade(
    f: &Fixture,
    product: &str,
    read_bound: Duration,
    order_bound: Duration,
) {
    let path = format!("/api/products/{product}");
    for _ in 0..3 {
        let read = f.gateway.get(&path).await;
        assert_answers(&read, 200, read_bound);
        let placed = f.order(product, 1, Some(&key())).await;
        assert_answers(&placed, 201, order_bound);
    }
}

/// The F1, F3 and F5 Redis cells (refused, black hole, slow replies):
/// with both Redis edges faulted, reads answer within 500 ms and orders
/// within [`REDIS_FAULT_ORDER_BOUND`], the bound a Redis call's own
/// timeout keeps them in.
pub async fn assert_redis_fault_degrades(f: &Fixture, product: &str) {
    assert_reads_and_orders_degrade(
        f,
        product,
        Duration::from_millis(500),
        REDIS_FAULT_ORDER_BOUND,
    )
    .await;
}
