//! Orders as the shop sees them: the request a customer sends, parsed into a
//! valid [`NewOrder`] (parse, don't validate), and the stored [`Order`].
//!
//! Nothing here knows HTTP, gRPC or SQL, so the rules (SPEC §3 limits) are
//! testable on their own.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};
use shopeasy_runtime::problem::FieldError;
use uuid::Uuid;

/// Most lines in one order.
pub const MAX_LINES: usize = 50;
/// Largest quantity of one line.
pub const MAX_QUANTITY: i64 = 1000;
/// Longest customer id.
pub const MAX_CUSTOMER_ID: usize = 128;

/// The signed-in customer a request acts for: the token's `sub`, checked
/// against the same rules a customer id always had (1..=128 printable
/// characters, no surrounding spaces), because it becomes the orders' and
/// the idempotency keys' `customer_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Customer(String);

impl Customer {
    /// The customer a verified token's `sub` names, or `None` when the
    /// `sub` cannot be a customer id here (too long, control characters,
    /// blank or padded with spaces). The HTTP layer answers `None` with 401
    /// `invalid_token`: the token is unusable for this service, whatever
    /// the request says.
    pub fn from_subject(sub: &str) -> Option<Self> {
        let usable = !sub.is_empty()
            && sub.trim() == sub
            && sub.chars().count() <= MAX_CUSTOMER_ID
            && !sub.chars().any(char::is_control);
        usable.then(|| Self(sub.to_owned()))
    }

    /// The customer id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `order` is this customer's: anyone else's order is, to
    /// them, an order that does not exist (404, OWASP API1).
    pub fn owns(&self, order: &Order) -> bool {
        order.customer_id == self.0
    }

    /// Checks a `customer_id` the request itself names (the body of
    /// `POST /api/orders`, the query of `GET /api/orders`): accepted only
    /// when it is this customer (SPEC §3), surrounding spaces ignored.
    ///
    /// # Errors
    /// A field error on `customer_id` when it names someone else.
    pub fn check_named(&self, named: Option<&str>) -> Result<(), FieldError> {
        match named {
            Some(c) if c.trim() != self.0 => Err(FieldError::new(
                "customer_id",
                "must be the signed-in customer (the token's sub)",
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Customer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The body of `POST /api/orders`, as sent (not yet valid). The customer
/// is the bearer token's `sub`, never this body. Only a JSON object fills
/// it or a line (`shopeasy_runtime::only_json_objects!`), as the document
/// says.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(remote = "Self")]
#[schema(
    description = "The body of `POST /api/orders`. The customer is the bearer token's `sub`, never this body."
)]
pub struct OrderRequest {
    /// Optional, and only a cross-check for clients written before tokens:
    /// the customer is always the bearer token's `sub`. When present it is
    /// accepted only when it equals `sub` (surrounding spaces ignored);
    /// anything else is 422 with a field error on `customer_id`.
    #[serde(default)]
    #[schema(example = "alice")]
    pub customer_id: Option<String>,
    /// What they order: 1 to 50 lines, no product twice.
    #[schema(min_items = 1, max_items = 50)]
    pub items: Vec<ItemRequest>,
}

/// One line of an [`OrderRequest`].
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(remote = "Self")]
#[schema(description = "One line of an order request.")]
pub struct ItemRequest {
    /// The product's id, a UUID (read as text here, so that a bad one is
    /// a 422 naming it).
    #[schema(value_type = uuid::Uuid)]
    pub product_id: String,
    /// Units, 1..=1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: i64,
}

shopeasy_runtime::only_json_objects!(OrderRequest, ItemRequest);

/// A valid order request: 1..=50 lines, quantities 1..=1000, no product
/// twice, a non-empty customer id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewOrder {
    customer_id: String,
    items: Vec<NewLine>,
}

/// One line of a [`NewOrder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NewLine {
    /// The product.
    pub product_id: Uuid,
    /// Units, 1..=1000.
    pub quantity: i64,
}

impl NewOrder {
    /// Parses `customer`'s request, naming every bad field.
    ///
    /// # Errors
    /// Every invalid field, with its path (`items[2].quantity`); a
    /// `customer_id` that is not `customer` is one of them.
    pub fn parse(request: OrderRequest, customer: &Customer) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        if let Err(e) = customer.check_named(request.customer_id.as_deref()) {
            errors.push(e);
        }
        let customer_id = customer.as_str().to_owned();
        if request.items.is_empty() || request.items.len() > MAX_LINES {
            errors.push(FieldError::new(
                "items",
                format!("must have 1 to {MAX_LINES} lines"),
            ));
        }
        let mut items = Vec::with_capacity(request.items.len());
        for (i, item) in request.items.iter().enumerate() {
            let product_id = match Uuid::try_parse(item.product_id.trim()) {
                Ok(id) => Some(id),
                Err(_) => {
                    errors.push(FieldError::new(
                        format!("items[{i}].product_id"),
                        "must be a UUID",
                    ));
                    None
                }
            };
            if !(1..=MAX_QUANTITY).contains(&item.quantity) {
                errors.push(FieldError::new(
                    format!("items[{i}].quantity"),
                    format!("must be between 1 and {MAX_QUANTITY}"),
                ));
            }
            if let Some(id) = product_id {
                if items.iter().any(|l: &NewLine| l.product_id == id) {
                    errors.push(FieldError::new(
                        format!("items[{i}].product_id"),
                        "appears more than once",
                    ));
                }
                items.push(NewLine {
                    product_id: id,
                    quantity: item.quantity,
                });
            }
        }
        if errors.is_empty() {
            Ok(Self { customer_id, items })
        } else {
            Err(errors)
        }
    }

    /// Who orders.
    pub fn customer_id(&self) -> &str {
        &self.customer_id
    }

    /// The lines, in the order given.
    pub fn items(&self) -> &[NewLine] {
        &self.items
    }

    /// The fingerprint of the canonical request (SHA-256 of its canonical
    /// JSON, hex): two requests with the same meaning — whatever their
    /// spacing, key order or UUID case — have the same fingerprint.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        Sha256::digest(&canonical)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Where an order stands (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(
    description = "Where an order stands: `pending` (accepted, stock not reserved yet), `confirmed` (stock reserved), `rejected` (stock was insufficient), `cancelled` (stock released)."
)]
pub enum OrderStatus {
    /// Accepted; stock not reserved yet (the outbox worker will).
    Pending,
    /// Stock reserved.
    Confirmed,
    /// Stock was insufficient.
    Rejected,
    /// Cancelled by the customer; stock released.
    Cancelled,
}

impl OrderStatus {
    /// The stored and wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "confirmed" => Self::Confirmed,
            "rejected" => Self::Rejected,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

impl fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored order (the `Order` of SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(description = "An order of the signed-in customer.")]
pub struct Order {
    /// The order id (at Inventory, also its reservation's id).
    pub id: Uuid,
    /// Who ordered.
    pub customer_id: String,
    /// Where it stands.
    pub status: OrderStatus,
    /// The lines, with the price of each product when it was ordered.
    pub items: Vec<OrderLine>,
    /// Σ quantity × unit price.
    pub total_cents: i64,
    /// When it was placed (RFC 3339 on the wire).
    #[serde(serialize_with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: i64,
    /// When its status last changed (RFC 3339 on the wire).
    #[serde(serialize_with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: i64,
}

impl Order {
    /// The lines as Inventory reserves them (product and quantity).
    pub fn stock_lines(&self) -> Vec<NewLine> {
        self.items
            .iter()
            .map(|l| NewLine {
                product_id: l.product_id,
                quantity: l.quantity,
            })
            .collect()
    }
}

/// One line of an [`Order`], with its price snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(description = "One line of an order, with the product's price when it was ordered.")]
pub struct OrderLine {
    /// The product.
    pub product_id: Uuid,
    /// Units.
    pub quantity: i64,
    /// The product's price when the order was placed.
    pub unit_price_cents: i64,
}

/// A product that is short of stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortage {
    /// The product.
    pub product_id: Uuid,
    /// Units asked for.
    pub requested: i64,
    /// Units available when asked.
    pub available: i64,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Serialises Unix milliseconds as RFC 3339 UTC (`2026-01-31T12:00:00.000Z`).
fn rfc3339<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ms))
}

/// Formats Unix milliseconds as RFC 3339 UTC, by the civil-from-days
/// algorithm (H. Hinnant), to avoid a date crate for one format.
pub fn format_rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(items: &[(&str, i64)]) -> OrderRequest {
        OrderRequest {
            customer_id: Some("c-1".into()),
            items: items
                .iter()
                .map(|(p, q)| ItemRequest {
                    product_id: (*p).into(),
                    quantity: *q,
                })
                .collect(),
        }
    }

    fn c1() -> Customer {
        Customer::from_subject("c-1").unwrap()
    }

    #[test]
    fn the_body_may_omit_the_customer_or_name_the_signed_in_one_only() {
        let mut req = request(&[(A, 1)]);
        req.customer_id = None;
        assert_eq!(NewOrder::parse(req, &c1()).unwrap().customer_id(), "c-1");
        let mut req = request(&[(A, 1)]);
        req.customer_id = Some(" c-1 ".into());
        assert!(NewOrder::parse(req, &c1()).is_ok());
        let mut req = request(&[(A, 1)]);
        req.customer_id = Some("bob".into());
        let errors = NewOrder::parse(req, &c1()).unwrap_err();
        assert_eq!(errors[0].field, "customer_id");
    }

    #[test]
    fn only_a_usable_subject_is_a_customer() {
        assert!(Customer::from_subject("alice").is_some());
        assert!(Customer::from_subject(&"x".repeat(MAX_CUSTOMER_ID)).is_some());
        for bad in [
            "",
            " ",
            " alice",
            "alice ",
            "a\u{7}b",
            &"x".repeat(MAX_CUSTOMER_ID + 1),
        ] {
            assert!(Customer::from_subject(bad).is_none(), "{bad:?}");
        }
    }

    const A: &str = "0190a6c4-0000-7000-8000-000000000001";
    const B: &str = "0190a6c4-0000-7000-8000-000000000002";

    #[test]
    fn a_valid_request_parses() {
        let order = NewOrder::parse(request(&[(A, 1), (B, 1000)]), &c1()).unwrap();
        assert_eq!(order.items().len(), 2);
        assert_eq!(order.customer_id(), "c-1");
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut req = request(&[(A, 0), ("nope", 1), (A, 1001)]);
        req.customer_id = Some("c-2".into());
        let errors = NewOrder::parse(req, &c1()).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "customer_id",
                "items[0].quantity",
                "items[1].product_id",
                "items[2].quantity",
                "items[2].product_id"
            ]
        );
    }

    #[test]
    fn line_count_is_bounded() {
        let errors = NewOrder::parse(request(&[]), &c1()).unwrap_err();
        assert_eq!(errors[0].field, "items");
        let ids: Vec<String> = (0..51).map(|_| Uuid::new_v4().to_string()).collect();
        let many: Vec<(&str, i64)> = ids.iter().map(|s| (s.as_str(), 1)).collect();
        let errors = NewOrder::parse(request(&many), &c1()).unwrap_err();
        assert_eq!(errors[0].field, "items");
    }

    #[test]
    fn fingerprint_ignores_form_but_not_meaning() {
        let a = NewOrder::parse(request(&[(A, 1)]), &c1()).unwrap();
        let upper = NewOrder::parse(request(&[(&A.to_uppercase(), 1)]), &c1()).unwrap();
        let more = NewOrder::parse(request(&[(A, 2)]), &c1()).unwrap();
        assert_eq!(a.fingerprint(), upper.fingerprint());
        assert_ne!(a.fingerprint(), more.fingerprint());
        assert_eq!(a.fingerprint().len(), 64);
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            format_rfc3339(1_798_675_200_000),
            "2026-12-31T00:00:00.000Z"
        );
    }
}
