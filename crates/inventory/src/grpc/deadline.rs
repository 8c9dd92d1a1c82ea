//! The caller's deadline as gRPC sends it: the `grpc-timeout` header
//! (gRPC over HTTP/2: at most 8 digits and a unit, `H M S m u n`).

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// The caller's timeout, or `None` when it sent none (or an invalid one,
/// which gRPC says to treat as none).
pub(crate) fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    parse(metadata.get("grpc-timeout")?.to_str().ok()?)
}

fn parse(value: &str) -> Option<Duration> {
    let unit_at = value.len().checked_sub(1)?;
    let (digits, unit) = value.split_at(unit_at);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_rejects_garbage() {
        assert_eq!(parse("1000000u"), Some(Duration::from_secs(1)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1M"), Some(Duration::from_secs(60)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "m", "123456789m", "12x", "-1m", "1.5S"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_the_header_from_metadata() {
        let mut md = MetadataMap::new();
        assert_eq!(grpc_timeout(&md), None);
        md.insert("grpc-timeout", "300m".parse().unwrap());
        assert_eq!(grpc_timeout(&md), Some(Duration::from_millis(300)));
    }
}
