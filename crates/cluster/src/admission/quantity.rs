//! Resource quantities as the API server reads them: the grammar of
//! apimachinery's `ParseQuantity` (its three errors, with its messages),
//! comparison, and the canonical form its `String()` prints in field
//! errors (`"-4"`, `"500m"`, `"1536Mi"`).
//!
//! Values are kept in nano-units (upstream's finest scale, rounded up away
//! from zero as upstream rounds), saturating at the bounds of `i128`.

use std::cmp::Ordering;

/// Upstream's `splitREString`, quoted in its format error.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Why a quantity string does not parse (apimachinery's three errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `ErrFormatWrong`.
    #[error("quantities must match the regular expression '{SPLIT_RE}'")]
    Format,
    /// `ErrNumeric`.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// `ErrSuffix`.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// How a quantity is written back.
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
    /// The value in nano-units.
    pub nanos: i128,
    /// The format its suffix asked for.
    pub format: Format,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parse as `resource.ParseQuantity` does (surrounding spaces are
    /// trimmed, as its JSON decoder does).
    pub fn parse(s: &str) -> Result<Quantity, Error> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::Format);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let negative = match b[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        let num_start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let num = &s[num_start..pos];
        let mut denom = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let d = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = &s[d..pos];
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && matches!(b[pos], b'-' | b'+') {
            pos += 1;
        }
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < b.len() {
            return Err(Error::Format);
        }
        let (base2, exponent, format) = interpret(&s[suffix_start..]).ok_or(Error::Suffix)?;
        let digits = format!("{num}{denom}");
        // More digits than any quantity needs: the value saturates.
        let mantissa: i128 = if digits.len() > 36 { i128::MAX / 4 } else { digits.parse::<i128>().unwrap_or(0) };
        let nanos = if base2 {
            // mantissa * 2^exponent * 10^9 / 10^len(denom), rounded up.
            let scaled = mantissa.saturating_mul(1i128.checked_shl(exponent as u32).unwrap_or(i128::MAX)).saturating_mul(NANO);
            div_up(scaled, pow10(denom.len() as i32))
        } else {
            let shift = exponent + 9 - denom.len() as i32;
            if shift >= 0 { mantissa.saturating_mul(pow10(shift)) } else { div_up(mantissa, pow10(-shift)) }
        };
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
        div_up(self.nanos.abs(), 1_000_000) % 1000 == 0
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
fn interpret(suffix: &str) -> Option<(bool, i32, Format)> {
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
            let e: i64 = s[1..].parse().ok()?;
            // Far beyond any representable quantity: saturate.
            Some((false, e.clamp(-60, 60) as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn pow10(e: i32) -> i128 {
    if e > 38 { i128::MAX } else { 10i128.saturating_pow(e.max(0) as u32) }
}

fn div_up(n: i128, d: i128) -> i128 {
    if d == i128::MAX {
        return i128::from(n != 0);
    }
    n / d + i128::from(n % d != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_as_upstream_does() {
        assert_eq!(Quantity::parse("lots"), Err(Error::Format));
        assert_eq!(Quantity::parse(""), Err(Error::Format));
        assert_eq!(Quantity::parse("4x"), Err(Error::Format));
        assert_eq!(Quantity::parse("4KK"), Err(Error::Suffix));
        assert_eq!(Quantity::parse("4e"), Err(Error::Suffix));
        assert_eq!(q("100m").nanos, 100_000_000);
        assert_eq!(q("1.5Gi").nanos, 1_610_612_736 * NANO);
        assert_eq!(q("2e3").nanos, 2000 * NANO);
        assert_eq!(q("0.1n").nanos, 1);
        assert!(q("-4").is_negative());
        assert!(q("2") > q("1500m"));
        assert_eq!(Error::Format.to_string(), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
    }

    #[test]
    fn prints_the_canonical_form() {
        for (input, shown) in [("-4", "-4"), ("1.5", "1500m"), ("1.5Gi", "1536Mi"), ("0.5Ki", "512"), ("1000", "1k"), ("2e3", "2e3"), ("0", "0"), ("-0.5", "-500m"), ("1Gi", "1Gi"), ("128974848", "128974848")] {
            assert_eq!(q(input).to_string(), shown, "{input}");
        }
    }
}
