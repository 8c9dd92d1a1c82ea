//! The history of each proxy's fault windows: when each toxic was added and
//! removed, and when the proxy was down.
//!
//! A resilience test must show that its retries happened *because of* a
//! fault: every retry attempt of a run lies inside a fault window of its
//! edge, and none outside one (issue 17, "Correlation"). That needs the
//! windows themselves, with times a trace can be laid beside. So every
//! change to a proxy's toxics or enabled flag — through the HTTP API or in
//! process, from the standalone binary or the embedded launcher — opens or
//! closes a [`ToxicWindow`] here:
//!
//! - adding a toxic opens a window; removing it closes it (`removed`);
//! - updating a toxic closes its window (`updated`) and opens one with the
//!   new attributes, since the fault changed;
//! - disabling a proxy opens a window of type [`DISABLED`]; enabling it
//!   closes that (`enabled`);
//! - `POST /reset` closes every window it ends (`reset`); stopping or
//!   removing a proxy closes its open windows (`stopped`).
//!
//! Each window has wall-clock times (Unix ms, comparable with other
//! processes' trace spans) and monotonic offsets (µs, for ordering within
//! this process whatever the wall clock does). The start is rounded down
//! and the end up to the millisecond, so the recorded window always
//! contains the real one.
//!
//! Each window is also a `tracing` span named `toxic_window`, created when
//! the window opens and closed when it ends, with no parent (it outlives the
//! request that opened it) and a `follows_from` link to that request's span.
//! A process that exports traces over OTLP thus shows every window as a
//! span with its real duration, beside the attempts it caused. An event
//! inside the span marks each transition.
//!
//! A history is bounded: the last [`DEFAULT_CAPACITY`] closed windows per
//! proxy, plus every open one; older ones are dropped and counted.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard, OnceLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::time::Instant;
use tracing::Span;

use crate::{Stream, Toxic};

/// How many closed windows a proxy keeps by default.
pub const DEFAULT_CAPACITY: usize = 1000;

/// The `type` (and `toxic` name) of the window during which a proxy is
/// disabled (`{"enabled": false}`): no connections at all, on both streams.
pub const DISABLED: &str = "disabled";

/// One fault window of one proxy, as `GET /windows` shows it (and as a
/// client of that route can read it back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToxicWindow {
    /// The proxy (edge) it happened on, for example `order-inventory`.
    pub proxy: String,
    /// Its number within the proxy's history, from 1, in opening order.
    pub id: u64,
    /// The toxic's name, or [`DISABLED`].
    pub toxic: String,
    /// The toxic's type (`latency`, `timeout`, ...), or [`DISABLED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The stream it acted on; `null` for [`DISABLED`] (both).
    pub stream: Option<Stream>,
    /// The toxic's toxicity (1 for [`DISABLED`]).
    pub toxicity: f32,
    /// The toxic's attributes (empty for [`DISABLED`]).
    pub attributes: Map<String, Value>,
    /// When it opened, Unix milliseconds (rounded down).
    pub started_unix_ms: u64,
    /// When it ended, Unix milliseconds (rounded up); `null` while open.
    pub ended_unix_ms: Option<u64>,
    /// When it opened, microseconds on this process's monotonic clock
    /// (since the first window of the process was stamped).
    pub started_monotonic_us: u64,
    /// When it ended on the same clock; `null` while open.
    pub ended_monotonic_us: Option<u64>,
    /// What ended it; `null` while open.
    pub ended_by: Option<WindowEnd>,
}

impl ToxicWindow {
    /// Whether it was open at any moment at or after `since_unix_ms`.
    pub fn open_since(&self, since_unix_ms: u64) -> bool {
        self.ended_unix_ms.is_none_or(|end| end >= since_unix_ms)
    }
}

/// What closed a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowEnd {
    /// The toxic was removed.
    Removed,
    /// The toxic was updated; a window with the new values follows.
    Updated,
    /// The disabled proxy was enabled again.
    Enabled,
    /// `POST /reset` (every toxic removed, every proxy enabled).
    Reset,
    /// The proxy was stopped, removed or replaced.
    Stopped,
}

impl WindowEnd {
    fn as_str(self) -> &'static str {
        match self {
            Self::Removed => "removed",
            Self::Updated => "updated",
            Self::Enabled => "enabled",
            Self::Reset => "reset",
            Self::Stopped => "stopped",
        }
    }
}

/// A proxy's windows at one moment: what it kept, and how many older ones
/// it dropped to stay bounded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowHistory {
    /// The windows, in opening order.
    pub windows: Vec<ToxicWindow>,
    /// Closed windows dropped (oldest first) since the history began.
    pub dropped: u64,
}

/// A moment, on both clocks.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    unix: Duration,
    monotonic_us: u64,
}

impl Stamp {
    fn now() -> Self {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let epoch = *EPOCH.get_or_init(Instant::now);
        let monotonic = Instant::now().saturating_duration_since(epoch);
        Self {
            unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            monotonic_us: u64::try_from(monotonic.as_micros()).unwrap_or(u64::MAX),
        }
    }

    fn unix_ms_down(self) -> u64 {
        u64::try_from(self.unix.as_millis()).unwrap_or(u64::MAX)
    }

    fn unix_ms_up(self) -> u64 {
        let down = self.unix_ms_down();
        if self.unix.subsec_nanos().is_multiple_of(1_000_000) {
            down
        } else {
            down.saturating_add(1)
        }
    }
}

/// An open window and the span that lasts as long as it.
#[derive(Debug)]
struct Open {
    window: ToxicWindow,
    span: Span,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    open: Vec<Open>,
    closed: VecDeque<ToxicWindow>,
    dropped: u64,
}

/// The bounded window history of one proxy name, shared by every proxy
/// that has borne the name in a [`crate::Proxies`] set (a restarted or
/// replaced proxy continues its history).
#[derive(Debug)]
pub(crate) struct WindowLog {
    proxy: String,
    capacity: usize,
    state: Mutex<State>,
}

/// Spans of windows just closed: dropped (which closes them, and lets an
/// exporter do its work) after every lock is released.
#[must_use]
#[derive(Debug, Default)]
pub(crate) struct Closed {
    _spans: Vec<Span>,
}

impl WindowLog {
    /// An empty history for the proxy named `proxy`.
    pub(crate) fn new(proxy: &str) -> Self {
        Self::with_capacity(proxy, DEFAULT_CAPACITY)
    }

    /// An empty history keeping at most `capacity` closed windows.
    pub(crate) fn with_capacity(proxy: &str, capacity: usize) -> Self {
        Self {
            proxy: proxy.to_owned(),
            capacity,
            state: Mutex::new(State {
                next_id: 1,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves a usable history.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens the window of `toxic`, just added.
    pub(crate) fn toxic_added(&self, toxic: &Toxic) {
        self.open(Some(toxic), Stamp::now());
    }

    /// Closes the window of `toxic`'s previous values and opens one with
    /// its new ones, at the same moment (no gap between them).
    pub(crate) fn toxic_updated(&self, toxic: &Toxic) -> Closed {
        let at = Stamp::now();
        let closed = self.close_where_at(|w| is_toxic(w, &toxic.name), WindowEnd::Updated, at);
        self.open(Some(toxic), at);
        closed
    }

    /// Closes the window of the toxic named `name`.
    pub(crate) fn toxic_removed(&self, name: &str, end: WindowEnd) -> Closed {
        self.close_where(|w| is_toxic(w, name), end)
    }

    /// Closes the windows of every toxic.
    pub(crate) fn all_toxics_removed(&self, end: WindowEnd) -> Closed {
        self.close_where(|w| w.stream.is_some(), end)
    }

    /// Opens the disabled window (when `enabled` is false and none is open)
    /// or closes it (when `enabled` is true), with `end` as the reason.
    pub(crate) fn enabled_changed(&self, enabled: bool, end: WindowEnd) -> Closed {
        if enabled {
            return self.close_where(|w| w.stream.is_none(), end);
        }
        let already = self.state().open.iter().any(|o| o.window.stream.is_none());
        if !already {
            self.open(None, Stamp::now());
        }
        Closed::default()
    }

    /// Closes every open window.
    pub(crate) fn stopped(&self) -> Closed {
        self.close_where(|_| true, WindowEnd::Stopped)
    }

    /// The windows open at any moment at or after `since_unix_ms` (all
    /// kept when `None`), in opening order.
    pub(crate) fn history(&self, since_unix_ms: Option<u64>) -> WindowHistory {
        let state = self.state();
        let mut windows: Vec<ToxicWindow> = state
            .closed
            .iter()
            .cloned()
            .chain(state.open.iter().map(|o| o.window.clone()))
            .filter(|w| since_unix_ms.is_none_or(|since| w.open_since(since)))
            .collect();
        windows.sort_by_key(|w| w.id);
        WindowHistory {
            windows,
            dropped: state.dropped,
        }
    }

    /// Opens a window for `toxic`, or the disabled window for `None`, at
    /// `at`.
    fn open(&self, toxic: Option<&Toxic>, at: Stamp) {
        let (name, kind, stream, toxicity, attributes) = match toxic {
            Some(t) => (
                t.name.clone(),
                t.kind.type_name().to_owned(),
                Some(t.stream),
                t.toxicity,
                t.kind.attributes(),
            ),
            None => (
                DISABLED.to_owned(),
                DISABLED.to_owned(),
                None,
                1.0,
                Map::new(),
            ),
        };
        let mut state = self.state();
        let id = state.next_id;
        state.next_id += 1;
        let stream_name = stream.map_or("both", Stream::as_str);
        let attributes_json = Value::Object(attributes.clone()).to_string();
        let span = tracing::info_span!(
            parent: None,
            "toxic_window",
            edge = %self.proxy,
            toxic = %name,
            toxic.type = %kind,
            toxic.stream = stream_name,
            toxic.toxicity = f64::from(toxicity),
            toxic.attributes = %attributes_json,
            window.id = id,
            window.ended_by = tracing::field::Empty,
        );
        span.follows_from(Span::current());
        span.in_scope(|| {
            tracing::info!(
                edge = %self.proxy,
                toxic = %name,
                toxic.type = %kind,
                toxic.stream = stream_name,
                toxic.toxicity = f64::from(toxicity),
                toxic.attributes = %attributes_json,
                window.id = id,
                "fault window opened"
            );
        });
        state.open.push(Open {
            window: ToxicWindow {
                proxy: self.proxy.clone(),
                id,
                toxic: name,
                kind,
                stream,
                toxicity,
                attributes,
                started_unix_ms: at.unix_ms_down(),
                ended_unix_ms: None,
                started_monotonic_us: at.monotonic_us,
                ended_monotonic_us: None,
                ended_by: None,
            },
            span,
        });
    }

    /// Closes the open windows `which` selects, for `end`, now.
    fn close_where(&self, which: impl Fn(&ToxicWindow) -> bool, end: WindowEnd) -> Closed {
        self.close_where_at(which, end, Stamp::now())
    }

    /// Closes the open windows `which` selects, for `end`, at `at`.
    fn close_where_at(
        &self,
        which: impl Fn(&ToxicWindow) -> bool,
        end: WindowEnd,
        at: Stamp,
    ) -> Closed {
        let mut state = self.state();
        let (ending, staying): (Vec<Open>, Vec<Open>) = std::mem::take(&mut state.open)
            .into_iter()
            .partition(|o| which(&o.window));
        state.open = staying;
        let mut spans = Vec::with_capacity(ending.len());
        for Open { mut window, span } in ending {
            window.ended_unix_ms = Some(at.unix_ms_up());
            window.ended_monotonic_us = Some(at.monotonic_us);
            window.ended_by = Some(end);
            span.record("window.ended_by", end.as_str());
            let micros = at.monotonic_us.saturating_sub(window.started_monotonic_us);
            span.in_scope(|| {
                tracing::info!(
                    edge = %window.proxy,
                    toxic = %window.toxic,
                    toxic.type = %window.kind,
                    window.id = window.id,
                    window.ended_by = end.as_str(),
                    window.duration_ms = micros / 1000,
                    "fault window closed"
                );
            });
            spans.push(span);
            state.closed.push_back(window);
            while state.closed.len() > self.capacity {
                state.closed.pop_front();
                state.dropped += 1;
            }
        }
        Closed { _spans: spans }
    }
}

fn is_toxic(window: &ToxicWindow, name: &str) -> bool {
    window.stream.is_some() && window.toxic == name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToxicKind;

    fn latency(name: &str, ms: u64) -> Toxic {
        Toxic::new(
            ToxicKind::Latency {
                latency: ms,
                jitter: 0,
            },
            Stream::Downstream,
        )
        .named(name)
    }

    #[test]
    fn add_update_remove_make_two_windows() {
        let log = WindowLog::new("edge");
        log.toxic_added(&latency("slow", 100));
        let _ = log.toxic_updated(&latency("slow", 300));
        let _ = log.toxic_removed("slow", WindowEnd::Removed);
        let history = log.history(None);
        assert_eq!(history.windows.len(), 2);
        let [first, second] = &history.windows[..] else {
            unreachable!()
        };
        assert_eq!(first.ended_by, Some(WindowEnd::Updated));
        assert_eq!(first.attributes["latency"], 100);
        assert_eq!(second.ended_by, Some(WindowEnd::Removed));
        assert_eq!(second.attributes["latency"], 300);
        assert!(first.ended_monotonic_us.unwrap() <= second.started_monotonic_us);
        assert!(first.started_unix_ms <= first.ended_unix_ms.unwrap());
    }

    #[test]
    fn disabled_windows_are_idempotent_and_survive_toxic_removal() {
        let log = WindowLog::new("edge");
        let _ = log.enabled_changed(false, WindowEnd::Enabled);
        let _ = log.enabled_changed(false, WindowEnd::Enabled);
        log.toxic_added(&latency("slow", 100));
        let _ = log.all_toxics_removed(WindowEnd::Reset);
        let open: Vec<_> = log
            .history(None)
            .windows
            .into_iter()
            .filter(|w| w.ended_by.is_none())
            .collect();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].kind, DISABLED);
        let _ = log.enabled_changed(true, WindowEnd::Enabled);
        assert!(
            log.history(None)
                .windows
                .iter()
                .all(|w| w.ended_by.is_some())
        );
    }

    #[test]
    fn the_bound_drops_the_oldest_closed_windows_and_counts_them() {
        let log = WindowLog::with_capacity("edge", 3);
        log.toxic_added(&latency("kept-open", 1));
        for i in 0..5 {
            log.toxic_added(&latency(&format!("t{i}"), 1));
            let _ = log.toxic_removed(&format!("t{i}"), WindowEnd::Removed);
        }
        let history = log.history(None);
        assert_eq!(history.dropped, 2);
        let names: Vec<_> = history.windows.iter().map(|w| w.toxic.as_str()).collect();
        assert_eq!(names, ["kept-open", "t2", "t3", "t4"]);
    }

    #[test]
    fn rounding_keeps_the_real_window_inside_the_recorded_one() {
        let at = Stamp {
            unix: Duration::from_micros(1_500),
            monotonic_us: 0,
        };
        assert_eq!(at.unix_ms_down(), 1);
        assert_eq!(at.unix_ms_up(), 2);
        let exact = Stamp {
            unix: Duration::from_millis(7),
            monotonic_us: 0,
        };
        assert_eq!(exact.unix_ms_up(), 7);
    }
}
