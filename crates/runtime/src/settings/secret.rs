//! Values that must never be printed: tokens and database URLs with passwords.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use subtle::ConstantTimeEq;

/// The mask printed in place of a secret.
pub const MASK: &str = "********";

/// A secret string (an admin token, say). `Debug`, `Display` and `Serialize`
/// print [`MASK`] (or nothing when it is empty); only [`Secret::expose`]
/// gives the value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself. Call it only where the value is used, never to log.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no value was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Compares with `candidate` in time that does not depend on where they
    /// differ (for bearer tokens). An empty secret matches nothing.
    pub fn matches(&self, candidate: &str) -> bool {
        !self.0.is_empty() && bool::from(self.0.as_bytes().ct_eq(candidate.as_bytes()))
    }

    fn masked(&self) -> &'static str {
        if self.0.is_empty() { "" } else { MASK }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?})", self.masked())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.masked())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.masked())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

/// A connection URL (`postgres://user:password@host/db`, `sqlite:path`,
/// `redis://…`) whose password is masked whenever it is printed.
///
/// It is a [`Secret`] that prints more of itself: holding, exposing and
/// reading the value are `Secret`'s; only [`SecretUrl::masked`] differs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretUrl(Secret);

impl SecretUrl {
    /// Wraps a URL.
    pub fn new(value: impl Into<String>) -> Self {
        Self(Secret::new(value))
    }

    /// The URL with its password, for connecting.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// True when no URL was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The URL with any password replaced by [`MASK`].
    pub fn masked(&self) -> String {
        let raw = self.0.expose();
        match url::Url::parse(raw) {
            Ok(mut url) if url.password().is_some() => {
                // Cannot fail: a URL with a password has a host.
                let _ = url.set_password(Some(MASK));
                url.to_string()
            }
            Ok(_) => raw.to_owned(),
            Err(_) if raw.is_empty() => String::new(),
            // Unparseable: print nothing of it rather than risk a password.
            Err(_) => MASK.to_owned(),
        }
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({:?})", self.masked())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.masked())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Secret::deserialize(deserializer).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(\"********\") ********");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"********\"");
        assert!(s.matches("hunter2"));
        assert!(!s.matches("hunter3"));
        assert!(!Secret::default().matches(""));
    }

    #[test]
    fn url_password_is_masked() {
        let u = SecretUrl::new("postgres://app:pw@db:5432/order");
        assert_eq!(u.masked(), "postgres://app:********@db:5432/order");
        assert_eq!(
            SecretUrl::new("sqlite:data/x.db").masked(),
            "sqlite:data/x.db"
        );
        assert!(!format!("{u:?}").contains("pw@"));
    }
}
