//! The key chain file (issue 39; docs/operator-guide.md, "Authenticated advertisements"):
//! RFC 8177's `ietf-key-chain` fields in TOML, read from a file that only its owner (and
//! group) may read. A secret is never logged: errors name the key and the field, never
//! the key string.
//!
//! ```toml
//! [[key]]
//! key-id = 1
//! crypto-algorithm = "hmac-sha-256"        # hmac-sha-384, hmac-sha-512
//! key-string = "a long random passphrase"  # or: hexadecimal-string = "00ab..."
//! send-lifetime = { start-date-time = "2026-12-01T00:00:00Z", end-date-time = "2027-01-01T00:00:00Z" }
//! accept-lifetime = { start-date-time = "2026-11-30T23:00:00Z", no-end-time = true }
//! # send-accept-lifetime = {...} sets both; a lifetime left out is RFC 8177's `always`;
//! # `duration = SECONDS` ends a lifetime that long after its start.
//! ```

use std::{os::unix::fs::PermissionsExt, path::Path};

use serde::Deserialize;

use crate::core::auth::{Key, KeyChain, KeyChainError, Lifetime, Secret};
use lq_common::auth::Algorithm;

/// Why a key chain file is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyChainFileError {
    /// The file cannot be read.
    #[error("cannot read the key chain {path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Others may read or write it.
    #[error(
        "the key chain {path} is accessible to others (mode {mode:03o}): its secrets must not be; chmod o= {path}"
    )]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Not TOML of the expected shape. Only the parser's message and the line are kept:
    /// its usual report quotes the offending line, which may hold a key string.
    #[error("the key chain {path}, line {line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The line (1-based; 0 when the parser gave no place).
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A field of one key.
    #[error("the key chain {path}, key {key_id}: {what}")]
    Key {
        /// The file.
        path: String,
        /// The key.
        key_id: u64,
        /// What is wrong.
        what: String,
    },
    /// The keys together.
    #[error("the key chain {path}")]
    Chain {
        /// The file.
        path: String,
        /// The cause.
        source: KeyChainError,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    key: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct KeyEntry {
    key_id: u64,
    crypto_algorithm: String,
    key_string: Option<SecretString>,
    hexadecimal_string: Option<SecretString>,
    send_lifetime: Option<LifetimeEntry>,
    accept_lifetime: Option<LifetimeEntry>,
    send_accept_lifetime: Option<LifetimeEntry>,
}

/// A key string as read: its `Debug` is redacted so that no error or log shows it.
#[derive(Deserialize)]
#[serde(transparent)]
struct SecretString(String);

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct LifetimeEntry {
    start_date_time: Option<String>,
    end_date_time: Option<String>,
    duration: Option<u32>,
    no_end_time: Option<bool>,
}

fn date_time(s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|e| format!("{s:?} is not an RFC 3339 date-time ({e})"))
}

fn lifetime(which: &str, l: Option<&LifetimeEntry>) -> Result<Lifetime, String> {
    let Some(l) = l else {
        return Ok(Lifetime::ALWAYS);
    };
    let start_s = l
        .start_date_time
        .as_deref()
        .map(date_time)
        .transpose()
        .map_err(|e| format!("{which} start-date-time: {e}"))?;
    let ends = [
        l.end_date_time.is_some(),
        l.duration.is_some(),
        l.no_end_time == Some(true),
    ];
    if ends.iter().filter(|e| **e).count() > 1 {
        return Err(format!(
            "{which}: end-date-time, duration and no-end-time exclude each other"
        ));
    }
    let end_s = match (&l.end_date_time, l.duration) {
        (Some(e), _) => Some(date_time(e).map_err(|e| format!("{which} end-date-time: {e}"))?),
        (None, Some(d)) => {
            let start = start_s.ok_or(format!("{which}: a duration needs a start-date-time"))?;
            Some(start + i64::from(d))
        }
        _ => None,
    };
    Ok(Lifetime { start_s, end_s })
}

fn key(e: &KeyEntry) -> Result<Key, String> {
    let id = u16::try_from(e.key_id)
        .map_err(|_| "key-id must be at most 65535 (16 bits on the wire)".to_string())?;
    let algorithm = Algorithm::from_name(&e.crypto_algorithm).ok_or_else(|| {
        format!(
            "crypto-algorithm {:?} is not one of hmac-sha-256, hmac-sha-384, hmac-sha-512",
            e.crypto_algorithm
        )
    })?;
    let secret = match (&e.key_string, &e.hexadecimal_string) {
        (Some(s), None) => s.0.as_bytes().to_vec(),
        (None, Some(h)) => {
            let digits: String = h.0.chars().filter(|c| !matches!(c, ':' | ' ')).collect();
            hex::decode(digits).map_err(|_| "hexadecimal-string is not hexadecimal".to_string())?
        }
        _ => return Err("exactly one of key-string and hexadecimal-string".to_string()),
    };
    let both = e.send_accept_lifetime.as_ref();
    if both.is_some() && (e.send_lifetime.is_some() || e.accept_lifetime.is_some()) {
        return Err("send-accept-lifetime excludes send-lifetime and accept-lifetime".to_string());
    }
    Ok(Key {
        id,
        algorithm,
        secret: Secret::new(secret),
        send: lifetime("send-lifetime", both.or(e.send_lifetime.as_ref()))?,
        accept: lifetime("accept-lifetime", both.or(e.accept_lifetime.as_ref()))?,
    })
}

/// Parses a key chain's text (`path` names it in errors).
pub fn parse(path: &str, text: &str) -> Result<KeyChain, KeyChainFileError> {
    let file: File = toml::from_str(text).map_err(|e| KeyChainFileError::Parse {
        path: path.to_string(),
        line: e.span().map_or(0, |s| {
            text[..s.start.min(text.len())].matches('\n').count() + 1
        }),
        message: e.message().to_string(),
    })?;
    let keys = file
        .key
        .iter()
        .map(|e| {
            key(e).map_err(|what| KeyChainFileError::Key {
                path: path.to_string(),
                key_id: e.key_id,
                what,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    KeyChain::new(keys).map_err(|source| KeyChainFileError::Chain {
        path: path.to_string(),
        source,
    })
}

/// Reads the key chain at `path`, refusing a file that others may read or write.
pub fn load(path: &Path) -> Result<KeyChain, KeyChainFileError> {
    let shown = path.display().to_string();
    let read = |source| KeyChainFileError::Read {
        path: shown.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(KeyChainFileError::TooOpen { path: shown, mode });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    parse(&shown, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const CHAIN: &str = r#"
[[key]]
key-id = 1
crypto-algorithm = "hmac-sha-256"
key-string = "hunter2 is not a key"
send-lifetime = { start-date-time = "2026-12-01T00:00:00Z", end-date-time = "2027-01-01T00:00:00Z" }
accept-lifetime = { start-date-time = "2026-11-30T23:00:00Z", duration = 7200 }

[[key]]
key-id = 2
crypto-algorithm = "hmac-sha-512"
hexadecimal-string = "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"
send-accept-lifetime = { start-date-time = "2026-12-31T00:00:00+01:00" }
"#;

    #[test]
    fn a_key_chain_parses_with_rfc_8177_fields() {
        let c = parse("k.toml", CHAIN).unwrap();
        let k = c.keys();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].algorithm, Algorithm::HmacSha256);
        assert_eq!(k[0].send.start_s, Some(1_796_083_200));
        assert_eq!(k[0].send.end_s, Some(1_798_761_600));
        assert_eq!(k[0].accept.start_s, Some(1_796_079_600));
        assert_eq!(k[0].accept.end_s, Some(1_796_079_600 + 7200));
        assert_eq!(k[1].algorithm, Algorithm::HmacSha512);
        assert_eq!(
            k[1].secret,
            Secret::new((0..16).map(|i| i * 0x11).collect())
        );
        assert_eq!(k[1].send, k[1].accept);
        assert_eq!(k[1].send.start_s, Some(1_798_671_600));
        assert_eq!(k[1].send.end_s, None);
    }

    #[test]
    fn bad_keys_are_refused_by_key_and_field_without_their_secret() {
        for (text, wanted) in [
            (
                "[[key]]\nkey-id = 70000\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\n",
                "at most 65535",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"md5\"\nkey-string = \"hunter2\"\n",
                "not one of",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\n",
                "exactly one of",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\nsend-lifetime = { start-date-time = \"yesterday\" }\n",
                "not an RFC 3339",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\nsend-lifetime = { duration = 5 }\n",
                "needs a start",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\nsend-accept-lifetime = {}\naccept-lifetime = {}\n",
                "excludes",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\n[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter3\"\n",
                "appears twice",
            ),
            ("", "no key"),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = [\"hunter2\"]\n",
                "line 4",
            ),
            (
                "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"hunter2\"\nkeystring = 1\n",
                "unknown field",
            ),
        ] {
            let e = parse("k.toml", text).unwrap_err();
            let shown = crate::core::report::Chain(&e).to_string();
            assert!(shown.contains(wanted), "{shown}");
            assert!(!shown.contains("hunter2"), "a secret shown: {shown}");
        }
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let dir = std::env::temp_dir().join(format!("lq-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keys.toml");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(CHAIN.as_bytes())
            .unwrap();
        for (mode, ok) in [(0o600, true), (0o640, true), (0o644, false), (0o606, false)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            match load(&path) {
                Ok(c) => assert!(ok, "{mode:o} accepted: {c:?}"),
                Err(e) => {
                    assert!(!ok, "{mode:o} refused: {e}");
                    assert!(e.to_string().contains("accessible to others"), "{e}");
                }
            }
        }
        let missing = load(&dir.join("absent.toml")).unwrap_err();
        assert!(missing.to_string().contains("cannot read"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
