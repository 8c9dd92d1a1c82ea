//! Test support: a metrics recorder that keeps every counter and gauge so
//! tests can assert on them.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};

#[derive(Debug, Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Relaxed)) + value);
    }
    fn decrement(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Relaxed)) - value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

/// Keeps counters and gauges by `name{label=value,…}` (labels sorted).
#[derive(Debug, Clone, Default)]
pub(crate) struct TestRecorder {
    cells: Arc<Mutex<HashMap<String, Arc<Cell>>>>,
}

fn render(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl TestRecorder {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        self.cells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(render(key))
            .or_default()
            .clone()
    }

    /// A counter's value (0 if never touched), e.g.
    /// `counter("x_total{outcome=retried,target=inventory}")`.
    pub(crate) fn counter(&self, key: &str) -> u64 {
        self.cells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    /// A gauge's value, if set.
    pub(crate) fn gauge(&self, key: &str) -> Option<f64> {
        self.cells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|c| f64::from_bits(c.0.load(Ordering::Relaxed)))
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
