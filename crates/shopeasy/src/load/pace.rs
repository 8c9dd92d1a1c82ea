//! Waiting for a request's intended start, to well under a millisecond.
//!
//! **Why not tokio's timer.** It has a resolution of 1 ms, and a parked
//! runtime sleeps in `epoll_wait`, whose timeout is whole milliseconds: a
//! request due at `t` starts up to about a millisecond after `t` (the
//! sweep's send lag had a median of 1.0 ms). Its latency runs from `t`
//! (open loop), so every figure of a step carried about a millisecond of
//! the generator's own. On Linux a `timerfd` (the `tokio-timerfd` crate)
//! wakes the runtime at the instant instead, as wrk2 paces with a
//! high-resolution clock: what is left of the lag is scheduling, and the
//! step still measures and reports it. Elsewhere, or when no `timerfd` can
//! be made, tokio's timer.
//!
//! The `timerfd` runs on the OS clock, so tokio's paused clock (which the
//! workspace's tests use elsewhere) does not drive it: nothing that paces
//! with it is tested on a paused clock.

use tokio::time::Instant;

/// Waits for instants in turn (one request's intended start after another).
pub struct Pacer {
    #[cfg(target_os = "linux")]
    timer: Option<tokio_timerfd::Delay>,
}

impl Pacer {
    /// A pacer; must be made inside a tokio runtime (the `timerfd` is
    /// registered with its reactor).
    pub fn new() -> Self {
        Self {
            #[cfg(target_os = "linux")]
            timer: tokio_timerfd::Delay::new(Instant::now().into_std()).ok(),
        }
    }

    /// Returns at `at` (at once when it has passed), never before it.
    pub async fn until(&mut self, at: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(timer) = self.timer.as_mut() {
            timer.reset(at.into_std());
            if timer.await.is_ok() {
                return;
            }
            // The timerfd failed: tokio's timer from now on.
            self.timer = None;
        }
        tokio::time::sleep_until(at).await;
    }
}

// `tokio_timerfd::Delay` has no `Debug`.
impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer").finish_non_exhaustive()
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn never_returns_before_the_instant_and_at_once_after_it() {
        let mut pacer = Pacer::new();
        #[cfg(target_os = "linux")]
        assert!(pacer.timer.is_some(), "a timerfd on Linux");
        for step in [50_u64, 300, 700, 1_300] {
            let at = Instant::now() + Duration::from_micros(step);
            pacer.until(at).await;
            assert!(
                Instant::now() >= at,
                "returned before the instant ({step} µs)"
            );
        }
        // A passed instant: no wait (bounded generously, for a loaded machine).
        let before = Instant::now();
        pacer.until(before - Duration::from_millis(5)).await;
        assert!(before.elapsed() < Duration::from_millis(500));
    }
}
