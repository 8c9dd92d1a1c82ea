//! Inventory's domain types, parsed once at the edge ("parse, don't
//! validate"): once a [`Reservation`] exists its id is a UUID, it has 1..=50
//! lines, no product twice and every quantity in 1..=1000. Nothing here knows
//! about gRPC or SQL.

use std::{collections::BTreeMap, fmt};

/// Most lines one reservation may have.
pub const MAX_LINES: usize = 50;
/// Most units of one product one line may reserve.
pub const MAX_QUANTITY: i64 = 1000;
/// Most units of one product that may be in stock.
pub const MAX_AVAILABLE: i64 = 1_000_000_000;

/// One bad field of a request: its path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Path of the field, for example `lines[2].quantity`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl Violation {
    fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.description)
    }
}

/// Parses a UUID in its hyphenated text form, in lower case.
fn parse_uuid(field: &str, raw: &str) -> Result<String, Violation> {
    if raw.is_empty() {
        return Err(Violation::new(field, "is required"));
    }
    match uuid::Uuid::try_parse(raw) {
        Ok(id) if raw.len() == 36 => Ok(id.hyphenated().to_string()),
        _ => Err(Violation::new(
            field,
            "must be a UUID in hyphenated form (8-4-4-4-12 hex digits)",
        )),
    }
}

/// A product's id: a UUID, kept in lower-case hyphenated form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProductId(String);

impl ProductId {
    /// Parses `raw`, naming `field` when it is not a UUID.
    ///
    /// # Errors
    /// A [`Violation`] of `field` when `raw` is empty or not a UUID.
    pub fn parse(field: &str, raw: &str) -> Result<Self, Violation> {
        parse_uuid(field, raw).map(Self)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps an id read back from storage (written by [`ProductId::parse`]).
    pub(crate) fn from_stored(id: String) -> Self {
        Self(id)
    }
}

impl fmt::Display for ProductId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A reservation's id (the order's id): a UUID, kept in lower-case
/// hyphenated form. It is the reservation's idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReservationId(String);

impl ReservationId {
    /// Parses `raw`, naming `field` when it is not a UUID.
    ///
    /// # Errors
    /// A [`Violation`] of `field` when `raw` is empty or not a UUID.
    pub fn parse(field: &str, raw: &str) -> Result<Self, Violation> {
        parse_uuid(field, raw).map(Self)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Units of one product in a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The product.
    pub product_id: ProductId,
    /// Units, 1..=[`MAX_QUANTITY`].
    pub quantity: i64,
}

/// A valid request to reserve stock: every line or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    id: ReservationId,
    lines: Vec<Line>,
}

impl Reservation {
    /// Parses a reservation from its raw id and `(product_id, quantity)`
    /// lines, reporting every bad field at once.
    ///
    /// # Errors
    /// Every [`Violation`]: a bad `reservation_id`; no lines or more than
    /// [`MAX_LINES`] (`lines`); a bad `lines[i].product_id` or one already
    /// given on an earlier line; a `lines[i].quantity` outside
    /// 1..=[`MAX_QUANTITY`].
    pub fn parse<'a>(
        reservation_id: &str,
        lines: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> Result<Self, Vec<Violation>> {
        let mut violations = Vec::new();
        let id = ReservationId::parse("reservation_id", reservation_id)
            .map_err(|v| violations.push(v))
            .ok();
        let raw: Vec<(&str, i64)> = lines.into_iter().collect();
        if raw.is_empty() {
            violations.push(Violation::new("lines", "at least one line is required"));
        } else if raw.len() > MAX_LINES {
            violations.push(Violation::new(
                "lines",
                format!("at most {MAX_LINES} lines, got {}", raw.len()),
            ));
            // Nothing more is looked at: a violation per line of a request
            // that is refused anyway would let one call build an error
            // (and a `grpc-message`) as large as it likes.
            return Err(violations);
        }
        let mut seen = BTreeMap::new();
        let mut parsed = Vec::with_capacity(raw.len());
        for (i, (product_id, quantity)) in raw.into_iter().enumerate() {
            let field = format!("lines[{i}].product_id");
            match ProductId::parse(&field, product_id) {
                Ok(product_id) => {
                    if let Some(first) = seen.insert(product_id.clone(), i) {
                        violations.push(Violation::new(
                            field,
                            format!("duplicate of lines[{first}].product_id"),
                        ));
                    } else {
                        parsed.push(Line {
                            product_id,
                            quantity,
                        });
                    }
                }
                Err(v) => violations.push(v),
            }
            if !(1..=MAX_QUANTITY).contains(&quantity) {
                violations.push(Violation::new(
                    format!("lines[{i}].quantity"),
                    format!("must be between 1 and {MAX_QUANTITY}, got {quantity}"),
                ));
            }
        }
        match id {
            Some(id) if violations.is_empty() => Ok(Self { id, lines: parsed }),
            _ => Err(violations),
        }
    }

    /// Its id.
    pub fn id(&self) -> &ReservationId {
        &self.id
    }

    /// Its lines, in the order asked.
    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// True when `stored` holds the same products and quantities as this
    /// request (in any order): a repeat of the same reservation.
    pub fn same_lines(&self, stored: &[Line]) -> bool {
        let key = |lines: &[Line]| -> BTreeMap<ProductId, i64> {
            lines
                .iter()
                .map(|l| (l.product_id.clone(), l.quantity))
                .collect()
        };
        stored.len() == self.lines.len() && key(stored) == key(&self.lines)
    }
}

/// Parses a new stock level for `SetStock`.
///
/// # Errors
/// A [`Violation`] of `available` outside 0..=[`MAX_AVAILABLE`].
pub fn parse_available(available: i64) -> Result<i64, Violation> {
    if (0..=MAX_AVAILABLE).contains(&available) {
        Ok(available)
    } else {
        Err(Violation::new(
            "available",
            format!("must be between 0 and {MAX_AVAILABLE}, got {available}"),
        ))
    }
}

/// What a successful `ReserveStock` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The lines reserved, in the order first asked.
    pub lines: Vec<Line>,
    /// True when the reservation already existed and nothing more was
    /// reserved.
    pub replayed: bool,
}

/// A product that did not have enough stock for a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortage {
    /// The product.
    pub product_id: ProductId,
    /// Units asked for.
    pub requested: i64,
    /// Units available when the reservation was tried.
    pub available: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: &str = "6f1c7a52-2c1e-4b8e-9d6a-0b7f6f0e7c11";
    const P2: &str = "0f2d4e0a-5a8c-4d5f-8e41-3b1d2c9a7e22";
    const R: &str = "8a4b0c3e-1d2f-4a5b-9c6d-7e8f9a0b1c2d";

    fn fields(r: Result<Reservation, Vec<Violation>>) -> Vec<String> {
        r.unwrap_err().into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn a_valid_reservation_parses_and_canonicalises_ids() {
        let upper = P1.to_uppercase();
        let r = Reservation::parse(R, [(upper.as_str(), 2), (P2, 1000)]).unwrap();
        assert_eq!(r.id().as_str(), R);
        assert_eq!(r.lines()[0].product_id.as_str(), P1);
        assert_eq!(r.lines()[1].quantity, 1000);
    }

    #[test]
    fn every_bad_field_is_named() {
        assert_eq!(
            fields(Reservation::parse("", [("x", 0), (P1, 1001)])),
            [
                "reservation_id",
                "lines[0].product_id",
                "lines[0].quantity",
                "lines[1].quantity"
            ]
        );
        assert_eq!(fields(Reservation::parse(R, [])), ["lines"]);
        let many: Vec<String> = (0..51)
            .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
            .collect();
        assert_eq!(
            fields(Reservation::parse(R, many.iter().map(|p| (p.as_str(), 1)))),
            ["lines"]
        );
        assert_eq!(
            fields(Reservation::parse(R, [(P1, 1), (P2, -1)])),
            ["lines[1].quantity"]
        );
    }

    #[test]
    fn too_many_lines_is_one_violation_however_bad_the_lines() {
        // 10,000 bad lines would otherwise be 20,000 violations.
        let bad = vec![("x", 0); 10_000];
        let err = Reservation::parse("", bad).unwrap_err();
        assert_eq!(
            err.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            ["reservation_id", "lines"]
        );
        assert!(err[1].description.contains("got 10000"), "{}", err[1]);
    }

    #[test]
    fn duplicate_products_are_refused_whatever_their_case() {
        let upper = P1.to_uppercase();
        let err = Reservation::parse(R, [(P1, 1), (upper.as_str(), 1)]).unwrap_err();
        assert_eq!(err[0].field, "lines[1].product_id");
        assert!(err[0].description.contains("lines[0]"), "{}", err[0]);
    }

    #[test]
    fn ids_must_be_hyphenated_uuids() {
        let simple = P1.replace('-', "");
        assert!(ProductId::parse("product_id", &simple).is_err());
        assert!(ProductId::parse("product_id", "not-a-uuid").is_err());
        assert!(ProductId::parse("product_id", P1).is_ok());
    }

    #[test]
    fn same_lines_ignores_order_but_not_quantities() {
        let r = Reservation::parse(R, [(P1, 1), (P2, 2)]).unwrap();
        let mut stored = r.lines().to_vec();
        stored.reverse();
        assert!(r.same_lines(&stored));
        stored[0].quantity = 3;
        assert!(!r.same_lines(&stored));
        assert!(!r.same_lines(&stored[..1]));
    }

    #[test]
    fn available_is_bounded() {
        assert_eq!(parse_available(0), Ok(0));
        assert!(parse_available(-1).is_err());
        assert!(parse_available(MAX_AVAILABLE + 1).is_err());
    }
}
