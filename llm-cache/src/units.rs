//! Byte sizes on the command line and in reports: `512KB`, `2GB`, `1.5GiB`, `4096`.
//!
//! | suffix (any case)         | multiplier |
//! |---------------------------|------------|
//! | none, `B`                 | 1          |
//! | `K`, `KB`, `KiB`          | 1024       |
//! | `M`, `MB`, `MiB`          | 1024²      |
//! | `G`, `GB`, `GiB`          | 1024³      |
//! | `T`, `TB`, `TiB`          | 1024⁴      |
//!
//! `KB` and `KiB` mean the same thing: memory capacities are powers of 1024. A fraction is
//! allowed when the result is a whole number of bytes (`1.5KB` = 1536, `0.5B` is refused).
//! Bandwidths are the one exception: `--pcie-gbps` is in decimal GB/s (10⁹ bytes per
//! second), as PCIe links are quoted. [`parse_bytes`] accepts 0; [`parse_capacity`] refuses
//! it.

use thiserror::Error;

/// A size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitsError {
    /// Nothing to parse.
    #[error("empty size: expected a number of bytes with an optional unit (B, KB, MB, GB, TB)")]
    Empty,
    /// The number part is not a number.
    #[error(
        "bad size `{text}`: expected digits (optionally with a fraction) and a unit such as 512KB or 2GB"
    )]
    BadNumber {
        /// The text as given.
        text: String,
    },
    /// An unknown unit.
    #[error("bad size `{text}`: unknown unit `{unit}` (expected B, KB, MB, GB, TB, or KiB..TiB)")]
    BadUnit {
        /// The text as given.
        text: String,
        /// The unit part.
        unit: String,
    },
    /// A fraction that leaves part of a byte.
    #[error("bad size `{text}`: not a whole number of bytes")]
    Fractional {
        /// The text as given.
        text: String,
    },
    /// More than `u64::MAX` bytes.
    #[error("bad size `{text}`: larger than 2^64-1 bytes")]
    Overflow {
        /// The text as given.
        text: String,
    },
    /// A capacity of zero bytes.
    #[error("capacity `{text}` is 0 bytes: a cache needs a positive capacity")]
    Zero {
        /// The text as given.
        text: String,
    },
}

const UNITS: [(&[&str], u64); 5] = [
    (&["", "b"], 1),
    (&["k", "kb", "kib"], 1 << 10),
    (&["m", "mb", "mib"], 1 << 20),
    (&["g", "gb", "gib"], 1 << 30),
    (&["t", "tb", "tib"], 1 << 40),
];

/// Parses a byte size such as `512KB`, `2GB`, `1.5GiB` or `4096` (powers of 1024).
pub fn parse_bytes(text: &str) -> Result<u64, UnitsError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(UnitsError::Empty);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let bad_number = || UnitsError::BadNumber { text: text.into() };
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 18
    {
        return Err(bad_number());
    }
    let lower = unit.to_ascii_lowercase();
    let mult = UNITS
        .iter()
        .find(|(names, _)| names.contains(&lower.as_str()))
        .map(|(_, m)| *m)
        .ok_or_else(|| UnitsError::BadUnit {
            text: text.into(),
            unit: unit.into(),
        })?;
    let overflow = || UnitsError::Overflow { text: text.into() };
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| overflow())?
    };
    let mut total = int.checked_mul(mult as u128).ok_or_else(overflow)?;
    if !frac.is_empty() {
        let scale = 10u128.pow(frac.len() as u32);
        let f: u128 = frac.parse().map_err(|_| bad_number())?;
        let part = f * mult as u128;
        if !part.is_multiple_of(scale) {
            return Err(UnitsError::Fractional { text: text.into() });
        }
        total += part / scale;
    }
    u64::try_from(total).map_err(|_| overflow())
}

/// Parses a cache capacity: [`parse_bytes`], refusing 0.
pub fn parse_capacity(text: &str) -> Result<u64, UnitsError> {
    match parse_bytes(text)? {
        0 => Err(UnitsError::Zero { text: text.into() }),
        n => Ok(n),
    }
}

/// Parses a comma-separated list of capacities (`2GB,4GB,8GB`).
pub fn parse_capacities(text: &str) -> Result<Vec<u64>, UnitsError> {
    text.split(',').map(parse_capacity).collect()
}

/// Formats bytes with the largest binary unit that keeps the number ≥ 1: `2 GiB`,
/// `1.50 GiB`, `512 KiB`, `17 B`. Whole numbers print without a fraction.
pub fn format_bytes(n: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    while i + 1 < NAMES.len() && n >= 1u64 << (10 * (i + 1)) {
        i += 1;
    }
    let unit = 1u64 << (10 * i);
    if n.is_multiple_of(unit) {
        format!("{} {}", n / unit, NAMES[i])
    } else {
        format!("{:.2} {}", n as f64 / unit as f64, NAMES[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512KB"), Ok(512 << 10));
        assert_eq!(parse_bytes("512kib"), Ok(512 << 10));
        assert_eq!(parse_bytes("2GB"), Ok(2 << 30));
        assert_eq!(parse_bytes(" 2 GiB "), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5K"), Ok(1536));
        assert_eq!(parse_bytes("3TB"), Ok(3 << 40));
        assert_eq!(parse_bytes("7b"), Ok(7));
        assert_eq!(parse_bytes(".5KB"), Ok(512));
        assert_eq!(parse_bytes("0"), Ok(0));
    }

    #[test]
    fn size_errors() {
        assert_eq!(parse_bytes(""), Err(UnitsError::Empty));
        assert!(matches!(
            parse_bytes("GB"),
            Err(UnitsError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_bytes("1.2.3GB"),
            Err(UnitsError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_bytes("-1GB"),
            Err(UnitsError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_bytes("2XB"),
            Err(UnitsError::BadUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("0.5B"),
            Err(UnitsError::Fractional { .. })
        ));
        assert!(matches!(
            parse_bytes("16777216TB"),
            Err(UnitsError::Overflow { .. })
        ));
        assert!(matches!(
            parse_bytes("99999999999999999999999"),
            Err(UnitsError::Overflow { .. })
        ));
        assert!(matches!(
            parse_capacity("0GB"),
            Err(UnitsError::Zero { .. })
        ));
        assert_eq!(parse_capacities("1KB,2MB"), Ok(vec![1024, 2 << 20]));
        assert!(matches!(
            parse_capacities("1KB,,2MB"),
            Err(UnitsError::Empty)
        ));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(17), "17 B");
        assert_eq!(format_bytes(512 << 10), "512 KiB");
        assert_eq!(format_bytes(2 << 30), "2 GiB");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
        assert_eq!(format_bytes(5 << 40), "5 TiB");
    }
}
