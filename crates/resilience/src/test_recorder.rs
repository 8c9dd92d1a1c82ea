//! A recorder for unit tests that remembers which series were registered
//! (name and labels), so a test can check what exists before any event.

use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

/// Remembers every registered series as `name{k="v",…}` (labels in the
/// order given), prefixed by its kind.
#[derive(Debug, Default, Clone)]
pub(crate) struct Registered(Arc<Mutex<Vec<String>>>);

impl Registered {
    fn note(&self, kind: &str, key: &Key) {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
            .collect();
        let line = format!("{kind} {}{{{}}}", key.name(), labels.join(","));
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.contains(&line) {
            seen.push(line);
        }
    }

    /// Every series registered so far.
    pub(crate) fn series(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl metrics::Recorder for Registered {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.note("counter", key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.note("gauge", key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.note("histogram", key);
        Histogram::noop()
    }
}
