//! Parse, don't validate: the catalogue's value types. A [`ProductDraft`]
//! can only be built from input whose every field is valid, so the store and
//! the cache never see a bad product.
//!
//! Parsing reports every invalid field at once ([`Invalid`]), which the HTTP
//! layer turns into one 422 naming each field.

use serde_json::Value;

use crate::currency;

/// Longest SKU.
pub const SKU_MAX: usize = 32;
/// Longest name, in characters.
pub const NAME_MAX: usize = 200;
/// Longest description, in characters.
pub const DESCRIPTION_MAX: usize = 2_000;
/// Highest price in minor units (ten billion of the major unit): keeps sums
/// of order lines far from overflowing.
pub const PRICE_MAX: i64 = 1_000_000_000_000;

/// One invalid field: its name and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldIssue {
    /// The field, as named on the wire.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// Every invalid field of one input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fields: {}", .0.iter().map(|i| i.field).collect::<Vec<_>>().join(", "))]
pub struct Invalid(pub Vec<FieldIssue>);

/// A stock-keeping unit: 3 to 32 of `A-Z`, `0-9`, `-`, starting with a letter
/// or digit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sku(String);

impl Sku {
    /// Parses a SKU.
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(s: &str) -> Result<Self, String> {
        let allowed = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-';
        let starts_well = s.starts_with(|c: char| c.is_ascii_uppercase() || c.is_ascii_digit());
        if (3..=SKU_MAX).contains(&s.len()) && starts_well && s.chars().all(allowed) {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "must be 3 to {SKU_MAX} characters A-Z, 0-9 or '-', starting with a letter or digit"
            ))
        }
    }

    /// The SKU.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A display name: 1 to 200 characters after trimming, no control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductName(String);

impl ProductName {
    /// Parses a name (trimmed).
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let len = s.chars().count();
        if len == 0 || len > NAME_MAX {
            Err(format!("must be 1 to {NAME_MAX} characters"))
        } else if s.chars().any(char::is_control) {
            Err("must not contain control characters".to_owned())
        } else {
            Ok(Self(s.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Free text of at most 2,000 characters (line breaks allowed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Description(String);

impl Description {
    /// Parses a description.
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.chars().count() > DESCRIPTION_MAX {
            Err(format!("must be at most {DESCRIPTION_MAX} characters"))
        } else if s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
            Err("must not contain control characters other than line breaks and tabs".to_owned())
        } else {
            Ok(Self(s.to_owned()))
        }
    }

    /// The description.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A price in minor units: `0..=PRICE_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price(i64);

impl Price {
    /// Parses a price.
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(cents: i64) -> Result<Self, String> {
        if (0..=PRICE_MAX).contains(&cents) {
            Ok(Self(cents))
        } else {
            Err(format!("must be between 0 and {PRICE_MAX}"))
        }
    }

    /// The price in minor units.
    pub fn cents(self) -> i64 {
        self.0
    }
}

/// An active ISO 4217 currency code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Currency(&'static str);

impl Currency {
    /// Parses a code (exactly as written: `EUR`, not `eur`).
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(s: &str) -> Result<Self, String> {
        currency::lookup(s)
            .map(Self)
            .ok_or_else(|| "must be an ISO 4217 currency code, for example EUR".to_owned())
    }

    /// The code.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// A valid product without an id: what create and update store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductDraft {
    /// SKU.
    pub sku: Sku,
    /// Name.
    pub name: ProductName,
    /// Description.
    pub description: Description,
    /// Price.
    pub price: Price,
    /// Currency.
    pub currency: Currency,
}

impl ProductDraft {
    /// Parses a JSON body (the shape of `shopeasy_product_api::NewProduct`),
    /// reporting every missing, mistyped or invalid field at once.
    ///
    /// # Errors
    /// [`Invalid`] naming each bad field (`body` when it is not an object).
    pub fn parse(body: &Value) -> Result<Self, Invalid> {
        let Some(object) = body.as_object() else {
            return Err(Invalid(vec![FieldIssue {
                field: "body",
                message: "must be a JSON object".to_owned(),
            }]));
        };
        let mut issues = Vec::new();
        let mut field = |name: &'static str, required: bool| -> Option<&Value> {
            match object.get(name) {
                Some(v) => Some(v),
                None if required => {
                    issues.push(FieldIssue {
                        field: name,
                        message: "is required".to_owned(),
                    });
                    None
                }
                None => None,
            }
        };
        let sku = field("sku", true);
        let name = field("name", true);
        let description = field("description", false);
        let price = field("price_cents", true);
        let currency = field("currency", true);

        let sku = sku.and_then(|v| check(&mut issues, "sku", text(v).and_then(Sku::parse)));
        let name =
            name.and_then(|v| check(&mut issues, "name", text(v).and_then(ProductName::parse)));
        // Omitted is empty; `null` is not a string, as the document says.
        let description = match description {
            None => Some(Description::default()),
            Some(v) => check(
                &mut issues,
                "description",
                text(v).and_then(Description::parse),
            ),
        };
        let price = price.and_then(|v| {
            let cents = v
                .as_i64()
                .ok_or_else(|| "must be a whole number of minor units".to_owned());
            check(&mut issues, "price_cents", cents.and_then(Price::parse))
        });
        let currency = currency
            .and_then(|v| check(&mut issues, "currency", text(v).and_then(Currency::parse)));
        match (sku, name, description, price, currency) {
            (Some(sku), Some(name), Some(description), Some(price), Some(currency))
                if issues.is_empty() =>
            {
                Ok(Self {
                    sku,
                    name,
                    description,
                    price,
                    currency,
                })
            }
            _ => Err(Invalid(issues)),
        }
    }
}

fn text(v: &Value) -> Result<&str, String> {
    v.as_str().ok_or_else(|| "must be a string".to_owned())
}

fn check<T>(issues: &mut Vec<FieldIssue>, field: &'static str, r: Result<T, String>) -> Option<T> {
    r.map_err(|message| issues.push(FieldIssue { field, message }))
        .ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn skus() {
        for ok in ["TEA-001", "A1B", "9-X"] {
            assert!(Sku::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "AB", "-AB", "tea-1", "A B C", &"A".repeat(33), "ÄBC"] {
            assert!(Sku::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_descriptions_prices_currencies() {
        assert_eq!(ProductName::parse("  Tea ").unwrap().as_str(), "Tea");
        assert!(ProductName::parse("   ").is_err());
        assert!(ProductName::parse(&"é".repeat(200)).is_ok());
        assert!(ProductName::parse(&"é".repeat(201)).is_err());
        assert!(ProductName::parse("a\u{0}b").is_err());
        assert!(Description::parse("line\nline").is_ok());
        assert!(Description::parse(&"x".repeat(2001)).is_err());
        assert!(Price::parse(0).is_ok());
        assert!(Price::parse(-1).is_err());
        assert!(Price::parse(PRICE_MAX + 1).is_err());
        assert_eq!(Currency::parse("EUR").unwrap().as_str(), "EUR");
        for bad in ["eur", "XYZ", "EURO", ""] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_draft_reports_every_bad_field() {
        let err = ProductDraft::parse(&json!({
            "sku": "bad sku", "price_cents": -5, "currency": 7, "description": 1
        }))
        .unwrap_err();
        let fields: Vec<_> = err.0.iter().map(|i| i.field).collect();
        assert_eq!(
            fields,
            ["name", "sku", "description", "price_cents", "currency"]
        );
        assert_eq!(
            ProductDraft::parse(&json!([1])).unwrap_err().0[0].field,
            "body"
        );
        assert!(matches!(
            ProductDraft::parse(&json!({"sku":"A-1","name":"x","price_cents":1.5,"currency":"EUR"})),
            Err(Invalid(i)) if i[0].field == "price_cents"
        ));
    }

    #[test]
    fn a_null_description_is_not_a_string() {
        let err = ProductDraft::parse(&json!({
            "sku": "TEA-1", "name": "Tea", "description": null, "price_cents": 450, "currency": "EUR"
        }))
        .unwrap_err();
        assert_eq!(err.0.len(), 1, "{err:?}");
        assert_eq!(err.0[0].field, "description");
        assert_eq!(err.0[0].message, "must be a string");
    }

    /// The OpenAPI document's constraints are the rules' own, so input the
    /// document refuses is refused here too: the SKU pattern is exactly
    /// [`Sku::parse`] (over random strings), and the lengths and bounds
    /// are these constants.
    #[test]
    fn the_documents_constraints_are_the_rules() {
        use rand::{Rng as _, SeedableRng as _, rngs::SmallRng};

        let pattern = regex::Regex::new(shopeasy_product_api::SKU_PATTERN).unwrap();
        // Mostly allowed characters, so that long valid SKUs are common
        // and the edges (length 3 and 32, a leading `-`) are reached.
        let allowed: Vec<char> = "AZ09-B7".chars().collect();
        let other: Vec<char> = "a Ä_".chars().collect();
        let mut rng = SmallRng::seed_from_u64(14);
        for _ in 0..20_000 {
            let len = rng.random_range(0..=SKU_MAX + 2);
            let s: String = (0..len)
                .map(|_| {
                    let from = if rng.random_ratio(1, 40) {
                        &other
                    } else {
                        &allowed
                    };
                    from[rng.random_range(0..from.len())]
                })
                .collect();
            assert_eq!(pattern.is_match(&s), Sku::parse(&s).is_ok(), "{s:?}");
        }

        let doc = serde_json::to_value(crate::http::openapi()).unwrap();
        for schema in ["Product", "NewProduct"] {
            let p = &doc["components"]["schemas"][schema]["properties"];
            assert_eq!(
                p["sku"]["pattern"],
                shopeasy_product_api::SKU_PATTERN,
                "{schema}: {p}"
            );
            assert_eq!(
                p["currency"]["pattern"],
                shopeasy_product_api::CURRENCY_PATTERN,
                "{schema}: {p}"
            );
            assert_eq!(p["sku"]["maxLength"], SKU_MAX, "{schema}: {p}");
            assert_eq!(p["sku"]["minLength"], 3, "{schema}: {p}");
            assert_eq!(p["name"]["minLength"], 1, "{schema}: {p}");
            assert_eq!(
                p["description"]["maxLength"], DESCRIPTION_MAX,
                "{schema}: {p}"
            );
            assert_eq!(p["price_cents"]["minimum"], 0, "{schema}: {p}");
            assert_eq!(p["price_cents"]["maximum"], PRICE_MAX, "{schema}: {p}");
        }
        let product = &doc["components"]["schemas"]["Product"]["properties"];
        assert_eq!(product["name"]["maxLength"], NAME_MAX, "{product}");
        // A new product's name is trimmed before it is counted: no maximum
        // the document could state exactly.
        let new = &doc["components"]["schemas"]["NewProduct"]["properties"];
        assert!(new["name"].get("maxLength").is_none(), "{new}");
    }

    #[test]
    fn a_valid_draft_parses() {
        let d = ProductDraft::parse(&json!({
            "sku": "TEA-1", "name": "Tea", "price_cents": 450, "currency": "EUR"
        }))
        .unwrap();
        assert_eq!(d.description.as_str(), "");
        assert_eq!(d.price.cents(), 450);
    }
}
