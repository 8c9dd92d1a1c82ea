//! Single flight: one fetch per key, detached, shared by every waiter.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shopeasy_resilience::deadline::Deadline;
use shopeasy_resilience::single_flight::{FlightError, SingleFlight};
use tokio::sync::Notify;

type Flights = SingleFlight<&'static str, u32, String>;

#[tokio::test(start_paused = true)]
async fn a_thousand_concurrent_waiters_cause_exactly_one_fetch() {
    let flights = Flights::new(Duration::from_secs(5));
    let fetches = Arc::new(AtomicU32::new(0));
    let release = Arc::new(Notify::new());
    let waiters: Vec<_> = (0..1000)
        .map(|_| {
            let flights = flights.clone();
            let fetches = fetches.clone();
            let release = release.clone();
            tokio::spawn(async move {
                flights
                    .get_or_fetch("sku-1", None, move || async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        release.notified().await;
                        Ok(42)
                    })
                    .await
            })
        })
        .collect();
    // Let every waiter join before the fetch completes.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(flights.in_flight(), 1);
    release.notify_one();
    for w in waiters {
        assert_eq!(w.await.unwrap(), Ok(42));
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!(flights.in_flight(), 0);

    // The next caller after completion starts a new fetch.
    let again = flights
        .get_or_fetch("sku-1", None, || async { Ok(43) })
        .await;
    assert_eq!(again, Ok(43));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_the_fetch_running_for_the_others() {
    let flights = Flights::new(Duration::from_secs(5));
    let finished = Arc::new(AtomicU32::new(0));
    let done = finished.clone();
    let leader = {
        let flights = flights.clone();
        tokio::spawn(async move {
            flights
                .get_or_fetch("sku-1", None, move || async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok(9)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let follower = flights.join("sku-1", || async { Ok(0) });
    assert!(follower.coalesced());
    leader.abort(); // the caller that started the fetch gives up
    assert!(leader.await.unwrap_err().is_cancelled());
    assert_eq!(follower.wait(None).await, Ok(9));
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_with_an_earlier_deadline_stops_waiting_only() {
    let flights = Flights::new(Duration::from_secs(5));
    let slow = || async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(5)
    };
    let patient = flights.join("k", slow);
    let hasty = flights.join("k", slow);
    let hasty = hasty.wait(Some(Deadline::after(Duration::from_millis(100))));
    assert_eq!(hasty.await, Err(FlightError::WaitExpired));
    assert_eq!(patient.wait(None).await, Ok(5));
}

#[tokio::test(start_paused = true)]
async fn the_error_reaches_every_waiter_and_the_fetch_has_its_own_timeout() {
    let flights = Flights::new(Duration::from_secs(1));
    let fail = || async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Err("refused".to_owned())
    };
    let a = flights.join("k", fail);
    let b = flights.join("k", fail);
    assert_eq!(
        a.wait(None).await,
        Err(FlightError::Failed("refused".into()))
    );
    assert_eq!(
        b.wait(None).await,
        Err(FlightError::Failed("refused".into()))
    );

    let hang = || std::future::pending::<Result<u32, String>>();
    let a = flights.join("k", hang);
    let b = flights.join("k", hang);
    let start = tokio::time::Instant::now();
    assert_eq!(a.wait(None).await, Err(FlightError::FetchTimedOut));
    assert_eq!(b.wait(None).await, Err(FlightError::FetchTimedOut));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(flights.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fetch_that_panics_when_started_leaves_no_flight_behind() {
    let flights = Flights::new(Duration::from_secs(5));
    let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
        flights.join("sku-1", || -> std::future::Ready<Result<u32, String>> {
            panic!("the fetch could not be built")
        })
    }));
    assert!(caught.is_err(), "the panic reaches the caller");
    assert_eq!(flights.in_flight(), 0, "no flight left behind");

    // The next caller for the key starts a fetch of its own.
    let again = flights
        .get_or_fetch("sku-1", None, || async { Ok(7) })
        .await;
    assert_eq!(again, Ok(7));
}
