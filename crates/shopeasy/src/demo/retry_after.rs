//! `retry-after`: a provider that says when to come back is believed — up
//! to the caller's deadline.
//!
//! ShopEasy's HTTP client stack (`HttpRetryPolicy`, as in [`super::retry`])
//! calls a scripted provider with a caller's budget of 2 s. Call 1: 503
//! with `Retry-After: 1`, then 200: the retry waits the second the provider
//! asked for, not the stack's own 25 ms backoff. Call 2: 503 with
//! `Retry-After: 3`: three seconds are past the deadline, so the stack
//! gives up at once and returns the 503 instead of sleeping into a
//! deadline nobody is waiting for.

use std::time::Duration;

use shopeasy_resilience::{deadline::Deadline, edge::EdgeConfig};
use tokio::time::Instant;

use super::{
    Outcome, Run, Scene, SceneInfo, Timeline,
    retry::{http_edge, judge},
    stub::{Answer, Stub},
};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "retry-after",
    summary: "a 503 with Retry-After honoured, and one beyond the deadline not retried",
    help: "ShopEasy's HTTP client stack (HttpRetryPolicy, backoff 25 ms with full \
jitter, two retries) calls a scripted provider for a caller whose deadline is 2 s. \
Call 1: the provider answers 503 with Retry-After: 1, then 200; the retry waits the \
second it was asked to. Call 2: 503 with Retry-After: 3, past the deadline; the stack \
does not retry and returns the 503 at once.",
    expected: "call 1 retried after at least the 1 s asked, result 200; call 2 not retried, \
its 503 returned in well under a second",
};

/// The caller's budget for each call.
const DEADLINE: Duration = Duration::from_secs(2);

/// Runs the scene.
///
/// # Errors
/// The stub cannot listen or the client cannot be built.
pub async fn run(_run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::RetryAfter);
    let stub = Stub::start(&[], Answer::Status(200)).await?;
    let config = EdgeConfig::new("demo-provider", Duration::from_millis(500));
    let client = http_edge(&config, format!("http://{}/stock", stub.addr()))?;
    let mut table = Timeline::new(
        "attempts, as the provider saw them (the caller's deadline: 2 s)",
        &["call", "ms", "attempt", "answer", "then"],
    );
    let mut made = Vec::new();
    for (call, script) in [
        (1, [Answer::Busy(1), Answer::Status(200)]),
        (2, [Answer::Busy(3), Answer::Status(200)]),
    ] {
        stub.script(&script, Answer::Status(200));
        let started = Instant::now();
        let mut request = http::Request::new(());
        request.extensions_mut().insert(Deadline::after(DEADLINE));
        let status = client
            .call(request, judge)
            .await
            .ok()
            .map(|r| r.status().as_u16());
        let took = started.elapsed();
        let arrivals = stub.arrivals();
        for (i, arrival) in arrivals.iter().enumerate() {
            let answer = match script.get(i) {
                Some(Answer::Busy(s)) => format!("503, Retry-After: {s}"),
                Some(Answer::Status(s)) => s.to_string(),
                _ => "?".to_owned(),
            };
            let then = if i + 1 < arrivals.len() {
                "wait as asked, retry".to_owned()
            } else if call == 2 {
                format!(
                    "not retried (3 s is past the deadline): 503 after {} ms",
                    took.as_millis()
                )
            } else {
                format!(
                    "result: {}",
                    status.map_or("failed".to_owned(), |s| s.to_string())
                )
            };
            table.push([
                call.to_string(),
                arrival
                    .at
                    .saturating_duration_since(started)
                    .as_millis()
                    .to_string(),
                (i + 1).to_string(),
                answer,
                then,
            ]);
        }
        made.push((arrivals, status, took));
    }
    outcome.timelines.push(table);

    let (first, first_status, _) = &made[0];
    let (second, second_status, second_took) = &made[1];
    let waited = match first.as_slice() {
        [a, b] => b.at.saturating_duration_since(a.at),
        _ => Duration::ZERO,
    };
    outcome.figure("call1_wait_ms", waited.as_millis() as f64);
    outcome.figure("call2_attempts", second.len() as f64);
    outcome.figure("call2_ms", second_took.as_millis() as f64);
    outcome.measured = format!(
        "call 1 waited {} ms before its retry (asked: 1000), result {}; call 2: {} attempt, \
         503 returned after {} ms",
        waited.as_millis(),
        first_status.map_or("failed".to_owned(), |s| s.to_string()),
        second.len(),
        second_took.as_millis(),
    );
    outcome.passed = first.len() == 2
        && waited >= Duration::from_secs(1)
        && waited < DEADLINE
        && *first_status == Some(200)
        && second.len() == 1
        && *second_status == Some(503)
        && *second_took < Duration::from_millis(500);
    Ok(outcome)
}
