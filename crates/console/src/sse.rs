//! `GET /events`: every snapshot, as it is made, as a server-sent event.
//!
//! Each event is `event: snapshot`, `data: <snapshot JSON>`; the JSON
//! carries `seq` and `at_unix_ms`, so a page (or a test) knows how old what
//! it shows is. A new listener gets the latest snapshot at once, then each
//! new one. A listener that falls behind skips to the newest snapshot
//! rather than queueing old ones (a `watch` channel holds one value), so a
//! slow page never makes the console buffer without bound.

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::State,
    response::sse::{Event, KeepAlive, Sse},
};
use futures::Stream;

use crate::{poll::Feed, server::AppState};

/// The event stream.
pub async fn events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    Sse::new(stream(state.feed.clone()))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
}

/// Each snapshot of `feed`, starting with the current one.
fn stream(mut feed: Feed) -> impl Stream<Item = Result<Event, Infallible>> {
    // The current snapshot counts as unseen, so it is sent first.
    feed.mark_changed();
    futures::stream::unfold(feed, |mut feed| async move {
        loop {
            feed.changed().await.ok()?;
            let json = feed.borrow_and_update().clone();
            if let Some(json) = json {
                let event = Event::default().event("snapshot").data(&*json);
                return Some((Ok(event), feed));
            }
        }
    })
}
