//! Semantic versions (semver 2.0.0) for version attributes and CEL's `semver()`.

use std::cmp::Ordering;

use thiserror::Error;

/// Why a version string is not a semantic version.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0:?} is not a valid semantic version")]
pub struct SemverError(pub String);

/// A parsed semantic version; build metadata is kept but never compared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Semver {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// Pre-release identifiers (`1.0.0-rc.1` has `["rc", "1"]`).
    pub pre: Vec<String>,
    /// Build metadata.
    pub build: String,
}

fn num(s: &str, full: &str) -> Result<u64, SemverError> {
    let err = || SemverError(full.to_string());
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    s.parse().map_err(|_| err())
}

fn ident_ok(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Semver {
    /// Parses a strict semantic version (`1.2.3`, `1.0.0-alpha.1+build`), as
    /// blang/semver's `Parse` does.
    pub fn parse(s: &str) -> Result<Self, SemverError> {
        let err = || SemverError(s.to_string());
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => {
                if !b.split('.').all(ident_ok) {
                    return Err(err());
                }
                (r, b.to_string())
            }
            None => (s, String::new()),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => {
                let ids: Vec<String> = p.split('.').map(str::to_string).collect();
                for id in &ids {
                    if !ident_ok(id) {
                        return Err(err());
                    }
                    if id.bytes().all(|b| b.is_ascii_digit()) && id.len() > 1 && id.starts_with('0') {
                        return Err(err());
                    }
                }
                (c, ids)
            }
            None => (rest, Vec::new()),
        };
        let mut parts = core.split('.');
        let (Some(a), Some(b), Some(c), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(err());
        };
        Ok(Semver { major: num(a, s)?, minor: num(b, s)?, patch: num(c, s)?, pre, build })
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch)).then_with(|| {
            match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&o.pre) {
                        let c = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(x), Ok(y)) => x.cmp(&y),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        };
                        if c != Ordering::Equal {
                            return c;
                        }
                    }
                    self.pre.len().cmp(&o.pre.len())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_order() {
        let v = |s| Semver::parse(s);
        assert!(v("1.2.3").is_ok());
        assert!(v("1.2").is_err());
        assert!(v("01.2.3").is_err());
        assert!(v("1.2.3-").is_err());
        let ord = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.1.0"];
        for w in ord.windows(2) {
            assert!(v(w[0]).ok() < v(w[1]).ok() && v(w[0]).is_ok(), "{} < {}", w[0], w[1]);
        }
        assert_eq!(v("1.0.0+a").map(|x| x.cmp(&Semver::parse("1.0.0").unwrap_or_else(|_| x.clone()))), Ok(Ordering::Equal));
    }
}
