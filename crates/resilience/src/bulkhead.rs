//! The bulkhead: a per-dependency concurrency limit that sheds load.
//!
//! A hung dependency must not take every connection, task or thread the
//! service has: at most `max_in_flight` calls to it run at once, and the
//! next one fails at once with [`Overloaded`] instead of queueing without
//! bound (tower's `ConcurrencyLimit` alone would queue; with `LoadShed` it
//! would shed, but reports tower's own `Overloaded` type and reserves its
//! permit in `poll_ready`). A shed call never reaches the inner service.
//!
//! Backpressure: `poll_ready` is the inner service's; the limit is checked in
//! `call`, and a slot is held until the response future completes or is
//! dropped.
//!
//! The count is striped: the `max_in_flight` slots are dealt out over a few
//! cache-line-sized counters, a thread takes from its own stripe first and
//! from the others only when its stripe is full. The total never exceeds
//! `max_in_flight`, and threads calling at once do not fight over one
//! counter.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use crossbeam_utils::CachePadded;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::error::{BoxError, Overloaded, poll_sent};
use crate::window::{SHARDS, thread_shard};

/// Limits calls in flight through every service made from it (they share
/// one count).
#[derive(Debug, Clone)]
pub struct BulkheadLayer {
    slots: Arc<Slots>,
}

#[derive(Debug)]
struct Slots {
    max: usize,
    stripes: Box<[CachePadded<Stripe>]>,
}

#[derive(Debug)]
struct Stripe {
    cap: usize,
    used: AtomicUsize,
}

impl Slots {
    fn new(max: usize) -> Self {
        let max = max.max(1);
        let n = SHARDS.min(max);
        let stripes = (0..n)
            .map(|i| {
                CachePadded::new(Stripe {
                    cap: max / n + usize::from(i < max % n),
                    used: AtomicUsize::new(0),
                })
            })
            .collect();
        Self { max, stripes }
    }

    /// Takes a slot: the stripe it came from.
    fn acquire(&self) -> Option<usize> {
        let n = self.stripes.len();
        let home = thread_shard() % n;
        (0..n).map(|k| (home + k) % n).find(|&i| {
            let s = &self.stripes[i];
            s.used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    (u < s.cap).then_some(u + 1)
                })
                .is_ok()
        })
    }

    fn release(&self, stripe: usize) {
        self.stripes[stripe].used.fetch_sub(1, Ordering::AcqRel);
    }

    fn in_flight(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.used.load(Ordering::Relaxed))
            .sum()
    }
}

impl BulkheadLayer {
    /// At most `max_in_flight` calls at once (at least 1).
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            slots: Arc::new(Slots::new(max_in_flight)),
        }
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }
}

impl<S> Layer<S> for BulkheadLayer {
    type Service = Bulkhead<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Bulkhead {
            inner,
            local: Arc::new(CachePadded::new(self.clone())),
        }
    }
}

/// Fails fast with [`Overloaded`] when `max_in_flight` calls are running.
///
/// Each instance (each clone) holds its own cache-line-padded `Arc` for its
/// calls' slots, so clones on different threads do not contend on one
/// reference count, nor on one cache line (see [`Breaker`](crate::breaker::Breaker)).
#[derive(Debug)]
pub struct Bulkhead<S> {
    inner: S,
    local: Arc<CachePadded<BulkheadLayer>>,
}

impl<S: Clone> Clone for Bulkhead<S> {
    fn clone(&self) -> Self {
        self.local.layer(self.inner.clone())
    }
}

impl<S> Bulkhead<S> {
    /// Wraps `inner` with its own limit of `max_in_flight`.
    pub fn new(inner: S, max_in_flight: usize) -> Self {
        BulkheadLayer::new(max_in_flight).layer(inner)
    }
}

impl<S, Req> Service<Req> for Bulkhead<S>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let max = self.local.slots.max;
        match self.local.slots.acquire() {
            None => ResponseFuture {
                inner: None,
                slot: None,
                max,
            },
            Some(stripe) => ResponseFuture {
                inner: Some(self.inner.call(req)),
                slot: Some(Slot {
                    owner: self.local.clone(),
                    stripe,
                }),
                max,
            },
        }
    }
}

#[derive(Debug)]
struct Slot {
    owner: Arc<CachePadded<BulkheadLayer>>,
    stripe: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.owner.slots.release(self.stripe);
    }
}

pin_project! {
    /// [`Bulkhead`]'s future: holds the slot until it completes or is
    /// dropped.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        slot: Option<Slot>,
        max: usize,
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let max_in_flight = *this.max;
        let out = std::task::ready!(poll_sent(this.inner.as_pin_mut(), cx, || {
            Overloaded { max_in_flight }.into()
        }));
        this.slot.take();
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;
    use tower_test::mock;

    #[tokio::test(start_paused = true)]
    async fn sheds_instead_of_queueing_and_frees_the_slot_on_completion_or_drop() {
        let (svc, mut handle) = mock::pair::<u32, u32>();
        let layer = BulkheadLayer::new(2);
        let svc = layer.layer(svc);

        let a = tokio::spawn(svc.clone().oneshot(1));
        let first = handle.next_request().await.unwrap();
        let b = tokio::spawn(svc.clone().oneshot(2));
        let second = handle.next_request().await.unwrap();
        assert_eq!(layer.in_flight(), 2);

        let err = svc.clone().oneshot(3).await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<Overloaded>(),
            Some(&Overloaded { max_in_flight: 2 })
        );

        first.1.send_response(10);
        assert_eq!(a.await.unwrap().unwrap(), 10);
        assert_eq!(layer.in_flight(), 1);
        b.abort();
        let _ = b.await;
        drop(second);
        assert_eq!(layer.in_flight(), 0, "a dropped call frees its slot");

        let c = tokio::spawn(svc.oneshot(4));
        let (req, resp) = handle.next_request().await.unwrap();
        assert_eq!(req, 4);
        resp.send_response(40);
        assert_eq!(c.await.unwrap().unwrap(), 40);
    }

    /// The stripes share out exactly `max` slots: one thread can take them
    /// all (from other stripes once its own is full), never one more, and
    /// threads at once never exceed the total.
    #[test]
    fn stripes_hold_exactly_max_slots() {
        for max in [1, 3, 8, 10, 1000] {
            let slots = Slots::new(max);
            let taken: Vec<usize> = (0..max).map(|_| slots.acquire().unwrap()).collect();
            assert_eq!(slots.acquire(), None, "max {max}");
            assert_eq!(slots.in_flight(), max);
            slots.release(taken[0]);
            assert!(slots.acquire().is_some());
        }
        let slots = Slots::new(50);
        let granted: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..100).filter(|_| slots.acquire().is_some()).count()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(granted, 50);
    }
}
