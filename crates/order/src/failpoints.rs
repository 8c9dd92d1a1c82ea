//! Test-only crash points of the order saga (FAULTS.md, "Outbox and saga").
//!
//! A [`Failpoints`] value is handed to [`crate::App::build_with`]; nothing is
//! global. Arming a point makes the next request that reaches it stop there
//! as a crash would: nothing after it runs (no status update, no key
//! release, no outbox cleanup), so what a restart or a retry does next is
//! exactly what it would do after a real crash. Production builds use
//! [`Failpoints::default`], with every point disarmed.

use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

/// A place in the saga where a crash is simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// After the order and its outbox row are committed, before
    /// `ReserveStock` is called.
    AfterOrderCommit,
    /// After `ReserveStock` succeeded, before the order is marked
    /// `confirmed`.
    AfterReserve,
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
        }
    }
}

/// Armed crash points, shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Failpoints(Arc<AtomicU32>);

impl Failpoints {
    /// Arms `point` for the next request that reaches it (once).
    pub fn arm(&self, point: Failpoint) {
        self.0.fetch_or(point.bit(), Ordering::SeqCst);
    }

    /// Disarms `point` and says whether it was armed: the saga calls this
    /// at each point and stops when it returns `Err`.
    ///
    /// # Errors
    /// The failpoint, when it was armed.
    pub fn check(&self, point: Failpoint) -> Result<(), Failpoint> {
        let before = self.0.fetch_and(!point.bit(), Ordering::SeqCst);
        if before & point.bit() == 0 {
            Ok(())
        } else {
            tracing::warn!(?point, "failpoint hit: stopping as a crash would");
            Err(point)
        }
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
