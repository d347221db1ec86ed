//! `--auth-tokens FILE`: which bearer token names which identity.
//!
//! The file holds one `<identity> <token>` per line (blank lines and `#` comments skipped). A
//! presented token is compared with every known token in constant time ([`subtle`]), and the
//! comparison never stops early, so the time taken says nothing about how close a guess was.
//! Tokens are never logged or shown; errors name only the file and the line number.

use std::path::Path;

use subtle::ConstantTimeEq;

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
    /// A line is not `<identity> <token>`.
    #[error("--auth-tokens {path}, line {line}: expected `<identity> <token>`")]
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

/// The known tokens and their identities.
pub struct Tokens {
    known: Vec<(Identity, Vec<u8>)>,
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
            match (words.next(), words.next(), words.next()) {
                (Some(identity), Some(token), None) => {
                    known.push((Identity(identity.to_owned()), token.as_bytes().to_vec()))
                }
                _ => return Err(index + 1),
            }
        }
        if known.is_empty() {
            return Err(0);
        }
        Ok(Self { known })
    }

    /// The identity whose token is `presented`, comparing with every token in constant time.
    pub fn identify(&self, presented: &[u8]) -> Option<Identity> {
        let mut found = None;
        for (identity, token) in &self.known {
            if bool::from(token.as_slice().ct_eq(presented)) {
                found = Some(identity.clone());
            }
        }
        found
    }
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
    }
}
