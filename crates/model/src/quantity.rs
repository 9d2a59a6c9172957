//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`): the one parser
//! of their grammar in the workspace.
//!
//! [`Quantity::parse`] reads a string as apimachinery's `ParseQuantity`
//! does (its grammar, its three errors with their messages) into an exact
//! count of nano-units, and prints the canonical form its `String()` prints
//! (`"-4"`, `"500m"`, `"1536Mi"`). The amounts the scheduler counts are
//! read through it: [`parse_value`] (bytes, counts) and [`parse_milli`]
//! (milli-CPU) round up as upstream's `Value()` and `MilliValue()` do, so
//! that a request of `0.5m` CPU still counts as one milli-CPU; [`parse_nanos`]
//! gives the signed nano-units DRA's capacities are added in.
//!
//! Values are exact up to 37 significant digits and 38 decimal places
//! (beyond, rounded up, far past any quantity the API serves); beyond the
//! bounds of `i128` nano-units they saturate.

use std::cmp::Ordering;

use thiserror::Error;

/// Upstream's `splitREString`, quoted in its format error.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Nano-units in one unit.
pub const NANO: i128 = 1_000_000_000;

/// Why a string is not a quantity (apimachinery's three errors, with its messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SyntaxError {
    /// `ErrFormatWrong`: not `<signed number><suffix>`.
    #[error("quantities must match the regular expression '{SPLIT_RE}'")]
    Format,
    /// `ErrNumeric`: the number has no digit (`.`, `+`, `e3`).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// `ErrSuffix`: an unknown suffix (`4KK`, `4e`).
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// Why a quantity cannot be used as an amount ([`parse_value`], [`parse_milli`], [`parse_nanos`]).
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

/// How a quantity is written back (upstream's `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `12e6`.
    DecimalExponent,
    /// `12Mi`.
    BinarySI,
    /// `12M`.
    DecimalSI,
}

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    /// The value in nano-units, rounded up away from zero.
    pub nanos: i128,
    /// The format its suffix asked for.
    pub format: Format,
}

impl Quantity {
    /// Parse as `resource.ParseQuantity` does (surrounding spaces are
    /// trimmed, as its JSON decoder does).
    pub fn parse(s: &str) -> std::result::Result<Quantity, SyntaxError> {
        let s = s.trim();
        let b = s.as_bytes();
        let mut pos = 0;
        let negative = match b.first() {
            None => return Err(SyntaxError::Format),
            Some(b'-') => {
                pos = 1;
                true
            }
            Some(b'+') => {
                pos = 1;
                false
            }
            Some(_) => false,
        };
        let digits_from = |pos: &mut usize| {
            let start = *pos;
            while *pos < b.len() && b[*pos].is_ascii_digit() {
                *pos += 1;
            }
            &s[start..*pos]
        };
        let num = digits_from(&mut pos);
        let mut denom = "";
        if b.get(pos) == Some(&b'.') {
            pos += 1;
            denom = digits_from(&mut pos);
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if matches!(b.get(pos), Some(b'-' | b'+')) {
            pos += 1;
        }
        digits_from(&mut pos);
        if pos < b.len() {
            return Err(SyntaxError::Format);
        }
        let (base2, exponent, format) = interpret(&s[suffix_start..]).ok_or(SyntaxError::Suffix)?;
        if num.is_empty() && denom.is_empty() {
            return Err(SyntaxError::Numeric);
        }
        let magnitude = magnitude(num, denom, base2, exponent);
        let nanos = i128::try_from(magnitude).unwrap_or(i128::MAX);
        let nanos = if negative { -nanos } else { nanos };
        let format = if format == Format::BinarySI && nanos.abs() < NANO && nanos != 0 { Format::DecimalSI } else { format };
        Ok(Quantity { nanos, format })
    }

    /// Negative?
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// A whole number of units?
    pub fn is_integer(&self) -> bool {
        // Upstream checks MilliValue() % 1000.
        div_up(self.nanos.unsigned_abs(), 1_000_000).is_multiple_of(1000)
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.nanos.cmp(&other.nanos))
    }
}

/// The canonical form (upstream's `Quantity.String()`).
impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySI && (self.nanos.abs() < 1024 * NANO || self.nanos % NANO != 0) {
            format = Format::DecimalSI;
        }
        if format == Format::BinarySI {
            let mut v = self.nanos / NANO;
            let mut exp = 0;
            while exp < 6 && v % 1024 == 0 {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return write!(f, "{v}{suffix}");
        }
        // Decimal: the largest exponent, a multiple of 3, that loses nothing.
        let mut v = self.nanos;
        let mut exp = -9;
        while exp < 18 && v % 1000 == 0 {
            v /= 1000;
            exp += 3;
        }
        match format {
            Format::DecimalExponent if exp == 0 => write!(f, "{v}"),
            Format::DecimalExponent => write!(f, "{v}e{exp}"),
            _ => {
                let suffix = match exp {
                    -9 => "n",
                    -6 => "u",
                    -3 => "m",
                    0 => "",
                    3 => "k",
                    6 => "M",
                    9 => "G",
                    12 => "T",
                    15 => "P",
                    _ => "E",
                };
                write!(f, "{v}{suffix}")
            }
        }
    }
}

/// A suffix: (base 2?, exponent, format), or None (`ErrSuffix`).
fn interpret(suffix: &str) -> Option<(bool, i64, Format)> {
    let decimal = |e| Some((false, e, Format::DecimalSI));
    let binary = |e| Some((true, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let digits = &s[1..];
            // Far beyond any representable quantity (or too long for i64): saturate.
            let e = digits.parse::<i64>().unwrap_or(if digits.starts_with('-') { -1000 } else { 1000 });
            Some((false, e.clamp(-1000, 1000), Format::DecimalExponent))
        }
        _ => None,
    }
}

/// Significant digits kept exactly; one more fits a `u128` with room to add one.
const KEPT_DIGITS: usize = 37;

/// `num.denom × 2^exponent` (binary) or `× 10^exponent` (decimal) in
/// nano-units, rounded up, saturating at `u128::MAX`.
fn magnitude(num: &str, denom: &str, base2: bool, exponent: i64) -> u128 {
    // The digits as one integer `mantissa × 10^exp10` nano-units.
    let all = format!("{num}{denom}");
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    let mut exp10 = 9 - denom.len() as i64 + (significant.len() - trimmed.len()) as i64;
    if !base2 {
        exp10 += exponent;
    }
    let (kept, sticky) = if trimmed.len() > KEPT_DIGITS {
        exp10 += (trimmed.len() - KEPT_DIGITS) as i64;
        (&trimmed[..KEPT_DIGITS], true)
    } else {
        (trimmed, false)
    };
    let mut mantissa: u128 = 0;
    for d in kept.bytes() {
        mantissa = mantissa * 10 + u128::from(d - b'0');
    }
    // Dropped digits (all past the 37th, the last non-zero) round the kept ones up.
    mantissa += u128::from(sticky);
    if mantissa == 0 {
        return 0;
    }
    let pow2 = if base2 { exponent as u32 } else { 0 };
    if exp10 >= 0 {
        return mantissa.saturating_mul(1u128 << pow2).saturating_mul(pow10(exp10));
    }
    // mantissa × 2^pow2 / 10^k, rounded up: the quotient and remainder of
    // the division, doubled pow2 times, so that nothing overflows early.
    let mut k = -exp10;
    if k > 38 {
        // Below 10^-38 of the last digit: round up at the 38th decimal place.
        mantissa = div_up(mantissa, pow10(k - 38));
        k = 38;
    }
    let p = pow10(k);
    let (mut q, mut r) = (mantissa / p, mantissa % p);
    for _ in 0..pow2 {
        q = q.saturating_mul(2);
        r <<= 1; // r < p ≤ 10^38, so 2r < u128::MAX
        if r >= p {
            r -= p;
            q = q.saturating_add(1);
        }
    }
    q.saturating_add(u128::from(r != 0))
}

/// 10^e, saturating.
fn pow10(e: i64) -> u128 {
    u32::try_from(e).ok().and_then(|e| 10u128.checked_pow(e)).unwrap_or(u128::MAX)
}

fn div_up(n: u128, d: u128) -> u128 {
    n / d + u128::from(!n.is_multiple_of(d))
}

/// The quantity's signed nano-units, refused beyond ±(2^63 − 1) units (as
/// the API refuses them).
pub fn parse_nanos(s: &str) -> Result<i128> {
    let q = Quantity::parse(s).map_err(|_| Error::Invalid(s.to_string()))?;
    if q.nanos.unsigned_abs() > i64::MAX as u128 * NANO as u128 {
        return Err(Error::Overflow(s.to_string()));
    }
    Ok(q.nanos)
}

/// The quantity in units of `nanos_per_unit` nano-units, rounded up (a
/// quantity rounded up at the nano and then at the unit is the quantity
/// rounded up at the unit).
fn parse_in(s: &str, nanos_per_unit: u128) -> Result<i64> {
    let q = Quantity::parse(s).map_err(|_| Error::Invalid(s.to_string()))?;
    if q.is_negative() {
        return Err(Error::Negative(s.to_string()));
    }
    i64::try_from(div_up(q.nanos.unsigned_abs(), nanos_per_unit)).map_err(|_| Error::Overflow(s.to_string()))
}

/// Integer value (bytes, counts), rounded up (upstream's `Value()`).
pub fn parse_value(s: &str) -> Result<i64> {
    parse_in(s, 1_000_000_000)
}

/// Milli-value (milli-CPU), rounded up (upstream's `MilliValue()`).
pub fn parse_milli(s: &str) -> Result<i64> {
    parse_in(s, 1_000_000)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// The grammar, one row per case: the input, its nano-units (or the
    /// error), and the canonical form printed back.
    #[test]
    fn grammar() {
        use SyntaxError::*;
        let cases: &[(&str, std::result::Result<i128, SyntaxError>, &str)] = &[
            ("1", Ok(NANO), "1"),
            ("100m", Ok(100_000_000), "100m"),
            ("1.5", Ok(1_500_000_000), "1500m"),
            ("1.5Gi", Ok(1_610_612_736 * NANO), "1536Mi"),
            ("0.5Ki", Ok(512 * NANO), "512"),
            ("1Gi", Ok(1_073_741_824 * NANO), "1Gi"),
            ("1k", Ok(1000 * NANO), "1k"),
            ("1000", Ok(1000 * NANO), "1k"),
            ("2e3", Ok(2000 * NANO), "2e3"),
            ("2E3", Ok(2000 * NANO), "2e3"),
            ("2e+3", Ok(2000 * NANO), "2e3"),
            ("1e-3", Ok(1_000_000), "1e-3"),
            ("-4", Ok(-4 * NANO), "-4"),
            ("-0.5", Ok(-500_000_000), "-500m"),
            ("+7", Ok(7 * NANO), "7"),
            ("0", Ok(0), "0"),
            ("-0", Ok(0), "0"),
            ("0.1n", Ok(1), "1n"),
            ("0.5n", Ok(1), "1n"),
            ("-0.5n", Ok(-1), "-1n"),
            ("1.", Ok(NANO), "1"),
            (".5", Ok(500_000_000), "500m"),
            ("007", Ok(7 * NANO), "7"),
            (" 3 ", Ok(3 * NANO), "3"),
            ("128974848", Ok(128_974_848 * NANO), "128974848"),
            ("0.000000000000000000000000000000000000000000001Ki", Ok(1), "1n"),
            ("1.0000000000000000000000000000000000000000Ei", Ok((1i128 << 60) * NANO), "1Ei"),
            ("1e-50", Ok(1), "1e-9"),
            ("1e99", Ok(i128::MAX), ""),
            ("99999999999999999999Ei", Ok(i128::MAX), ""),
            ("", Err(Format), ""),
            ("lots", Err(Format), ""),
            ("4x", Err(Format), ""),
            ("1.2.3", Err(Format), ""),
            ("1 Gi", Err(Format), ""),
            ("4KK", Err(Suffix), ""),
            ("1Qi", Err(Format), ""),
            ("4e", Err(Suffix), ""),
            ("0.1mi", Err(Suffix), ""),
            (".", Err(Numeric), ""),
            ("+", Err(Numeric), ""),
            ("e3", Err(Numeric), ""),
        ];
        for (input, want, shown) in cases {
            let got = Quantity::parse(input);
            assert_eq!(got.map(|q| q.nanos), *want, "{input:?}");
            if !shown.is_empty() {
                assert_eq!(q(input).to_string(), *shown, "{input:?}");
            }
        }
        assert!(q("2") > q("1500m"));
        assert!(q("2").is_integer() && !q("1500m").is_integer());
        assert_eq!(SyntaxError::Format.to_string(), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
    }

    /// The amounts the scheduler counts: value and milli-value, rounded up.
    #[test]
    fn amounts() {
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
        for s in ["", "abc", "1.2.3", "1Qi", "-1", "1e99", "99999999999999999999Ei", "."] {
            assert!(parse_value(s).is_err(), "{s}");
        }
        assert_eq!(parse_value("-1"), Err(Error::Negative("-1".into())));
        assert_eq!(parse_milli("10E"), Err(Error::Overflow("10E".into())));
        assert_eq!(parse_nanos("-2"), Ok(-2 * NANO));
        assert_eq!(parse_nanos("9223372036854775807"), Ok(i128::from(i64::MAX) * NANO));
        assert_eq!(parse_nanos("9223372036854775808"), Err(Error::Overflow("9223372036854775808".into())));
    }

    proptest! {
        /// Any decimal `<int>.<frac><suffix>` reads as its exact value, rounded
        /// up at the nano, and its canonical form reads back to the same value.
        #[test]
        fn exact_and_round_trips(int in 0u64..1_000_000_000_000, frac in "[0-9]{0,12}", suffix in prop::sample::select(vec![("", 0i32), ("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("e2", 2), ("e-4", -4)]), neg: bool) {
            let s = format!("{}{int}.{frac}{}", if neg { "-" } else { "" }, suffix.0);
            let parsed = q(&s);
            // Exact: int.frac × 10^(e + 9), rounded up, from the digits.
            let digits: i128 = format!("{int}{frac}").parse().unwrap_or(0);
            let shift = suffix.1 + 9 - frac.len() as i32;
            let want = if shift >= 0 { digits * 10i128.pow(shift as u32) } else { let d = 10i128.pow((-shift) as u32); digits / d + i128::from(digits % d != 0) };
            prop_assert_eq!(parsed.nanos, if neg { -want } else { want });
            prop_assert_eq!(q(&parsed.to_string()).nanos, parsed.nanos);
        }
    }
}
