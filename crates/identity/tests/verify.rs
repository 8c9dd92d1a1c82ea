//! Each way a token can be wrong gets its own error and a 401 with an RFC
//! 6750 challenge; a good token gives its claims. Keys come from a real
//! JWKS provider on 127.0.0.1:0.

mod support;

use axum::{
    Router,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    routing::get,
};
use shopeasy_identity::{AuthError, AuthSettings, Authenticated, Verifier};
use support::{AUDIENCE, ISSUER, Provider, b64, claims, key, now, settings};
use tokio::time::Instant;

/// A verifier over a provider publishing key 1.
async fn verifier() -> (Verifier, Provider) {
    let k = key(1);
    let (provider, addr) = Provider::start(&[&k]).await;
    let v =
        Verifier::from_settings(&settings(format!("http://{addr}/jwks.json"))).expect("verifier");
    (v, provider)
}

fn with(claims: serde_json::Value, edit: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
    let mut c = claims;
    edit(&mut c);
    c
}

#[tokio::test]
async fn a_valid_token_gives_its_customer_and_scopes() {
    let (v, provider) = verifier().await;
    let token = key(1).sign(&claims("alice")).expect("sign");
    let c = v.verify(&token).await.expect("valid");
    assert_eq!(c.customer_id(), "alice");
    assert!(c.has_scope("orders:write"));
    assert_eq!(c.client_id.as_deref(), Some("test"));
    assert_eq!(
        provider.requests(),
        1,
        "the first token fetched the keys once"
    );
    v.verify(&token).await.expect("valid again");
    assert_eq!(provider.requests(), 1, "later tokens use the cached keys");
}

#[tokio::test]
async fn every_bad_token_gets_its_own_error() {
    let (v, _provider) = verifier().await;
    let good = claims("alice");
    let signed = |c: serde_json::Value| key(1).sign(&c).expect("sign");
    let cases: Vec<(&str, String, AuthError)> = vec![
        (
            "expired beyond the leeway",
            signed(with(good.clone(), |c| c["exp"] = (now() - 120).into())),
            AuthError::Expired,
        ),
        (
            "not valid yet beyond the leeway",
            signed(with(good.clone(), |c| c["nbf"] = (now() + 600).into())),
            AuthError::NotYetValid,
        ),
        (
            "another issuer",
            signed(with(good.clone(), |c| {
                c["iss"] = "https://evil.test".into()
            })),
            AuthError::WrongIssuer,
        ),
        (
            "another audience",
            signed(with(good.clone(), |c| c["aud"] = "someone-else".into())),
            AuthError::WrongAudience,
        ),
        (
            "no sub",
            signed(with(good.clone(), |c| {
                c.as_object_mut().expect("object").remove("sub");
            })),
            AuthError::MissingClaim("sub"),
        ),
        (
            "no exp",
            signed(with(good.clone(), |c| {
                c.as_object_mut().expect("object").remove("exp");
            })),
            AuthError::MissingClaim("exp"),
        ),
        (
            // jsonwebtoken treats a `sub` of the wrong type as absent.
            "a numeric sub",
            signed(with(good.clone(), |c| c["sub"] = 42.into())),
            AuthError::MissingClaim("sub"),
        ),
        (
            "an empty sub",
            signed(with(good.clone(), |c| c["sub"] = "".into())),
            AuthError::InvalidClaim("sub"),
        ),
        ("malformed", "not-a-jwt".into(), AuthError::Malformed),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(format!(r#"{{"alg":"none","kid":"{}"}}"#, key(1).kid())),
                b64(good.to_string())
            ),
            AuthError::UnsupportedAlgorithm,
        ),
    ];
    for (what, token, expected) in cases {
        let got = v.verify(&token).await.err();
        assert_eq!(got, Some(expected), "{what}");
        let response = expected.to_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .expect("ascii");
        assert!(
            challenge.starts_with(
                "Bearer realm=\"shopeasy\", error=\"invalid_token\", error_description=\""
            ),
            "{what}: {challenge}"
        );
    }
}

#[tokio::test]
async fn a_token_signed_by_another_key_under_our_kid_fails_its_signature() {
    let (v, _provider) = verifier().await;
    let forged = key(9).sign(&claims("alice")).expect("sign");
    // Re-label the forger's token with our key's kid.
    let mut parts: Vec<String> = forged.split('.').map(str::to_owned).collect();
    parts[0] = b64(format!(
        r#"{{"alg":"EdDSA","typ":"at+jwt","kid":"{}"}}"#,
        key(1).kid()
    ));
    assert_eq!(
        v.verify(&parts.join(".")).await.err(),
        Some(AuthError::BadSignature)
    );
}

#[tokio::test]
async fn an_hs256_token_keyed_with_our_public_key_is_refused() {
    let (v, _provider) = verifier().await;
    let public = key(1).jwk().clone();
    let secret = serde_json::to_vec(&public).expect("json");
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(key(1).kid().to_owned());
    let token = jsonwebtoken::encode(
        &header,
        &claims("mallory"),
        &jsonwebtoken::EncodingKey::from_secret(&secret).expect("key"),
    )
    .expect("sign");
    assert_eq!(
        v.verify(&token).await.err(),
        Some(AuthError::UnsupportedAlgorithm)
    );
}

#[tokio::test]
async fn a_little_clock_skew_is_forgiven() {
    let (v, _provider) = verifier().await;
    let skewed = with(claims("alice"), |c| {
        c["exp"] = (now() - 10).into();
        c["nbf"] = (now() + 10).into();
    });
    let token = key(1).sign(&skewed).expect("sign");
    v.verify(&token).await.expect("within the 30 s leeway");
}

#[tokio::test]
async fn a_configured_public_key_verifies_without_a_jwks() {
    let v = Verifier::from_settings(&AuthSettings {
        public_key_pem: support::public_pem(&key(3)),
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        ..AuthSettings::default()
    })
    .expect("verifier");
    let c = v
        .verify(&key(3).sign(&claims("bob")).expect("sign"))
        .await
        .expect("valid");
    assert_eq!(c.customer_id(), "bob");
    assert_eq!(
        v.verify(&key(4).sign(&claims("bob")).expect("sign"))
            .await
            .err(),
        Some(AuthError::BadSignature)
    );
}

#[tokio::test]
async fn an_axum_route_answers_401_with_a_challenge_and_a_problem() {
    let (v, _provider) = verifier().await;
    async fn mine(Authenticated(claims): Authenticated) -> String {
        format!("orders of {}", claims.customer_id())
    }
    let addr = support::serve(Router::new().route("/api/orders", get(mine)).with_state(v)).await;
    let url = format!("http://{addr}/api/orders");
    let http = reqwest::Client::new();

    let none = http.get(&url).send().await.expect("send");
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        none.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"shopeasy\""
    );
    assert_eq!(
        none.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let body: serde_json::Value = none.json().await.expect("json");
    assert_eq!(body["type"], "urn:shopeasy:problem:unauthorized");
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));

    let basic = http
        .get(&url)
        .header(header::AUTHORIZATION, "Basic YWxpY2U6eA==")
        .send()
        .await
        .expect("send");
    assert_eq!(
        basic.status(),
        StatusCode::UNAUTHORIZED,
        "another scheme is no bearer token"
    );

    let expired = key(1)
        .sign(&with(claims("alice"), |c| c["exp"] = (now() - 120).into()))
        .expect("sign");
    let bad = http
        .get(&url)
        .bearer_auth(expired)
        .send()
        .await
        .expect("send");
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        bad.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"shopeasy\", error=\"invalid_token\", error_description=\"the token has expired\""
    );
    let body: serde_json::Value = bad.json().await.expect("json");
    assert_eq!(body["type"], "urn:shopeasy:problem:invalid-token");
    assert_eq!(body["detail"], "the token has expired");

    let good = key(1).sign(&claims("alice")).expect("sign");
    let ok = http.get(&url).bearer_auth(good).send().await.expect("send");
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.text().await.expect("text"), "orders of alice");
}

#[tokio::test]
async fn two_authorization_headers_are_malformed() {
    let (v, _provider) = verifier().await;
    let token = key(1).sign(&claims("alice")).expect("sign");
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("value");
    headers.append(header::AUTHORIZATION, value.clone());
    assert_eq!(
        v.authenticate(&headers).await.ok().map(|c| c.subject),
        Some("alice".into())
    );
    headers.append(header::AUTHORIZATION, value);
    assert_eq!(
        v.authenticate(&headers).await.err(),
        Some(AuthError::Malformed)
    );
}

/// A throw-away key of `tests/fixtures`.
fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

/// A verifier of the fixed key set `jwks`, served at `/certs`.
async fn verifier_of(jwks: serde_json::Value) -> Verifier {
    let addr = support::serve(Router::new().route(
        "/certs",
        get(move || {
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    ))
    .await;
    Verifier::from_settings(&settings(format!("http://{addr}/certs"))).expect("verifier")
}

/// Signs `claims` with `key` under `alg` and `kid`, as an access token
/// (`typ: at+jwt`; `Header::new` says `JWT`, which is refused).
fn sign_with(
    key: &jsonwebtoken::EncodingKey,
    alg: jsonwebtoken::Algorithm,
    kid: &str,
    claims: &serde_json::Value,
) -> String {
    sign_header(key, alg, Some(kid), claims)
}

/// Signs `claims` with `key` under `alg`, `kid` (`None`: no `kid`) and
/// `typ: at+jwt`.
fn sign_header(
    key: &jsonwebtoken::EncodingKey,
    alg: jsonwebtoken::Algorithm,
    kid: Option<&str>,
    claims: &serde_json::Value,
) -> String {
    let mut header = jsonwebtoken::Header::new(alg);
    header.typ = Some("at+jwt".into());
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).expect("sign")
}

#[tokio::test]
async fn es256_and_rs256_tokens_verify_from_a_jwks_and_from_a_pem() {
    use jsonwebtoken::{Algorithm, EncodingKey, jwk::Jwk};
    let ec = EncodingKey::from_ec_pem(fixture("test-es256-private.pem").as_bytes()).expect("ec");
    let rsa = EncodingKey::from_rsa_pem(fixture("test-rsa-private.pem").as_bytes()).expect("rsa");
    let mut ec_jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).expect("jwk");
    ec_jwk.common.key_id = Some("ec-1".into());
    let mut rsa_jwk = Jwk::from_encoding_key(&rsa, Algorithm::RS256).expect("jwk");
    rsa_jwk.common.key_id = Some("rsa-1".into());
    let v = verifier_of(serde_json::json!({ "keys": [ec_jwk, rsa_jwk] })).await;
    let es = sign_with(&ec, Algorithm::ES256, "ec-1", &claims("erin"));
    let rs = sign_with(&rsa, Algorithm::RS256, "rsa-1", &claims("ravi"));
    assert_eq!(v.verify(&es).await.expect("ES256").customer_id(), "erin");
    assert_eq!(v.verify(&rs).await.expect("RS256").customer_id(), "ravi");
    // A key used under another family's algorithm is refused outright.
    let confused = sign_with(&rsa, Algorithm::RS256, "ec-1", &claims("ravi"));
    assert_eq!(
        v.verify(&confused).await.err(),
        Some(AuthError::UnsupportedAlgorithm)
    );

    for (pem, token) in [("test-es256-public.pem", &es), ("test-rsa-public.pem", &rs)] {
        let v = Verifier::from_settings(&AuthSettings {
            public_key_pem: fixture(pem),
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            ..AuthSettings::default()
        })
        .expect("verifier");
        v.verify(token).await.expect(pem);
    }
}

#[tokio::test]
async fn a_verified_token_is_checked_once_until_its_keys_are_withdrawn() {
    let (v, provider) = verifier().await;
    let token = key(1).sign(&claims("alice")).expect("sign");
    for _ in 0..10 {
        assert_eq!(
            v.verify(&token).await.expect("valid").customer_id(),
            "alice"
        );
    }
    // The first verify fetched the keys; the refresh below may start once
    // min_refresh_interval has passed since.
    let fetched = Instant::now();
    assert_eq!(v.signature_checks(), 1, "the same bytes are verified once");
    assert_eq!(v.cached_tokens(), 1);

    // Another signature over the same claims is other bytes: checked in
    // full, refused, and not kept.
    let mut forged = token.clone();
    let last = forged.pop().expect("a character");
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert!(v.verify(&forged).await.is_err());
    assert!(v.verify(&forged).await.is_err());
    assert_eq!(
        v.signature_checks(),
        3,
        "a refused token is checked each time"
    );
    assert_eq!(v.cached_tokens(), 1);

    // The issuer withdraws key 1: after the next refresh the cached verdict
    // no longer answers, and the token no longer verifies.
    provider.set_keys(&[&key(2)]);
    support::after_min_interval(fetched).await;
    v.jwks()
        .expect("a JWKS")
        .refresh()
        .await
        .expect("refreshed");
    assert_eq!(v.verify(&token).await.err(), Some(AuthError::UnknownKey));
    assert_eq!(v.signature_checks(), 4);
}

#[tokio::test]
async fn a_cached_token_expires_on_time() {
    let (v, _provider) = {
        let k = key(1);
        let (provider, addr) = Provider::start(&[&k]).await;
        let mut s = settings(format!("http://{addr}/jwks.json"));
        s.leeway_seconds = 0;
        (Verifier::from_settings(&s).expect("verifier"), provider)
    };
    let exp = now() + 1;
    let token = key(1)
        .sign(&with(claims("alice"), |c| c["exp"] = exp.into()))
        .expect("sign");
    v.verify(&token).await.expect("valid now");
    assert_eq!(v.cached_tokens(), 1);
    // Past `exp` (at most ~2 s from now): the cached verdict is not
    // served; the token is expired.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let verdict = loop {
        match v.verify(&token).await {
            Ok(_) if tokio::time::Instant::now() < deadline => {
                assert!(now() <= exp, "served from the cache after its exp");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => break other,
        }
    };
    assert_eq!(verdict.err(), Some(AuthError::Expired));
    assert!(now() > exp);
}

/// RFC 9068 §4: an access token says `typ: at+jwt`. Any other JWT the
/// issuer signs for our audience — an OpenID Connect ID token says `JWT` —
/// is refused unless `auth.token_types` names its `typ` (Keycloak, Dex); a
/// token without `typ` is refused whatever the setting. Fails without the
/// check: the `JWT` and `typ`-less tokens verified.
#[tokio::test]
async fn only_access_tokens_pass_unless_the_settings_accept_another_typ() {
    let k = key(1);
    let (_provider, addr) = Provider::start(&[&k]).await;
    let token = |typ: Option<&str>| support::sign_as(&k, typ, Some(k.kid()), &claims("alice"));

    let v =
        Verifier::from_settings(&settings(format!("http://{addr}/jwks.json"))).expect("verifier");
    for typ in ["at+jwt", "AT+JWT", "application/at+jwt"] {
        let got = v.verify(&token(Some(typ))).await.map(|c| c.subject);
        assert_eq!(got.ok().as_deref(), Some("alice"), "{typ}");
    }
    for typ in [
        Some("JWT"),
        Some("application/jwt"),
        Some("secevent+jwt"),
        None,
    ] {
        let got = v.verify(&token(typ)).await.err();
        assert_eq!(got, Some(AuthError::WrongTokenType), "{typ:?}");
    }
    let response = AuthError::WrongTokenType.to_response();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .expect("ascii")
            .contains("error=\"invalid_token\"")
    );

    // AUTH__TOKEN_TYPES=at+jwt,JWT, as deploy/README.md says for Keycloak
    // and Dex.
    let mut s = settings(format!("http://{addr}/jwks.json"));
    s.token_types = "at+jwt,JWT".into();
    let v = Verifier::from_settings(&s).expect("verifier");
    for typ in ["JWT", "jwt", "at+jwt"] {
        assert!(v.verify(&token(Some(typ))).await.is_ok(), "{typ}");
    }
    for typ in [Some("secevent+jwt"), None] {
        let got = v.verify(&token(typ)).await.err();
        assert_eq!(got, Some(AuthError::WrongTokenType), "{typ:?}");
    }
}

/// A token without a `kid` is tried against every key of its algorithm,
/// so one broken key in the provider's JWKS must not stop it: a P-256 key
/// whose point is off the curve (its parts have the right length, so it
/// loads, and fails only when tried) and Ed25519 keys with a short or long
/// `x` (skipped at load), each listed before the good keys.
///
/// Fails without the fix: the ES256 token got `Malformed` (the loop gave
/// up at the off-curve key's `InvalidEcdsaKey`, before any signature was
/// checked), and the EdDSA token panicked in `jsonwebtoken` (its Ed25519
/// verifier slices `x[..32]`).
#[tokio::test]
async fn one_broken_key_in_a_jwks_does_not_stop_tokens_without_a_kid() {
    use jsonwebtoken::{Algorithm, EncodingKey, jwk::Jwk};
    let ec = EncodingKey::from_ec_pem(fixture("test-es256-private.pem").as_bytes()).expect("ec");
    let mut ec_jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).expect("jwk");
    ec_jwk.common.key_id = Some("ec-good".into());
    let ed = key(5);
    let zeros = b64([0u8; 32]);
    let jwks = serde_json::json!({ "keys": [
        // (0, 0) is not a point of P-256.
        { "kty": "EC", "crv": "P-256", "x": zeros, "y": zeros, "kid": "ec-off-curve" },
        { "kty": "OKP", "crv": "Ed25519", "x": b64([7u8; 16]), "kid": "ed-short" },
        { "kty": "OKP", "crv": "Ed25519", "x": b64([7u8; 48]), "kid": "ed-long" },
        ec_jwk,
        ed.jwk(),
    ]});
    let v = verifier_of(jwks).await;

    let es = sign_header(&ec, Algorithm::ES256, None, &claims("erin"));
    assert_eq!(
        v.verify(&es).await.map(|c| c.subject).ok().as_deref(),
        Some("erin"),
        "the good P-256 key is tried after the broken one"
    );
    let eddsa = support::sign_as(&ed, Some("at+jwt"), None, &claims("eddie"));
    assert_eq!(
        v.verify(&eddsa).await.map(|c| c.subject).ok().as_deref(),
        Some("eddie"),
        "the short Ed25519 key was skipped at load"
    );
    let keys = v.jwks().expect("a JWKS").snapshot().keys;
    let kids: Vec<_> = keys
        .keys()
        .iter()
        .filter_map(|k| k.kid.as_deref())
        .collect();
    assert_eq!(kids, ["ec-off-curve", "ec-good", ed.kid()]);

    // Claims still end the search: an expired token signed by the good key
    // is expired, not "no key verified it".
    let expired = sign_header(
        &ec,
        Algorithm::ES256,
        None,
        &with(claims("erin"), |c| c["exp"] = (now() - 120).into()),
    );
    assert_eq!(v.verify(&expired).await.err(), Some(AuthError::Expired));
    // A token no key signed is a bad signature, whichever keys were tried.
    let forged = support::sign_as(&key(6), Some("at+jwt"), None, &claims("mallory"));
    assert_eq!(v.verify(&forged).await.err(), Some(AuthError::BadSignature));
    let forged_es = {
        // A made-up signature over a good token: the off-curve key cannot
        // even be made a verifier, the good one refuses the signature.
        let ours = es.rsplit_once('.').expect("three parts").0;
        format!("{ours}.{}", b64([1u8; 64]))
    };
    assert_eq!(
        v.verify(&forged_es).await.err(),
        Some(AuthError::BadSignature)
    );
}
