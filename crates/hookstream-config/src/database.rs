//! The `[database]` section: where PostgreSQL is and how to reach it (TLS up to
//! `verify-full`, a pool per service, a statement timeout).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Validate};

/// TLS modes, as libpq names them.
pub const SSL_MODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// Where the PostgreSQL database is.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/database?…` (a password here is never logged).
    pub url: String,
    /// A file holding the password (a mounted secret), read at connect time; it overrides a
    /// password in `url`, so the URL itself can live in plain configuration.
    pub password_file: Option<PathBuf>,
    /// This service's connection pool.
    pub max_connections: u32,
    /// Run the embedded migrations at start-up (safe with several instances: sqlx takes a lock).
    pub migrate_on_start: bool,
    /// TLS: `disable`, `allow`, `prefer`, `require`, `verify-ca` or `verify-full` (checks the
    /// server's certificate and its host name). Unset: what the URL says (`sslmode=`), else `prefer`.
    pub ssl_mode: Option<String>,
    /// CA certificate(s) (PEM) the server's certificate must chain to (`verify-ca`,
    /// `verify-full`); without it, the usual public roots.
    pub ssl_root_cert: Option<PathBuf>,
    /// Client certificate and key (PEM), when the server asks for one.
    pub ssl_client_cert: Option<PathBuf>,
    pub ssl_client_key: Option<PathBuf>,
    /// The server cancels any statement running longer (0: no limit). Migrations are exempt.
    pub statement_timeout_ms: u64,
    /// How long to wait for a free pooled connection before failing.
    pub acquire_timeout_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "postgres://postgres@127.0.0.1:5432/hookstream".into(),
            password_file: None,
            max_connections: 10,
            migrate_on_start: true,
            ssl_mode: None,
            ssl_root_cert: None,
            ssl_client_cert: None,
            ssl_client_key: None,
            statement_timeout_ms: 30_000,
            acquire_timeout_ms: 10_000,
        }
    }
}

impl DatabaseConfig {
    /// How long a client waits for one answer before it gives a connection up as gone dark:
    /// the statement timeout the server enforces (30 s when it is off) plus 5 s.
    pub fn answer_deadline(&self) -> std::time::Duration {
        let statement = if self.statement_timeout_ms > 0 {
            self.statement_timeout_ms
        } else {
            30_000
        };
        std::time::Duration::from_millis(statement + 5_000)
    }

    /// The URL with its password masked, for messages and logs.
    pub fn redacted_url(&self) -> String {
        redact_password(&self.url)
    }

    /// The password from `password_file` (trailing newline dropped), if one is named.
    pub fn file_password(&self) -> Result<Option<String>, ConfigError> {
        self.password_file
            .as_ref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                    .map_err(|e| {
                        ConfigError::new(format!(
                            "database.password_file: cannot read {}: {e}",
                            p.display()
                        ))
                    })
            })
            .transpose()
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`, and a password given as
/// a query parameter (`?password=secret`, which PostgreSQL's drivers accept too) → `password=***`.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let tail = redact_query_password(tail);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => format!("{scheme}://{authority}{tail}"),
    }
}

/// The path and query with the value of every `password` or `sslpassword` parameter masked.
fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            let decoded = percent_decoded_lowercase(key);
            if decoded == "password" || decoded == "sslpassword" {
                format!("{key}=***")
            } else {
                pair.to_string()
            }
        })
        .collect();
    format!("{path}?{}", params.join("&"))
}

/// `key` with its %XX escapes decoded and lowercased (a key spelled `pass%77ord` is still
/// the password).
fn percent_decoded_lowercase(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &self.redacted_url())
            .field("password_file", &self.password_file)
            .field("max_connections", &self.max_connections)
            .field("migrate_on_start", &self.migrate_on_start)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.ssl_root_cert)
            .field("ssl_client_cert", &self.ssl_client_cert)
            .field("ssl_client_key", &self.ssl_client_key)
            .field("statement_timeout_ms", &self.statement_timeout_ms)
            .field("acquire_timeout_ms", &self.acquire_timeout_ms)
            .finish()
    }
}

impl Validate for DatabaseConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        if !(self.url.starts_with("postgres://") || self.url.starts_with("postgresql://")) {
            return err("database.url must be a postgres:// or postgresql:// URL".into());
        }
        if self.max_connections == 0 {
            return err("database.max_connections must be at least 1".into());
        }
        if self.acquire_timeout_ms == 0 {
            return err("database.acquire_timeout_ms must be at least 1".into());
        }
        if let Some(mode) = &self.ssl_mode {
            if !SSL_MODES.contains(&mode.as_str()) {
                return err(format!(
                    "database.ssl_mode must be one of {}, not {mode:?}",
                    SSL_MODES.join(", ")
                ));
            }
        }
        for (key, path) in [
            ("database.password_file", &self.password_file),
            ("database.ssl_root_cert", &self.ssl_root_cert),
            ("database.ssl_client_cert", &self.ssl_client_cert),
            ("database.ssl_client_key", &self.ssl_client_key),
        ] {
            if let Some(p) = path {
                if std::fs::metadata(p).is_err() {
                    return err(format!("{key}: cannot read {}", p.display()));
                }
            }
        }
        if self.ssl_client_cert.is_some() != self.ssl_client_key.is_some() {
            return err("database.ssl_client_cert and database.ssl_client_key go together".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        let cfg = DatabaseConfig {
            url: "postgres://app:s3cr3t@db.example.com:5432/app?sslmode=require".into(),
            ..Default::default()
        };
        assert_eq!(
            cfg.redacted_url(),
            "postgres://app:***@db.example.com:5432/app?sslmode=require"
        );
        assert!(!format!("{cfg:?}").contains("s3cr3t"));
        assert_eq!(redact_password("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_password("postgres://db/x"), "postgres://db/x");
        // sqlx takes the password from the query too.
        assert_eq!(
            redact_password("postgres://app@db/hs?sslmode=require&password=s3cr3t&application_name=x"),
            "postgres://app@db/hs?sslmode=require&password=***&application_name=x"
        );
        assert_eq!(
            redact_password("postgresql://db?PassWord=s3cr3t&sslpassword=k3y"),
            "postgresql://db?PassWord=***&sslpassword=***"
        );
        assert_eq!(
            redact_password("postgres://db/x?pass%77ord=s3cr3t"),
            "postgres://db/x?pass%77ord=***"
        );
        assert_eq!(
            redact_password("postgres://u:p@db/x?password"),
            "postgres://u:***@db/x?password=***"
        );
    }

    #[test]
    fn tls_settings_are_checked() {
        let bad = DatabaseConfig {
            ssl_mode: Some("verify_full".into()),
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("database.ssl_mode"));
        let missing = DatabaseConfig {
            ssl_root_cert: Some("/nope/ca.pem".into()),
            ..Default::default()
        };
        assert!(missing
            .validate()
            .unwrap_err()
            .to_string()
            .contains("database.ssl_root_cert"));
        DatabaseConfig {
            ssl_mode: Some("verify-full".into()),
            ..Default::default()
        }
        .validate()
        .unwrap();
    }
}
