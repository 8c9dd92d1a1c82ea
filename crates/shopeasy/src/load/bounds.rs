//! The ranges of `shopeasy load`'s numeric options, checked as they are
//! parsed: a value outside its range is clap's usual error naming the
//! option and the range (exit status 2) before anything is sent.
//!
//! Why at parsing: checked later, such a value panicked deep in the run
//! (`Duration::from_secs_f64` on `--timeout=-1`, `--deadline inf`,
//! `--step-seconds=-1`), measured nothing and called it a pass
//! (`--capacity=-5`), or never ended (`--max-connections 0` left every
//! request waiting for a connection), and a rate of `1e-20` passed the
//! old `(0, 100000]` only to panic on its interval (`1 / rate` seconds is
//! more than a `Duration` holds).

/// Fewest requests per second a rate may ask for: one every 100 s. Why a
/// floor above zero: requests are paced `1 / rate` seconds apart, and near
/// zero that is more than a `Duration` holds (a panic).
pub const MIN_RATE: f64 = 0.01;
/// Most requests per second a rate may ask for (and the most a sweep's
/// step may offer: see `sweep::step_rates`).
pub const MAX_RATE: f64 = 100_000.0;
/// Longest a length of time may be, in seconds (a day).
pub const MAX_SECONDS: f64 = 86_400.0;
/// Most requests or connections a count may allow at once.
pub const MAX_COUNT: usize = 1_000_000;

/// A finite number in `(low, high]`, or in `[low, high]` when `low` is
/// `inclusive`.
fn number(text: &str, low: f64, inclusive: bool, high: f64) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    let above = if inclusive { value >= low } else { value > low };
    if value.is_finite() && above && value <= high {
        Ok(value)
    } else {
        let open = if inclusive { '[' } else { '(' };
        Err(format!("must be in {open}{low}, {high}]"))
    }
}

/// Requests per second (`--rate`, `--capacity`, `--start-rate`).
///
/// # Errors
/// Not a number in `[0.01, 100000]` ([`MIN_RATE`], [`MAX_RATE`]).
pub fn rate(text: &str) -> Result<f64, String> {
    number(text, MIN_RATE, true, MAX_RATE)
}

/// The gateway's base URL (`--target`): an `http://` or `https://` URL
/// with a host. Why at parsing: `127.0.0.1:8080` (no scheme) was taken,
/// and every request then failed before it left, counted as "no answer"
/// as if the target had not answered.
///
/// # Errors
/// Not such a URL.
pub fn target(text: &str) -> Result<String, String> {
    let usage = "must be an http:// or https:// URL, e.g. http://127.0.0.1:8080";
    match reqwest::Url::parse(text.trim()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            Ok(text.trim().trim_end_matches('/').to_owned())
        }
        _ => Err(usage.to_owned()),
    }
}

/// A length of time in seconds (`--duration`, `--timeout`, `--deadline`,
/// `--step-seconds`, `--probe-seconds`).
///
/// # Errors
/// Not a number in `(0, 86400]`.
pub fn seconds(text: &str) -> Result<f64, String> {
    number(text, 0.0, false, MAX_SECONDS)
}

/// A latency bound in milliseconds (`--p99`, `--p99-bound`).
///
/// # Errors
/// Not a number in `(0, 86400000]`.
pub fn milliseconds(text: &str) -> Result<f64, String> {
    number(text, 0.0, false, MAX_SECONDS * 1000.0)
}

/// A share (`--read-ratio`, `--max-error-rate`, `--min-gain`).
///
/// # Errors
/// Not a number in `[0, 1]`.
pub fn share(text: &str) -> Result<f64, String> {
    number(text, 0.0, true, 1.0)
}

/// The capacity search's step (`--ramp`): each probe must offer more than
/// the last, or the search would never end.
///
/// # Errors
/// Not a number in `(1, 100]`.
pub fn ramp(text: &str) -> Result<f64, String> {
    number(text, 1.0, false, 100.0)
}

/// A multiple of the capacity (each of `--multipliers`).
///
/// # Errors
/// Not a number in `(0, 1000]`.
pub fn multiplier(text: &str) -> Result<f64, String> {
    number(text, 0.0, false, 1000.0)
}

/// How many requests or connections at once (`--max-outstanding`,
/// `--max-connections`): at least one, or nothing is ever sent.
///
/// # Errors
/// Not a whole number in `[1, 1000000]`.
pub fn count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) => Ok(n),
        _ => Err(format!("must be a whole number in [1, {MAX_COUNT}]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_outside_their_range_are_refused_with_the_range() {
        for bad in ["-1", "0", "inf", "NaN", "1e300", "", "fast"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0").unwrap_err(), "must be in (0, 86400]");
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert_eq!(seconds("86400"), Ok(86_400.0));
        assert!(rate("100001").is_err());
        assert_eq!(rate("0.5"), Ok(0.5));
        // Positive, but its interval (1e20 s) is more than a Duration holds.
        assert_eq!(rate("1e-20").unwrap_err(), "must be in [0.01, 100000]");
        assert_eq!(rate("0.01"), Ok(0.01));
        assert!(rate("0").is_err());
        assert_eq!(share("0"), Ok(0.0));
        assert_eq!(share("1"), Ok(1.0));
        assert_eq!(share("7").unwrap_err(), "must be in [0, 1]");
        assert!(ramp("1").is_err());
        assert_eq!(ramp("1.4"), Ok(1.4));
        assert!(multiplier("-3").is_err());
        assert!(milliseconds("0").is_err());
        assert_eq!(
            count("0").unwrap_err(),
            "must be a whole number in [1, 1000000]"
        );
        assert!(count("-1").is_err());
        assert!(count("2.5").is_err());
        assert_eq!(count("256"), Ok(256));
    }

    #[test]
    fn a_target_must_be_an_http_url_with_a_host() {
        for bad in [
            "127.0.0.1:8080",
            "localhost:8080",
            "ftp://127.0.0.1",
            "http://",
            "",
        ] {
            let error = target(bad).expect_err(bad);
            assert!(error.starts_with("must be an http://"), "{bad}: {error}");
        }
        assert_eq!(
            target("http://127.0.0.1:8080/"),
            Ok("http://127.0.0.1:8080".to_owned())
        );
        assert_eq!(
            target("https://shop.example"),
            Ok("https://shop.example".to_owned())
        );
    }
}
