//! Test-only crash points of the order saga (FAULTS.md, "Outbox and saga").
//!
//! A [`Failpoints`] value is handed to [`crate::App::build_with`]; nothing is
//! global. Arming a point makes the next request that reaches it stop there
//! as a crash would: nothing after it runs (no status update, no key
//! release, no outbox cleanup), so what a restart or a retry does next is
//! exactly what it would do after a real crash. Production builds use
//! [`Failpoints::default`], with every point disarmed.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU32, Ordering},
};

use tokio::sync::Notify;

/// A place in the saga where a crash (or a stall) is simulated. An order
/// makes three commits — (a) key + order + outbox row, (b) Inventory's
/// reservation, (c) the final record + response — and there is a point
/// in every gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// After pricing and the stock check, before commit (a) (stall only:
    /// nothing is written yet, so a crash there is just a failed request).
    BeforeOrderCommit,
    /// After the order and its outbox row are committed (a), before
    /// `ReserveStock` is called.
    AfterOrderCommit,
    /// `ReserveStock` succeeded (b) but its answer is lost on the way back:
    /// the request sees Inventory unavailable.
    ReserveAnswerLost,
    /// After `ReserveStock` succeeded (b), before the final commit (c).
    AfterReserve,
    /// After the final commit (c), before the response is sent.
    AfterFinalCommit,
    /// After `ReleaseStock` succeeded, before the release is recorded.
    AfterRelease,
    /// The outbox worker's next task panics (a bug, or a dependency that
    /// panics on a malformed answer): the worker must survive it.
    OutboxTaskPanics,
}

impl Failpoint {
    fn bit(self) -> u32 {
        match self {
            Self::AfterOrderCommit => 1,
            Self::AfterReserve => 2,
            Self::AfterRelease => 4,
            Self::OutboxTaskPanics => 8,
            Self::BeforeOrderCommit => 16,
            Self::ReserveAnswerLost => 32,
            Self::AfterFinalCommit => 64,
        }
    }
}

/// Armed crash points and stalls, shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Failpoints(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    armed: AtomicU32,
    stalled: AtomicU32,
    stalls: Mutex<Vec<(Failpoint, Stall)>>,
}

/// A stall armed at a point: the next request to reach it waits there
/// until [`Stall::release`] — as a holder stalled by a GC pause, a slow
/// disk or a descheduled VM would.
#[derive(Debug, Clone, Default)]
pub struct Stall {
    reached: Arc<Notify>,
    released: Arc<Notify>,
}

impl Stall {
    /// Waits until a request is held at the point.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the held request (or the next to come) go on.
    pub fn release(&self) {
        self.released.notify_one();
    }
}

impl Failpoints {
    /// Arms `point` for the next request that reaches it (once).
    pub fn arm(&self, point: Failpoint) {
        self.0.armed.fetch_or(point.bit(), Ordering::SeqCst);
    }

    /// Arms a stall at `point` for the next request that reaches it (once).
    pub fn stall(&self, point: Failpoint) -> Stall {
        let stall = Stall::default();
        self.0
            .stalls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((point, stall.clone()));
        self.0.stalled.fetch_or(point.bit(), Ordering::SeqCst);
        stall
    }

    /// Disarms `point` and says whether it was armed: the saga calls this
    /// at each point and stops when it returns `Err`.
    ///
    /// # Errors
    /// The failpoint, when it was armed.
    pub fn check(&self, point: Failpoint) -> Result<(), Failpoint> {
        let before = self.0.armed.fetch_and(!point.bit(), Ordering::SeqCst);
        if before & point.bit() == 0 {
            Ok(())
        } else {
            tracing::warn!(?point, "failpoint hit: stopping as a crash would");
            Err(point)
        }
    }

    /// Waits at `point` if a stall is armed there (one atomic load when
    /// none is).
    pub async fn pause(&self, point: Failpoint) {
        if self.0.stalled.load(Ordering::SeqCst) & point.bit() == 0 {
            return;
        }
        let stall = {
            let mut stalls = self
                .0
                .stalls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(i) = stalls.iter().position(|(p, _)| *p == point) else {
                return;
            };
            let (_, stall) = stalls.remove(i);
            if !stalls.iter().any(|(p, _)| *p == point) {
                self.0.stalled.fetch_and(!point.bit(), Ordering::SeqCst);
            }
            stall
        };
        tracing::warn!(?point, "failpoint: stalling");
        stall.reached.notify_one();
        stall.released.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_fires_once() {
        let f = Failpoints::default();
        assert!(f.check(Failpoint::AfterReserve).is_ok());
        f.arm(Failpoint::AfterReserve);
        assert!(f.clone().check(Failpoint::AfterOrderCommit).is_ok());
        assert_eq!(
            f.check(Failpoint::AfterReserve),
            Err(Failpoint::AfterReserve)
        );
        assert!(f.check(Failpoint::AfterReserve).is_ok());
    }
}
