//! The "recent order's path" panel's contract: the spans of one order, hop
//! by hop (gateway → order → inventory / product), each hop's attempts and
//! the deadline it had left when it started.
//!
//! Spans live wherever the process's tracer sends them; the console must not
//! depend on a tracing backend, so it names only this trait. The embedded
//! launcher keeps its recent orders' spans in memory and implements it;
//! without one (the standalone binary, whose spans go to Jaeger) the panel
//! says where to look instead.

use serde::Serialize;

/// One order's trace, as the panel draws it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderPath {
    /// The W3C trace id (hex), to find the same trace in Jaeger.
    pub trace_id: String,
    /// When the first hop started (Unix ms).
    pub started_unix_ms: u64,
    /// From the first hop's start to the last hop's end (ms).
    pub duration_ms: f64,
    /// The hops in the order they started.
    pub hops: Vec<Hop>,
}

/// One hop: a service handling part of the order, or a callee no attempt
/// reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    /// The service (`gateway`, `order`, `inventory`, `product`).
    pub service: String,
    /// What it did (`POST /api/orders`, `/inventory.v1.Inventory/Reserve`);
    /// `not reached` for attempts that got no answer from the service.
    pub operation: String,
    /// Its start, from the order's first hop (ms).
    pub start_ms: f64,
    /// How long it took (ms).
    pub duration_ms: f64,
    /// The deadline it had left when it started (ms), as its caller sent it
    /// (`None`: the caller sent none).
    pub deadline_left_ms: Option<u64>,
    /// Its answer (HTTP status or gRPC code), when recorded.
    pub status: Option<String>,
    /// It serves a shared cache fill (single flight: one fetch for every
    /// waiting caller), which runs under its own deadline, not the order's.
    pub shared: bool,
    /// The caller's attempts that led to this hop.
    pub attempts: Vec<AttemptView>,
}

/// One attempt of a caller on a hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    /// 1 for the first try, 2 for the first retry, …
    pub number: u32,
    /// `ok`, `retryable` or `failed`.
    pub outcome: String,
    /// Its start, from the order's first hop (ms).
    pub start_ms: f64,
    /// How long it took (ms).
    pub duration_ms: f64,
}

/// Where the console reads recent orders' traces.
pub trait TraceSource: Send + Sync + std::fmt::Debug + 'static {
    /// The most recent order's path, if one was traced.
    fn recent_order(&self) -> Option<OrderPath>;
}

/// What the panel shows: a path, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathPanel {
    /// The most recent order's path.
    pub path: Option<OrderPath>,
    /// Why no path is drawn (no trace source, no order yet).
    pub note: Option<String>,
}

impl PathPanel {
    /// The panel for `source` (`None`: this console has no trace source).
    pub fn read(source: Option<&dyn TraceSource>) -> Self {
        match source.map(TraceSource::recent_order) {
            Some(Some(path)) => Self {
                path: Some(path),
                note: None,
            },
            Some(None) => Self {
                path: None,
                note: Some("no order traced yet: place one (Buy one)".into()),
            },
            None => Self {
                path: None,
                note: Some(
                    "this console has no trace source: the services export their spans over \
                     OTLP — open the trace in Jaeger (http://localhost:16686)"
                        .into(),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct One(Option<OrderPath>);

    impl TraceSource for One {
        fn recent_order(&self) -> Option<OrderPath> {
            self.0.clone()
        }
    }

    #[test]
    fn the_panel_says_why_it_draws_nothing() {
        assert!(PathPanel::read(None).note.unwrap().contains("Jaeger"));
        let empty = PathPanel::read(Some(&One(None)));
        assert!(empty.path.is_none());
        assert!(empty.note.unwrap().contains("no order traced yet"));
        let path = OrderPath {
            trace_id: "ab".into(),
            started_unix_ms: 1,
            duration_ms: 2.0,
            hops: Vec::new(),
        };
        let drawn = PathPanel::read(Some(&One(Some(path.clone()))));
        assert_eq!(drawn.path, Some(path));
        assert_eq!(drawn.note, None);
    }
}
