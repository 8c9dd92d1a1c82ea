//! The binary refuses bad settings before it starts (SPEC §8).

use std::process::Command;

fn gateway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shopeasy-gateway"))
}

#[test]
fn zero_or_absurd_settings_refuse_to_start_with_a_clear_message() {
    let out = gateway()
        .arg("--check-config")
        .env("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "0")
        .env("RESILIENCE__GATEWAY__GET_RETRIES", "500")
        .env("ROUTES__ORDER_URL", "not a url")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "resilience.gateway.activity_timeout_seconds (env RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS) = 0: must be between 0.05 and 3600 seconds",
        "resilience.gateway.get_retries (env RESILIENCE__GATEWAY__GET_RETRIES) = 500: must be between 0 and 10",
        "routes.order_url (env ROUTES__ORDER_URL) = not a url",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn defaults_are_valid_and_printable() {
    let out = gateway().arg("--print-defaults").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("activity_timeout_seconds = 30.0"), "{text}");
    assert!(
        text.contains("product_url = \"http://127.0.0.1:8081\""),
        "{text}"
    );
    let out = gateway()
        .arg("--check-config")
        .env(
            "AUTH__JWKS_URL",
            "http://127.0.0.1:8085/.well-known/jwks.json",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn without_a_token_key_source_the_gateway_refuses_to_start() {
    let out = gateway()
        .arg("--check-config")
        .env_remove("AUTH__JWKS_URL")
        .env_remove("AUTH__PUBLIC_KEY_PEM")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("auth.jwks_url (env AUTH__JWKS_URL)")
            && err.contains("one of jwks_url or public_key_pem is required"),
        "{err}"
    );
}
