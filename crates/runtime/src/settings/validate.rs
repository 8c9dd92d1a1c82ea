//! Range checks that report every bad key at once, with its value and the
//! allowed range.

use std::{fmt, ops::RangeInclusive, time::Duration};

use serde::{Deserialize, Serialize};

/// A duration given in seconds (the unit every `*_seconds` key uses).
///
/// Stored as given so that [`Validator::seconds`] can report the exact bad
/// value; read it with [`Seconds::get`] after validation.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seconds(f64);

impl Seconds {
    /// Wraps a number of seconds.
    pub const fn new(seconds: f64) -> Self {
        Self(seconds)
    }

    /// The value in seconds, as given.
    pub const fn as_f64(self) -> f64 {
        self.0
    }

    /// The duration. Values that validation would reject (negative,
    /// non-finite) saturate to zero or the maximum instead of panicking.
    pub fn get(self) -> Duration {
        Duration::try_from_secs_f64(self.0).unwrap_or(if self.0 > 0.0 {
            Duration::MAX
        } else {
            Duration::ZERO
        })
    }
}

impl From<Duration> for Seconds {
    fn from(d: Duration) -> Self {
        Self(d.as_secs_f64())
    }
}

/// One invalid setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    /// The key, dotted (`resilience.inventory.timeout_seconds`).
    pub key: String,
    /// The value that was given, as text.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (env {}) = {}: {}",
            self.key,
            env_name(&self.key),
            self.value,
            self.allowed
        )
    }
}

/// The environment variable for a dotted key: `a.b_c.d` → `A__B_C__D`.
pub fn env_name(key: &str) -> String {
    key.replace('.', "__").to_ascii_uppercase()
}

/// Collects [`SettingError`]s while a settings type checks its fields.
#[derive(Debug, Default)]
pub struct Validator {
    errors: Vec<SettingError>,
    /// Prepended to every key recorded (see [`Validator::within`]).
    prefix: String,
}

impl Validator {
    /// An empty validator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `check` with every key it records under `prefix`
    /// (`v.within("database", |v| v.number("max_connections", …))` records
    /// `database.max_connections`), so a settings section names its keys
    /// once instead of formatting the prefix into each. Nested calls join
    /// their prefixes with dots; an empty prefix adds nothing.
    pub fn within(&mut self, prefix: &str, check: impl FnOnce(&mut Self)) {
        let outer = self.prefix.len();
        if !prefix.is_empty() {
            self.prefix.push_str(prefix);
            self.prefix.push('.');
        }
        check(self);
        self.prefix.truncate(outer);
    }

    /// Records an error for `key` (under the current [`Validator::within`]
    /// prefix, if any).
    pub fn fail(&mut self, key: &str, value: impl fmt::Display, allowed: impl Into<String>) {
        self.errors.push(SettingError {
            key: format!("{}{key}", self.prefix),
            value: value.to_string(),
            allowed: allowed.into(),
        });
    }

    /// A duration in seconds must be finite and within `range`.
    pub fn seconds(&mut self, key: &str, value: Seconds, range: RangeInclusive<f64>) {
        let v = value.as_f64();
        if !v.is_finite() || !range.contains(&v) {
            self.fail(
                key,
                v,
                format!(
                    "must be between {} and {} seconds",
                    range.start(),
                    range.end()
                ),
            );
        }
    }

    /// A number must lie within `range`.
    pub fn number<T>(&mut self, key: &str, value: T, range: RangeInclusive<T>)
    where
        T: PartialOrd + fmt::Display + Copy,
    {
        if !range.contains(&value) {
            self.fail(
                key,
                value,
                format!("must be between {} and {}", range.start(), range.end()),
            );
        }
    }

    /// A ratio must be finite and within `range`.
    pub fn ratio(&mut self, key: &str, value: f64, range: RangeInclusive<f64>) {
        if !value.is_finite() || !range.contains(&value) {
            self.fail(
                key,
                value,
                format!("must be between {} and {}", range.start(), range.end()),
            );
        }
    }

    /// A URL must parse and use one of `schemes`. An empty value is allowed
    /// only when `optional`.
    pub fn url(&mut self, key: &str, shown: &str, raw: &str, schemes: &[&str], optional: bool) {
        if raw.is_empty() {
            if !optional {
                self.fail(
                    key,
                    "\"\"",
                    format!("required: a {} URL", schemes.join("/")),
                );
            }
            return;
        }
        let ok = url::Url::parse(raw).is_ok_and(|u| schemes.contains(&u.scheme()));
        if !ok {
            self.fail(
                key,
                shown,
                format!("must be a URL with scheme {}", schemes.join(", ")),
            );
        }
    }

    /// A value must be one of `choices`.
    pub fn one_of(&mut self, key: &str, value: &str, choices: &[&str]) {
        if !choices.contains(&value) {
            self.fail(key, value, format!("must be one of {}", choices.join(", ")));
        }
    }

    /// The errors recorded so far.
    pub fn into_errors(self) -> Vec<SettingError> {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_names_keys_under_its_prefix_and_restores_it() {
        let mut v = Validator::new();
        v.within("resilience", |v| {
            v.within("gateway", |v| v.number("get_retries", 11, 0..=10));
            v.within("", |v| v.number("top", 2, 0..=1));
        });
        v.number("outside", 5, 0..=1);
        let keys: Vec<_> = v.into_errors().into_iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            [
                "resilience.gateway.get_retries",
                "resilience.top",
                "outside"
            ]
        );
    }

    #[test]
    fn reports_every_bad_key_with_value_and_range() {
        let mut v = Validator::new();
        v.seconds("a.timeout_seconds", Seconds::new(0.0), 0.001..=60.0);
        v.seconds("a.ok_seconds", Seconds::new(1.0), 0.001..=60.0);
        v.number("a.retries", 11u32, 0..=10);
        v.ratio("a.ratio", f64::NAN, 0.0..=1.0);
        let errs = v.into_errors();
        assert_eq!(errs.len(), 3);
        assert_eq!(
            errs[0].to_string(),
            "a.timeout_seconds (env A__TIMEOUT_SECONDS) = 0: must be between 0.001 and 60 seconds"
        );
        assert_eq!(errs[1].key, "a.retries");
        assert_eq!(errs[1].value, "11");
    }

    #[test]
    fn seconds_saturate_instead_of_panicking() {
        assert_eq!(Seconds::new(-1.0).get(), Duration::ZERO);
        assert_eq!(Seconds::new(f64::INFINITY).get(), Duration::MAX);
        assert_eq!(Seconds::new(0.25).get(), Duration::from_millis(250));
    }
}
