//! The binary's shared command line: `--print-defaults` and `--check-config`.

use std::process::Command;

fn inventory() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shopeasy-inventory"));
    cmd.env_clear();
    cmd
}

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
        .env("ADMIN_TOKEN", "very-secret")
        .env("DATABASE_URL", "postgres://app:pa55@db/inventory")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains("very-secret") && !text.contains("pa55"),
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
