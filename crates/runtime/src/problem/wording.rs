//! serde's data errors in the words of the wire.
//!
//! serde writes its messages for Rust programmers: `invalid type: string
//! "2", expected i64 at line 1 column 60`, ``missing field `quantity` ``,
//! `invalid length 0, expected struct SessionRequest with 1 element`. A
//! client speaks JSON and does not know our type names, so each message
//! is rewritten once here for every service: JSON's kinds instead of Rust's
//! types (`must be an integer, found a string`), a missing or repeated
//! field named as the field itself (`items[0].quantity`: `is required`),
//! and no line and column (the field already says where). A message of a
//! shape not known here keeps serde's words, without the position.

use super::FieldError;

/// The field error for a data error at `path` with serde's `message`;
/// `whole` names the field when the message is about the whole input
/// (`path` empty): `body`, `query`.
pub(super) fn data_error(whole: &str, path: &str, message: &str) -> FieldError {
    let message = without_position(message);
    // The path of a missing or repeated field ends at its object.
    let at = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    if let Some(name) = quoted_after(message, "missing field ") {
        return FieldError::new(at(name), "is required");
    }
    if let Some(name) = quoted_after(message, "duplicate field ") {
        return FieldError::new(at(name), "must be sent once");
    }
    if let Some(name) = quoted_after(message, "unknown field ") {
        // That of an unknown one already ends at the field.
        let field = if path.is_empty() { name } else { path };
        return FieldError::new(field, "is not a known field");
    }
    let field = if path.is_empty() { whole } else { path };
    FieldError::new(
        field,
        reworded(message).unwrap_or_else(|| message.to_owned()),
    )
}

/// `invalid type: U, expected E`, `invalid value: U, expected E` and
/// `invalid length N, expected E` in JSON's words; `None` for any other
/// shape.
fn reworded(message: &str) -> Option<String> {
    // The last one: what was found may be the client's own text.
    let (found, expected) = message.rsplit_once(", expected ")?;
    if let Some(found) = found.strip_prefix("invalid type: ") {
        return Some(format!(
            "must be {}, found {}",
            expectation(expected),
            json_kind(found)
        ));
    }
    if let Some(found) = found.strip_prefix("invalid value: ") {
        let must = match integer_range(expected) {
            Some((min, max)) => format!("an integer from {min} to {max}"),
            None => expectation(expected),
        };
        return Some(format!("must be {must}, found {}", json_kind(found)));
    }
    if found.starts_with("invalid length ") {
        return Some(format!("must be {}", expectation(expected)));
    }
    None
}

/// What serde expected, as a JSON kind where it named a Rust type.
fn expectation(expected: &str) -> String {
    if integer_range(expected).is_some() {
        "an integer".to_owned()
    } else if matches!(expected, "f32" | "f64") {
        "a number".to_owned()
    } else if expected == "a map"
        || expected.starts_with("struct ")
        || expected.starts_with("tuple struct ")
    {
        "a JSON object".to_owned()
    } else if expected == "a sequence" || expected.starts_with("a tuple of size ") {
        "an array".to_owned()
    } else {
        expected.to_owned()
    }
}

/// What serde found (its `Unexpected`, as serde_json prints it), as a JSON
/// kind; a number or boolean keeps its value, a string does not (it may
/// be long, and the client sent it).
fn json_kind(found: &str) -> String {
    let value = |kind: &str| {
        found
            .strip_prefix(kind)
            .and_then(|v| v.strip_prefix('`')?.strip_suffix('`'))
            .map(str::to_owned)
    };
    if let Some(v) = value("integer ")
        .or_else(|| value("floating point "))
        .or_else(|| value("boolean "))
    {
        return v;
    }
    match found {
        "map" => "an object".to_owned(),
        "sequence" => "an array".to_owned(),
        "null" | "unit value" => "null".to_owned(),
        _ if found.starts_with("string ") => "a string".to_owned(),
        _ => found.to_owned(),
    }
}

/// The bounds of the integer type serde names (`u32`, `i64`, …).
fn integer_range(expected: &str) -> Option<(i128, u128)> {
    Some(match expected {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" | "usize" => (0, u64::MAX.into()),
        "i8" => (i8::MIN.into(), i8::MAX.unsigned_abs().into()),
        "i16" => (i16::MIN.into(), i16::MAX.unsigned_abs().into()),
        "i32" => (i32::MIN.into(), i32::MAX.unsigned_abs().into()),
        "i64" | "isize" => (i64::MIN.into(), i64::MAX.unsigned_abs().into()),
        _ => return None,
    })
}

/// The name in `` `name` `` right after `prefix`.
fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    message
        .strip_prefix(prefix)?
        .strip_prefix('`')?
        .split_once('`')
        .map(|(name, _)| name)
}

/// `message` without serde_json's trailing ` at line N column M`.
fn without_position(message: &str) -> &str {
    let Some((head, tail)) = message.rsplit_once(" at line ") else {
        return message;
    };
    let is_position = tail.split_once(" column ").is_some_and(|(line, column)| {
        [line, column]
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if is_position { head } else { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn says(path: &str, message: &str) -> (String, String) {
        let e = data_error("body", path, message);
        (e.field, e.message)
    }

    fn pair(field: &str, message: &str) -> (String, String) {
        (field.to_owned(), message.to_owned())
    }

    #[test]
    fn a_wrong_type_is_named_in_json_kinds_without_the_position() {
        assert_eq!(
            says(
                "items[0].quantity",
                r#"invalid type: string "2", expected i64 at line 1 column 60"#
            ),
            pair("items[0].quantity", "must be an integer, found a string")
        );
        assert_eq!(
            says(
                "items",
                "invalid type: map, expected a sequence at line 1 column 10"
            ),
            pair("items", "must be an array, found an object")
        );
        assert_eq!(
            says(
                "",
                "invalid type: sequence, expected struct OrderRequest at line 1 column 0"
            ),
            pair("body", "must be a JSON object, found an array")
        );
        assert_eq!(
            says(
                "items[0]",
                "invalid type: null, expected struct ItemRequest at line 1 column 14"
            ),
            pair("items[0]", "must be a JSON object, found null")
        );
        assert_eq!(
            says(
                "quantity",
                "invalid type: floating point `1.5`, expected u32 at line 1 column 16"
            ),
            pair("quantity", "must be an integer, found 1.5")
        );
        assert_eq!(
            says(
                "name",
                "invalid type: boolean `true`, expected a string at line 1 column 12"
            ),
            pair("name", "must be a string, found true")
        );
        assert_eq!(
            says("n", r#"invalid type: string "a, expected b", expected i64"#),
            pair("n", "must be an integer, found a string")
        );
        assert_eq!(
            says("price", "invalid type: string \"x\", expected f64"),
            pair("price", "must be a number, found a string")
        );
    }

    #[test]
    fn a_value_out_of_range_says_the_range() {
        assert_eq!(
            says(
                "quantity",
                "invalid value: integer `-1`, expected u32 at line 1 column 14"
            ),
            pair(
                "quantity",
                "must be an integer from 0 to 4294967295, found -1"
            )
        );
        assert_eq!(
            says(
                "n",
                "invalid value: integer `300`, expected i8 at line 1 column 8"
            ),
            pair("n", "must be an integer from -128 to 127, found 300")
        );
    }

    #[test]
    fn a_missing_repeated_or_unknown_field_is_named_as_the_field() {
        assert_eq!(
            says("", "missing field `items` at line 1 column 2"),
            pair("items", "is required")
        );
        assert_eq!(
            says("items[0]", "missing field `quantity` at line 1 column 28"),
            pair("items[0].quantity", "is required")
        );
        assert_eq!(
            says("items", "missing field `items`"),
            pair("items.items", "is required")
        );
        assert_eq!(
            says("", "duplicate field `customer` at line 1 column 30"),
            pair("customer", "must be sent once")
        );
        assert_eq!(
            says(
                "colour",
                "unknown field `colour`, expected `customer` at line 1 column 9"
            ),
            pair("colour", "is not a known field")
        );
        assert_eq!(
            says(
                "items[0].colour",
                "unknown field `colour`, expected `quantity`"
            ),
            pair("items[0].colour", "is not a known field")
        );
    }

    #[test]
    fn the_whole_input_is_named_as_the_caller_says() {
        assert_eq!(
            data_error("query", "", "invalid digit found in string").field,
            "query"
        );
        assert_eq!(
            data_error("query", "", "duplicate field `limit`").field,
            "limit"
        );
    }

    #[test]
    fn a_short_array_for_an_object_asks_for_an_object() {
        assert_eq!(
            says(
                "",
                "invalid length 0, expected struct SessionRequest with 1 element at line 1 column 2"
            ),
            pair("body", "must be a JSON object")
        );
    }

    #[test]
    fn another_shape_keeps_serdes_words_without_the_position() {
        assert_eq!(
            says(
                "kind",
                "unknown variant `x`, expected `a` or `b` at line 1 column 12"
            ),
            pair("kind", "unknown variant `x`, expected `a` or `b`")
        );
        assert_eq!(
            says(
                "id",
                "UUID parsing failed: invalid length at line 9 column x"
            ),
            pair(
                "id",
                "UUID parsing failed: invalid length at line 9 column x"
            )
        );
    }
}
