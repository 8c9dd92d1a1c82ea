//! Waiting for something to become true, within a bound.
//!
//! Tests of a distributed system cannot sleep a fixed time and hope: they
//! poll a condition until it holds. Every crate polls through these two
//! functions so that each wait has the same shape: a total bound that a
//! slow or hung check cannot stretch (each check is raced against the time
//! left), a fixed poll interval, and a failure that says what was awaited,
//! for how long and how many times it was checked.

use std::{fmt, time::Duration};

use tokio::time::Instant;

/// How long [`eventually`] waits between two checks. Short next to the
/// bounds tests use (0.5 s to 20 s), long enough that a check which
/// places an order or reads `/metrics` does not become a load test.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Why a wait gave up: what was awaited, the bound and the checks made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The bound that passed.
    pub within: Duration,
    /// How many checks ran (the last one may have been cut at the bound).
    pub checks: u32,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "still false after {:?} ({} checks, one every {POLL_INTERVAL:?})",
            self.within, self.checks
        )
    }
}

/// Polls `check` until it returns true; `Ok(time it took)`, or
/// `Err(TimedOut)` once `within` has passed. A check still running at the
/// bound is dropped, so the whole wait never takes longer than `within`
/// (plus scheduling).
///
/// # Errors
/// [`TimedOut`] when `check` did not return true within `within`.
pub async fn poll(
    within: Duration,
    mut check: impl AsyncFnMut() -> bool,
) -> Result<Duration, TimedOut> {
    let started = Instant::now();
    let deadline = started + within;
    let mut checks = 0;
    loop {
        checks += 1;
        // `timeout_at` polls the check before its timer, so a check that
        // is ready at once is still evaluated when started at the bound.
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(true) => return Ok(started.elapsed()),
            Ok(false) if Instant::now() < deadline => {}
            Ok(false) | Err(_) => return Err(TimedOut { within, checks }),
        }
        tokio::time::sleep_until(deadline.min(Instant::now() + POLL_INTERVAL)).await;
    }
}

/// True once `check` returns true, false when `within` passes first (see
/// [`poll`] for the bound). For waits whose failure message needs what
/// the test reads afterwards; otherwise prefer [`assert_eventually`].
pub async fn eventually(within: Duration, check: impl AsyncFnMut() -> bool) -> bool {
    poll(within, check).await.is_ok()
}

/// Waits as [`eventually`] does and returns how long it took.
///
/// # Panics
/// When `within` passes first, with `what` (the property awaited, as the
/// test names it: "C8: pending → confirmed") and the [`TimedOut`] details.
pub async fn assert_eventually(
    within: Duration,
    what: impl fmt::Display,
    check: impl AsyncFnMut() -> bool,
) -> Duration {
    match poll(within, check).await {
        Ok(took) => took,
        Err(timed_out) => panic!("{what}: {timed_out}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_condition_that_turns_true_is_met() {
        let calls = AtomicU32::new(0);
        let took = poll(Duration::from_secs(1), async || {
            calls.fetch_add(1, Ordering::Relaxed) >= 3
        })
        .await
        .unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        assert_eq!(took, POLL_INTERVAL * 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_condition_that_stays_false_times_out_at_the_bound() {
        let started = Instant::now();
        let err = poll(Duration::from_millis(500), async || false)
            .await
            .unwrap_err();
        assert!(started.elapsed() <= Duration::from_millis(500));
        assert_eq!(err.within, Duration::from_millis(500));
        assert!(err.checks >= 9, "{err:?}");
        assert!(!eventually(Duration::from_millis(100), async || false).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_check_cannot_stretch_the_bound() {
        let started = Instant::now();
        let err = poll(Duration::from_millis(300), async || {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            true
        })
        .await
        .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert_eq!(err.checks, 1);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "C8: pending → confirmed: still false after 200ms")]
    async fn the_failure_names_what_was_awaited() {
        assert_eventually(
            Duration::from_millis(200),
            "C8: pending → confirmed",
            async || false,
        )
        .await;
    }
}
