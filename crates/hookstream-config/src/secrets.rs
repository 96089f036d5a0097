//! The `[secrets]` section: the keys that seal endpoint secrets (and URLs) at rest.

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Validate};

/// The keys that seal endpoint signing secrets at rest (AES-256-GCM). A key is written
/// `<id>:<64 hex digits>` (32 random bytes; `hookstream secrets generate-key` makes one).
/// `key` seals new secrets; it and `previous_keys` open existing ones, so a key can be
/// rotated: add the new key as `key`, move the old one to `previous_keys`, run
/// `hookstream secrets seal` to re-seal every secret, then drop the old key.
/// `key_file` names a file with one key per line (first line: the sealing key), for keys
/// mounted from a secret store; it is read when `key` is empty.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    pub key: String,
    pub previous_keys: Vec<String>,
    pub key_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for SecretsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsConfig")
            .field("key", &if self.key.is_empty() { "" } else { "<redacted>" })
            .field(
                "previous_keys",
                &format!("<{} redacted>", self.previous_keys.len()),
            )
            .field("key_file", &self.key_file)
            .finish()
    }
}

impl SecretsConfig {
    /// Every configured key, the sealing key first (empty when none is configured).
    pub fn keys(&self) -> Result<Vec<String>, ConfigError> {
        let mut keys = Vec::new();
        if !self.key.is_empty() {
            keys.push(self.key.trim().to_string());
        } else if let Some(path) = &self.key_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new(format!("cannot read secrets.key_file {}: {e}", path.display()))
            })?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        keys.extend(self.previous_keys.iter().map(|k| k.trim().to_string()));
        Ok(keys)
    }
}

impl Validate for SecretsConfig {
    /// Every configured key must be well formed (`<id>:<64 hex digits>`), ids unique; the
    /// key file must be readable. Whether a key is required at all is the service's call.
    fn validate(&self) -> Result<(), ConfigError> {
        let keys = self.keys()?;
        let mut ids = std::collections::HashSet::new();
        for (i, key) in keys.iter().enumerate() {
            let what = if i == 0 {
                "secrets.key".to_string()
            } else {
                format!("secrets key #{}", i + 1)
            };
            let Some((id, hex)) = key.split_once(':') else {
                return Err(ConfigError::new(format!(
                    "{what} must be <id>:<64 hex digits> (`hookstream secrets generate-key` makes one)"
                )));
            };
            if id.is_empty() || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ConfigError::new(format!(
                    "{what} must be <id>:<64 hex digits> (32 bytes); `hookstream secrets generate-key` makes one"
                )));
            }
            if !ids.insert(id.to_string()) {
                return Err(ConfigError::new(format!(
                    "secrets key id {id:?} is configured twice"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_and_duplicate_keys_are_refused() {
        let good = format!("k1:{}", "ab".repeat(32));
        let ok = SecretsConfig {
            key: good.clone(),
            ..Default::default()
        };
        ok.validate().unwrap();
        for bad in ["k1", "k1:abc", ":00", &format!("k1:{}", "zz".repeat(32))] {
            let cfg = SecretsConfig {
                key: bad.to_string(),
                ..Default::default()
            };
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains("secrets.key"), "{err}");
            assert!(!err.contains("zz"), "a key is never echoed: {err}");
        }
        let dup = SecretsConfig {
            key: good.clone(),
            previous_keys: vec![good],
            ..Default::default()
        };
        assert!(dup.validate().unwrap_err().to_string().contains("twice"));
        assert!(
            SecretsConfig::default().validate().is_ok(),
            "no key is the service's call"
        );
    }
}
