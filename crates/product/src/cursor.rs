//! The opaque page cursor of `GET /api/products`.
//!
//! Pages are in id order (ids are UUIDv7, so that is creation order), read
//! with keyset pagination: a cursor names the last id of the previous page,
//! and the next page starts after it. Unlike an offset, this neither skips
//! nor repeats products when others are inserted or deleted meanwhile.
//! Clients must treat the text as opaque; the `c1` version prefix lets its
//! format change later.

use uuid::Uuid;

const VERSION: &str = "c1";

/// Where a page starts: after the product with this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor(Uuid);

impl Cursor {
    /// The cursor of the page after the one ending with `last`.
    pub fn after(last: Uuid) -> Self {
        Self(last)
    }

    /// The id the page starts after.
    pub fn last_id(self) -> Uuid {
        self.0
    }

    /// Reads a cursor given by a client.
    ///
    /// # Errors
    /// When the text is not a cursor this service issued.
    pub fn parse(text: &str) -> Result<Self, String> {
        text.strip_prefix(VERSION)
            .filter(|hex| hex.len() == 32)
            .and_then(|hex| Uuid::try_parse(hex).ok())
            .map(Self)
            .ok_or_else(|| "is not a cursor returned by this API".to_owned())
    }

    /// The text given to clients.
    pub fn encode(self) -> String {
        format!("{VERSION}{}", self.0.simple())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_foreign_text() {
        let c = Cursor::after(Uuid::now_v7());
        assert_eq!(Cursor::parse(&c.encode()), Ok(c));
        for bad in ["", "c1", "c2abc", "c1zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "x"] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
        let hyphenated = format!("c1{}", Uuid::nil().hyphenated());
        assert!(Cursor::parse(&hyphenated).is_err());
    }
}
