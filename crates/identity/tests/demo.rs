//! The demo issuer: its key survives a restart, it says it is a demo, and
//! its tokens verify with a `Verifier` pointed at the JWKS it serves.

mod support;

use std::os::unix::fs::PermissionsExt;

use axum::http::StatusCode;
use shopeasy_identity::{
    AuthSettings, DemoIssuer, DemoIssuerConfig, Verifier,
    demo::{DEMO_HEADER, KEY_FILE},
};

fn config() -> DemoIssuerConfig {
    DemoIssuerConfig::default()
}

#[tokio::test]
async fn the_key_survives_a_restart_and_is_private() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first = DemoIssuer::open(&data, config()).expect("open");
    let token = first.issue("alice").expect("issue").access_token;
    drop(first);

    let second = DemoIssuer::open(&data, config()).expect("reopen");
    let other = DemoIssuer::open(&dir.path().join("elsewhere"), config()).expect("open");
    assert_ne!(
        second.key().kid(),
        other.key().kid(),
        "a new folder gets a new key"
    );

    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&data.join(KEY_FILE)), 0o600);
    assert_eq!(mode(&data), 0o700);

    // A token signed before the restart verifies against the JWKS served
    // after it.
    let addr = support::serve(second.router()).await;
    let v = Verifier::from_settings(&AuthSettings::for_jwks(format!(
        "http://{addr}/.well-known/jwks.json"
    )))
    .expect("verifier");
    assert_eq!(
        v.verify(&token).await.expect("valid").customer_id(),
        "alice"
    );
    let jwks = v.jwks().expect("jwks").snapshot();
    assert!(jwks.keys.has_kid(second.key().kid()));
}

#[tokio::test]
async fn a_signed_in_demo_customer_is_verified_through_the_served_jwks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let issuer = DemoIssuer::open(dir.path(), config()).expect("open");
    let addr = support::serve(issuer.router()).await;
    let http = reqwest::Client::new();

    let r = http
        .post(format!("http://{addr}/api/session"))
        .json(&serde_json::json!({"customer": "alice"}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[DEMO_HEADER], "true");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["demo"], true);
    assert_eq!(body["expires_in"], 3600);
    let token = body["access_token"].as_str().expect("token");

    let header = jsonwebtoken::decode_header(token).expect("header");
    assert_eq!(header.typ.as_deref(), Some("at+jwt"));
    assert_eq!(header.kid.as_deref(), Some(issuer.key().kid()));

    let v = Verifier::from_settings(&AuthSettings::for_jwks(format!(
        "http://{addr}/.well-known/jwks.json"
    )))
    .expect("verifier");
    let claims = v.verify(token).await.expect("valid");
    assert_eq!(claims.customer_id(), "alice");
    assert_eq!(claims.client_id.as_deref(), Some("shopeasy-demo"));

    let discovery: serde_json::Value = http
        .get(format!("http://{addr}/.well-known/openid-configuration"))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(discovery["demo"], true);
    assert_eq!(discovery["jwks_uri"], "/.well-known/jwks.json");
}

#[tokio::test]
async fn bad_sign_in_requests_get_problems_not_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let issuer = DemoIssuer::open(dir.path(), config()).expect("open");
    let addr = support::serve(issuer.router()).await;
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/api/session");

    for (body, status) in [
        (
            r#"{"customer":"Alice Smith"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (r#"{"customer":""}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (
            &format!(r#"{{"customer":"{}"}}"#, "a".repeat(33)),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (r#"{"name":"alice"}"#, StatusCode::UNPROCESSABLE_ENTITY),
        // serde's derive would read the array as the struct's fields.
        (r#"["alice"]"#, StatusCode::UNPROCESSABLE_ENTITY),
        (r#"{"customer":"#, StatusCode::BAD_REQUEST),
    ] {
        let r = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), status, "{body}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{body}"
        );
        assert_eq!(r.headers()[DEMO_HEADER], "true");
        let p: serde_json::Value = r.json().await.expect("json");
        assert!(
            p["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
    let text = http
        .post(&url)
        .header("content-type", "text/plain")
        .body(r#"{"customer":"alice"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(text.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        issuer.issue("Bob").err().map(|e| e.to_string()),
        Some("a demo customer name is 1 to 32 characters of a-z, 0-9, _ and -".into())
    );
}

#[tokio::test]
async fn a_url_issuer_publishes_its_jwks_under_it() {
    let issuer = DemoIssuer::new(
        support::key(5),
        DemoIssuerConfig {
            issuer: "http://127.0.0.1:8080/".into(),
            ..config()
        },
    );
    assert_eq!(
        issuer.discovery()["jwks_uri"],
        "http://127.0.0.1:8080/.well-known/jwks.json"
    );
}

#[tokio::test]
async fn the_public_key_pem_verifies_its_tokens_and_no_other_keys() {
    let key = shopeasy_identity::DemoKey::from_seed([7; 32]).expect("key");
    let issuer = DemoIssuer::new(key.clone(), config());
    let settings = AuthSettings {
        public_key_pem: key.public_key_pem(),
        ..AuthSettings::default()
    };
    let v = Verifier::from_settings(&settings).expect("verifier from the public PEM");
    let token = issuer.issue("bob").expect("issue").access_token;
    assert_eq!(v.verify(&token).await.expect("valid").customer_id(), "bob");

    let stranger = DemoIssuer::new(
        shopeasy_identity::DemoKey::from_seed([8; 32]).expect("key"),
        config(),
    );
    let forged = stranger.issue("bob").expect("issue").access_token;
    assert!(
        v.verify(&forged).await.is_err(),
        "another key's token is refused"
    );
}
