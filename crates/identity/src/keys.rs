//! Verification keys: a JWKS document or one PEM key, parsed into the
//! keys we accept and the algorithms each may verify.
//!
//! Only asymmetric keys are accepted (`OKP`/Ed25519, `EC` P-256/P-384,
//! `RSA`): a shared-secret `oct` key in a public JWKS would let anyone who
//! reads the JWKS mint tokens, and pairing each key with its own family of
//! algorithms is what stops algorithm confusion (an RS256 public key used as
//! an HS256 secret).

use base64::Engine;
use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse},
};

/// Most keys kept from one JWKS: providers publish two or three (current,
/// next, previous); a document with hundreds is a mistake or an attack.
pub const MAX_KEYS: usize = 32;

/// Largest JWKS document read, in bytes.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// One key that may verify tokens.
#[derive(Clone)]
pub struct VerifyKey {
    /// The JWK `kid`, when the key has one.
    pub kid: Option<String>,
    /// The algorithms this key verifies (from its `alg`, or its type).
    pub algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyKey")
            .field("kid", &self.kid)
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

impl VerifyKey {
    /// The key for `jsonwebtoken::decode`.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.key
    }

    /// Whether this key may verify a token signed with `alg`.
    pub fn allows(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }
}

/// Why keys could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The document is not a JWKS (`{"keys": [...]}`).
    #[error("not a JWKS document: {0}")]
    NotJwks(String),
    /// The document has no key we can verify with.
    #[error("the JWKS has no usable signing key (Ed25519, P-256, P-384 or RSA)")]
    NoUsableKey,
    /// The PEM is not a public key of a supported type.
    #[error("the PEM is not an Ed25519, P-256/P-384 or RSA public key")]
    BadPem,
}

/// The keys in force: what a JWKS fetch or the configured PEM gave.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<VerifyKey>,
}

impl KeySet {
    /// Parses a JWKS document, keeping up to [`MAX_KEYS`] usable signing
    /// keys and skipping the rest (encryption keys, symmetric keys, unknown
    /// types or curves, keys that do not parse or whose parts have the
    /// wrong length), so one odd key in a provider's set does not stop the
    /// others from working.
    ///
    /// # Errors
    /// [`KeyError::NotJwks`] for a document of another shape,
    /// [`KeyError::NoUsableKey`] when nothing usable is left.
    pub fn from_jwks(body: &[u8]) -> Result<Self, KeyError> {
        #[derive(serde::Deserialize)]
        struct Doc {
            keys: Vec<serde_json::Value>,
        }
        let doc: Doc =
            serde_json::from_slice(body).map_err(|e| KeyError::NotJwks(e.to_string()))?;
        let keys: Vec<VerifyKey> = doc
            .keys
            .into_iter()
            .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
            .filter_map(|jwk| from_jwk(&jwk))
            .take(MAX_KEYS)
            .collect();
        if keys.is_empty() {
            return Err(KeyError::NoUsableKey);
        }
        Ok(Self { keys })
    }

    /// One public key in PEM, without a `kid` (it verifies any token whose
    /// algorithm suits it).
    ///
    /// # Errors
    /// [`KeyError::BadPem`].
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let pem = pem.trim().as_bytes();
        let (key, algorithms) = if let Ok(k) = DecodingKey::from_ed_pem(pem) {
            (k, vec![Algorithm::EdDSA])
        } else if let Ok(k) = DecodingKey::from_ec_pem(pem) {
            (k, vec![Algorithm::ES256, Algorithm::ES384])
        } else if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
            (k, rsa_algorithms())
        } else {
            return Err(KeyError::BadPem);
        };
        Ok(Self {
            keys: vec![VerifyKey {
                kid: None,
                algorithms,
                key,
            }],
        })
    }

    /// The keys, in document order.
    pub fn keys(&self) -> &[VerifyKey] {
        &self.keys
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no keys (nothing fetched yet).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys that may verify a token with header `kid` and `alg`: the
    /// key with that `kid`, or — for a token without a `kid` — every key
    /// that suits `alg`.
    pub fn candidates<'a>(
        &'a self,
        kid: Option<&'a str>,
        alg: Algorithm,
    ) -> impl Iterator<Item = &'a VerifyKey> + 'a {
        self.keys.iter().filter(move |k| {
            k.allows(alg)
                && match kid {
                    Some(kid) => k.kid.as_deref() == Some(kid),
                    None => true,
                }
        })
    }

    /// Whether a key with `kid` is present (whatever its algorithm).
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

fn rsa_algorithms() -> Vec<Algorithm> {
    vec![
        Algorithm::RS256,
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS384,
        Algorithm::PS512,
    ]
}

/// The key of one JWK, or `None` when we do not verify with it.
fn from_jwk(jwk: &Jwk) -> Option<VerifyKey> {
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    // Each part must have its curve's exact length (RFC 8037 §2, RFC 7518
    // §6.2.1.2): `jsonwebtoken` checks only that it decodes, and a short
    // Ed25519 `x` makes its verifier panic (it slices `[..32]`), on the
    // request that tries the key.
    let family: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            if decoded_len(&p.x)? != 32 {
                return None;
            }
            vec![Algorithm::EdDSA]
        }
        AlgorithmParameters::EllipticCurve(p) => {
            let (size, algorithm) = match p.curve {
                EllipticCurve::P256 => (32, Algorithm::ES256),
                EllipticCurve::P384 => (48, Algorithm::ES384),
                _ => return None,
            };
            if decoded_len(&p.x)? != size || decoded_len(&p.y)? != size {
                return None;
            }
            vec![algorithm]
        }
        AlgorithmParameters::RSA(p) => {
            if decoded_len(&p.n)? == 0 || decoded_len(&p.e)? == 0 {
                return None;
            }
            rsa_algorithms()
        }
        // Symmetric (`oct`) and unknown key types are never used.
        _ => return None,
    };
    // A key that names its algorithm verifies only that one, and only if it
    // belongs to the key's family.
    let algorithms = match jwk.common.key_algorithm {
        Some(named) => {
            let named = Algorithm::try_from(named).ok()?;
            if !family.contains(&named) {
                return None;
            }
            vec![named]
        }
        None => family,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerifyKey {
        kid: jwk.common.key_id.clone(),
        algorithms,
        key,
    })
}

/// The length of a JWK's base64url part, `None` when it does not decode.
fn decoded_len(part: &str) -> Option<usize> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()
        .map(|bytes| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str = r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}"#;

    #[test]
    fn symmetric_encryption_and_mismatched_keys_are_skipped() {
        let doc = format!(
            r#"{{"keys":[
                {{"kty":"oct","k":"c2VjcmV0","kid":"hmac"}},
                {{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","use":"enc","kid":"enc"}},
                {{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","alg":"RS256","kid":"confused"}},
                {{"kty":"weird","kid":"unknown"}},
                {ED}
            ]}}"#
        );
        let set = KeySet::from_jwks(doc.as_bytes()).expect("one usable key");
        assert_eq!(set.len(), 1);
        assert!(set.has_kid("ed"));
        assert_eq!(set.candidates(Some("ed"), Algorithm::EdDSA).count(), 1);
        assert_eq!(set.candidates(Some("ed"), Algorithm::HS256).count(), 0);
        assert_eq!(set.candidates(None, Algorithm::EdDSA).count(), 1);
    }

    #[test]
    fn a_document_without_usable_keys_is_an_error() {
        assert_eq!(
            KeySet::from_jwks(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).err(),
            Some(KeyError::NoUsableKey)
        );
        assert!(matches!(
            KeySet::from_jwks(b"<html>"),
            Err(KeyError::NotJwks(_))
        ));
        assert_eq!(KeySet::from_pem("nope").err(), Some(KeyError::BadPem));
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Keys whose parts decode but have the wrong length are skipped at
    /// load. Fails without the length checks: every one of them was kept
    /// (and the short Ed25519 key panicked the request that tried it).
    #[test]
    fn keys_with_parts_of_the_wrong_length_are_skipped() {
        let (b16, b32, b48) = (b64(&[7; 16]), b64(&[7; 32]), b64(&[7; 48]));
        let doc = format!(
            r#"{{"keys":[
                {{"kty":"OKP","crv":"Ed25519","x":"{b16}","kid":"short-okp"}},
                {{"kty":"OKP","crv":"Ed25519","x":"{b48}","kid":"long-okp"}},
                {{"kty":"EC","crv":"P-256","x":"{b16}","y":"{b32}","kid":"short-x"}},
                {{"kty":"EC","crv":"P-256","x":"{b32}","y":"{b48}","kid":"long-y"}},
                {{"kty":"EC","crv":"P-384","x":"{b32}","y":"{b32}","kid":"p384-of-p256-size"}},
                {{"kty":"RSA","n":"","e":"AQAB","kid":"no-n"}},
                {{"kty":"RSA","n":"{b32}","e":"","kid":"no-e"}},
                {ED}
            ]}}"#
        );
        let set = KeySet::from_jwks(doc.as_bytes()).expect("the one good key");
        let kids: Vec<_> = set.keys().iter().map(|k| k.kid.as_deref()).collect();
        assert_eq!(kids, [Some("ed")]);

        let right = format!(
            r#"{{"keys":[
                {{"kty":"EC","crv":"P-256","x":"{b32}","y":"{b32}","kid":"p256"}},
                {{"kty":"EC","crv":"P-384","x":"{b48}","y":"{b48}","kid":"p384"}},
                {{"kty":"RSA","n":"{b32}","e":"AQAB","kid":"rsa"}}
            ]}}"#
        );
        // Right lengths are kept (whether the point is on its curve is
        // found when a token is checked; the verifier then tries the next
        // key).
        assert_eq!(KeySet::from_jwks(right.as_bytes()).expect("kept").len(), 3);
    }
}
