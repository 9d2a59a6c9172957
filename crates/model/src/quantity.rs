//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`) parsed to integers.
//!
//! Upstream rounds up when it takes a quantity's `Value()` or `MilliValue()`;
//! so do we, so that a request of `0.5m` CPU still counts as one milli-CPU.

use thiserror::Error;

/// Why a quantity string could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The string is empty or not of the form `<number><suffix>`.
    #[error("quantity {0:?} is not a valid Kubernetes quantity")]
    Invalid(String),
    /// The value does not fit in 64 bits.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
    /// Negative quantities cannot be requested or offered.
    #[error("quantity {0:?} is negative")]
    Negative(String),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// The quantity's value times `scale` (1 for bytes and counts, 1000 for milli-units),
/// rounded up to the next integer.
pub fn parse_scaled(s: &str, scale: i64) -> Result<i64> {
    let invalid = || Error::Invalid(s.to_string());
    let t = s.trim();
    if t.is_empty() {
        return Err(invalid());
    }
    let (neg, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    // Split number and suffix.
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(invalid());
    }
    // value = digits * 10^dec_exp * 2^bin_exp
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let mut digits: i128 = 0;
    let mut dec_exp: i32 = 0;
    for c in int_part.chars().chain(frac_part.chars()) {
        let d = i128::from(c as u8 - b'0');
        if digits > i128::MAX / 100 {
            // Precision beyond this cannot change a 64-bit result except for
            // rounding; keep magnitude by raising the exponent.
            dec_exp += 1;
            continue;
        }
        digits = digits * 10 + d;
    }
    dec_exp -= i32::try_from(frac_part.len()).map_err(|_| invalid())?;
    let mut bin_exp: i32 = 0;
    match suffix {
        "" => {}
        "n" => dec_exp -= 9,
        "u" => dec_exp -= 6,
        "m" => dec_exp -= 3,
        "k" => dec_exp += 3,
        "M" => dec_exp += 6,
        "G" => dec_exp += 9,
        "T" => dec_exp += 12,
        "P" => dec_exp += 15,
        "E" => dec_exp += 18,
        "Ki" => bin_exp = 10,
        "Mi" => bin_exp = 20,
        "Gi" => bin_exp = 30,
        "Ti" => bin_exp = 40,
        "Pi" => bin_exp = 50,
        "Ei" => bin_exp = 60,
        s2 if s2.starts_with('e') || s2.starts_with('E') => {
            let e: i32 = s2[1..].parse().map_err(|_| invalid())?;
            if !(-40..=40).contains(&e) {
                return Err(Error::Overflow(s.to_string()));
            }
            dec_exp += e;
        }
        _ => return Err(invalid()),
    }
    if neg && digits != 0 {
        return Err(Error::Negative(s.to_string()));
    }
    let overflow = || Error::Overflow(s.to_string());
    let mut v: i128 = digits.checked_mul(i128::from(scale)).ok_or_else(overflow)?;
    if bin_exp > 0 {
        v = v.checked_mul(1i128 << bin_exp).ok_or_else(overflow)?;
    }
    if dec_exp >= 0 {
        for _ in 0..dec_exp {
            v = v.checked_mul(10).ok_or_else(overflow)?;
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-dec_exp) {
            div = match div.checked_mul(10) {
                Some(d) => d,
                None => {
                    // Smaller than any representable unit: rounds up to 1 if non-zero.
                    return Ok(i64::from(v > 0));
                }
            };
        }
        v = (v + div - 1) / div;
    }
    i64::try_from(v).map_err(|_| overflow())
}

/// Integer value (bytes, counts), rounded up.
pub fn parse_value(s: &str) -> Result<i64> {
    parse_scaled(s, 1)
}

/// Milli-value (milli-CPU), rounded up.
pub fn parse_milli(s: &str) -> Result<i64> {
    parse_scaled(s, 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, i64, i64)] = &[
            ("1", 1, 1000),
            ("100m", 1, 100),
            ("0.5", 1, 500),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("500Mi", 524_288_000, 524_288_000_000),
            ("2k", 2000, 2_000_000),
            ("1e3", 1000, 1_000_000),
            ("0", 0, 0),
            ("0.1m", 1, 1),
            ("10000", 10000, 10_000_000),
        ];
        for (s, v, m) in cases {
            assert_eq!(parse_value(s), Ok(*v), "{s}");
            assert_eq!(parse_milli(s), Ok(*m), "{s}");
        }
    }

    #[test]
    fn bad() {
        for s in ["", "abc", "1.2.3", "1Qi", "-1", "1e99", "99999999999999999999Ei", "."] {
            assert!(parse_value(s).is_err(), "{s}");
        }
    }
}
