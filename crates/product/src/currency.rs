//! The active ISO 4217 currency codes (alphabetic), for [`crate::domain::Currency`].
//!
//! Funds codes, precious metals and testing codes (`XAU`, `XTS`, `XXX`…) are
//! left out: a price is never quoted in them.

/// Active ISO 4217 codes, sorted (binary-searched).
const CODES: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BHD",
    "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF",
    "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN",
    "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD",
    "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD", "JPY", "KES",
    "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL",
    "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN",
    "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP",
    "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK",
    "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT",
    "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VED", "VES",
    "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
];

/// The code as a `'static` string when `code` is an active ISO 4217 code.
pub(crate) fn lookup(code: &str) -> Option<&'static str> {
    CODES.binary_search(&code).ok().map(|i| CODES[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_sorted_and_unique() {
        assert!(CODES.windows(2).all(|w| w[0] < w[1]));
        // The document's pattern admits every code, so a string it refuses
        // is no code (what the API conformance test relies on).
        let pattern = regex::Regex::new(shopeasy_product_api::CURRENCY_PATTERN).unwrap();
        assert!(CODES.iter().all(|c| pattern.is_match(c)));
        assert_eq!(lookup("USD"), Some("USD"));
        assert_eq!(lookup("usd"), None);
    }
}
