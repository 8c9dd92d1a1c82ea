//! Reading a `/metrics` page (the Prometheus text format the runtime's
//! admin listener serves): its samples, looked up by name and labels.
//!
//! One reader serves every consumer of the page: the console sums the
//! counters it derives rates from, the overload sweep reads the gateway's
//! histogram, the demo's scenes count calls before and after a fault, and
//! every crate's tests check their counters through it
//! (`shopeasy_testkit` re-exports it), so a label's quoting, a sample
//! without labels, a timestamp or a `# HELP` line is read the same way
//! everywhere, and a series is named by its labels instead of matched as
//! text. Written here rather than taken from `prometheus-parse`, which
//! folds histograms and summaries into typed values: the consumers want
//! the flat series (`…_bucket{le}`, `…_count`) as the page lists them.

/// One sample line: `name{label="value",…} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric's name (`…_total`, `…_count`, `…_bucket`, …).
    pub name: String,
    /// Its labels, in the order the page lists them.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// True when the sample is of metric `name` and has every one of
    /// `labels` (other labels may be present too).
    pub fn matches(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name && labels.iter().all(|(k, v)| self.label(k) == Some(*v))
    }
}

/// A parsed `/metrics` page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    samples: Vec<Sample>,
}

impl Page {
    /// Parses the text format; comment lines, blank lines and lines that
    /// are not a sample are skipped (a page half understood still shows
    /// what it can).
    pub fn parse(text: &str) -> Self {
        Self {
            samples: text.lines().filter_map(parse_sample).collect(),
        }
    }

    /// Every sample, in page order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The samples of `name` that carry all of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.matches(name, labels))
    }

    /// The sum over the samples of `name` that carry all of `labels` (0
    /// when there are none): a counter's total across the labels left
    /// open.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0".
        self.matching(name, labels).map(|s| s.value).sum::<f64>() + 0.0
    }

    /// The value of the one series of `name` whose labels are exactly
    /// `labels` (in any order), if the page has it.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels)
            .find(|s| s.labels.len() == labels.len())
            .map(|s| s.value)
    }

    /// True when some sample of `name` carries all of `labels`.
    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.matching(name, labels).next().is_some()
    }
}

/// [`Page::sum`] of a page not parsed yet: the common one-off read.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    Page::parse(text).sum(name, labels)
}

fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    // The value, then an optional timestamp.
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    (!name.is_empty()).then(|| Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` → the pairs (unescaped) and what follows the `}`.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = text.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
        text = &after[1 + end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP shopeasy_downstream_retries_total Retries.
# TYPE shopeasy_downstream_retries_total counter
shopeasy_downstream_retries_total{target="inventory",outcome="retried"} 3
shopeasy_downstream_retries_total{target="product",outcome="retried"} 2
shopeasy_downstream_retries_total{target="product",outcome="budget_exhausted"} 1
shopeasy_outbox_backlog 7
shopeasy_odd{path="/a\"b\\c",x_target="product"} 1.5 1700000000000
shopeasy_seconds_bucket{le="+Inf"} 4
garbage line
shopeasy_broken{target="unclosed} 9
"#;

    #[test]
    fn sums_the_samples_that_carry_every_label_asked_for() {
        let m = Page::parse(PAGE);
        let name = "shopeasy_downstream_retries_total";
        assert_eq!(m.sum(name, &[]), 6.0);
        assert_eq!(m.sum(name, &[("target", "product")]), 3.0);
        assert_eq!(
            m.sum(name, &[("target", "product"), ("outcome", "retried")]),
            2.0
        );
        let none = m.sum(name, &[("target", "order")]);
        assert_eq!(none, 0.0);
        assert_eq!(none.to_string(), "0", "not -0");
        assert!(!m.has(name, &[("outcome", "exhausted")]));
        assert_eq!(
            m.get(name, &[("outcome", "retried"), ("target", "product")]),
            Some(2.0)
        );
        assert_eq!(
            m.get(name, &[("target", "product")]),
            None,
            "not the whole set"
        );
        assert_eq!(metric_sum(PAGE, "shopeasy_outbox_backlog", &[]), 7.0);
    }

    #[test]
    fn reads_quoted_labels_and_timestamps_exactly() {
        let m = Page::parse(PAGE);
        let odd = m.matching("shopeasy_odd", &[]).next().unwrap();
        assert_eq!(odd.label("path"), Some("/a\"b\\c"));
        assert_eq!(odd.value, 1.5);
        // A label is matched by name, not by a substring of the line.
        assert!(!m.has("shopeasy_odd", &[("target", "product")]));
        assert!(m.has("shopeasy_odd", &[("x_target", "product")]));
        assert_eq!(m.sum("shopeasy_seconds_bucket", &[("le", "+Inf")]), 4.0);
        assert_eq!(
            m.samples().len(),
            6,
            "comments and malformed lines are skipped"
        );
        assert!(!m.has("garbage", &[]));
        assert!(!m.has("shopeasy_broken", &[]));
    }
}
