//! A request body's object is a JSON object, never an array, and a body
//! read as members ([`JsonMembers`]) names each once.
//!
//! serde's derived `Deserialize` for a struct also takes a sequence of its
//! fields in order, so `["alice"]` would be read as `{"customer":"alice"}`
//! and `{"items":[["<id>",2]]}` as an order line. The OpenAPI documents say
//! object, and input they refuse must be refused, so the request types
//! take only a map: each derives with `#[serde(remote = "Self")]` (which
//! makes the derived code an inherent `deserialize`) and is named in
//! [`only_json_objects!`](crate::only_json_objects), which implements
//! [`FromJsonObject`] with that code and `Deserialize` with
//! [`only_object`]. serde has no attribute for this; this is the smallest
//! wrapper that keeps the derive, its attributes and the field paths of
//! its errors.

use std::{fmt, marker::PhantomData};

use serde::de::{
    self, Deserialize, Deserializer, MapAccess, Visitor, value::MapAccessDeserializer,
};
use serde_json::{Map, Value};

/// A struct that only a JSON object may fill.
pub trait FromJsonObject: Sized {
    /// The derived, field-by-field deserialization (the inherent
    /// `deserialize` that `#[serde(remote = "Self")]` generates).
    ///
    /// # Errors
    /// The deserializer's, for a missing, repeated or ill-typed field.
    fn from_fields<'de, D: Deserializer<'de>>(fields: D) -> Result<Self, D::Error>;
}

/// `T` from a JSON object; anything else (an array above all) is the
/// error "expected a JSON object".
///
/// # Errors
/// The deserializer's, for anything but an object or for a bad field.
pub fn only_object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromJsonObject,
{
    struct Object<T>(PhantomData<T>);

    impl<'de, T: FromJsonObject> Visitor<'de> for Object<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::from_fields(MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(Object(PhantomData))
}

/// A JSON object whose every member is named once, for a handler that
/// reads a body's members itself (product's drafts).
///
/// serde_json's `Value` keeps the last of two members of one name without
/// a word, where another parser (a proxy's, a client's) may keep the
/// first: a body whose meaning depends on who reads it is refused, with
/// serde's words for it (``duplicate field `sku` ``, which the `Json`
/// extractor answers as 422 naming `sku`), as a derived type refuses it.
/// Only the top level is checked: the values are `Value`s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonMembers(pub Map<String, Value>);

impl<'de> Deserialize<'de> for JsonMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;

        impl<'de> Visitor<'de> for Members {
            type Value = JsonMembers;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonMembers, A::Error> {
                let mut members = Map::new();
                while let Some(name) = map.next_key::<String>()? {
                    if members.contains_key(&name) {
                        return Err(de::Error::custom(format_args!("duplicate field `{name}`")));
                    }
                    let value = map.next_value()?;
                    members.insert(name, value);
                }
                Ok(JsonMembers(members))
            }
        }

        deserializer.deserialize_map(Members)
    }
}

/// Makes each struct named take only a JSON object: implements
/// [`FromJsonObject`](crate::problem::FromJsonObject) with its derived
/// code and `Deserialize` with
/// [`only_object`](crate::problem::only_object). Each must derive
/// `Deserialize` with `#[serde(remote = "Self")]`; one that also derives
/// `Serialize` (which the attribute turns into an inherent `serialize`
/// too) is named after `serialize:`, and gets its `Serialize` back.
#[macro_export]
macro_rules! only_json_objects {
    (serialize: $($ty:ty),+ $(,)?) => {
        $crate::only_json_objects!($($ty),+);
        $(
            impl ::serde::Serialize for $ty {
                fn serialize<S: ::serde::Serializer>(
                    &self,
                    serializer: S,
                ) -> ::core::result::Result<S::Ok, S::Error> {
                    // The inherent, derived `serialize`.
                    <$ty>::serialize(self, serializer)
                }
            }
        )+
    };
    ($($ty:ty),+ $(,)?) => {$(
        impl $crate::problem::FromJsonObject for $ty {
            fn from_fields<'de, D: ::serde::Deserializer<'de>>(
                fields: D,
            ) -> ::core::result::Result<Self, D::Error> {
                // The inherent, derived `deserialize`.
                <$ty>::deserialize(fields)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::core::result::Result<Self, D::Error> {
                $crate::problem::only_object(deserializer)
            }
        }
    )+};
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::JsonMembers;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(remote = "Self")]
    struct Line {
        sku: String,
        #[serde(default)]
        quantity: u32,
    }

    crate::only_json_objects!(Line);

    /// Both ways, as the fault API's proxy.
    #[derive(Debug, PartialEq, serde::Serialize, Deserialize)]
    #[serde(remote = "Self")]
    struct Both {
        name: String,
    }

    crate::only_json_objects!(serialize: Both);

    #[test]
    fn a_type_both_ways_still_serializes_and_takes_only_an_object() {
        let both = Both { name: "a".into() };
        let text = serde_json::to_string(&both).unwrap();
        assert_eq!(text, r#"{"name":"a"}"#);
        assert_eq!(serde_json::from_str::<Both>(&text).unwrap(), both);
        assert!(serde_json::from_str::<Both>(r#"["a"]"#).is_err());
    }

    #[derive(Debug, Deserialize)]
    struct Order {
        #[allow(dead_code)]
        items: Vec<Line>,
    }

    #[test]
    fn an_object_fills_the_struct_with_its_defaults() {
        let line: Line = serde_json::from_str(r#"{"sku":"A-1"}"#).unwrap();
        assert_eq!(
            line,
            Line {
                sku: "A-1".into(),
                quantity: 0
            }
        );
    }

    #[test]
    fn an_array_of_the_fields_is_refused() {
        let e = serde_json::from_str::<Line>(r#"["A-1",2]"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid type: sequence, expected a JSON object"),
            "{e}"
        );
        let e = serde_json::from_str::<Order>(r#"{"items":[["A-1",2]]}"#).unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
    }

    #[test]
    fn members_are_an_object_each_named_once() {
        let m: JsonMembers = serde_json::from_str(r#"{"sku":"A","n":{"x":1}}"#).unwrap();
        assert_eq!(m.0.len(), 2);
        assert_eq!(m.0["n"], serde_json::json!({"x": 1}));
        let e = serde_json::from_str::<JsonMembers>(r#"{"sku":"A","n":1,"sku":"B"}"#).unwrap_err();
        assert!(e.to_string().starts_with("duplicate field `sku`"), "{e}");
        let e = serde_json::from_str::<JsonMembers>("[]").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid type: sequence, expected a JSON object"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_field_keeps_serdes_message() {
        let e = serde_json::from_str::<Line>(r#"{"quantity":1}"#).unwrap_err();
        assert!(e.to_string().starts_with("missing field `sku`"), "{e}");
        let e = serde_json::from_str::<Line>(r#"{"sku":"A","sku":"B"}"#).unwrap_err();
        assert!(e.to_string().starts_with("duplicate field `sku`"), "{e}");
    }
}
