//! The rules every credential setting follows (the admin token, the service
//! token between order and inventory): a key whose last segment ends in
//! `_token` is a credential.
//!
//! A service started from its environment or a file refuses a credential
//! shorter than [`MIN_TOKEN_LEN`] characters, or equal to a value this
//! project has published (an example in a document, `.env.example`, a
//! Kubernetes example), naming the key: such a value is as good as known to
//! everyone, and a service that starts with it has an open door. An empty
//! credential is allowed: it admits nobody (`crate::auth`).
//!
//! The embedded demo is the exception: its launcher builds every service's
//! settings in-process and marks its loads ([`crate::settings::Loader::embedded_demo`]);
//! a binary started from the environment never does, so no environment
//! variable can switch the rule off.

use super::Validator;

/// The shortest credential a service started from its environment accepts:
/// 32 characters (the launcher's random tokens are 32 hex digits, 128 bits).
pub const MIN_TOKEN_LEN: usize = 32;

/// Values this project has published as examples (documents, example
/// files, the Kubernetes example Secrets, before and now): never accepted as
/// a credential outside the embedded demo. deploy-check keeps this list
/// complete: every token value in `.env.example`, the Kubernetes overlays and
/// the documents must be empty or listed here.
pub const PUBLISHED_EXAMPLES: &[&str] = &[
    "change-me-demo-admin-token",
    "change-me-demo-service-token",
    "secret",
    "s3cret",
    "very-secret",
    "test-admin-token",
    "e2e-admin-token",
    "REPLACE-WITH-32-OR-MORE-RANDOM-CHARACTERS",
];

/// Whether `key` (dotted) names a credential: its last segment ends in
/// `_token` (`admin_token`, `inventory.service_token`).
pub fn is_credential_key(key: &str) -> bool {
    key.rsplit('.')
        .next()
        .is_some_and(|last| last.ends_with("_token"))
}

/// What a credential must be, as the error (and the settings reference) says.
pub fn rule() -> String {
    format!(
        "must be empty (no credential) or at least {MIN_TOKEN_LEN} characters and not a \
         published example (generate one: openssl rand -hex 32)"
    )
}

/// Checks the credential `value` given for `key`: records an error unless it
/// is empty, or long enough and unpublished, or `embedded_demo` is set.
/// The value itself is never recorded, only its length.
pub fn check(v: &mut Validator, key: &str, value: &str, embedded_demo: bool) {
    if embedded_demo || value.is_empty() {
        return;
    }
    let published = PUBLISHED_EXAMPLES.contains(&value);
    if value.chars().count() < MIN_TOKEN_LEN || published {
        let shown = if published {
            "a published example value".to_owned()
        } else {
            format!("a value of {} characters", value.chars().count())
        };
        v.fail(key, shown, rule());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(key: &str, value: &str, demo: bool) -> Vec<String> {
        let mut v = Validator::new();
        check(&mut v, key, value, demo);
        v.into_errors().into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn short_and_published_tokens_are_refused_naming_the_key() {
        let short = errors("admin_token", "abc", false);
        assert_eq!(short.len(), 1);
        assert!(
            short[0].starts_with("admin_token (env ADMIN_TOKEN)"),
            "{short:?}"
        );
        assert!(short[0].contains("3 characters"), "{short:?}");
        assert!(!short[0].contains("abc"), "the value is not printed");
        let published = errors("inventory.service_token", PUBLISHED_EXAMPLES[7], false);
        assert_eq!(published.len(), 1);
        assert!(published[0].contains("published example"), "{published:?}");
        assert!(errors("admin_token", &"x".repeat(31), false).len() == 1);
    }

    #[test]
    fn empty_long_or_embedded_tokens_are_accepted() {
        assert!(errors("admin_token", "", false).is_empty());
        assert!(errors("admin_token", &"x".repeat(32), false).is_empty());
        assert!(errors("admin_token", "abc", true).is_empty());
        assert!(errors("admin_token", "change-me-demo-admin-token", true).is_empty());
    }

    #[test]
    fn credential_keys_are_the_token_keys() {
        assert!(is_credential_key("admin_token"));
        assert!(is_credential_key("service_token"));
        assert!(is_credential_key("inventory.service_token"));
        assert!(!is_credential_key("token_bucket.rate"));
        assert!(!is_credential_key("database_url"));
    }
}
