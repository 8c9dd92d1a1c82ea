//! The load panel's contract: start and stop an open-loop generator and
//! read its live numbers.
//!
//! The generator lives in the launcher (`shopeasy load`), which depends on
//! every service; the console must not depend on it, so it names only this
//! trait and the launcher implements it. Without one (the standalone
//! `shopeasy-console` binary) the panel says the generator is not available.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

/// The lowest rate a run may ask for, per second.
pub const MIN_RATE: f64 = 1.0;
/// The highest rate a run may ask for, per second.
pub const MAX_RATE: f64 = 5000.0;

/// What the page asks the generator for (a JSON object only).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct LoadRequest {
    /// Requests per second, [`MIN_RATE`]..=[`MAX_RATE`].
    pub rate: f64,
    /// Share of reads (the rest are orders), 0..=1.
    pub read_share: f64,
    /// How long to run, in seconds, (0, 3600]; default 60.
    #[serde(default = "default_duration")]
    pub duration_seconds: f64,
}

shopeasy_runtime::only_json_objects!(serialize: LoadRequest);

fn default_duration() -> f64 {
    60.0
}

impl LoadRequest {
    /// Checks the ranges (the page sends what a person typed).
    ///
    /// # Errors
    /// The first value out of range, named.
    pub fn validate(&self) -> Result<(), String> {
        // At least one a second, as the page's input (`min="1"`): the
        // generator paces sends `1 / rate` apart, and a rate near zero
        // makes that gap too long for a `Duration` (the launcher panicked).
        if !(self.rate >= MIN_RATE && self.rate <= MAX_RATE) {
            return Err(format!(
                "rate {} is outside [{MIN_RATE}, {MAX_RATE}] per second",
                self.rate
            ));
        }
        if !(0.0..=1.0).contains(&self.read_share) {
            return Err(format!("read_share {} is outside 0..=1", self.read_share));
        }
        if !(self.duration_seconds > 0.0 && self.duration_seconds <= 3600.0) {
            return Err(format!(
                "duration_seconds {} is outside (0, 3600]",
                self.duration_seconds
            ));
        }
        Ok(())
    }
}

/// What the generator is doing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadStatus {
    /// A run is in progress.
    pub running: bool,
    /// What the current (or last) run was asked for.
    pub request: Option<LoadRequest>,
    /// Requests answered in the last second (or no answer within the
    /// timeout), per second.
    pub live_rate: f64,
    /// Answers of the last few seconds by HTTP status (`"0"`: no answer).
    pub statuses: BTreeMap<String, u64>,
    /// Median latency of the last few seconds (ms), from intended send time.
    pub p50_ms: f64,
    /// 99th percentile latency of the last few seconds (ms).
    pub p99_ms: f64,
    /// Requests sent in this run.
    pub sent: u64,
    /// Why the last run ended early, if it did.
    pub error: Option<String>,
}

/// The `q`-quantile (0..=1) of sorted `values` by nearest rank (the
/// smallest value at or above which lie `q` of them); zero when empty.
///
/// The one rank rule of every latency figure ShopEasy prints — the load
/// panel's p50/p99, the overload sweep's columns, the benches' and the
/// end-to-end suite's — so that two figures of the same samples agree.
/// It lives here because the load panel's contract is where a p99 is
/// first promised, and every crate that prints one depends on this one,
/// except the resilience crate: that depends on nothing of ShopEasy's, so
/// that it can be copied alone, and its tests spell the same rule out.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A load generator the console can drive.
pub trait LoadControl: Send + Sync + std::fmt::Debug + 'static {
    /// Starts a run (stopping any run in progress first).
    ///
    /// # Errors
    /// When the generator refuses the request (the reason is the page's
    /// 400 detail: it is about the request, not about the system).
    fn start(&self, request: LoadRequest) -> Result<(), String>;

    /// Stops the run in progress, if any.
    fn stop(&self);

    /// Its live numbers.
    fn status(&self) -> LoadStatus;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let ms: Vec<_> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(quantile(&ms, 0.5), Duration::from_millis(100));
        assert_eq!(quantile(&ms, 0.99), Duration::from_millis(198));
        assert_eq!(quantile(&ms, 0.999), Duration::from_millis(200));
        assert_eq!(quantile(&ms, 1.0), Duration::from_millis(200));
        assert_eq!(quantile(&ms, 0.0), Duration::from_millis(1));
        assert_eq!(quantile(&ms[..1], 0.99), Duration::from_millis(1));
        assert_eq!(quantile(&[], 0.99), Duration::ZERO);
    }

    #[test]
    fn a_request_is_an_object_never_an_array_of_its_fields() {
        let r: LoadRequest = serde_json::from_str(r#"{"rate":10,"read_share":1}"#).unwrap();
        assert_eq!(r.duration_seconds, 60.0);
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<LoadRequest>(&text).unwrap(), r);
        let e = serde_json::from_str::<LoadRequest>("[10, 1, 60]").unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
    }

    /// A rate of 1e-20 passed `rate > 0` and the launcher then panicked
    /// making `Duration::from_secs_f64(1 / rate)`: the floor is the page's
    /// own `min="1"`.
    #[test]
    fn a_rate_below_one_a_second_is_refused_and_named() {
        let ok = LoadRequest {
            rate: 1.0,
            read_share: 1.0,
            duration_seconds: 10.0,
        };
        ok.validate().unwrap();
        for rate in [1e-20, f64::MIN_POSITIVE, 0.5, 0.999, -1.0, f64::NAN, 5000.5] {
            let e = LoadRequest { rate, ..ok }.validate().unwrap_err();
            assert!(e.contains("rate"), "{rate}: {e}");
        }
        LoadRequest { rate: 5000.0, ..ok }.validate().unwrap();
    }

    #[test]
    fn requests_out_of_range_are_named() {
        let ok = LoadRequest {
            rate: 100.0,
            read_share: 0.8,
            duration_seconds: 10.0,
        };
        ok.validate().unwrap();
        let bad = LoadRequest { rate: 0.0, ..ok };
        assert!(bad.validate().unwrap_err().contains("rate"));
        let bad = LoadRequest {
            read_share: 1.5,
            ..ok
        };
        assert!(bad.validate().unwrap_err().contains("read_share"));
        let parsed: LoadRequest = serde_json::from_str(r#"{"rate": 5, "read_share": 1}"#).unwrap();
        assert_eq!(parsed.duration_seconds, 60.0);
    }
}
