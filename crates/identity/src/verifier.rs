//! Verifying a bearer token: the header (`alg`, then `typ`), the key, the
//! signature, then the claims — in that order, each failure a distinct
//! [`AuthError`].

use std::{
    fmt,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{
    extract::{FromRef, FromRequestParts},
    http::{HeaderMap, header, request::Parts},
};
use base64::Engine;
use jsonwebtoken::{Algorithm, Validation, errors::ErrorKind};
use serde::Deserialize;

use crate::{
    error::{AuthError, ConfigError},
    jwks::{FetchError, JwksCache, JwksConfig},
    keys::KeySet,
    settings::{AuthSettings, normalize_token_type},
    verified::VerifiedTokens,
};

/// Longest token accepted, in bytes: real access tokens are well under
/// 2 KiB; anything longer is refused before any decoding.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Longest `sub` accepted, in bytes (it becomes a database key).
pub const MAX_SUBJECT_BYTES: usize = 255;

/// The algorithms a token may name: asymmetric only. `none` and the
/// shared-secret `HS*` are refused before any key is looked at.
const ACCEPTED: [Algorithm; 9] = [
    Algorithm::EdDSA,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

/// What a verified token says about its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `sub`: the customer id the services act for.
    pub subject: String,
    /// `scope` (space-separated, RFC 9068) or `scp` (a list), empty when
    /// the token has neither.
    pub scopes: Vec<String>,
    /// `client_id`, when present.
    pub client_id: Option<String>,
    /// `jti`, when present.
    pub token_id: Option<String>,
    /// `exp`, seconds since the epoch.
    pub expires_at: u64,
}

impl Claims {
    /// The customer this request acts for (the token's `sub`).
    pub fn customer_id(&self) -> &str {
        &self.subject
    }

    /// Whether the token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// The claims as they arrive; typed loosely so that a claim of the wrong
/// type is [`AuthError::InvalidClaim`], not a generic parse failure.
#[derive(Deserialize)]
struct RawClaims {
    // Defaulted, so that a token without them fails validation as
    // `MissingClaim`, not deserialisation as `Malformed`.
    #[serde(default)]
    sub: serde_json::Value,
    #[serde(default)]
    exp: serde_json::Value,
    #[serde(default)]
    scope: Option<serde_json::Value>,
    #[serde(default)]
    scp: Option<serde_json::Value>,
    #[serde(default)]
    client_id: Option<serde_json::Value>,
    #[serde(default)]
    jti: Option<serde_json::Value>,
}

impl RawClaims {
    fn into_claims(self) -> Result<Claims, AuthError> {
        let subject = match self.sub {
            serde_json::Value::String(s)
                if !s.is_empty()
                    && s.len() <= MAX_SUBJECT_BYTES
                    && !s.chars().any(char::is_control) =>
            {
                s
            }
            _ => return Err(AuthError::InvalidClaim("sub")),
        };
        let expires_at = self.exp.as_u64().unwrap_or(0);
        let mut scopes: Vec<String> = match self.scope {
            Some(serde_json::Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(_) => return Err(AuthError::InvalidClaim("scope")),
        };
        match self.scp {
            Some(serde_json::Value::Array(items)) => scopes.extend(
                items
                    .into_iter()
                    .filter_map(|v| v.as_str().map(str::to_owned)),
            ),
            Some(serde_json::Value::String(s)) => {
                scopes.extend(s.split_whitespace().map(str::to_owned));
            }
            _ => {}
        }
        scopes.truncate(64);
        let text = |v: Option<serde_json::Value>| v.and_then(|v| v.as_str().map(str::to_owned));
        Ok(Claims {
            subject,
            scopes,
            client_id: text(self.client_id),
            token_id: text(self.jti),
            expires_at,
        })
    }
}

/// Verifies bearer tokens against one issuer. Cloning shares the key cache.
///
/// ```no_run
/// # async fn demo(headers: axum::http::HeaderMap) -> Result<(), Box<dyn std::error::Error>> {
/// use shopeasy_identity::{AuthSettings, Verifier};
/// let verifier = Verifier::from_settings(&AuthSettings::for_jwks(
///     "http://127.0.0.1:8080/.well-known/jwks.json",
/// ))?;
/// match verifier.authenticate(&headers).await {
///     Ok(claims) => println!("customer {}", claims.customer_id()),
///     Err(e) => { let _401 = e.to_response(); }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Verifier {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Keys,
    issuer: String,
    audience: String,
    /// The `typ` values accepted, normalised ([`normalize_token_type`]).
    token_types: Vec<String>,
    leeway: u64,
    /// Tokens that passed every check, until they expire or the keys
    /// change (the verified-token cache).
    verified: VerifiedTokens,
    /// Full verifications run (signature checks attempted).
    signature_checks: AtomicU64,
}

enum Keys {
    Fixed(Arc<KeySet>),
    Jwks(JwksCache),
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Verifier");
        d.field("issuer", &self.inner.issuer)
            .field("audience", &self.inner.audience)
            .field("token_types", &self.inner.token_types)
            .field("leeway", &self.inner.leeway);
        match &self.inner.keys {
            Keys::Fixed(k) => d.field("keys", &k.len()),
            Keys::Jwks(c) => d.field("jwks", c),
        };
        d.finish()
    }
}

impl Verifier {
    /// A verifier as `settings` say (validated first).
    ///
    /// # Errors
    /// [`ConfigError::Settings`] listing every bad key;
    /// [`ConfigError::Client`] when the JWKS client cannot be built.
    pub fn from_settings(settings: &AuthSettings) -> Result<Self, ConfigError> {
        let problems = settings.problems();
        if !problems.is_empty() {
            return Err(ConfigError::Settings(problems));
        }
        let keys = if settings.jwks_url.is_empty() {
            let set = KeySet::from_pem(&settings.public_key_pem)
                .map_err(|e| ConfigError::Client(e.to_string()))?;
            Keys::Fixed(Arc::new(set))
        } else {
            let cache = JwksCache::new(JwksConfig {
                url: settings.jwks_url.clone(),
                fetch_timeout: settings.fetch_timeout_seconds.get(),
                fetch_deadline: settings.fetch_deadline_seconds.get(),
                fetch_retries: settings.fetch_retries,
                min_refresh_interval: settings.min_refresh_interval_seconds.get(),
                refresh_interval: settings.refresh_interval_seconds.get(),
            })
            .map_err(|e| ConfigError::Client(e.to_string()))?;
            Keys::Jwks(cache)
        };
        Ok(Self {
            inner: Arc::new(Inner {
                keys,
                issuer: settings.issuer.clone(),
                audience: settings.audience.clone(),
                // Validated above: a non-empty list.
                token_types: settings.accepted_token_types().unwrap_or_default(),
                leeway: settings.leeway_seconds,
                verified: VerifiedTokens::default(),
                signature_checks: AtomicU64::new(0),
            }),
        })
    }

    /// How many tokens were verified in full (header, key, signature,
    /// claims) so far; a token answered from the verified-token cache is
    /// not counted. For `/admin` and tests.
    pub fn signature_checks(&self) -> u64 {
        self.inner.signature_checks.load(Ordering::Relaxed)
    }

    /// How many verified tokens are kept (the verified-token cache).
    pub fn cached_tokens(&self) -> usize {
        self.inner.verified.len()
    }

    /// The JWKS cache, when keys come from a JWKS (for `/admin` and tests).
    pub fn jwks(&self) -> Option<&JwksCache> {
        match &self.inner.keys {
            Keys::Jwks(c) => Some(c),
            Keys::Fixed(_) => None,
        }
    }

    /// Fetches the keys now, so the first request does not wait for them.
    /// A failure is not fatal (the first token retries), but is worth
    /// logging at start-up.
    ///
    /// # Errors
    /// The fetch's error.
    pub async fn warm_up(&self) -> Result<(), FetchError> {
        match &self.inner.keys {
            Keys::Fixed(_) => Ok(()),
            Keys::Jwks(c) => c.refresh().await.map(drop),
        }
    }

    /// The caller of a request: its `Authorization: Bearer` token verified.
    ///
    /// # Errors
    /// [`AuthError::Missing`] without a bearer token, otherwise as
    /// [`Verifier::verify`].
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Claims, AuthError> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let Some(value) = values.next() else {
            return Err(AuthError::Missing);
        };
        if values.next().is_some() {
            return Err(AuthError::Malformed);
        }
        let value = value.to_str().map_err(|_| AuthError::Malformed)?;
        let token = shopeasy_runtime::auth::bearer_token(value).ok_or(AuthError::Missing)?;
        self.verify(token).await
    }

    /// Verifies `token`: an accepted algorithm, an accepted `typ`
    /// (`auth.token_types`, RFC 9068 §4), a key of the issuer's (one
    /// refresh on an unknown `kid`), the signature, then `exp`/`nbf` (with
    /// the leeway), `iss`, `aud` and `sub`.
    ///
    /// A token that passed every check before, with the keys still in
    /// force, is answered from the verified-token cache after its `exp` is
    /// checked against the clock again.
    ///
    /// # Errors
    /// The [`AuthError`] naming the first check that failed.
    pub async fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let now = jsonwebtoken::get_current_timestamp();
        let leeway = self.inner.leeway;
        if let Some(claims) = self
            .inner
            .verified
            .get(token, self.key_generation(), now, leeway)
        {
            return Ok(claims);
        }
        let (claims, keys) = self.verify_in_full(token).await?;
        if let Some(generation) = self.generation_of(&keys) {
            self.inner
                .verified
                .insert(token, &claims, generation, now, leeway);
        }
        Ok(claims)
    }

    /// The generation of the keys in force (a fixed key: always 0), after
    /// starting a background refresh when they are due one.
    fn key_generation(&self) -> u64 {
        match &self.inner.keys {
            Keys::Fixed(_) => 0,
            Keys::Jwks(cache) => {
                cache.refresh_if_stale();
                cache.snapshot().generation
            }
        }
    }

    /// The generation of `keys` if they are still the keys in force
    /// (`None`: a refresh replaced them meanwhile, so a verdict reached
    /// with them is not kept).
    fn generation_of(&self, keys: &Arc<KeySet>) -> Option<u64> {
        match &self.inner.keys {
            Keys::Fixed(_) => Some(0),
            Keys::Jwks(cache) => {
                let snap = cache.snapshot();
                Arc::ptr_eq(&snap.keys, keys).then_some(snap.generation)
            }
        }
    }

    /// [`Self::verify`] without the cache: every check, in order.
    /// Returns the claims with the key set that verified them.
    async fn verify_in_full(&self, token: &str) -> Result<(Claims, Arc<KeySet>), AuthError> {
        self.inner.signature_checks.fetch_add(1, Ordering::Relaxed);
        let header = TokenHeader::parse(token)?;
        // Before any key is looked for: an ID token (or any other JWT the
        // issuer signs for our audience) is not an access token, however
        // valid its signature (RFC 9068 §4).
        if !self.accepts_type(header.typ.as_deref()) {
            return Err(AuthError::WrongTokenType);
        }
        let keys = self.keys_for(&header).await?;
        // A configured PEM key has no `kid`: it is checked whatever `kid`
        // the token names.
        let kid = match self.inner.keys {
            Keys::Fixed(_) => None,
            Keys::Jwks(_) => header.kid.as_deref(),
        };
        let validation = self.validation(header.alg);
        // A token without a `kid` is tried against every key of its
        // algorithm. Only a claim error ends the search: claims are checked
        // after the signature, so the signature verified and this key is
        // the token's. Anything else — another key's signature, or a key
        // of the provider's that cannot verify anything (a point off its
        // curve) — says nothing about the next key, so one broken key in a
        // JWKS cannot make valid tokens fail.
        let mut verdict = AuthError::BadSignature;
        for key in keys.candidates(kid, header.alg) {
            match jsonwebtoken::decode::<RawClaims>(token, key.decoding_key(), &validation) {
                Ok(data) => return Ok((data.claims.into_claims()?, keys.clone())),
                Err(e) => {
                    let error = map_error(e.kind());
                    if is_claim_error(error) {
                        return Err(error);
                    }
                    if is_key_error(e.kind()) {
                        tracing::debug!(
                            kid = ?key.kid,
                            error = %e,
                            "a JWKS key cannot verify; trying the next"
                        );
                    }
                    // The first error more telling than a bad signature
                    // (a signature that is not base64, say) is the answer.
                    if verdict == AuthError::BadSignature {
                        verdict = error;
                    }
                }
            }
        }
        Err(verdict)
    }

    /// Whether a token whose header says `typ` is an access token we
    /// accept: it must have a `typ`, and it must be one of
    /// `auth.token_types` (compared as RFC 7515 §4.1.9 says).
    fn accepts_type(&self, typ: Option<&str>) -> bool {
        typ.is_some_and(|typ| self.inner.token_types.contains(&normalize_token_type(typ)))
    }

    /// The key set to verify `header` with, refreshed once if it has no
    /// key for it.
    async fn keys_for(&self, header: &TokenHeader) -> Result<Arc<KeySet>, AuthError> {
        let cache = match &self.inner.keys {
            Keys::Fixed(keys) => {
                // One configured key and no `kid`s: any token whose
                // algorithm suits it is checked against it.
                return if keys.candidates(None, header.alg).next().is_some() {
                    Ok(keys.clone())
                } else {
                    Err(AuthError::UnsupportedAlgorithm)
                };
            }
            Keys::Jwks(cache) => cache,
        };
        cache.refresh_if_stale();
        let snap = cache.snapshot();
        if snap
            .keys
            .candidates(header.kid.as_deref(), header.alg)
            .next()
            .is_some()
        {
            return Ok(snap.keys);
        }
        // A key we have under this `kid` but for another algorithm is a
        // forged or broken token, not a rotation: no refresh.
        if header.kid.as_deref().is_some_and(|k| snap.keys.has_kid(k)) {
            return Err(AuthError::UnsupportedAlgorithm);
        }
        let keys = match cache.refresh_after_miss(snap.generation).await {
            Ok(keys) => keys,
            Err(e) => {
                let current = cache.snapshot().keys;
                if current.is_empty() {
                    tracing::warn!(error = %e, "no JWKS keys to verify with");
                    return Err(AuthError::KeysUnavailable);
                }
                current
            }
        };
        if keys
            .candidates(header.kid.as_deref(), header.alg)
            .next()
            .is_some()
        {
            Ok(keys)
        } else {
            Err(AuthError::UnknownKey)
        }
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = self.inner.leeway;
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_issuer(&[&self.inner.issuer]);
        v.set_audience(&[&self.inner.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v
    }
}

/// What the verifier reads from a token's header before trusting it.
struct TokenHeader {
    alg: Algorithm,
    kid: Option<String>,
    typ: Option<String>,
}

impl TokenHeader {
    fn parse(token: &str) -> Result<Self, AuthError> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(head), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(AuthError::Malformed);
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(head)
            .map_err(|_| AuthError::Malformed)?;
        #[derive(Deserialize)]
        struct Head {
            alg: String,
            #[serde(default)]
            kid: Option<String>,
            #[serde(default)]
            typ: Option<String>,
        }
        let head: Head = serde_json::from_slice(&bytes).map_err(|_| AuthError::Malformed)?;
        let alg = Algorithm::from_str(&head.alg).map_err(|_| AuthError::UnsupportedAlgorithm)?;
        if !ACCEPTED.contains(&alg) {
            return Err(AuthError::UnsupportedAlgorithm);
        }
        Ok(Self {
            alg,
            kid: head.kid,
            typ: head.typ,
        })
    }
}

fn map_error(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::InvalidSignature => AuthError::BadSignature,
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => AuthError::MissingClaim(match claim.as_str() {
            "exp" => "exp",
            "iss" => "iss",
            "aud" => "aud",
            _ => "sub",
        }),
        ErrorKind::InvalidClaimFormat(claim) => AuthError::InvalidClaim(match claim.as_str() {
            "exp" => "exp",
            "nbf" => "nbf",
            "iss" => "iss",
            "aud" => "aud",
            _ => "sub",
        }),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            AuthError::UnsupportedAlgorithm
        }
        // The key cannot verify anything (a point off its curve): as far as
        // this token goes, its signature did not verify with this key.
        kind if is_key_error(kind) => AuthError::BadSignature,
        // A signature that is not even decodable, JSON that is not claims:
        // the token is broken.
        _ => AuthError::Malformed,
    }
}

/// Whether `jsonwebtoken` refused the key rather than the token (raised
/// before any signature check).
fn is_key_error(kind: &ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidEddsaKey
            | ErrorKind::InvalidRsaKey(_)
            | ErrorKind::InvalidKeyFormat
    )
}

/// Whether `error` is about the claims: found only after the signature
/// verified, so the key that gave it is the token's and its verdict stands.
fn is_claim_error(error: AuthError) -> bool {
    matches!(
        error,
        AuthError::Expired
            | AuthError::NotYetValid
            | AuthError::WrongIssuer
            | AuthError::WrongAudience
            | AuthError::MissingClaim(_)
            | AuthError::InvalidClaim(_)
    )
}

/// An axum extractor for handlers that need a signed-in caller: the state
/// must give a [`Verifier`] (`FromRef`), and a request without a valid token
/// is answered by [`AuthError`]'s response (401 + `WWW-Authenticate`).
///
/// ```no_run
/// use axum::{Router, routing::get};
/// use shopeasy_identity::{Authenticated, Verifier};
///
/// async fn mine(Authenticated(claims): Authenticated) -> String {
///     format!("orders of {}", claims.customer_id())
/// }
/// fn app(verifier: Verifier) -> Router {
///     Router::new().route("/api/orders", get(mine)).with_state(verifier)
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Authenticated(pub Claims);

impl<S> FromRequestParts<S> for Authenticated
where
    Verifier: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Verifier::from_ref(state)
            .authenticate(&parts.headers)
            .await
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn only_asymmetric_algorithms_pass_the_header_check() {
        let token = |alg: &str| {
            format!(
                "{}.{}.sig",
                b64(&format!(r#"{{"alg":"{alg}"}}"#)),
                b64("{}")
            )
        };
        for refused in ["none", "None", "HS256", "HS512", "XX1"] {
            assert_eq!(
                TokenHeader::parse(&token(refused)).err(),
                Some(AuthError::UnsupportedAlgorithm),
                "{refused}"
            );
        }
        for accepted in ["EdDSA", "ES256", "RS256", "PS512"] {
            assert!(TokenHeader::parse(&token(accepted)).is_ok(), "{accepted}");
        }
    }

    #[test]
    fn malformed_tokens_are_refused_before_decoding() {
        for bad in [
            "",
            "abc",
            "a.b",
            "a.b.c.d",
            "!!!.e30.x",
            &format!("{}.e30.x", b64("not json")),
            &"a".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert_eq!(
                TokenHeader::parse(bad).err(),
                Some(AuthError::Malformed),
                "{bad:.20}"
            );
        }
    }

    #[test]
    fn a_subject_must_be_a_short_printable_string() {
        let raw = |sub: serde_json::Value| RawClaims {
            sub,
            exp: 1.into(),
            scope: Some("orders:read orders:write".into()),
            scp: None,
            client_id: None,
            jti: None,
        };
        let ok = raw("alice".into()).into_claims().expect("valid");
        assert_eq!(ok.customer_id(), "alice");
        assert!(ok.has_scope("orders:write"));
        for bad in [
            serde_json::Value::from(""),
            serde_json::Value::from(7),
            serde_json::Value::from("a\nb"),
            serde_json::Value::from("x".repeat(MAX_SUBJECT_BYTES + 1)),
        ] {
            assert_eq!(
                raw(bad).into_claims().err(),
                Some(AuthError::InvalidClaim("sub"))
            );
        }
    }
}
