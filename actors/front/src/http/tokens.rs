//! `--auth-tokens FILE`: which bearer token names which identity.
//!
//! The file holds one `<identity> <token>` or `<identity> sha256:<hex>` per line (blank lines and
//! `#` comments skipped); the second form keeps only the token's SHA-256 (`printf %s "$TOKEN" |
//! sha256sum`) on the server, so the file alone lets no one in. Every known token is kept as its
//! SHA-256; a presented token is hashed once and compared with every one in constant time
//! ([`subtle`], equal lengths, so not even a token's length shows), and the comparison never stops
//! early, so the time taken says nothing about how close a guess was. Tokens are never logged or
//! shown; errors name only the file and the line number.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The prefix of a token given as its SHA-256 in hex.
const SHA256_PREFIX: &str = "sha256:";

/// The identity a request authenticated as: the dsh session id its calls and tasks belong to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity(pub String);

/// A token file that could not be used; the Display is the startup error.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file could not be read.
    #[error("--auth-tokens {path}: {err}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// A line is not `<identity> <token>` or `<identity> sha256:<hex>`.
    #[error(
        "--auth-tokens {path}, line {line}: expected `<identity> <token>` or \
         `<identity> sha256:<64 hex digits>`"
    )]
    Malformed {
        /// The file.
        path: String,
        /// The 1-based line number.
        line: usize,
    },
    /// The file names no token.
    #[error("--auth-tokens {path}: no `<identity> <token>` line")]
    Empty {
        /// The file.
        path: String,
    },
}

/// The known tokens, each as its SHA-256, and their identities.
pub struct Tokens {
    known: Vec<(Identity, [u8; 32])>,
}

impl Tokens {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Self, TokensError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| TokensError::Read {
            path: shown.clone(),
            err,
        })?;
        Self::parse(&text).map_err(|line| match line {
            0 => TokensError::Empty { path: shown },
            line => TokensError::Malformed { path: shown, line },
        })
    }

    /// Parses the file's text; `Err(n)` for a malformed line `n`, `Err(0)` for no token.
    fn parse(text: &str) -> Result<Self, usize> {
        let mut known = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let hash = match (words.next(), words.next(), words.next()) {
                (Some(_), Some(token), None) => match token.strip_prefix(SHA256_PREFIX) {
                    Some(hex) => from_hex(hex),
                    None => Some(sha256(token.as_bytes())),
                },
                _ => None,
            };
            match (line.split_whitespace().next(), hash) {
                (Some(identity), Some(hash)) => known.push((Identity(identity.to_owned()), hash)),
                _ => return Err(index + 1),
            }
        }
        if known.is_empty() {
            return Err(0);
        }
        Ok(Self { known })
    }

    /// The identity whose token is `presented`, comparing its hash with every token's in
    /// constant time.
    pub fn identify(&self, presented: &[u8]) -> Option<Identity> {
        let presented = sha256(presented);
        let mut found = None;
        for (identity, hash) in &self.known {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(identity.clone());
            }
        }
        found
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// 64 hex digits (either case) as 32 bytes.
fn from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_identity_and_nothing_else_does() {
        let tokens = Tokens::parse("# agents\nalice a-secret\n\nbob b-secret\n").unwrap();
        assert_eq!(tokens.identify(b"b-secret"), Some(Identity("bob".into())));
        assert_eq!(tokens.identify(b"a-secre"), None);
        assert_eq!(tokens.identify(b""), None);
    }

    #[test]
    fn a_malformed_line_is_named_by_number() {
        assert_eq!(Tokens::parse("alice a\nbob\n").err(), Some(2));
        assert_eq!(Tokens::parse("# none\n").err(), Some(0));
        assert_eq!(Tokens::parse("alice sha256:abc\n").err(), Some(1));
        let not_hex = format!("alice sha256:{}\n", "g".repeat(64));
        assert_eq!(Tokens::parse(&not_hex).err(), Some(1));
    }

    #[test]
    fn a_hashed_token_names_its_identity() {
        // printf %s b-secret | sha256sum; alice's in upper case.
        let bob = "60a8476a0e58815b61bbcdcdb8db2c1ec1b4f339897f4af2a0401b4115f5d662";
        let alice = "6B5F4E1D2E0F7C1A9E2B5D2F7A3C4E8F0A1B2C3D4E5F60718293A4B5C6D7E8F9";
        let tokens = Tokens::parse(&format!(
            "alice sha256:{alice}\nbob sha256:{bob}\ncarol c\n"
        ))
        .unwrap();
        assert_eq!(tokens.identify(b"b-secret"), Some(Identity("bob".into())));
        assert_eq!(tokens.identify(b"c"), Some(Identity("carol".into())));
        assert_eq!(tokens.identify(b"b-secre"), None);
        assert_eq!(
            tokens.identify(bob.as_bytes()),
            None,
            "the hash is not the token"
        );
    }
}
