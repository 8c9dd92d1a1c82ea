//! The binary's shared command line: `--print-defaults` and `--check-config`.

use std::process::Command;

fn inventory() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shopeasy-inventory"));
    cmd.env_clear();
    cmd
}

/// Credentials a binary started from its environment accepts (32+ characters).
const LONG_ADMIN: &str = "admin-token-for-the-cli-test-0123456789";
const LONG_SERVICE: &str = "service-token-for-the-cli-test-0123456789";

#[test]
fn print_defaults_shows_the_spec_ports() {
    let out = inventory().arg("--print-defaults").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("listen_addr = \"0.0.0.0:50051\""), "{text}");
    assert!(text.contains("admin_addr = \"0.0.0.0:9083\""), "{text}");
    assert!(text.contains("request_timeout_seconds = 5"), "{text}");
}

#[test]
fn check_config_masks_secrets_and_rejects_bad_values() {
    let out = inventory()
        .arg("--check-config")
        .env("ADMIN_TOKEN", LONG_ADMIN)
        .env("SERVICE_TOKEN", LONG_SERVICE)
        .env("DATABASE_URL", "postgres://app:pa55@db/inventory")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains(LONG_ADMIN) && !text.contains(LONG_SERVICE) && !text.contains("pa55"),
        "{text}"
    );

    let out = inventory()
        .arg("--check-config")
        .env("REQUEST_TIMEOUT_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("request_timeout_seconds"), "{err}");
}

/// A binary started from its environment refuses a short credential, or one
/// this project has published as an example, naming the key (and never
/// printing the value); an empty one (nobody admitted) starts.
#[test]
fn short_or_published_tokens_refuse_to_start_naming_the_key() {
    let published = shopeasy_runtime::settings::credential::PUBLISHED_EXAMPLES;
    for (var, key, value) in [
        ("ADMIN_TOKEN", "admin_token", "very-secret"),
        (
            "SERVICE_TOKEN",
            "service_token",
            "0123456789abcdef0123456789abcde",
        ),
        ("ADMIN_TOKEN", "admin_token", published[0]),
        ("SERVICE_TOKEN", "service_token", published[1]),
    ] {
        let out = inventory()
            .arg("--check-config")
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{var}={value}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(&format!("{key} (env {var})")), "{err}");
        assert!(err.contains("at least 32 characters"), "{err}");
        assert!(!err.contains(value), "the value is not printed: {err}");
    }
    let out = inventory()
        .arg("--check-config")
        .env("ADMIN_TOKEN", "")
        .env("SERVICE_TOKEN", "")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
