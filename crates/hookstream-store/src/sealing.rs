//! Endpoint signing secrets and URLs sealed at rest with AES-256-GCM.
//!
//! A sealed secret is `nonce (12 random bytes) || ciphertext || tag`, with the endpoint id as
//! associated data: a sealed value copied to another endpoint's row does not open. Each row
//! names its key (`key_id`), so keys rotate without downtime (see `SecretsConfig`). Keys and
//! plaintexts never appear in `Debug` output, errors or logs.

use std::collections::HashMap;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use hookstream_config::SecretsConfig;
use rand::RngCore;
use uuid::Uuid;

const NONCE_LEN: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(
        "no key to seal endpoint secrets: set secrets.key (HOOKSTREAM_SECRETS__KEY) or secrets.key_file; \
         `hookstream secrets generate-key` makes one"
    )]
    NoKey,
    #[error("invalid secrets key #{0}: expected <id>:<64 hex digits> (32 bytes)")]
    BadKey(usize),
    #[error("secrets key id {0:?} is configured twice")]
    DuplicateKey(String),
    #[error("{0}")]
    Config(#[from] hookstream_config::ConfigError),
    #[error("secret sealed with key {0:?}, which is not configured")]
    UnknownKey(String),
    #[error("sealed secret does not open (wrong key, wrong endpoint, or corrupted)")]
    Corrupt,
}

/// Seals with the first configured key; opens with any of them.
pub struct Sealer {
    active: String,
    keys: HashMap<String, Aes256Gcm>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("active", &self.active)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Sealer {
    pub fn from_config(cfg: &SecretsConfig) -> Result<Self, SealError> {
        Self::from_keys(&cfg.keys()?)
    }

    /// From `<id>:<hex>` keys, the sealing key first.
    pub fn from_keys(specs: &[String]) -> Result<Self, SealError> {
        let mut keys = HashMap::new();
        let mut active = None;
        for (i, spec) in specs.iter().enumerate() {
            let (id, hex_key) = spec.split_once(':').ok_or(SealError::BadKey(i + 1))?;
            let bytes = hex::decode(hex_key).map_err(|_| SealError::BadKey(i + 1))?;
            if id.is_empty() || bytes.len() != 32 {
                return Err(SealError::BadKey(i + 1));
            }
            let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes));
            if keys.insert(id.to_string(), cipher).is_some() {
                return Err(SealError::DuplicateKey(id.to_string()));
            }
            active.get_or_insert_with(|| id.to_string());
        }
        Ok(Self {
            active: active.ok_or(SealError::NoKey)?,
            keys,
        })
    }

    /// A new random key, written as configuration expects it.
    pub fn generate_key(id: &str) -> String {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        format!("{id}:{}", hex::encode(bytes))
    }

    /// The id of the key that seals.
    pub fn active_key_id(&self) -> &str {
        &self.active
    }

    /// Seals a signing secret for `endpoint`; returns the key id and the sealed bytes.
    pub fn seal(&self, endpoint: Uuid, plaintext: &str) -> (String, Vec<u8>) {
        self.seal_with(endpoint.as_bytes(), plaintext)
    }

    /// Opens a secret sealed for `endpoint` with key `key_id`.
    pub fn open(&self, endpoint: Uuid, key_id: &str, sealed: &[u8]) -> Result<String, SealError> {
        self.open_with(endpoint.as_bytes(), key_id, sealed)
    }

    /// Seals an endpoint's URL (which may carry a token). Its associated data differs from a
    /// secret's, so a sealed URL does not open as a secret, nor the other way round.
    pub fn seal_url(&self, endpoint: Uuid, url: &str) -> (String, Vec<u8>) {
        self.seal_with(&url_aad(endpoint), url)
    }

    /// Opens a URL sealed for `endpoint`.
    pub fn open_url(&self, endpoint: Uuid, key_id: &str, sealed: &[u8]) -> Result<String, SealError> {
        self.open_with(&url_aad(endpoint), key_id, sealed)
    }

    /// Seals an endpoint's custom headers (receivers' credentials), with associated data of
    /// their own.
    pub fn seal_headers(&self, endpoint: Uuid, headers_json: &str) -> (String, Vec<u8>) {
        self.seal_with(&labelled_aad(endpoint, b"/headers"), headers_json)
    }

    /// Opens headers sealed for `endpoint`.
    pub fn open_headers(&self, endpoint: Uuid, key_id: &str, sealed: &[u8]) -> Result<String, SealError> {
        self.open_with(&labelled_aad(endpoint, b"/headers"), key_id, sealed)
    }

    /// Seals a payload data key (`payload_keys`), with its id as associated data.
    pub fn seal_data_key(&self, key: Uuid, data_key: &[u8; 32]) -> (String, Vec<u8>) {
        self.seal_bytes(&labelled_aad(key, b"/payload-key"), data_key)
    }

    /// Opens a data key sealed for `key` with master key `key_id`.
    pub fn open_data_key(&self, key: Uuid, key_id: &str, sealed: &[u8]) -> Result<[u8; 32], SealError> {
        let plain = self.open_bytes(&labelled_aad(key, b"/payload-key"), key_id, sealed)?;
        plain.try_into().map_err(|_| SealError::Corrupt)
    }

    fn seal_with(&self, aad: &[u8], plaintext: &str) -> (String, Vec<u8>) {
        self.seal_bytes(aad, plaintext.as_bytes())
    }

    fn seal_bytes(&self, aad: &[u8], plaintext: &[u8]) -> (String, Vec<u8>) {
        let cipher = &self.keys[&self.active];
        let mut nonce = [0u8; NONCE_LEN];
        rand::thread_rng().fill_bytes(&mut nonce);
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad })
            .expect("AES-GCM encryption of a short secret cannot fail");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        (self.active.clone(), out)
    }

    fn open_with(&self, aad: &[u8], key_id: &str, sealed: &[u8]) -> Result<String, SealError> {
        String::from_utf8(self.open_bytes(aad, key_id, sealed)?).map_err(|_| SealError::Corrupt)
    }

    fn open_bytes(&self, aad: &[u8], key_id: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let cipher = self
            .keys
            .get(key_id)
            .ok_or_else(|| SealError::UnknownKey(key_id.to_string()))?;
        if sealed.len() <= NONCE_LEN {
            return Err(SealError::Corrupt);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: body, aad })
            .map_err(|_| SealError::Corrupt)
    }
}

fn url_aad(endpoint: Uuid) -> Vec<u8> {
    labelled_aad(endpoint, b"/url")
}

fn labelled_aad(endpoint: Uuid, label: &[u8]) -> Vec<u8> {
    let mut aad = endpoint.as_bytes().to_vec();
    aad.extend_from_slice(label);
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_only_for_the_same_endpoint_and_a_known_key() {
        let sealer = Sealer::from_keys(&[Sealer::generate_key("k2"), Sealer::generate_key("k1")]).unwrap();
        let ep = Uuid::now_v7();
        let (key_id, sealed) = sealer.seal(ep, "whsec_c2VjcmV0");
        assert_eq!(key_id, "k2", "the first key seals");
        assert!(
            !sealed.windows(6).any(|w| w == b"whsec_"),
            "no plaintext in the sealed bytes"
        );
        assert_eq!(sealer.open(ep, &key_id, &sealed).unwrap(), "whsec_c2VjcmV0");
        assert!(matches!(
            sealer.open(Uuid::now_v7(), &key_id, &sealed),
            Err(SealError::Corrupt)
        ));
        assert!(matches!(sealer.open(ep, "k1", &sealed), Err(SealError::Corrupt)));
        assert!(matches!(
            sealer.open(ep, "k9", &sealed),
            Err(SealError::UnknownKey(_))
        ));
        let mut flipped = sealed.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            sealer.open(ep, &key_id, &flipped),
            Err(SealError::Corrupt)
        ));
        assert!(!format!("{sealer:?}").contains(&Sealer::generate_key("k2")[3..]));
    }

    #[test]
    fn a_sealed_url_opens_only_as_that_endpoints_url() {
        let sealer = Sealer::from_keys(&[Sealer::generate_key("k")]).unwrap();
        let ep = Uuid::now_v7();
        let url = "https://hooks.example.com/services/T000/B000/s3cr3tT0k3nValue";
        let (key_id, sealed) = sealer.seal_url(ep, url);
        assert!(
            !sealed.windows(8).any(|w| w == b"s3cr3tT0"),
            "no plaintext in the sealed bytes"
        );
        assert_eq!(sealer.open_url(ep, &key_id, &sealed).unwrap(), url);
        assert!(sealer.open(ep, &key_id, &sealed).is_err(), "not as a secret");
        assert!(
            sealer.open_url(Uuid::now_v7(), &key_id, &sealed).is_err(),
            "not for another endpoint"
        );
        let (key_id, secret) = sealer.seal(ep, "whsec_x");
        assert!(
            sealer.open_url(ep, &key_id, &secret).is_err(),
            "a secret is not a url"
        );
    }

    #[test]
    fn rejects_malformed_and_missing_keys() {
        assert!(matches!(Sealer::from_keys(&[]), Err(SealError::NoKey)));
        assert!(matches!(
            Sealer::from_keys(&["nocolon".into()]),
            Err(SealError::BadKey(1))
        ));
        assert!(matches!(
            Sealer::from_keys(&["k:abcd".into()]),
            Err(SealError::BadKey(1))
        ));
        let k = Sealer::generate_key("k");
        assert!(matches!(
            Sealer::from_keys(&[k.clone(), k]),
            Err(SealError::DuplicateKey(_))
        ));
    }
}
