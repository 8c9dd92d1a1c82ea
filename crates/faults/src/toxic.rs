//! Toxics: what a proxy does to the bytes flowing one way through it.
//!
//! The model and the JSON are Toxiproxy 2.x's: a toxic has a `name`, a
//! `type`, a `stream` (`upstream` = client → server, `downstream` = server →
//! client), a `toxicity` (the probability, rolled once per connection, that
//! it applies to that connection) and type-specific integer `attributes`.
//!
//! Unlike Toxiproxy, a toxic parsed from JSON has its attributes bounded: a
//! duration at most 24 h ([`MAX_WAIT_MS`]), a bandwidth at most a terabyte
//! per second ([`MAX_RATE`]). Beyond that a value is a typo, not a fault
//! worth injecting, and it is refused with a 400 that names it rather than
//! accepted into a proxy whose clock arithmetic it would overflow.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;

/// The longest duration an attribute may ask for, in milliseconds: 24 h
/// (`latency`, `jitter`, `timeout`, `slow_close`'s `delay`; `slicer`'s
/// `delay`, in µs, is bounded by the same 24 h). Longer is a mistake: a
/// black hole for good is `timeout` 0.
pub const MAX_WAIT_MS: u64 = 24 * 60 * 60 * 1000;

/// The highest `bandwidth` `rate` in KB/s: 10^9, a terabyte per second,
/// beyond any link a test runs on (0 already means no limit).
pub const MAX_RATE: u64 = 1_000_000_000;

/// Which direction of a connection a toxic acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client → upstream server: requests.
    Upstream,
    /// Upstream server → client: responses (Toxiproxy's default).
    #[default]
    Downstream,
}

impl Stream {
    /// The wire name: `upstream` or `downstream`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upstream => "upstream",
            Self::Downstream => "downstream",
        }
    }
}

impl std::fmt::Display for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A toxic's type and attributes. Attribute names and units are
/// Toxiproxy's; a missing attribute is 0, as in Toxiproxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "attributes", rename_all = "snake_case")]
pub enum ToxicKind {
    /// Delays every chunk by `latency` ms, ± up to `jitter` ms (seeded).
    Latency {
        /// Added delay in milliseconds.
        #[serde(default)]
        latency: u64,
        /// Uniform random variation in milliseconds, either way.
        #[serde(default)]
        jitter: u64,
    },
    /// Black hole: drops all data; closes the connection after `timeout` ms
    /// (0 = never, until the toxic is removed and data flows again).
    Timeout {
        /// Milliseconds before the connection is closed; 0 = never.
        #[serde(default)]
        timeout: u64,
    },
    /// On the next data in this direction, drops it, waits `timeout` ms and
    /// resets the connection (TCP RST, via `SO_LINGER` 0).
    ResetPeer {
        /// Milliseconds between the data arriving and the reset.
        #[serde(default)]
        timeout: u64,
    },
    /// Limits throughput to `rate` KB/s (1 KB = 1000 bytes; 0 = no limit).
    Bandwidth {
        /// Kilobytes per second.
        #[serde(default)]
        rate: u64,
    },
    /// Delays the close (EOF) by `delay` ms.
    SlowClose {
        /// Milliseconds.
        #[serde(default)]
        delay: u64,
    },
    /// Slices data into pieces of `average_size` ± `size_variation` bytes,
    /// `delay` µs apart.
    Slicer {
        /// Mean piece size in bytes (at least 1).
        #[serde(default)]
        average_size: u64,
        /// Uniform random variation of the piece size, either way.
        #[serde(default)]
        size_variation: u64,
        /// Microseconds between pieces.
        #[serde(default)]
        delay: u64,
    },
    /// Closes the connection once `bytes` bytes have passed in this
    /// direction since the toxic was added.
    LimitData {
        /// The byte budget.
        #[serde(default)]
        bytes: u64,
    },
}

impl ToxicKind {
    /// The wire name of the type (`latency`, `reset_peer`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Latency { .. } => "latency",
            Self::Timeout { .. } => "timeout",
            Self::ResetPeer { .. } => "reset_peer",
            Self::Bandwidth { .. } => "bandwidth",
            Self::SlowClose { .. } => "slow_close",
            Self::Slicer { .. } => "slicer",
            Self::LimitData { .. } => "limit_data",
        }
    }

    /// Rejects attribute values that would make the toxic meaningless, or
    /// are beyond the bounds ([`MAX_WAIT_MS`], [`MAX_RATE`]); the error
    /// names the attribute.
    fn validate(&self) -> Result<(), Error> {
        let kind = self.type_name();
        match *self {
            Self::Latency { latency, jitter } => {
                at_most(kind, "latency", latency, MAX_WAIT_MS, "ms (24 h)")?;
                at_most(kind, "jitter", jitter, MAX_WAIT_MS, "ms (24 h)")
            }
            Self::Timeout { timeout } | Self::ResetPeer { timeout } => {
                at_most(kind, "timeout", timeout, MAX_WAIT_MS, "ms (24 h)")
            }
            Self::SlowClose { delay } => at_most(kind, "delay", delay, MAX_WAIT_MS, "ms (24 h)"),
            Self::Bandwidth { rate } => at_most(kind, "rate", rate, MAX_RATE, "KB/s"),
            Self::Slicer {
                average_size: 0, ..
            } => Err(Error::BadBody(
                "slicer: average_size must be at least 1".into(),
            )),
            Self::Slicer { delay, .. } => {
                at_most(kind, "delay", delay, MAX_WAIT_MS * 1000, "µs (24 h)")
            }
            Self::LimitData { .. } => Ok(()),
        }
    }

    /// Parses `attributes` for the toxic type `kind`; missing attributes are 0.
    fn from_attributes(kind: &str, attributes: Value) -> Result<Self, Error> {
        const KNOWN: [&str; 7] = [
            "latency",
            "timeout",
            "reset_peer",
            "bandwidth",
            "slow_close",
            "slicer",
            "limit_data",
        ];
        if !KNOWN.contains(&kind) {
            return Err(Error::InvalidToxicType(kind.to_owned()));
        }
        let mut tagged = Map::new();
        tagged.insert("type".into(), Value::String(kind.to_owned()));
        tagged.insert("attributes".into(), attributes);
        let parsed: Self = serde_json::from_value(Value::Object(tagged))
            .map_err(|e| Error::BadBody(format!("attributes: {e}")))?;
        parsed.validate()?;
        Ok(parsed)
    }

    /// The attributes as a JSON object.
    pub(crate) fn attributes(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => match map.remove("attributes") {
                Some(Value::Object(attributes)) => attributes,
                _ => Map::new(),
            },
            _ => Map::new(),
        }
    }
}

/// A named toxic on one stream of a proxy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Toxic {
    /// Unique within its proxy; Toxiproxy's default is `<type>_<stream>`.
    pub name: String,
    /// Type and attributes (serialised as `type` and `attributes`).
    #[serde(flatten)]
    pub kind: ToxicKind,
    /// The direction it acts on.
    pub stream: Stream,
    /// Probability in `[0, 1]` that it applies to a given connection, rolled
    /// once per connection with the proxy's seeded generator.
    pub toxicity: f32,
}

impl Toxic {
    /// A toxic named `<type>_<stream>` that applies to every connection.
    pub fn new(kind: ToxicKind, stream: Stream) -> Self {
        Self {
            name: format!("{}_{}", kind.type_name(), stream),
            kind,
            stream,
            toxicity: 1.0,
        }
    }

    /// The same toxic under another name.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The same toxic with another toxicity (clamped to `[0, 1]`).
    #[must_use]
    pub fn with_toxicity(mut self, toxicity: f32) -> Self {
        self.toxicity = toxicity.clamp(0.0, 1.0);
        self
    }

    /// Parses Toxiproxy's toxic JSON, with its defaults: `stream`
    /// `downstream`, `toxicity` 1, `name` `<type>_<stream>`, attributes 0.
    ///
    /// # Errors
    /// [`Error::BadBody`] for malformed JSON or out-of-range values,
    /// [`Error::InvalidStream`], [`Error::InvalidToxicType`].
    pub fn from_json(body: &[u8]) -> Result<Self, Error> {
        #[derive(Deserialize)]
        #[serde(remote = "Self")]
        struct Wire {
            #[serde(default)]
            name: String,
            #[serde(default, rename = "type")]
            kind: String,
            #[serde(default)]
            stream: Option<String>,
            #[serde(default)]
            toxicity: Option<f32>,
            #[serde(default)]
            attributes: Option<Value>,
        }
        // A JSON object only, as Go's decoder takes it.
        shopeasy_runtime::only_json_objects!(Wire);
        let wire: Wire = serde_json::from_slice(body).map_err(|e| Error::BadBody(e.to_string()))?;
        let stream = match wire.stream.as_deref() {
            None | Some("") | Some("downstream") => Stream::Downstream,
            Some("upstream") => Stream::Upstream,
            Some(_) => return Err(Error::InvalidStream),
        };
        let kind = ToxicKind::from_attributes(
            &wire.kind,
            wire.attributes.unwrap_or_else(|| Value::Object(Map::new())),
        )?;
        let toxicity = check_toxicity(wire.toxicity.unwrap_or(1.0))?;
        let name = if wire.name.is_empty() {
            format!("{}_{}", wire.kind, stream)
        } else {
            wire.name
        };
        Ok(Self {
            name,
            kind,
            stream,
            toxicity,
        })
    }

    /// Applies Toxiproxy's toxic update JSON (`attributes` merged over the
    /// current ones, optional `toxicity`) and returns the updated toxic.
    ///
    /// # Errors
    /// [`Error::BadBody`] for malformed JSON or out-of-range values.
    pub fn updated_from_json(&self, body: &[u8]) -> Result<Self, Error> {
        #[derive(Deserialize)]
        #[serde(remote = "Self")]
        struct Wire {
            #[serde(default)]
            toxicity: Option<f32>,
            #[serde(default)]
            attributes: Option<Map<String, Value>>,
        }
        shopeasy_runtime::only_json_objects!(Wire);
        let wire: Wire = serde_json::from_slice(body).map_err(|e| Error::BadBody(e.to_string()))?;
        let mut attributes = self.kind.attributes();
        attributes.extend(wire.attributes.unwrap_or_default());
        let kind = ToxicKind::from_attributes(self.kind.type_name(), Value::Object(attributes))?;
        let toxicity = check_toxicity(wire.toxicity.unwrap_or(self.toxicity))?;
        Ok(Self {
            name: self.name.clone(),
            kind,
            stream: self.stream,
            toxicity,
        })
    }
}

/// `Ok` when the attribute `name` of a `kind` toxic is at most `max`.
fn at_most(kind: &str, name: &str, value: u64, max: u64, unit: &str) -> Result<(), Error> {
    if value <= max {
        Ok(())
    } else {
        Err(Error::BadBody(format!(
            "{kind}: {name} must be at most {max} {unit}, not {value}"
        )))
    }
}

fn check_toxicity(toxicity: f32) -> Result<f32, Error> {
    if (0.0..=1.0).contains(&toxicity) {
        Ok(toxicity)
    } else {
        Err(Error::BadBody(format!(
            "toxicity {toxicity} is outside [0, 1]"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_toxiproxy_defaults() {
        let toxic =
            Toxic::from_json(br#"{"type":"latency","attributes":{"latency":250}}"#).unwrap();
        assert_eq!(toxic.name, "latency_downstream");
        assert_eq!(toxic.stream, Stream::Downstream);
        assert!((toxic.toxicity - 1.0).abs() < f32::EPSILON);
        assert_eq!(
            toxic.kind,
            ToxicKind::Latency {
                latency: 250,
                jitter: 0
            }
        );
    }

    #[test]
    fn serialises_as_toxiproxy_json() {
        let toxic = Toxic::new(ToxicKind::ResetPeer { timeout: 5 }, Stream::Upstream).named("rst");
        let json = serde_json::to_value(&toxic).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name":"rst","type":"reset_peer","stream":"upstream",
                               "toxicity":1.0,"attributes":{"timeout":5}})
        );
        let back = Toxic::from_json(json.to_string().as_bytes()).unwrap();
        assert_eq!(back, toxic);
    }

    #[test]
    fn rejects_bad_input_with_the_toxiproxy_error() {
        assert!(matches!(
            Toxic::from_json(br#"{"type":"nope"}"#),
            Err(Error::InvalidToxicType(_))
        ));
        assert!(matches!(
            Toxic::from_json(br#"{"type":"latency","stream":"sideways"}"#),
            Err(Error::InvalidStream)
        ));
        assert!(matches!(
            Toxic::from_json(br#"{"type":"latency","attributes":{"latency":-1}}"#),
            Err(Error::BadBody(_))
        ));
        assert!(matches!(
            Toxic::from_json(br#"{"type":"latency","toxicity":1.5}"#),
            Err(Error::BadBody(_))
        ));
        assert!(matches!(
            Toxic::from_json(br#"{"type":"slicer"}"#),
            Err(Error::BadBody(_))
        ));
        assert!(matches!(
            Toxic::from_json(b"not json"),
            Err(Error::BadBody(_))
        ));
    }

    /// A value that would overflow the proxy's arithmetic (or is a typo for
    /// a smaller one) is a 400 naming the attribute, not a toxic that
    /// breaks the connections it applies to.
    #[test]
    fn rejects_attributes_beyond_their_bounds_naming_them() {
        let max = u64::MAX;
        for (json, attribute) in [
            (
                format!(r#"{{"type":"latency","attributes":{{"latency":{max}}}}}"#),
                "latency",
            ),
            (
                format!(
                    r#"{{"type":"latency","attributes":{{"jitter":{}}}}}"#,
                    MAX_WAIT_MS + 1
                ),
                "jitter",
            ),
            (
                format!(r#"{{"type":"timeout","attributes":{{"timeout":{max}}}}}"#),
                "timeout",
            ),
            (
                format!(r#"{{"type":"reset_peer","attributes":{{"timeout":{max}}}}}"#),
                "timeout",
            ),
            (
                format!(r#"{{"type":"slow_close","attributes":{{"delay":{max}}}}}"#),
                "delay",
            ),
            (
                format!(r#"{{"type":"bandwidth","attributes":{{"rate":{max}}}}}"#),
                "rate",
            ),
            (
                format!(
                    r#"{{"type":"bandwidth","attributes":{{"rate":{}}}}}"#,
                    MAX_RATE + 1
                ),
                "rate",
            ),
            (
                format!(r#"{{"type":"slicer","attributes":{{"average_size":1,"delay":{max}}}}}"#),
                "delay",
            ),
        ] {
            match Toxic::from_json(json.as_bytes()) {
                Err(Error::BadBody(message)) => {
                    assert!(
                        message.contains(&format!("{attribute} must be at most")),
                        "{json}: {message}"
                    );
                }
                other => panic!("{json} must be refused, got {other:?}"),
            }
        }
        // The bounds themselves are accepted.
        for json in [
            format!(
                r#"{{"type":"latency","attributes":{{"latency":{MAX_WAIT_MS},"jitter":{MAX_WAIT_MS}}}}}"#
            ),
            format!(r#"{{"type":"bandwidth","attributes":{{"rate":{MAX_RATE}}}}}"#),
            format!(r#"{{"type":"limit_data","attributes":{{"bytes":{max}}}}}"#),
        ] {
            assert!(Toxic::from_json(json.as_bytes()).is_ok(), "{json}");
        }
        // An update is bounded too.
        let toxic = Toxic::new(ToxicKind::Bandwidth { rate: 1 }, Stream::Downstream);
        assert!(matches!(
            toxic.updated_from_json(format!(r#"{{"attributes":{{"rate":{max}}}}}"#).as_bytes()),
            Err(Error::BadBody(_))
        ));
    }

    #[test]
    fn update_merges_attributes() {
        let toxic = Toxic::new(
            ToxicKind::Latency {
                latency: 100,
                jitter: 10,
            },
            Stream::Upstream,
        );
        let updated = toxic
            .updated_from_json(br#"{"attributes":{"latency":300},"toxicity":0.5}"#)
            .unwrap();
        assert_eq!(
            updated.kind,
            ToxicKind::Latency {
                latency: 300,
                jitter: 10
            }
        );
        assert!((updated.toxicity - 0.5).abs() < f32::EPSILON);
        assert_eq!(updated.name, toxic.name);
    }
}
