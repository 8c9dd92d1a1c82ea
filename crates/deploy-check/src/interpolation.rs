//! Compose's variable interpolation: `${VAR}`, `${VAR:-default}`,
//! `${VAR-default}`, `${VAR:?error}`, `$VAR` and the `$$` escape.

/// One `${…}` or `$VAR` in a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpolation {
    /// The variable read from the environment or `.env`.
    pub var: String,
    /// The default after `:-` or `-`, if any.
    pub default: Option<String>,
}

/// Every interpolation in `text`, in order.
pub fn find(text: &str) -> Vec<Interpolation> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            rest = after; // `$$` is a literal dollar
        } else if let Some(body) = rest.strip_prefix('{') {
            let end = body.find('}').unwrap_or(body.len());
            out.push(parse_braced(&body[..end]));
            rest = body.get(end + 1..).unwrap_or_default();
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end > 0 {
                out.push(Interpolation {
                    var: rest[..end].to_owned(),
                    default: None,
                });
            }
            rest = &rest[end..];
        }
    }
    out
}

fn parse_braced(body: &str) -> Interpolation {
    let end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(body.len());
    let (var, tail) = body.split_at(end);
    let default = tail
        .strip_prefix(":-")
        .or_else(|| tail.strip_prefix('-'))
        .map(str::to_owned);
    Interpolation {
        var: var.to_owned(),
        default,
    }
}

/// When `value` is exactly `${var:-default}` for its own variable `var`,
/// the default; this is how compose repeats a tunable setting.
pub fn own_default<'a>(var: &str, value: &'a str) -> Option<&'a str> {
    value
        .strip_prefix("${")?
        .strip_suffix('}')?
        .strip_prefix(var)?
        .strip_prefix(":-")
        .filter(|d| !d.contains(['$', '}']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_form() {
        let found = find("a ${A} ${B:-1.5} ${C-x} ${D:?set D} $E $$F ${G:-}");
        let vars: Vec<(&str, Option<&str>)> = found
            .iter()
            .map(|i| (i.var.as_str(), i.default.as_deref()))
            .collect();
        assert_eq!(
            vars,
            [
                ("A", None),
                ("B", Some("1.5")),
                ("C", Some("x")),
                ("D", None),
                ("E", None),
                ("G", Some("")),
            ]
        );
    }

    #[test]
    fn own_default_needs_the_same_variable() {
        assert_eq!(own_default("A__B", "${A__B:-3}"), Some("3"));
        assert_eq!(own_default("A__B", "${A__B:-}"), Some(""));
        assert_eq!(own_default("A__B", "${A__BC:-3}"), None);
        assert_eq!(own_default("A__B", "3"), None);
        assert_eq!(own_default("A__B", "x${A__B:-3}"), None);
    }
}
