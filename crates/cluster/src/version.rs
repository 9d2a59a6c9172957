//! `berth cluster --kubernetes-version`: which Kubernetes release the
//! local cluster answers as. `/version` reports it, and the built-in
//! resources that release does not serve by default are left out of
//! discovery and OpenAPI and answer 404 on every path.
//!
//! The table below lists the served resources that do not exist (or are
//! not served by default) in every supported release; each row names the
//! first release that serves it. Sources: the per-release OpenAPI
//! definitions as k8s-openapi 0.29 generates them (`v1_34` .. `v1_37`:
//! a kind is absent there when its group-version does not exist in that
//! release), and the graduation of each API:
//! - resource.k8s.io/v1 ResourceClaim, ResourceClaimTemplate, DeviceClass,
//!   ResourceSlice: DRA GA in 1.34 (v1 on by default); absent in 1.33.
//! - resource.k8s.io/v1 DeviceTaintRule: v1alpha3 in 1.33–1.35 and
//!   v1beta2 in 1.36 (alpha and beta APIs are off by default, KEP-3136);
//!   v1 from 1.37.
//! - storage.k8s.io/v1 VolumeAttributesClass: GA in 1.34.
//! - admissionregistration.k8s.io/v1 MutatingAdmissionPolicy(Binding):
//!   v1beta1 (off by default) until 1.35, v1 from 1.36.
//! - certificates.k8s.io/v1 ClusterTrustBundle: v1beta1 (off by default)
//!   until 1.36, v1 from 1.37.
//! - scheduling.k8s.io/v1beta1 PodGroup and Workload: v1alpha1 (Workload
//!   only) in 1.35, v1alpha2 in 1.36, both alpha and off by default;
//!   v1beta1 from 1.37 (behind the GenericWorkload gate, which the local
//!   cluster treats as on, as it always has).
//!
//! Every other built-in resource of the table is served by all of them.

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

/// Errors of the version flag.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a supported `1.MINOR`.
    #[error("unsupported Kubernetes version {0:?}: expected one of 1.34, 1.35, 1.36, 1.37")]
    Unsupported(String),
}

/// The oldest release the local cluster can answer as.
pub const OLDEST_MINOR: u32 = 34;
/// The newest (and default) one.
pub const NEWEST_MINOR: u32 = 37;

/// Built-in resources (group, version, plural) and the first minor
/// release that serves them by default (see the module's doc).
const SINCE: &[(&str, &str, &str, u32)] = &[
    ("resource.k8s.io", "v1", "resourceclaims", 34),
    ("resource.k8s.io", "v1", "resourceclaimtemplates", 34),
    ("resource.k8s.io", "v1", "deviceclasses", 34),
    ("resource.k8s.io", "v1", "resourceslices", 34),
    ("resource.k8s.io", "v1", "devicetaintrules", 37),
    ("storage.k8s.io", "v1", "volumeattributesclasses", 34),
    ("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", 36),
    ("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", 36),
    ("certificates.k8s.io", "v1", "clustertrustbundles", 37),
    ("scheduling.k8s.io", "v1beta1", "podgroups", 37),
    ("scheduling.k8s.io", "v1beta1", "workloads", 37),
];

/// A Kubernetes release (`1.MINOR`) the local cluster answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    minor: u32,
}

impl Default for KubeVersion {
    fn default() -> Self {
        KubeVersion { minor: NEWEST_MINOR }
    }
}

impl KubeVersion {
    /// Release `1.minor`, if supported.
    pub fn new(minor: u32) -> Result<KubeVersion, Error> {
        if (OLDEST_MINOR..=NEWEST_MINOR).contains(&minor) {
            Ok(KubeVersion { minor })
        } else {
            Err(Error::Unsupported(format!("1.{minor}")))
        }
    }

    /// The minor version.
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// Does this release serve the built-in resource `group/version`
    /// `plural` by default? (Resources not in the table are served by
    /// every supported release; custom resources are not asked about.)
    pub fn serves(self, group: &str, version: &str, plural: &str) -> bool {
        SINCE.iter().find(|(g, v, p, _)| *g == group && *v == version && *p == plural).is_none_or(|(_, _, _, since)| self.minor >= *since)
    }

    /// The body of `/version`.
    pub fn version_json(self) -> Value {
        let minor = self.minor.to_string();
        json!({
            "major": "1",
            "minor": minor,
            "emulationMajor": "1",
            "emulationMinor": minor,
            "gitVersion": format!("v1.{minor}.0-berth"),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.25",
            "compiler": "gc",
            "platform": "linux/amd64",
        })
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl FromStr for KubeVersion {
    type Err = Error;

    /// `1.34`, `v1.34` or `1.34.2` (the patch is ignored).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Unsupported(s.to_string());
        let rest = s.trim().strip_prefix('v').unwrap_or(s.trim());
        let mut parts = rest.split('.');
        if parts.next() != Some("1") {
            return Err(bad());
        }
        let minor = parts.next().and_then(|m| m.parse::<u32>().ok()).ok_or_else(bad)?;
        if parts.next().is_some_and(|p| p.parse::<u32>().is_err()) || parts.next().is_some() {
            return Err(bad());
        }
        KubeVersion::new(minor).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_gate_resources() {
        let v = |s: &str| s.parse::<KubeVersion>().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v("1.34").minor(), 34);
        assert_eq!(v("v1.36").minor(), 36);
        assert_eq!(v("1.35.2").minor(), 35);
        assert_eq!(KubeVersion::default(), v("1.37"));
        for bad in ["1.33", "1.38", "2.34", "1", "1.x", "1.34.0.1", "", "1.34.x"] {
            assert!(bad.parse::<KubeVersion>().is_err(), "{bad}");
        }
        assert!(v("1.34").serves("resource.k8s.io", "v1", "resourceclaims"));
        assert!(!v("1.34").serves("scheduling.k8s.io", "v1beta1", "podgroups"));
        assert!(!v("1.36").serves("resource.k8s.io", "v1", "devicetaintrules"));
        assert!(v("1.36").serves("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies"));
        assert!(!v("1.35").serves("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies"));
        assert!(v("1.34").serves("", "v1", "pods"));
        // Every row of the table is served by the default (no change without the flag).
        assert!(SINCE.iter().all(|(g, ver, p, _)| KubeVersion::default().serves(g, ver, p)));
        assert_eq!(v("1.35").version_json()["gitVersion"], "v1.35.0-berth");
    }
}
