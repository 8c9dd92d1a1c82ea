//! Each fault window is traced as one `toxic_window` span, open exactly
//! while the window lasts.
//!
//! A file (a process) of its own: the test watches the span through a
//! thread-local subscriber (`set_default`), and tracing caches each
//! callsite's interest process-wide, so another test thread that reached
//! the same callsite with no subscriber at the wrong moment could leave it
//! cached as "never" and the span unseen (seen once in CI).
#![allow(clippy::unwrap_used)]

mod support;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use shopeasy_faults::{FaultProxy, Stream, Toxic, ToxicKind, windows::DISABLED};
use support::echo;
use tracing::{
    Event, Metadata, Subscriber,
    field::{Field, Visit},
    span::{Attributes, Id, Record},
};

#[derive(Debug, Default)]
struct SpanSeen {
    name: &'static str,
    fields: BTreeMap<String, String>,
    refs: usize,
    closed: bool,
    parent: Option<u64>,
    /// Messages of the events inside it.
    events: Vec<String>,
}

#[derive(Debug, Default)]
struct Seen {
    next: u64,
    spans: BTreeMap<u64, SpanSeen>,
    entered: Vec<u64>,
}

/// Records spans, their fields, their closing and the events inside them.
#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A `toxic_window` span as the capture saw it.
#[derive(Debug)]
struct WindowSpan {
    fields: BTreeMap<String, String>,
    closed: bool,
    parent: Option<u64>,
    events: Vec<String>,
}

impl Capture {
    fn windows(&self) -> Vec<WindowSpan> {
        self.0
            .lock()
            .unwrap()
            .spans
            .values()
            .filter(|s| s.name == "toxic_window")
            .map(|s| WindowSpan {
                fields: s.fields.clone(),
                closed: s.closed,
                parent: s.parent,
                events: s.events.clone(),
            })
            .collect()
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut seen = self.0.lock().unwrap();
        seen.next += 1;
        let id = seen.next;
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let parent = if span.is_root() {
            None
        } else {
            span.parent()
                .map(Id::into_u64)
                .or_else(|| seen.entered.last().copied())
        };
        seen.spans.insert(
            id,
            SpanSeen {
                name: span.metadata().name(),
                fields,
                refs: 1,
                parent,
                ..SpanSeen::default()
            },
        );
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(s) = seen.spans.get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut seen = self.0.lock().unwrap();
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        if let Some(current) = seen.entered.last().copied()
            && let Some(s) = seen.spans.get_mut(&current)
        {
            s.events.push(fields.remove("message").unwrap_or_default());
        }
    }
    fn enter(&self, span: &Id) {
        self.0.lock().unwrap().entered.push(span.into_u64());
    }
    fn exit(&self, span: &Id) {
        let mut seen = self.0.lock().unwrap();
        if let Some(at) = seen.entered.iter().rposition(|&id| id == span.into_u64()) {
            seen.entered.remove(at);
        }
    }
    fn clone_span(&self, span: &Id) -> Id {
        if let Some(s) = self.0.lock().unwrap().spans.get_mut(&span.into_u64()) {
            s.refs += 1;
        }
        span.clone()
    }
    fn try_close(&self, span: Id) -> bool {
        let mut seen = self.0.lock().unwrap();
        let Some(s) = seen.spans.get_mut(&span.into_u64()) else {
            return false;
        };
        s.refs -= 1;
        if s.refs == 0 {
            s.closed = true;
        }
        s.closed
    }
}

/// Each window is one `toxic_window` span, a root with the edge and the
/// toxic's values, open exactly while the window is: created at add,
/// closed at removal; an update closes one and opens the next; a disabled
/// period is one too. An event inside marks each transition.
#[tokio::test]
async fn each_window_is_a_toxic_window_span_open_exactly_while_it_lasts() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let upstream = echo().await;
    let proxy = FaultProxy::start("order-inventory", upstream.addr.to_string())
        .await
        .unwrap();

    // Added inside a request's span: the window is still a root.
    let request = tracing::info_span!("request");
    request.in_scope(|| {
        proxy
            .add_toxic(
                Toxic::new(
                    ToxicKind::Latency {
                        latency: 100,
                        jitter: 0,
                    },
                    Stream::Downstream,
                )
                .named("slow")
                .with_toxicity(0.25),
            )
            .unwrap();
    });
    drop(request);
    let windows = capture.windows();
    assert_eq!(windows.len(), 1);
    let WindowSpan {
        fields,
        closed,
        parent,
        events,
    } = &windows[0];
    assert!(!closed, "open while the toxic is on");
    assert_eq!(*parent, None, "a root span: it outlives the request");
    assert_eq!(fields["edge"], "order-inventory");
    assert_eq!(fields["toxic"], "slow");
    assert_eq!(fields["toxic.type"], "latency");
    assert_eq!(fields["toxic.stream"], "downstream");
    assert_eq!(fields["toxic.toxicity"], "0.25");
    assert_eq!(fields["toxic.attributes"], r#"{"jitter":0,"latency":100}"#);
    assert_eq!(events, &["fault window opened"]);

    proxy
        .update_toxic(
            Toxic::new(
                ToxicKind::Latency {
                    latency: 300,
                    jitter: 0,
                },
                Stream::Downstream,
            )
            .named("slow"),
        )
        .unwrap();
    let windows = capture.windows();
    assert_eq!(windows.len(), 2);
    assert!(
        windows[0].closed,
        "the update closed the first window's span"
    );
    assert_eq!(windows[0].fields["window.ended_by"], "updated");
    assert_eq!(
        windows[0].events,
        ["fault window opened", "fault window closed"]
    );
    assert!(!windows[1].closed, "and opened the next");
    assert_eq!(
        windows[1].fields["toxic.attributes"],
        r#"{"jitter":0,"latency":300}"#
    );

    proxy.remove_toxic("slow").unwrap();
    let windows = capture.windows();
    assert!(windows[1].closed, "removal closed it");
    assert_eq!(windows[1].fields["window.ended_by"], "removed");

    proxy.set_enabled(false).await;
    let windows = capture.windows();
    assert_eq!(windows.len(), 3);
    assert_eq!(windows[2].fields["toxic.type"], DISABLED);
    assert_eq!(windows[2].fields["toxic.stream"], "both");
    assert!(!windows[2].closed, "open while disabled");
    proxy.set_enabled(true).await;
    assert!(capture.windows()[2].closed, "closed when enabled again");

    // A window open when the proxy stops ends with it.
    proxy
        .add_toxic(Toxic::new(
            ToxicKind::Timeout { timeout: 0 },
            Stream::Upstream,
        ))
        .unwrap();
    proxy.stop().await;
    let windows = capture.windows();
    assert_eq!(windows.len(), 4);
    assert!(windows[3].closed);
    assert_eq!(windows[3].fields["window.ended_by"], "stopped");
}
