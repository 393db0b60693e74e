//! Byte sizes as people type them: `4K`, `64KiB`, `1M`, `16m`, `1G`, `4096` (binary units).

use std::fmt;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("`{0}` is not a size (examples: 4096, 4K, 64KiB, 1M, 2G)")]
    Malformed(String),
    #[error("`{0}` is zero: an MR needs at least one byte")]
    Zero(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
    #[error("{0} is too large for one work request")]
    TooLargeForWr(String),
}

/// Parses one size. Units are powers of 1024; `B`, `iB` suffixes are accepted.
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(SizeError::Malformed(t.to_string()));
    }
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| SizeError::TooLarge(t.to_string()))?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(SizeError::Malformed(t.to_string())),
    };
    if n == 0 {
        return Err(SizeError::Zero(t.to_string()));
    }
    n.checked_mul(1u64 << shift).ok_or_else(|| SizeError::TooLarge(t.to_string()))
}

/// Parses a comma-separated list (`4K,64K,1M`), keeping the order given.
pub(crate) fn parse_size_list(text: &str) -> Result<Vec<u64>, SizeError> {
    text.split(',').map(parse_size).collect()
}

/// A size written back the short way (`64K`, `16M`, `1536`).
pub(crate) struct Human(pub u64);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
            if n >= 1 << shift && n.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary_and_case_insensitive() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("16mb"), Ok(16 << 20));
        assert_eq!(parse_size(" 2G "), Ok(2 << 30));
        assert_eq!(parse_size("100B"), Ok(100));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("K"), Err(SizeError::Malformed("K".into())));
        assert_eq!(parse_size("4X"), Err(SizeError::Malformed("4X".into())));
        assert_eq!(parse_size("-4K"), Err(SizeError::Malformed("-4K".into())));
        assert_eq!(parse_size("0M"), Err(SizeError::Zero("0M".into())));
        assert!(matches!(parse_size("99999999999999G"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("99999999999999999999999"), Err(SizeError::TooLarge(_))));
    }

    #[test]
    fn the_default_spread_parses_in_order() {
        assert_eq!(
            parse_size_list("4K,64K,1M,16M,64M"),
            Ok(vec![4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20])
        );
        assert_eq!(parse_size_list("1M,4K"), Ok(vec![1 << 20, 4096]));
        assert_eq!(parse_size_list("4K,,1M"), Err(SizeError::Empty));
    }

    #[test]
    fn human_round_trips_the_short_forms() {
        for s in ["4K", "64K", "1M", "16M", "64M", "2G", "1536", "1025"] {
            assert_eq!(Human(parse_size(s).unwrap()).to_string(), s);
        }
    }
}
