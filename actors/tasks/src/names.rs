//! Settings spelled as words (`read-only`, `kill`, `deny`), as a command line or a config file gives
//! them: one trait for the enums that hold such a setting, so each parses and prints its words the same
//! way and lists them (the `dsh` flags offer exactly these), and the error for a word that is none of
//! them. It lives in this crate, the lowest one with such an enum ([`crate::SandboxMode`]); dsh-bash's
//! settings use it too.

/// A setting whose values are spelled as words.
pub trait Named: Copy + 'static {
    /// Every value, in the order they are listed.
    const VALUES: &'static [Self];
    /// What a value is, for errors: `a sandbox mode`.
    const WHAT: &'static str;

    /// The value's word.
    fn name(self) -> &'static str;

    /// The value whose word is exactly `text`.
    fn from_name(text: &str) -> Result<Self, UnknownValue> {
        Self::VALUES
            .iter()
            .copied()
            .find(|value| value.name() == text)
            .ok_or_else(|| UnknownValue {
                what: Self::WHAT,
                text: text.to_owned(),
                expected: Self::VALUES.iter().map(|value| value.name()).collect(),
            })
    }
}

/// Makes `$setting`, an enum of unit variants, a [`Named`] setting: `$what` one is (for errors),
/// and each variant's word in the order they are listed; `Display` prints the word and `FromStr`
/// takes exactly the words.
#[macro_export]
macro_rules! named_setting {
    ($setting:ident, $what:literal, $($variant:ident => $word:literal),+ $(,)?) => {
        impl $crate::Named for $setting {
            const VALUES: &'static [$setting] = &[$($setting::$variant),+];
            const WHAT: &'static str = $what;

            fn name(self) -> &'static str {
                match self {
                    $($setting::$variant => $word,)+
                }
            }
        }

        impl ::std::fmt::Display for $setting {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::Named::name(*self))
            }
        }

        impl ::std::str::FromStr for $setting {
            type Err = $crate::UnknownValue;

            fn from_str(text: &str) -> ::std::result::Result<Self, $crate::UnknownValue> {
                <$setting as $crate::Named>::from_name(text)
            }
        }
    };
}

/// A word that is none of a setting's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not {what} (expected one of: {})", expected.join(", "))]
pub struct UnknownValue {
    /// What the word should have named (`a sandbox mode`).
    pub what: &'static str,
    /// The word given.
    pub text: String,
    /// The setting's words.
    pub expected: Vec<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxMode;

    #[test]
    fn each_word_parses_to_its_value_and_prints_back() {
        for mode in SandboxMode::VALUES {
            assert_eq!(mode.name().parse::<SandboxMode>(), Ok(*mode));
            assert_eq!(mode.to_string(), mode.name());
        }
        let unknown = "Read-Only".parse::<SandboxMode>().unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "\"Read-Only\" is not a sandbox mode (expected one of: read-only, workspace-write, \
             danger-full-access)"
        );
    }
}
