//! **A demo issuer** for the one-command system: not an identity provider.
//!
//! It signs access tokens for whoever asks with a plausible name — there
//! is no password, no consent, no session — so the embedded system can be
//! used and load-tested without installing Keycloak or Dex. Everything it
//! serves says so: every answer carries `ShopEasy-Demo-Issuer: true`, the
//! session and discovery bodies `"demo": true`. Full mode points
//! `auth.jwks_url` at a real provider instead.
//!
//! What it does well enough to stand in for a real issuer:
//!
//! - one Ed25519 signing key in the data folder (`demo-issuer-ed25519.pem`,
//!   PKCS#8, created 0600 in a 0700 folder), reused across restarts, so
//!   tokens survive a restart of the launcher;
//! - the key's `kid` is its RFC 7638 thumbprint, so the same key always has
//!   the same `kid`;
//! - `GET /.well-known/jwks.json` and `GET /.well-known/openid-configuration`,
//!   which is all a [`Verifier`](crate::Verifier) (or any other resource
//!   server) needs;
//! - tokens shaped as RFC 9068 asks: header `typ: at+jwt`, claims `iss`,
//!   `sub`, `aud`, `exp`, `iat`, `nbf`, `jti`, `client_id`, `scope`.

use std::{
    fmt,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{HeaderName, HeaderValue, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::Engine;
use jsonwebtoken::{
    Algorithm, EncodingKey, Header,
    jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash},
};
use serde::{Deserialize, Serialize};
use shopeasy_runtime::problem::{FieldError, Json, Problem};

/// The file the signing key is kept in, inside the data folder.
pub const KEY_FILE: &str = "demo-issuer-ed25519.pem";

/// The header on every answer of the demo issuer.
pub const DEMO_HEADER: HeaderName = HeaderName::from_static("shopeasy-demo-issuer");

/// The path of the JWKS the router serves.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// The path of the OIDC discovery document the router serves.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// The path that signs a customer in.
pub const SESSION_PATH: &str = "/api/session";

/// Longest demo customer name.
pub const MAX_NAME: usize = 32;

/// The PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410 §7): the
/// 32-byte seed follows it.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// Why the demo issuer could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    /// The customer name is not 1..=32 characters of `a-z`, `0-9`, `_`, `-`.
    #[error("a demo customer name is 1 to {MAX_NAME} characters of a-z, 0-9, _ and -")]
    InvalidCustomer,
    /// The key file or its folder could not be read or written.
    #[error("demo issuer key file {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The key file exists but holds no Ed25519 key (delete it to get a
    /// new one; tokens signed with the old key then stop verifying).
    #[error("demo issuer key file {0} holds no Ed25519 private key")]
    BadKeyFile(PathBuf),
    /// No randomness for a new key.
    #[error("no randomness for a new signing key: {0}")]
    Random(String),
    /// Signing or deriving the public key failed.
    #[error("signing failed: {0}")]
    Signing(String),
}

/// A customer name the demo issuer signs for: 1..=[`MAX_NAME`] characters
/// of `a-z`, `0-9`, `_` and `-`, so it is safe as a `sub`, a log field and
/// a database key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerName(String);

impl CustomerName {
    /// Checks `name`.
    ///
    /// # Errors
    /// [`IssuerError::InvalidCustomer`].
    pub fn parse(name: &str) -> Result<Self, IssuerError> {
        let ok = (1..=MAX_NAME).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(IssuerError::InvalidCustomer)
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An Ed25519 signing key with its public JWK.
#[derive(Clone)]
pub struct DemoKey {
    pkcs8: Vec<u8>,
    encoding: EncodingKey,
    jwk: Jwk,
}

impl fmt::Debug for DemoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoKey")
            .field("kid", &self.kid())
            .finish_non_exhaustive()
    }
}

impl DemoKey {
    /// A new key from the operating system's randomness.
    ///
    /// # Errors
    /// [`IssuerError::Random`] when the OS has none to give.
    pub fn generate() -> Result<Self, IssuerError> {
        use rand::TryRngCore;
        let mut seed = [0u8; 32];
        rand::rngs::OsRng
            .try_fill_bytes(&mut seed)
            .map_err(|e| IssuerError::Random(e.to_string()))?;
        Self::from_seed(seed)
    }

    /// The key whose 32-byte Ed25519 seed is `seed` (tests use fixed seeds).
    ///
    /// # Errors
    /// [`IssuerError::Signing`] when the public key cannot be derived.
    pub fn from_seed(seed: [u8; 32]) -> Result<Self, IssuerError> {
        let mut pkcs8 = PKCS8_ED25519_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        Self::from_pkcs8(pkcs8)
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<Self, IssuerError> {
        let encoding = EncodingKey::from_ed_der(&pkcs8);
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::EdDSA)
            .map_err(|e| IssuerError::Signing(e.to_string()))?;
        let kid = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|e| IssuerError::Signing(e.to_string()))?;
        jwk.common.key_id = Some(kid);
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        Ok(Self {
            pkcs8,
            encoding,
            jwk,
        })
    }

    /// The key in `dir`'s [`KEY_FILE`], created (0600, folder 0700) when
    /// absent. Two processes starting together end up with the same key:
    /// the file is written aside and linked into place only if still absent.
    ///
    /// # Errors
    /// [`IssuerError::Io`] for an unusable folder,
    /// [`IssuerError::BadKeyFile`] for a file that holds no key.
    pub fn load_or_create(dir: &Path) -> Result<Self, IssuerError> {
        let path = dir.join(KEY_FILE);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| IssuerError::Io { path, source }
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => return Self::from_pem_file(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
        create_private_dir(dir).map_err(io(dir))?;
        let key = Self::generate()?;
        let tmp = dir.join(format!("{KEY_FILE}.{}.tmp", uuid::Uuid::new_v4().simple()));
        write_private(&tmp, key.to_pem().as_bytes()).map_err(io(&tmp))?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                tracing::info!(path = %path.display(), kid = key.kid(), "demo issuer key created");
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(&path).map_err(io(&path))?;
                Self::from_pem_file(&path, &text)
            }
            Err(e) => Err(io(&path)(e)),
        }
    }

    fn from_pem_file(path: &Path, text: &str) -> Result<Self, IssuerError> {
        tighten(path);
        let bad = || IssuerError::BadKeyFile(path.to_owned());
        let body: String = text
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>();
        if !text.contains("-----BEGIN PRIVATE KEY-----") {
            return Err(bad());
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .map_err(|_| bad())?;
        if der.len() != 48 || der[..16] != PKCS8_ED25519_PREFIX {
            return Err(bad());
        }
        Self::from_pkcs8(der).map_err(|_| bad())
    }

    /// The private key as PKCS#8 PEM (what [`KEY_FILE`] holds).
    pub fn to_pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.pkcs8);
        format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n")
    }

    /// The public key as SPKI PEM (`PUBLIC KEY`): what `auth.public_key_pem`
    /// takes, for a verifier that trusts this one key without a JWKS (tests,
    /// the end-to-end cluster).
    pub fn public_key_pem(&self) -> String {
        /// DER of `SubjectPublicKeyInfo { id-Ed25519 }` up to the key bytes
        /// (RFC 8410 §4).
        const SPKI_ED25519_PREFIX: [u8; 12] = [
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        let x = match &self.jwk.algorithm {
            jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(okp) => okp.x.as_str(),
            _ => "",
        };
        let public = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(x)
            .unwrap_or_default();
        let mut der = SPKI_ED25519_PREFIX.to_vec();
        der.extend_from_slice(&public);
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n")
    }

    /// The public key as a JWK (`kty: OKP`, `crv: Ed25519`, `kid`, `alg`,
    /// `use: sig`).
    pub fn jwk(&self) -> &Jwk {
        &self.jwk
    }

    /// The key id: the JWK's SHA-256 thumbprint (RFC 7638).
    pub fn kid(&self) -> &str {
        self.jwk.common.key_id.as_deref().unwrap_or_default()
    }

    /// Signs `claims` as an RFC 9068 access token (`typ: at+jwt`, this
    /// key's `kid`).
    ///
    /// # Errors
    /// [`IssuerError::Signing`].
    pub fn sign<T: Serialize>(&self, claims: &T) -> Result<String, IssuerError> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some("at+jwt".into());
        header.kid = Some(self.kid().to_owned());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .map_err(|e| IssuerError::Signing(e.to_string()))
    }
}

/// Creates `dir` (and its parents) readable by its owner only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Writes a new file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Narrows a key file someone made readable by others back to 0600.
fn tighten(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(path = %path.display(), "demo issuer key file was readable by others; set to 0600");
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// What the demo issuer puts in its tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoIssuerConfig {
    /// `iss`; when it is an `http(s)` URL, the discovery document's
    /// `jwks_uri` is under it.
    pub issuer: String,
    /// `aud`.
    pub audience: String,
    /// Lifetime of a token.
    pub token_ttl: Duration,
    /// `scope`, space-separated.
    pub scope: String,
}

impl Default for DemoIssuerConfig {
    /// The issuer and audience [`AuthSettings`](crate::AuthSettings)
    /// defaults expect, one-hour tokens, the order scopes.
    fn default() -> Self {
        let auth = crate::AuthSettings::default();
        Self {
            issuer: auth.issuer,
            audience: auth.audience,
            token_ttl: Duration::from_secs(3600),
            scope: "orders:read orders:write".into(),
        }
    }
}

/// The claims of a demo token (RFC 9068 §2.2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DemoClaims {
    /// The issuer.
    pub iss: String,
    /// The customer.
    pub sub: String,
    /// The audience.
    pub aud: String,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// Issued at.
    pub iat: u64,
    /// Not before.
    pub nbf: u64,
    /// A unique id.
    pub jti: String,
    /// Who asked: always `shopeasy-demo`.
    pub client_id: String,
    /// Granted scopes.
    pub scope: String,
}

/// A signed token and how long it lives.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IssuedToken {
    /// The JWT.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// The customer it was issued for.
    pub customer: String,
    /// Always `true`: this token comes from the demo issuer.
    pub demo: bool,
}

/// The demo issuer: a key, what to put in tokens, and a router.
#[derive(Debug, Clone)]
pub struct DemoIssuer {
    key: DemoKey,
    config: DemoIssuerConfig,
}

impl DemoIssuer {
    /// The issuer whose key lives in `data_dir` (see
    /// [`DemoKey::load_or_create`]).
    ///
    /// # Errors
    /// As [`DemoKey::load_or_create`].
    pub fn open(data_dir: &Path, config: DemoIssuerConfig) -> Result<Self, IssuerError> {
        Ok(Self::new(DemoKey::load_or_create(data_dir)?, config))
    }

    /// An issuer with `key` (kept in memory only).
    pub fn new(key: DemoKey, config: DemoIssuerConfig) -> Self {
        Self { key, config }
    }

    /// Its key.
    pub fn key(&self) -> &DemoKey {
        &self.key
    }

    /// Its settings.
    pub fn config(&self) -> &DemoIssuerConfig {
        &self.config
    }

    /// Signs a token for `customer` (for `shopeasy token alice`, the load
    /// generator and `POST /api/session`).
    ///
    /// # Errors
    /// [`IssuerError::InvalidCustomer`] for a bad name,
    /// [`IssuerError::Signing`].
    pub fn issue(&self, customer: &str) -> Result<IssuedToken, IssuerError> {
        let name = CustomerName::parse(customer)?;
        let now = jsonwebtoken::get_current_timestamp();
        let ttl = self.config.token_ttl.as_secs().max(1);
        let claims = DemoClaims {
            iss: self.config.issuer.clone(),
            sub: name.as_str().to_owned(),
            aud: self.config.audience.clone(),
            exp: now + ttl,
            iat: now,
            nbf: now,
            jti: uuid::Uuid::new_v4().to_string(),
            client_id: "shopeasy-demo".into(),
            scope: self.config.scope.clone(),
        };
        Ok(IssuedToken {
            access_token: self.key.sign(&claims)?,
            token_type: "Bearer",
            expires_in: ttl,
            customer: name.0,
            demo: true,
        })
    }

    /// The public keys, as `GET /.well-known/jwks.json` serves them.
    pub fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: vec![self.key.jwk().clone()],
        }
    }

    /// The OIDC discovery document (only the members a resource server
    /// reads, plus `"demo": true`).
    pub fn discovery(&self) -> serde_json::Value {
        let issuer = &self.config.issuer;
        let base = if issuer.starts_with("http://") || issuer.starts_with("https://") {
            issuer.trim_end_matches('/')
        } else {
            ""
        };
        serde_json::json!({
            "issuer": issuer,
            "jwks_uri": format!("{base}{JWKS_PATH}"),
            "token_endpoint": format!("{base}{SESSION_PATH}"),
            "response_types_supported": ["token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["EdDSA"],
            "scopes_supported": self.config.scope.split_whitespace().collect::<Vec<_>>(),
            "demo": true,
        })
    }

    /// The routes: `GET` [`JWKS_PATH`], `GET` [`DISCOVERY_PATH`], `POST`
    /// [`SESSION_PATH`] with `{"customer": "alice"}`. Merge it into a
    /// router of your own, or serve it alone.
    pub fn router(&self) -> Router {
        Router::new()
            .route(JWKS_PATH, get(jwks))
            .route(DISCOVERY_PATH, get(discovery))
            .route(SESSION_PATH, post(session))
            .fallback(|| async { demo(Problem::no_route().into_response()) })
            .method_not_allowed_fallback(|| async {
                demo(Problem::method_not_allowed().into_response())
            })
            .with_state(Arc::new(self.clone()))
    }
}

/// Marks an answer as the demo issuer's.
fn demo(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(DEMO_HEADER, HeaderValue::from_static("true"));
    response
}

async fn jwks(State(issuer): State<Arc<DemoIssuer>>) -> Response {
    let mut r = axum::Json(issuer.jwks()).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    demo(r)
}

async fn discovery(State(issuer): State<Arc<DemoIssuer>>) -> Response {
    demo(axum::Json(issuer.discovery()).into_response())
}

/// The body of `POST /api/session`: a JSON object only.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
struct SessionRequest {
    customer: String,
}

shopeasy_runtime::only_json_objects!(SessionRequest);

async fn session(
    State(issuer): State<Arc<DemoIssuer>>,
    body: Result<Json<SessionRequest>, Problem>,
) -> Response {
    let response = match body {
        Err(problem) => problem.into_response(),
        Ok(Json(req)) => match issuer.issue(&req.customer) {
            Ok(token) => {
                let mut r = axum::Json(token).into_response();
                // RFC 6749 §5.1: token responses are never cached.
                r.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            Err(e @ IssuerError::InvalidCustomer) => {
                Problem::validation([FieldError::new("customer", e.to_string())]).into_response()
            }
            Err(e) => {
                tracing::error!(error = %e, "demo issuer could not sign");
                Problem::internal().into_response()
            }
        },
    };
    demo(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn customer_names_are_short_and_plain() {
        for ok in ["alice", "bob-2", "load_gen_17", "a", &"x".repeat(MAX_NAME)] {
            assert!(CustomerName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Alice",
            "al ice",
            "ali/ce",
            "é",
            &"x".repeat(MAX_NAME + 1),
            "a\n",
        ] {
            assert!(CustomerName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_key_round_trips_through_its_pem_with_the_same_kid() {
        let key = DemoKey::from_seed([7; 32]).expect("key");
        let again = DemoKey::from_pem_file(Path::new("mem"), &key.to_pem()).expect("pem");
        assert_eq!(key.kid(), again.kid());
        assert_ne!(key.kid(), DemoKey::from_seed([8; 32]).expect("key").kid());
        assert!(matches!(
            DemoKey::from_pem_file(
                Path::new("mem"),
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            ),
            Err(IssuerError::BadKeyFile(_))
        ));
    }
}
