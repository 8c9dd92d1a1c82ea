//! `shopeasy-identity`, the demo issuer process: started as full mode starts
//! it (settings from the environment alone), it signs a customer in, and the
//! token verifies through the JWKS it serves; its admin listener answers
//! like every service's; the built binary prints its ports and rejects bad
//! settings.

use std::{os::unix::fs::PermissionsExt, process::Command};

use shopeasy_identity::{
    AuthSettings, Verifier,
    demo::{DEMO_HEADER, KEY_FILE},
    server::App,
};
use shopeasy_runtime::{lifecycle::Bound, topology};

#[tokio::test]
async fn a_token_from_its_session_endpoint_verifies_through_its_jwks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("key");
    let data_dir = data.to_str().expect("utf-8 path");
    let bound = Bound::<App>::from_env(&[("DATA_DIR", data_dir), ("TOKEN_TTL_SECONDS", "600")])
        .await
        .expect("build");
    let kid = bound.service().issuer().key().kid().to_owned();
    let running = bound.start();
    let (public, admin) = (running.local_addr(), running.admin_addr());
    let http = reqwest::Client::new();

    let r = http
        .post(format!("http://{public}/api/session"))
        .json(&serde_json::json!({"customer": "alice"}))
        .send()
        .await
        .expect("session");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[DEMO_HEADER], "true");
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["expires_in"], 600, "TOKEN_TTL_SECONDS is read");
    assert_eq!(body["demo"], true);
    let token = body["access_token"].as_str().expect("token").to_owned();

    // What order and gateway are given in compose: the JWKS URL, the
    // default issuer and audience.
    let verifier = Verifier::from_settings(&AuthSettings::for_jwks(format!(
        "http://{public}/.well-known/jwks.json"
    )))
    .expect("verifier");
    let claims = verifier.verify(&token).await.expect("valid token");
    assert_eq!(claims.customer_id(), "alice");
    assert!(verifier.jwks().expect("jwks").snapshot().keys.has_kid(&kid));

    // A bad name is a 422 problem, not a token.
    let r = http
        .post(format!("http://{public}/api/session"))
        .json(&serde_json::json!({"customer": "Alice Smith"}))
        .send()
        .await
        .expect("session");
    assert_eq!(r.status(), 422);
    assert_eq!(r.headers()["content-type"], "application/problem+json");

    // The admin listener: health, metrics, and a report that says demo.
    for path in ["/health/live", "/health/ready", "/metrics"] {
        let r = http
            .get(format!("http://{admin}{path}"))
            .send()
            .await
            .expect("admin");
        assert_eq!(r.status(), 200, "{path}");
    }
    let report: serde_json::Value = http
        .get(format!("http://{admin}/admin/resilience"))
        .send()
        .await
        .expect("report")
        .json()
        .await
        .expect("json");
    assert_eq!(report["demo_issuer"]["demo"], true, "{report}");
    assert_eq!(report["demo_issuer"]["kid"], kid.as_str(), "{report}");
    running.stop().await.expect("stop");

    // The key was created private, and a restart keeps it: the old token
    // still verifies against the new process's JWKS.
    let mode = std::fs::metadata(data.join(KEY_FILE))
        .expect("key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = Bound::<App>::from_env(&[("DATA_DIR", data_dir)])
        .await
        .expect("rebuild")
        .start();
    let verifier = Verifier::from_settings(&AuthSettings::for_jwks(format!(
        "http://{}/.well-known/jwks.json",
        again.local_addr()
    )))
    .expect("verifier");
    assert_eq!(
        verifier
            .verify(&token)
            .await
            .expect("still valid")
            .customer_id(),
        "alice"
    );
    again.stop().await.expect("stop");
}

#[tokio::test]
async fn an_unusable_key_file_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(KEY_FILE), "not a key").expect("write");
    let err = Bound::<App>::from_env(&[("DATA_DIR", dir.path().to_str().expect("utf-8"))])
        .await
        .expect_err("a bad key file is an error");
    assert!(format!("{err:#}").contains(KEY_FILE), "{err:#}");
}

fn identity() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shopeasy-identity"));
    cmd.env_clear();
    cmd
}

#[test]
fn print_defaults_shows_the_topology_ports() {
    let out = identity().arg("--print-defaults").output().expect("run");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let node = topology::IDENTITY;
    assert!(
        text.contains(&format!("listen_addr = \"0.0.0.0:{}\"", node.public_port)),
        "{text}"
    );
    assert!(
        text.contains(&format!("admin_addr = \"0.0.0.0:{}\"", node.admin_port)),
        "{text}"
    );
    assert!(text.contains("issuer = \"shopeasy-demo\""), "{text}");
    assert!(text.contains("token_ttl_seconds = 3600"), "{text}");
}

#[test]
fn check_config_rejects_bad_values_naming_the_key() {
    let out = identity()
        .arg("--check-config")
        .env("TOKEN_TTL_SECONDS", "999999")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert!(err.contains("token_ttl_seconds"), "{err}");

    let out = identity()
        .arg("--check-config")
        .env("LOG__COLOUR", "never")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "an unknown key: {out:?}");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert!(err.contains("log.colour"), "{err}");

    let out = identity().arg("--check-config").output().expect("run");
    assert!(out.status.success(), "{out:?}");
}
