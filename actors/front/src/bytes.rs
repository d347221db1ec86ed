//! Byte counts as the flags spell them (`64MiB`, `1G`, `500kB`): parsed for `--retained-*-bytes` and
//! `--task-max-memory`, and shown in `--help` in the largest binary unit that divides them, so a
//! library default (`dsh_tasks::DEFAULT_MAX_RETAINED_BYTES`) reads as it is meant.

use std::fmt;

/// `64MiB`, `1G`, `500k`, `1048576`: a byte count with an optional binary (KiB/MiB/GiB, or K/M/G)
/// or decimal (kB/MB/GB) suffix.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 64MiB)"))?;
    let unit: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size suffix {other:?} (use KiB, MiB, GiB)")),
    };
    number
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A byte count as the flags spell it (`64MiB`, `1G`, `500kB`; see [`parse_bytes`]), shown in
/// `--help` in the largest binary unit that divides it, so a library default reads as it is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteCount(pub u64);

impl fmt::Display for ByteCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ByteCount(bytes) = *self;
        for (unit, suffix) in [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
            if bytes != 0 && bytes % unit == 0 {
                return write!(f, "{}{suffix}", bytes / unit);
            }
        }
        write!(f, "{bytes}")
    }
}

/// [`parse_bytes`] as a [`ByteCount`].
pub fn byte_count(text: &str) -> Result<ByteCount, String> {
    parse_bytes(text).map(ByteCount)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_and_decimal_suffixes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("500kB"), Ok(500_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("5 parsecs").is_err());
    }

    #[test]
    fn byte_counts_show_in_the_largest_binary_unit() {
        assert_eq!(ByteCount(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteCount(1 << 30).to_string(), "1GiB");
        assert_eq!(ByteCount(1536).to_string(), "1536");
        assert_eq!(ByteCount(0).to_string(), "0");
        for text in ["64MiB", "1GiB", "12345"] {
            assert_eq!(byte_count(text).map(|n| n.to_string()).as_deref(), Ok(text));
        }
    }
}
