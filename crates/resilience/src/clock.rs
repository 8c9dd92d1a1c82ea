//! One clock reading per call chain.
//!
//! Reading the monotonic clock costs 20–30 ns in a virtual machine, and a
//! call through the full stack would read it four times within a few
//! hundred nanoseconds: the deadline, the budget deposit, the attempt
//! timeout, the breaker's record. [`DeadlineLayer`](crate::deadline::DeadlineLayer)
//! reads it once and lends the reading to every layer below it for the
//! length of its synchronous `call` (tower's `call`s run one inside the
//! other, so the readings would differ by nanoseconds); a layer called
//! outside that span — a retry after its backoff, a future completing
//! later — reads the clock itself. The reading lives in a thread-local, so
//! nothing crosses threads and nothing outlives the call.
//!
//! Written by hand: no crate offers a scoped "now" for tokio's pausable
//! clock (`quanta` and `coarsetime` keep clocks of their own, which tests
//! with `tokio::time::pause` could not advance).

use std::cell::Cell;

use tokio::time::Instant;

thread_local! {
    static LENT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The instant lent by an enclosing [`with_now`] on this thread, else the
/// clock.
pub(crate) fn now() -> Instant {
    LENT.with(Cell::get).unwrap_or_else(Instant::now)
}

/// Runs `f` with [`now`] answering `at` on this thread (restored
/// afterwards, even if `f` panics).
pub(crate) fn with_now<R>(at: Instant, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LENT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LENT.with(|l| l.replace(Some(at))));
    f()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lent_instant_holds_inside_the_call_only() {
        let lent = Instant::now() - Duration::from_secs(5);
        let inside = with_now(lent, || {
            let nested = with_now(lent + Duration::from_secs(1), now);
            (now(), nested)
        });
        assert_eq!(inside, (lent, lent + Duration::from_secs(1)));
        assert_eq!(now(), Instant::now(), "restored: the clock again");
        let caught = std::panic::catch_unwind(|| with_now(lent, || panic!("inner")));
        assert!(caught.is_err());
        assert_eq!(now(), Instant::now(), "restored after a panic");
    }
}
