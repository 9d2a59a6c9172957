//! Kubernetes quantities as exact integers of nano-units, for arithmetic.
//!
//! Device capacities, counters and capacity requests are compared and added
//! exactly (upstream uses `resource.Quantity` arithmetic); nano-units in an
//! `i128` hold every quantity the API accepts (at most 2^63 with nine
//! fractional digits) without rounding. The string is read by the model's
//! one quantity parser ([`berth_model::quantity`]).

use std::fmt;

use berth_model::quantity::NANO;

/// Why a quantity string could not be read (the model's error: invalid or too large).
pub use berth_model::quantity::Error as QuantityError;

/// A quantity in nano-units (`1` is `1n`, `1_000_000_000` is `1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(pub i128);

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);

    /// A whole number of units.
    pub fn from_units(v: i64) -> Self {
        Quantity(i128::from(v) * NANO)
    }

    /// Parses `100m`, `1.5Gi`, `2e3`, `-1`.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        berth_model::quantity::parse_nanos(s).map(Quantity)
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
