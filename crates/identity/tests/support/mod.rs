//! Shared by the identity tests: a JWKS provider on 127.0.0.1:0 that counts
//! its requests, keys with fixed seeds, tokens with any claims or header,
//! and a metrics recorder that keeps counters.

#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{
    Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use shopeasy_identity::{AuthSettings, DemoKey};

/// Issuer and audience every test token uses unless it is about them.
pub const ISSUER: &str = "https://issuer.test";
/// The audience.
pub const AUDIENCE: &str = "shopeasy";

/// Serves `router` on a free port of 127.0.0.1.
pub async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A JWKS provider whose key set a test changes, counting requests.
#[derive(Clone, Default)]
pub struct Provider {
    keys: Arc<Mutex<Vec<DemoKey>>>,
    requests: Arc<AtomicU64>,
    /// Answer 503 to this many requests before answering normally.
    fail_next: Arc<AtomicU64>,
}

impl Provider {
    /// A provider publishing `keys`, served on 127.0.0.1:0.
    pub async fn start(keys: &[&DemoKey]) -> (Self, SocketAddr) {
        let p = Self::default();
        p.set_keys(keys);
        let router = Router::new()
            .route("/jwks.json", get(jwks))
            .with_state(p.clone());
        let addr = serve(router).await;
        (p, addr)
    }

    /// Publishes `keys` from now on.
    pub fn set_keys(&self, keys: &[&DemoKey]) {
        *self.keys.lock().expect("keys") = keys.iter().map(|k| (*k).clone()).collect();
    }

    /// Requests served so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Makes the next `n` requests fail with 503.
    pub fn fail_next(&self, n: u64) {
        self.fail_next.store(n, Ordering::SeqCst);
    }
}

async fn jwks(State(p): State<Provider>) -> Response {
    p.requests.fetch_add(1, Ordering::SeqCst);
    if p.fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let set = JwkSet {
        keys: p
            .keys
            .lock()
            .expect("keys")
            .iter()
            .map(|k| k.jwk().clone())
            .collect(),
    };
    axum::Json(set).into_response()
}

/// The shortest `auth.min_refresh_interval_seconds` the settings accept,
/// which [`settings`] uses: a test that needs a second refresh waits this
/// long after the first started (see [`after_min_interval`]).
pub const MIN_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The settings of a verifier for the JWKS at `url`, with short timeouts
/// and the shortest minimum interval between refreshes.
pub fn settings(url: String) -> AuthSettings {
    AuthSettings {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        fetch_timeout_seconds: shopeasy_runtime::settings::Seconds::new(0.3),
        fetch_deadline_seconds: shopeasy_runtime::settings::Seconds::new(1.0),
        min_refresh_interval_seconds: MIN_REFRESH_INTERVAL.into(),
        ..AuthSettings::for_jwks(url)
    }
}

/// Waits until [`MIN_REFRESH_INTERVAL`] has passed since `started`, an
/// instant taken after the last refresh began (after the call that made
/// it returned), so the next refresh is allowed to start. Not a guess at
/// how long something takes: the interval is the verifier's own rule.
pub async fn after_min_interval(started: tokio::time::Instant) {
    tokio::time::sleep_until(started + MIN_REFRESH_INTERVAL).await;
}

/// The key with seed `n`.
pub fn key(n: u8) -> DemoKey {
    DemoKey::from_seed([n; 32]).expect("key")
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Claims that pass: our issuer and audience, `sub`, valid for an hour.
pub fn claims(sub: &str) -> serde_json::Value {
    serde_json::json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": sub,
        "iat": now(),
        "nbf": now(),
        "exp": now() + 3600,
        "scope": "orders:read orders:write",
        "client_id": "test",
        "jti": "t-1",
    })
}

/// `claims` signed by `key` (EdDSA) with the header's `typ` and `kid` as
/// given (`None`: left out), for tokens [`DemoKey::sign`] does not make.
pub fn sign_as(
    key: &DemoKey,
    typ: Option<&str>,
    kid: Option<&str>,
    claims: &serde_json::Value,
) -> String {
    let body: String = key
        .to_pem()
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .expect("PKCS#8");
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.typ = typ.map(str::to_owned);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(
        &header,
        claims,
        &jsonwebtoken::EncodingKey::from_ed_der(&der),
    )
    .expect("sign")
}

/// Base64url without padding.
pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The Ed25519 public key of `key` as an SPKI PEM (what
/// `auth.public_key_pem` takes).
pub fn public_pem(key: &DemoKey) -> String {
    let AlgorithmParameters::OctetKeyPair(p) = &key.jwk().algorithm else {
        panic!("an Ed25519 key");
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&p.x)
        .expect("x");
    let mut der = vec![
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ];
    der.extend_from_slice(&raw);
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
}

/// A metrics recorder keeping every counter by `name{label=value,…}`
/// (labels sorted). Installed per thread
/// (`metrics::set_default_local_recorder`), so a `current_thread` test sees
/// only its own counts, whatever other tests run meanwhile.
#[derive(Clone, Default)]
pub struct Counters {
    cells: Arc<Mutex<HashMap<String, Arc<Cell>>>>,
}

#[derive(Default)]
struct Cell(AtomicU64);

impl metrics::CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl Counters {
    /// A counter's value (0 if never touched), e.g.
    /// `get("shopeasy_identity_jwks_refreshes_total{outcome=throttled}")`.
    pub fn get(&self, key: &str) -> u64 {
        self.cells
            .lock()
            .expect("cells")
            .get(key)
            .map_or(0, |c| c.0.load(Ordering::Relaxed))
    }
}

impl metrics::Recorder for Counters {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let cell = self
            .cells
            .lock()
            .expect("cells")
            .entry(name)
            .or_default()
            .clone();
        metrics::Counter::from_arc(cell)
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}
