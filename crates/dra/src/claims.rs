//! Compact views of DeviceClasses and ResourceClaims, with the API server's
//! defaulting applied (allocationMode ExactCount, count 1, toleration
//! operator Equal).

use std::collections::HashMap;

use k8s_openapi::api::resource::v1 as res;
use thiserror::Error;

use crate::quantity::{Quantity, QuantityError};

/// Why a class or claim could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// A capacity request does not parse.
    #[error("claim {claim}, request {request}: capacity {name}: {source}")]
    Quantity {
        /// namespace/name of the claim.
        claim: String,
        /// The request's name.
        request: String,
        /// The capacity's name.
        name: String,
        /// The parse error.
        #[source]
        source: QuantityError,
    },
    /// The object has no name.
    #[error("object without metadata.name")]
    NoName,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ClaimError>;

/// A DeviceClass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassView {
    /// metadata.name.
    pub name: String,
    /// CEL expressions of spec.selectors; `None` for a selector that is not CEL.
    pub selectors: Vec<Option<String>>,
    /// spec.extendedResourceName.
    pub extended_resource_name: Option<String>,
    /// spec.config, as given (copied into allocation results).
    pub config: Vec<res::DeviceClassConfiguration>,
}

impl ClassView {
    /// Compiles a DeviceClass.
    pub fn from_api(c: &res::DeviceClass) -> Result<Self> {
        Ok(ClassView {
            name: c.metadata.name.clone().ok_or(ClaimError::NoName)?,
            selectors: selectors(c.spec.as_ref().and_then(|s| s.selectors.as_deref())),
            extended_resource_name: c.spec.as_ref().and_then(|s| s.extended_resource_name.clone()),
            config: c.spec.as_ref().and_then(|s| s.config.clone()).unwrap_or_default(),
        })
    }
}

/// The DeviceClasses by name.
#[derive(Clone, Debug, Default)]
pub struct Classes {
    by_name: HashMap<String, ClassView>,
}

impl Classes {
    /// No classes.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds or replaces a class.
    pub fn upsert(&mut self, c: ClassView) {
        self.by_name.insert(c.name.clone(), c);
    }
    /// Removes a class.
    pub fn remove(&mut self, name: &str) {
        self.by_name.remove(name);
    }
    /// A class by name.
    pub fn get(&self, name: &str) -> Option<&ClassView> {
        self.by_name.get(name)
    }
    /// The class whose extendedResourceName is `name` (DRAExtendedResource).
    pub fn for_extended_resource(&self, name: &str) -> Option<&ClassView> {
        let mut found: Vec<&ClassView> =
            self.by_name.values().filter(|c| c.extended_resource_name.as_deref() == Some(name)).collect();
        // Deterministic when several classes name it: the first by name.
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.first().copied()
    }
}

fn selectors(s: Option<&[res::DeviceSelector]>) -> Vec<Option<String>> {
    s.unwrap_or_default().iter().map(|s| s.cel.as_ref().map(|c| c.expression.clone())).collect()
}

/// allocationMode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocationMode {
    /// ExactCount with its count (default 1).
    ExactCount(i64),
    /// All matching devices.
    All,
    /// A mode this version does not know (an error when allocating, as upstream).
    Unknown(String),
}

/// A device toleration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Toleration {
    /// key ("" matches every key, with Exists).
    pub key: String,
    /// operator: true for Exists, false for Equal (the default).
    pub exists: bool,
    /// value (for Equal).
    pub value: String,
    /// effect ("" matches every effect).
    pub effect: String,
    /// The API object, copied into allocation results.
    pub api: res::DeviceToleration,
}

impl Toleration {
    fn from_api(t: &res::DeviceToleration) -> Self {
        Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists: t.operator.as_deref() == Some("Exists"),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
            api: t.clone(),
        }
    }

    /// Does it tolerate a taint? (upstream's `resourceclaim.ToleratesTaint`)
    pub fn tolerates(&self, key: &str, value: &str, effect: &str) -> bool {
        if !self.key.is_empty() && self.key != key {
            return false;
        }
        if !self.effect.is_empty() && self.effect != effect {
            return false;
        }
        self.exists || self.value == value
    }
}

/// A request, or one subrequest of a firstAvailable list.
#[derive(Clone, Debug, PartialEq)]
pub struct SubRequest {
    /// The (sub)request's own name.
    pub name: String,
    /// deviceClassName.
    pub class: String,
    /// allocationMode and count, defaulted.
    pub mode: AllocationMode,
    /// CEL expressions of selectors (`None`: not CEL).
    pub selectors: Vec<Option<String>>,
    /// adminAccess (exactly requests only).
    pub admin_access: Option<bool>,
    /// tolerations.
    pub tolerations: Vec<Toleration>,
    /// capacity.requests by qualified name.
    pub capacity: Vec<(String, Quantity)>,
}

/// A request of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The request's name.
    pub name: String,
    /// `exactly` as one alternative, or the firstAvailable subrequests in order.
    pub alternatives: Vec<SubRequest>,
    /// True for firstAvailable (results name `request/subrequest`).
    pub first_available: bool,
}

/// A claim constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// matchAttribute over the named requests (all when empty).
    Match {
        /// requests.
        requests: Vec<String>,
        /// The fully qualified attribute name.
        attribute: String,
    },
    /// distinctAttribute over the named requests (all when empty).
    Distinct {
        /// requests.
        requests: Vec<String>,
        /// The fully qualified attribute name.
        attribute: String,
    },
    /// Neither (an error when allocating, as upstream).
    Unknown,
}

/// A ResourceClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimView {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// spec.devices.requests.
    pub requests: Vec<Request>,
    /// spec.devices.constraints.
    pub constraints: Vec<Constraint>,
    /// spec.devices.config, as given.
    pub config: Vec<res::DeviceClaimConfiguration>,
    /// status.allocation, when allocated.
    pub allocation: Option<res::AllocationResult>,
    /// A hash of what allocation reads of the spec (requests and
    /// constraints; not the config, not the claim's identity): two claims
    /// with the same hash get the same devices on the same node
    /// ([`ClaimView::allocation_hash`]).
    pub spec_hash: u64,
}

fn mode(m: Option<&str>, count: Option<i64>) -> AllocationMode {
    match m.unwrap_or("ExactCount") {
        "ExactCount" => AllocationMode::ExactCount(count.unwrap_or(1)),
        "All" => AllocationMode::All,
        other => AllocationMode::Unknown(other.to_string()),
    }
}

impl ClaimView {
    /// `namespace/name`, as upstream's klog.KObj prints a claim.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Compiles a ResourceClaim, applying API defaults.
    pub fn from_api(c: &res::ResourceClaim) -> Result<Self> {
        let namespace = c.metadata.namespace.clone().unwrap_or_default();
        let name = c.metadata.name.clone().ok_or(ClaimError::NoName)?;
        let key = format!("{namespace}/{name}");
        let caps = |req: &str, cr: Option<&res::CapacityRequirements>| -> Result<Vec<(String, Quantity)>> {
            let mut out = Vec::new();
            for (n, q) in cr.and_then(|c| c.requests.as_ref()).into_iter().flatten() {
                let v = Quantity::parse(&q.0).map_err(|source| ClaimError::Quantity {
                    claim: key.clone(),
                    request: req.to_string(),
                    name: n.clone(),
                    source,
                })?;
                out.push((n.clone(), v));
            }
            Ok(out)
        };
        let spec = &c.spec.as_ref().and_then(|s| s.devices.clone());
        let mut requests = Vec::new();
        for r in spec.as_ref().and_then(|d| d.requests.as_ref()).into_iter().flatten() {
            let (alternatives, first_available) = if let Some(subs) = r.first_available.as_ref().filter(|s| !s.is_empty()) {
                let mut alts = Vec::new();
                for s in subs {
                    alts.push(SubRequest {
                        name: s.name.clone(),
                        class: s.device_class_name.clone(),
                        mode: mode(s.allocation_mode.as_deref(), s.count),
                        selectors: selectors(s.selectors.as_deref()),
                        admin_access: None,
                        tolerations: s.tolerations.iter().flatten().map(Toleration::from_api).collect(),
                        capacity: caps(&format!("{}/{}", r.name, s.name), s.capacity.as_ref())?,
                    });
                }
                (alts, true)
            } else if let Some(e) = &r.exactly {
                (
                    vec![SubRequest {
                        name: r.name.clone(),
                        class: e.device_class_name.clone(),
                        mode: mode(e.allocation_mode.as_deref(), e.count),
                        selectors: selectors(e.selectors.as_deref()),
                        admin_access: e.admin_access,
                        tolerations: e.tolerations.iter().flatten().map(Toleration::from_api).collect(),
                        capacity: caps(&r.name, e.capacity.as_ref())?,
                    }],
                    false,
                )
            } else {
                // Neither: "missing device class name" when allocating.
                (
                    vec![SubRequest {
                        name: r.name.clone(),
                        class: String::new(),
                        mode: AllocationMode::ExactCount(1),
                        selectors: Vec::new(),
                        admin_access: None,
                        tolerations: Vec::new(),
                        capacity: Vec::new(),
                    }],
                    false,
                )
            };
            requests.push(Request { name: r.name.clone(), alternatives, first_available });
        }
        let constraints: Vec<Constraint> = spec
            .as_ref()
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .map(|k| {
                let requests = k.requests.clone().unwrap_or_default();
                match (&k.match_attribute, &k.distinct_attribute) {
                    (Some(a), _) => Constraint::Match { requests, attribute: a.clone() },
                    (None, Some(a)) => Constraint::Distinct { requests, attribute: a.clone() },
                    _ => Constraint::Unknown,
                }
            })
            .collect();
        let spec_hash = Self::allocation_hash(&requests, &constraints);
        Ok(ClaimView {
            namespace,
            name,
            uid: c.metadata.uid.clone().unwrap_or_default(),
            requests,
            constraints,
            config: spec.as_ref().and_then(|d| d.config.clone()).unwrap_or_default(),
            allocation: c.status.as_ref().and_then(|s| s.allocation.clone()),
            spec_hash,
        })
    }

    /// The hash of [`ClaimView::spec_hash`]: the compiled requests and
    /// constraints, every field of them (through their `Debug` form, so that
    /// a field added later counts without anyone remembering it here), with
    /// fixed keys (equal specs, equal hashes, in every process).
    pub fn allocation_hash(requests: &[Request], constraints: &[Constraint]) -> u64 {
        use std::fmt::Write;
        use std::hash::Hasher;
        struct W(std::hash::DefaultHasher);
        impl Write for W {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.write(s.as_bytes());
                Ok(())
            }
        }
        let mut w = W(std::hash::DefaultHasher::new());
        // Writing to a hasher cannot fail.
        let _ = write!(w, "{requests:?}|{constraints:?}");
        w.0.finish()
    }

    /// Does any request ask for admin access?
    pub fn wants_admin_access(&self) -> bool {
        self.requests.iter().flat_map(|r| &r.alternatives).any(|s| s.admin_access == Some(true))
    }
}
