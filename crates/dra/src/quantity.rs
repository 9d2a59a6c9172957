//! Kubernetes quantities as exact integers of nano-units.
//!
//! Device capacities, counters and capacity requests are compared and added
//! exactly (upstream uses `resource.Quantity` arithmetic); nano-units in an
//! `i128` hold every quantity the API accepts (at most 2^63 with nine
//! fractional digits) without rounding.

use std::fmt;

use thiserror::Error;

/// Why a quantity string could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// Not of the form `<signed number><suffix>`.
    #[error("quantity {0:?} is not a valid Kubernetes quantity")]
    Invalid(String),
    /// Too large to represent.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// A quantity in nano-units (`1` is `1n`, `1_000_000_000` is `1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(pub i128);

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);

    /// A whole number of units.
    pub fn from_units(v: i64) -> Self {
        Quantity(i128::from(v) * NANO)
    }

    /// Parses `100m`, `1.5Gi`, `2e3`, `-1`.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        let invalid = || QuantityError::Invalid(s.to_string());
        let overflow = || QuantityError::Overflow(s.to_string());
        let t = s.trim();
        let (neg, body) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            Some(_) => (false, t),
            None => return Err(invalid()),
        };
        let num_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
        let (num, suffix) = body.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(invalid());
        }
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        // digits as an integer and a decimal exponent
        let mut mantissa: i128 = 0;
        for c in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa.checked_mul(10).and_then(|m| m.checked_add(i128::from(c - b'0'))).ok_or_else(overflow)?;
        }
        let mut exp10: i32 = -i32::try_from(frac_part.len()).map_err(|_| invalid())?;
        let mut mult: i128 = 1;
        match suffix {
            "" => {}
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            "Ki" => mult = 1 << 10,
            "Mi" => mult = 1 << 20,
            "Gi" => mult = 1 << 30,
            "Ti" => mult = 1 << 40,
            "Pi" => mult = 1 << 50,
            "Ei" => mult = 1 << 60,
            other => {
                let rest = other.strip_prefix('e').or_else(|| other.strip_prefix('E')).ok_or_else(invalid)?;
                let e: i32 = rest.parse().map_err(|_| invalid())?;
                if !(-40..=40).contains(&e) {
                    return Err(overflow());
                }
                exp10 += e;
            }
        }
        // value in nanos = mantissa * mult * 10^(exp10 + 9), rounded up (as upstream
        // rounds sub-nano quantities up)
        let mut v = mantissa.checked_mul(mult).ok_or_else(overflow)?;
        let e = exp10 + 9;
        if e >= 0 {
            for _ in 0..e {
                v = v.checked_mul(10).ok_or_else(overflow)?;
            }
        } else {
            let mut div: i128 = 1;
            for _ in 0..(-e) {
                div = div.checked_mul(10).ok_or_else(overflow)?;
            }
            v = (v + div - 1) / div;
        }
        if v > i128::from(i64::MAX) * NANO {
            return Err(overflow());
        }
        Ok(Quantity(if neg { -v } else { v }))
    }

    /// The value in whole units, rounded up (upstream's `Quantity.Value()`).
    pub fn value(self) -> i128 {
        let q = self.0.div_euclid(NANO);
        if self.0.rem_euclid(NANO) != 0 { q + 1 } else { q }
    }

    /// Saturating sum.
    pub fn saturating_add(self, o: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(o.0))
    }

    /// Saturating difference.
    pub fn saturating_sub(self, o: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(o.0))
    }
}

impl fmt::Display for Quantity {
    /// The canonical decimal form: whole units when exact, else the largest
    /// of `m`, `u`, `n` that is exact (`1500m`, `1`, `5n`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v % NANO == 0 {
            write!(f, "{}", v / NANO)
        } else if v % 1_000_000 == 0 {
            write!(f, "{}m", v / 1_000_000)
        } else if v % 1_000 == 0 {
            write!(f, "{}u", v / 1_000)
        } else {
            write!(f, "{v}n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        let p = |s| Quantity::parse(s).map(|q| q.0);
        assert_eq!(p("1"), Ok(NANO));
        assert_eq!(p("100m"), Ok(100_000_000));
        assert_eq!(p("1.5Gi"), Ok(3 * (1 << 29) * NANO));
        assert_eq!(p("2e3"), Ok(2000 * NANO));
        assert_eq!(p("1k"), Ok(1000 * NANO));
        assert_eq!(p("-2"), Ok(-2 * NANO));
        assert_eq!(p("0.5n"), Ok(1));
        assert!(p("").is_err());
        assert!(p("1x").is_err());
        assert!(p("1.2.3").is_err());
    }

    #[test]
    fn value_rounds_up_and_display_is_canonical() {
        assert_eq!(Quantity::parse("1500m").map(Quantity::value), Ok(2));
        assert_eq!(Quantity::parse("1Gi").map(|q| q.to_string()), Ok("1073741824".to_string()));
        assert_eq!(Quantity::parse("1500m").map(|q| q.to_string()), Ok("1500m".to_string()));
        assert!(Quantity::parse("1Gi").ok() > Quantity::parse("1G").ok());
    }
}
