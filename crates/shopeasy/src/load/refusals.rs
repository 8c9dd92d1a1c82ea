//! The gateway's own account of its refusals, from its Prometheus
//! endpoint: how long it held the requests it shed
//! (`shopeasy_gateway_request_duration_seconds{outcome="shed"}`).
//!
//! The sweep's refusal latency is the client's: from each request's
//! intended start to its answer, so it holds the generator's lateness, the
//! loopback and every wait of the gateway's workers for a core as well as
//! the gateway's own work. On a machine whose cores are oversubscribed
//! (several processes, a database and the generator on two cores) those
//! waits dominate; the gateway's histogram shows what is left when they
//! are taken out. It is read before and after each step and the step's
//! p99 given as the bound of the bucket it falls in.

use std::time::Duration;

use shopeasy_console::prom::Page;

/// The histogram's bucket series.
const BUCKET: &str = "shopeasy_gateway_request_duration_seconds_bucket";

/// The cumulative counts of the shed requests' durations by bucket bound
/// (seconds), summed over every series (route, status) with
/// `outcome="shed"`; sorted by bound, `+Inf` last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets(Vec<(f64, f64)>);

impl Buckets {
    /// Reads the buckets from the text exposition format (the console's
    /// reader of a `/metrics` page).
    pub fn parse(text: &str) -> Self {
        let page = Page::parse(text);
        let mut sums: Vec<(f64, f64)> = Vec::new();
        for sample in page.matching(BUCKET, &[("outcome", "shed")]) {
            let Some(Ok(le)) = sample.label("le").map(str::parse::<f64>) else {
                continue;
            };
            match sums.iter_mut().find(|(b, _)| *b == le) {
                Some((_, sum)) => *sum += sample.value,
                None => sums.push((le, sample.value)),
            }
        }
        sums.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self(sums)
    }

    /// The p99 of the requests shed since `earlier`, as the upper bound of
    /// the bucket it falls in; `None` when none were shed since (or the
    /// p99 is past the last finite bound).
    pub fn p99_since(&self, earlier: &Self) -> Option<Duration> {
        let count = |buckets: &Self, le: f64| {
            buckets
                .0
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c)
        };
        let diffs: Vec<(f64, f64)> = self
            .0
            .iter()
            .map(|&(le, c)| (le, (c - count(earlier, le)).max(0.0)))
            .collect();
        let total = diffs.last()?.1;
        if total <= 0.0 {
            return None;
        }
        diffs
            .iter()
            .find(|(le, c)| le.is_finite() && *c >= 0.99 * total)
            .map(|(le, _)| Duration::from_secs_f64(*le))
    }
}

/// Fetches and parses `url` (the gateway's admin `/metrics`); `None`, with
/// a line on standard error, when it cannot be read.
pub async fn read(client: &reqwest::Client, url: &str) -> Option<Buckets> {
    let text = async {
        client
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
    };
    match text.await {
        Ok(text) => Some(Buckets::parse(&text)),
        Err(e) => {
            eprintln!("sweep: reading {url}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# TYPE shopeasy_gateway_request_duration_seconds histogram
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="503",outcome="shed",le="0.001"} 10000
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="503",outcome="shed",le="0.0025"} 10000
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="503",outcome="shed",le="0.005"} 10000
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="503",outcome="shed",le="+Inf"} 10000
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="201",outcome="forwarded",le="0.001"} 0
shopeasy_gateway_request_duration_seconds_bucket{route="orders",status="201",outcome="forwarded",le="+Inf"} 99
"#;

    fn after(fast: u64, mid: u64, slow: u64) -> String {
        let shed = |route: &str, le: &str, n: u64| {
            format!(
                "shopeasy_gateway_request_duration_seconds_bucket{{route=\"{route}\",status=\"503\",outcome=\"shed\",le=\"{le}\"}} {n}\n"
            )
        };
        // Two routes: the series are summed by bound.
        [
            shed("orders", "0.001", 10_000 + fast / 2),
            shed("orders", "0.0025", 10_000 + (fast + mid) / 2),
            shed("orders", "0.005", 10_000 + (fast + mid + slow) / 2),
            shed("orders", "+Inf", 10_000 + (fast + mid + slow) / 2),
            shed("products", "0.001", fast / 2),
            shed("products", "0.0025", (fast + mid) / 2),
            shed("products", "0.005", (fast + mid + slow) / 2),
            shed("products", "+Inf", (fast + mid + slow) / 2),
        ]
        .concat()
    }

    #[test]
    fn the_p99_is_the_bound_of_its_bucket_over_the_step_only() {
        let before = Buckets::parse(BEFORE);
        // 990 of 1,000 within 1 ms: p99 ≤ 1 ms.
        let a = Buckets::parse(&after(990, 0, 10));
        assert_eq!(a.p99_since(&before), Some(Duration::from_millis(1)));
        // 980 within 1 ms, 20 more within 2.5 ms: p99 ≤ 2.5 ms.
        let b = Buckets::parse(&after(980, 20, 0));
        assert_eq!(b.p99_since(&before), Some(Duration::from_micros(2500)));
        // Only the step's refusals count: 984 of its 1,000 within 1 ms, so
        // its p99 is in the 2.5 ms bucket. With the 10,000 shed before it
        // (all within 1 ms) it would read 1 ms.
        let c = Buckets::parse(&after(984, 16, 0));
        assert_eq!(c.p99_since(&before), Some(Duration::from_micros(2500)));
        assert_eq!(
            c.p99_since(&Buckets::default()),
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn nothing_shed_or_nothing_finite_is_unknown() {
        let before = Buckets::parse(BEFORE);
        assert_eq!(before.p99_since(&before), None, "none shed since");
        assert_eq!(Buckets::parse("").p99_since(&before), None);
        // Every refusal past the last finite bound.
        let slow = BEFORE.replace("le=\"+Inf\"} 10000", "le=\"+Inf\"} 10100");
        assert_ne!(slow, BEFORE);
        assert_eq!(Buckets::parse(&slow).p99_since(&before), None);
    }

    #[test]
    fn other_outcomes_and_other_metrics_are_left_out() {
        let text = "shopeasy_gateway_request_duration_seconds_bucket{route=\"r\",status=\"201\",outcome=\"forwarded\",le=\"+Inf\"} 5\n\
                    shopeasy_downstream_request_duration_seconds_bucket{outcome=\"shed\",le=\"+Inf\"} 5\n";
        assert_eq!(Buckets::parse(text), Buckets::default());
    }
}
