//! A sliding-window event counter without a lock: the storage behind the
//! retry budget and the circuit breaker's failure ratio.
//!
//! The window is split into `slots` time slots; each slot has `shards`
//! cache-line-sized cells, and a thread always writes to its own shard, so
//! threads counting at the same time do not fight over one cache line. Each
//! cell is one `AtomicU64` holding the slot number it counts for (high 32
//! bits) and the count (low 32 bits): a cell left over from an older lap of
//! the ring is recognised by its slot number and restarted with one
//! compare-and-swap, so no separate "reset" races with an increment.
//!
//! Reading (`sum`) walks every cell; that is for the rare path (a retry, a
//! failure, an admin snapshot), never for the common successful call.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use tokio::time::Instant;

/// Cells per slot when a window is striped across threads.
pub(crate) const SHARDS: usize = 8;

/// Counts events in the last `window`, in `slots` steps.
#[derive(Debug)]
pub(crate) struct SlidingWindow {
    origin: Instant,
    slot_nanos: u64,
    /// A power of two, so a ring index is a mask, not a division.
    slots: u32,
    /// A power of two, as `slots`.
    shards: usize,
    /// The slot `add` last saw: checking that `now` still falls in it is a
    /// multiplication, where finding the slot is a 64-bit division (the
    /// hot path's costliest instruction). Read by every thread, written
    /// once per slot.
    recent: CachePadded<AtomicU64>,
    cells: Box<[CachePadded<AtomicU64>]>,
}

fn pack(slot: u32, count: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(count)
}

fn unpack(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, v as u32)
}

thread_local! {
    static SHARD: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

/// This thread's stripe index (threads are numbered as they first ask).
pub(crate) fn thread_shard() -> usize {
    SHARD.with(|s| *s)
}

impl SlidingWindow {
    /// A window of `window` split into at least `slots` slots (rounded up
    /// to a power of two), striped over `shards` cells per slot (rounded up
    /// to a power of two; 1 = not striped).
    pub(crate) fn new(window: Duration, slots: u32, shards: usize) -> Self {
        let slots = slots.max(1).next_power_of_two();
        let shards = shards.max(1).next_power_of_two();
        let slot_nanos = u64::try_from(window.as_nanos() / u128::from(slots))
            .unwrap_or(u64::MAX)
            .max(1);
        let cells = (0..slots as usize * shards)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        Self {
            // Slot 0 is reserved for "never written": start counting at slot 1.
            origin: Instant::now()
                .checked_sub(Duration::from_nanos(slot_nanos))
                .unwrap_or_else(Instant::now),
            slot_nanos,
            slots,
            shards,
            recent: CachePadded::new(AtomicU64::new(0)),
            cells,
        }
    }

    fn slot(&self, now: Instant) -> u32 {
        let elapsed = now.saturating_duration_since(self.origin);
        // u64 nanoseconds cover 584 years; u128 division is slow.
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let recent = self.recent.load(Ordering::Relaxed);
        let start = recent.saturating_mul(self.slot_nanos);
        if nanos >= start && nanos - start < self.slot_nanos {
            return recent as u32;
        }
        let slot = nanos / self.slot_nanos;
        self.recent.store(slot, Ordering::Relaxed);
        slot as u32
    }

    fn live(&self, current: u32, cell_slot: u32) -> bool {
        cell_slot != 0 && current.wrapping_sub(cell_slot) < self.slots
    }

    fn cell(&self, slot: u32, shard: usize) -> &AtomicU64 {
        let i = (slot & (self.slots - 1)) as usize * self.shards + (shard & (self.shards - 1));
        &self.cells[i]
    }

    /// Counts one event at `now`.
    pub(crate) fn add(&self, now: Instant) {
        let slot = self.slot(now);
        let shard = if self.shards == 1 { 0 } else { thread_shard() };
        let cell = self.cell(slot, shard);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let (s, n) = unpack(cur);
            let next = if s == slot {
                pack(slot, n.saturating_add(1))
            } else {
                pack(slot, 1)
            };
            match cell.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Events counted in the window ending at `now`.
    pub(crate) fn sum(&self, now: Instant) -> u64 {
        let slot = self.slot(now);
        self.cells
            .iter()
            .map(|c| {
                let (s, n) = unpack(c.load(Ordering::Acquire));
                if self.live(slot, s) { u64::from(n) } else { 0 }
            })
            .sum()
    }

    /// Counts one event at `now` only if `allow(total before it)` holds,
    /// atomically with respect to other calls of this method (the check and
    /// the increment are one compare-and-swap on the current cell). Only for
    /// unstriped windows (`shards == 1`).
    pub(crate) fn add_if(&self, now: Instant, allow: impl Fn(u64) -> bool) -> bool {
        debug_assert_eq!(self.shards, 1);
        let slot = self.slot(now);
        let cell = self.cell(slot, 0);
        loop {
            let cur = cell.load(Ordering::Acquire);
            let (s, n) = unpack(cur);
            let mine = if s == slot { u64::from(n) } else { 0 };
            let others: u64 = (1..self.slots)
                .map(|back| {
                    let past = slot.wrapping_sub(back);
                    let (ps, pn) = unpack(self.cell(past, 0).load(Ordering::Acquire));
                    if ps == past && self.live(slot, ps) {
                        u64::from(pn)
                    } else {
                        0
                    }
                })
                .sum();
            if !allow(others + mine) {
                return false;
            }
            let next = pack(slot, u32::try_from(mine + 1).unwrap_or(u32::MAX));
            if cell
                .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// Forgets every event.
    pub(crate) fn reset(&self) {
        for c in self.cells.iter() {
            c.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_slide_out_of_the_window() {
        let w = SlidingWindow::new(Duration::from_secs(10), 10, SHARDS);
        for _ in 0..5 {
            w.add(Instant::now());
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        w.add(Instant::now());
        assert_eq!(w.sum(Instant::now()), 6);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(w.sum(Instant::now()), 1, "the first five slid out");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(w.sum(Instant::now()), 0);
        // A full lap of the ring later, old cells are not mistaken for new.
        tokio::time::advance(Duration::from_secs(100)).await;
        w.add(Instant::now());
        assert_eq!(w.sum(Instant::now()), 1);
        w.reset();
        assert_eq!(w.sum(Instant::now()), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_if_checks_and_counts_atomically() {
        let w = SlidingWindow::new(Duration::from_secs(10), 10, 1);
        let mut taken = 0;
        for _ in 0..10 {
            if w.add_if(Instant::now(), |n| n < 3) {
                taken += 1;
            }
        }
        assert_eq!(taken, 3);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(w.add_if(Instant::now(), |n| n < 3));
    }
}
