//! Reading a `/metrics` page (Prometheus text format): just enough to sum
//! the counters the console derives rates from.

/// One sample line: `name{label="value",…} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name (`…_total`, `…_count`, …).
    pub name: String,
    /// Its labels, in page order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    samples: Vec<Sample>,
}

impl Page {
    /// Parses `text`; comments, blank and malformed lines are skipped (a
    /// page the console half understands still shows what it does).
    pub fn parse(text: &str) -> Self {
        Self {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// The samples of series `name` carrying every one of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    /// The sum over [`Page::matching`] (0 when none match).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0".
        self.matching(name, labels).map(|s| s.value).sum::<f64>() + 0.0
    }

    /// True when the page has at least one sample of `name`.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            (
                &line[..open],
                parse_labels(&line[open + 1..close])?,
                &line[close + 1..],
            )
        }
        None => {
            let space = line.find(char::is_whitespace)?;
            (&line[..space], Vec::new(), &line[space..])
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.trim().to_owned(),
        labels,
        value,
    })
}

/// `a="x",b="y \"q\""` → pairs; `None` when malformed.
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(',' | ' ')) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(labels);
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        }
        labels.push((name.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP x
# TYPE shopeasy_downstream_retries_total counter
shopeasy_downstream_retries_total{target="inventory",outcome="retried"} 3
shopeasy_downstream_retries_total{target="inventory",outcome="budget_exhausted"} 1
shopeasy_downstream_request_duration_seconds_count{target="in\"v",outcome="ok"} 12
shopeasy_outbox_backlog 7
garbage line
"#;

    #[test]
    fn samples_are_read_by_name_and_labels() {
        let page = Page::parse(PAGE);
        assert_eq!(
            page.sum(
                "shopeasy_downstream_retries_total",
                &[("target", "inventory")]
            ),
            4.0
        );
        assert_eq!(
            page.sum(
                "shopeasy_downstream_retries_total",
                &[("outcome", "retried")]
            ),
            3.0
        );
        assert_eq!(
            page.sum(
                "shopeasy_downstream_request_duration_seconds_count",
                &[("target", "in\"v")]
            ),
            12.0
        );
        assert_eq!(page.sum("shopeasy_outbox_backlog", &[]), 7.0);
        assert!(page.has("shopeasy_outbox_backlog"));
        assert!(!page.has("garbage"));
    }
}
