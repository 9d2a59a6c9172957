//! `berth dump --anonymize`: the same cluster under other names, with every
//! scheduling decision unchanged.
//!
//! Every identifying string goes through one function, a keyed hash
//! (HMAC-SHA256) shortened to `a` and 16 hex digits: the same input gives the
//! same output everywhere in one dump, so a name and every reference to it
//! (a node's name, its `kubernetes.io/hostname` label, a pod's `nodeName`, a
//! `matchFields` value, a PVC's selected-node annotation; a label value and
//! the selectors that match it; an owner's name and uid) stay equal. The key
//! is random per dump and never written: the names of a cluster are few and
//! guessable ("default", "nginx", "payments"), so an unkeyed or fixed-key
//! hash could be reversed by hashing a dictionary. Whoever made the dump can
//! keep the mapping (`--anonymize-map`) to read results back.
//!
//! Strings are hashed unless the field is known to carry no identity and to
//! matter as written:
//! - `apiVersion`, `kind`, enum-like fields (operators, taint effects,
//!   phases, policies, condition types and reasons, access modes), times
//!   (creationTimestamp orders the queue), schedulerName (profiles name it);
//! - resource names and quantities (requests, limits, capacity, allocatable,
//!   overhead), PDB minAvailable/maxUnavailable;
//! - label and annotation keys of the `kubernetes.io` and `k8s.io` domains
//!   (`kubernetes.io/hostname`, `topology.kubernetes.io/zone`,
//!   `scheduling.x-k8s.io/pod-group`, ...); other keys are hashed;
//! - CSI driver and provisioner names (in-tree migration and volume limits
//!   match them by name), the `system-` PriorityClasses;
//! - integers (NodeAffinity's Gt and Lt compare label values as numbers),
//!   "", and the wildcard host IPs `0.0.0.0` and `::`;
//! - DRA device definitions (a ResourceSlice's devices, their attributes,
//!   capacity and taints, CEL selectors, device names): CEL expressions name
//!   them and cannot be rewritten reliably; a claim's device request keeps
//!   its tolerations, which match those taints.
//!
//! DRA references are hashed as the names they point to: a pod's
//! resourceClaimName and resourceClaimTemplateName, a claim's
//! deviceClassName, its request and subrequest names (containers'
//! `claims[].request`, allocation results), a pool's name, reservedFor.
//!
//! Structure the scheduler relies on is kept: image names are normalized
//! (`:latest`) before hashing, as ImageLocality compares them; zone label
//! values joined by `__` (a PersistentVolume in several zones) are hashed
//! part by part; a generic ephemeral volume's claim, named
//! `<pod>-<volume>`, is named from the hashed pod and volume names; a
//! prioritized-list request `<request>/<subrequest>` part by part.

use std::collections::{BTreeMap, HashMap};

use ring::hmac;
use serde_json::{Map, Value};
use thiserror::Error;

/// Why anonymization failed.
#[derive(Debug, Error)]
pub enum Error {
    /// No random key could be drawn.
    #[error("drawing a random key: the system's random source failed")]
    Random,
    /// Two inputs hashed to the same output (about one chance in 2^64 per pair).
    #[error("{first:?} and {second:?} hash to the same name {hashed}; dump again for another key")]
    Collision {
        /// One input.
        first: String,
        /// The other.
        second: String,
        /// Their common output.
        hashed: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// String fields kept as they are (see the module documentation).
const KEEP_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "apiGroup",
    "resource",
    "operator",
    "effect",
    "phase",
    "type",
    "status",
    "reason",
    "restartPolicy",
    "protocol",
    "whenUnsatisfiable",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "preemptionPolicy",
    "schedulerName",
    "volumeBindingMode",
    "reclaimPolicy",
    "persistentVolumeReclaimPolicy",
    "accessModes",
    "volumeMode",
    "provisioner",
    "driver",
    "fsType",
    "imagePullPolicy",
    "terminationMessagePolicy",
    "dnsPolicy",
    "unhealthyPodEvictionPolicy",
    "minAvailable",
    "maxUnavailable",
    "allocationMode",
    "expression",
    "extendedResourceName",
    "device",
    "resourceName",
    "qosClass",
    "creationTimestamp",
    "deletionTimestamp",
    "lastTransitionTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "startTime",
    "startedAt",
    "finishedAt",
    "timeAdded",
    "resourceVersion",
    "fieldPath",
    "sessionAffinity",
    "ipFamilyPolicy",
    "ipFamilies",
    "internalTrafficPolicy",
    "externalTrafficPolicy",
    "podManagementPolicy",
    "fsGroupPolicy",
    "volumeLifecycleModes",
    "mountPropagation",
    "matchAttribute",
    "distinctAttribute",
];

/// Objects kept whole: quantities keyed by resource name, DRA devices.
const KEEP_OBJECTS: &[&str] = &["capacity", "allocatable", "overhead", "allocatedResources", "minResources", "limits", "attributes", "os"];

/// Lists kept whole: a ResourceSlice's devices and counters (a claim's
/// `devices` is an object, and is walked).
const KEEP_ARRAYS: &[&str] = &["devices", "sharedCounters"];

/// Strings that are label keys.
const KEY_FIELDS: &[&str] = &["key", "topologyKey", "matchLabelKeys", "mismatchLabelKeys", "topologyKeys"];

/// Annotations whose values are kept: flags and driver names the scheduler reads.
const KEEP_ANNOTATION_VALUES: &[&str] = &[
    "storage.alpha.kubernetes.io/migrated-plugins",
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
    "storageclass.kubernetes.io/is-default-class",
];

/// Rewrites objects with one keyed hash; see the module documentation.
pub struct Anonymizer {
    key: hmac::Key,
    /// Original → anonymized, for `--anonymize-map`.
    map: BTreeMap<String, String>,
    /// Anonymized → original, to detect collisions.
    back: HashMap<String, String>,
    /// Walking a ResourceClaim's device request (its tolerations are kept,
    /// as the device taints they match are).
    in_device_request: bool,
}

impl std::fmt::Debug for Anonymizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anonymizer").field("names", &self.map.len()).finish_non_exhaustive()
    }
}

/// A label or annotation key of the `kubernetes.io` or `k8s.io` domains (or a field path).
pub fn well_known_key(k: &str) -> bool {
    if k == "metadata.name" || k == "metadata.namespace" {
        return true;
    }
    let Some((prefix, _)) = k.split_once('/') else { return false };
    ["kubernetes.io", "k8s.io", "x-k8s.io"].iter().any(|d| prefix == *d || prefix.strip_suffix(d).is_some_and(|p| p.ends_with('.')))
}

impl Anonymizer {
    /// With a random key, drawn once for this dump.
    pub fn random() -> Result<Anonymizer> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| Error::Random)?;
        Ok(Anonymizer { key, map: BTreeMap::new(), back: HashMap::new(), in_device_request: false })
    }

    /// With a given key: the same names give the same output in every dump
    /// (tests; never for a dump that leaves the house).
    pub fn with_key(key: &[u8]) -> Anonymizer {
        Anonymizer { key: hmac::Key::new(hmac::HMAC_SHA256, key), map: BTreeMap::new(), back: HashMap::new(), in_device_request: false }
    }

    /// Every string replaced so far: original → anonymized.
    pub fn mapping(&self) -> &BTreeMap<String, String> {
        &self.map
    }

    fn remember(&mut self, original: &str, hashed: String) -> Result<String> {
        if let Some(other) = self.back.get(&hashed)
            && other != original
        {
            return Err(Error::Collision { first: other.clone(), second: original.into(), hashed });
        }
        self.back.insert(hashed.clone(), original.into());
        self.map.insert(original.into(), hashed.clone());
        Ok(hashed)
    }

    /// The one function every identifying string goes through.
    pub fn hash(&mut self, s: &str) -> Result<String> {
        if s.is_empty() || s == "0.0.0.0" || s == "::" || is_integer(s) {
            return Ok(s.to_string());
        }
        if s.contains("__") {
            let parts: Vec<String> = s.split("__").map(|p| self.hash(p)).collect::<Result<_>>()?;
            return Ok(parts.join("__"));
        }
        if let Some(h) = self.map.get(s) {
            return Ok(h.clone());
        }
        let tag = hmac::sign(&self.key, s.as_bytes());
        let hex: String = tag.as_ref().iter().take(8).map(|b| format!("{b:02x}")).collect();
        self.remember(s, format!("a{hex}"))
    }

    fn label_key(&mut self, k: &str) -> Result<String> {
        if well_known_key(k) { Ok(k.to_string()) } else { self.hash(k) }
    }

    fn image(&mut self, s: &str) -> Result<String> {
        self.hash(&berth_model::node::normalized_image_name(s))
    }

    fn priority_class(&mut self, s: &str) -> Result<String> {
        if s.starts_with("system-") { Ok(s.to_string()) } else { self.hash(s) }
    }

    fn request(&mut self, s: &str) -> Result<String> {
        let parts: Vec<String> = s.split('/').map(|p| self.hash(p)).collect::<Result<_>>()?;
        Ok(parts.join("/"))
    }

    /// Learns names that other objects derive from this one, before any
    /// object is rewritten: a pod's generic ephemeral volume has the claim
    /// `<pod>-<volume>`, which must become `<hashed pod>-<hashed volume>`.
    pub fn observe(&mut self, o: &Value) -> Result<()> {
        if o.get("kind").and_then(Value::as_str) != Some("Pod") {
            return Ok(());
        }
        let Some(pod) = o.pointer("/metadata/name").and_then(Value::as_str) else { return Ok(()) };
        for v in o.pointer("/spec/volumes").and_then(Value::as_array).into_iter().flatten() {
            if v.get("ephemeral").is_none() {
                continue;
            }
            let Some(vol) = v.get("name").and_then(Value::as_str) else { continue };
            let claim = format!("{pod}-{vol}");
            let hashed = format!("{}-{}", self.hash(pod)?, self.hash(vol)?);
            match self.map.get(&claim) {
                Some(h) if *h == hashed => {}
                Some(h) => return Err(Error::Collision { first: claim.clone(), second: format!("{pod} + {vol}"), hashed: h.clone() }),
                None => {
                    self.remember(&claim, hashed)?;
                }
            }
        }
        Ok(())
    }

    /// Rewrites one object of the dump in place.
    pub fn object(&mut self, o: &mut Value) -> Result<()> {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        // Names kept by kind: CSI drivers are named by their (public) driver
        // name; a CSINode's drivers likewise.
        let kept_name = match kind.as_str() {
            "CSIDriver" => o.pointer("/metadata/name").cloned(),
            _ => None,
        };
        let class_name = if kind == "PriorityClass" { o.pointer("/metadata/name").and_then(Value::as_str).map(String::from) } else { None };
        let driver_names: Vec<Value> = if kind == "CSINode" {
            o.pointer("/spec/drivers").and_then(Value::as_array).into_iter().flatten().map(|d| d.get("name").cloned().unwrap_or(Value::Null)).collect()
        } else {
            Vec::new()
        };
        self.walk(o, "")?;
        if let Some(n) = kept_name
            && let Some(slot) = o.pointer_mut("/metadata/name")
        {
            *slot = n;
        }
        if let Some(n) = class_name {
            let h = self.priority_class(&n)?;
            if let Some(slot) = o.pointer_mut("/metadata/name") {
                *slot = Value::from(h);
            }
        }
        if let Some(drivers) = o.pointer_mut("/spec/drivers").and_then(Value::as_array_mut) {
            for (d, n) in drivers.iter_mut().zip(driver_names) {
                if let Value::Object(m) = d
                    && !n.is_null()
                {
                    m.insert("name".into(), n);
                }
            }
        }
        Ok(())
    }

    fn walk(&mut self, v: &mut Value, field: &str) -> Result<()> {
        match v {
            Value::String(s) => {
                let new = self.string(field, s)?;
                *s = new;
            }
            Value::Array(a) => {
                for x in a {
                    self.walk(x, field)?;
                }
            }
            Value::Object(m) => {
                for (k, child) in m.iter_mut() {
                    self.field(k, child)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn field(&mut self, k: &str, child: &mut Value) -> Result<()> {
        let is_object = child.is_object();
        match k {
            "labels" | "matchLabels" if is_object => self.label_map(child),
            "annotations" if is_object => self.annotation_map(child),
            // A Service's or ReplicationController's selector, a pod's
            // nodeSelector: maps of labels. A LabelSelector or a
            // NodeSelector (DRA, PersistentVolume) is walked as a structure.
            "selector" | "nodeSelector" if is_object && !has_any(child, &["matchLabels", "matchExpressions", "nodeSelectorTerms"]) => self.label_map(child),
            // Quantities keyed by resource name; a DRA config's `requests`
            // is a list of request names instead.
            "requests" if is_object => Ok(()),
            "requests" => self.walk_request_names(child),
            // A device request's tolerations match device taints, which are
            // kept with the devices.
            "tolerations" if self.in_device_request => Ok(()),
            _ if is_object && KEEP_OBJECTS.contains(&k) => Ok(()),
            _ if child.is_array() && KEEP_ARRAYS.contains(&k) => Ok(()),
            _ => self.walk(child, k),
        }
    }

    fn walk_request_names(&mut self, v: &mut Value) -> Result<()> {
        match v {
            Value::String(s) => {
                let new = self.request(s)?;
                *s = new;
            }
            Value::Array(a) => {
                for x in a {
                    self.walk_request_names(x)?;
                }
            }
            // A claim's device request: its name (referenced by containers'
            // `claims[].request` and allocation results, hashed as they
            // are), its deviceClassName (hashed as the DeviceClass's name),
            // its subrequests (firstAvailable).
            Value::Object(_) => {
                let outer = std::mem::replace(&mut self.in_device_request, true);
                let r = self.walk(v, "");
                self.in_device_request = outer;
                r?;
            }
            _ => {}
        }
        Ok(())
    }

    fn string(&mut self, field: &str, s: &str) -> Result<String> {
        if KEEP_FIELDS.contains(&field) || field == "maximumVolumeSize" || field == "capacity" || field == "sizeLimit" {
            return Ok(s.to_string());
        }
        match field {
            "image" | "names" => self.image(s),
            "priorityClassName" => self.priority_class(s),
            "request" => self.request(s),
            _ if KEY_FIELDS.contains(&field) => self.label_key(s),
            _ => self.hash(s),
        }
    }

    fn label_map(&mut self, v: &mut Value) -> Result<()> {
        let Value::Object(m) = v else { return Ok(()) };
        let mut out = Map::new();
        for (k, val) in std::mem::take(m) {
            let k = self.label_key(&k)?;
            let val = match val {
                Value::String(s) => Value::from(self.hash(&s)?),
                other => other,
            };
            out.insert(k, val);
        }
        *m = out;
        Ok(())
    }

    fn annotation_map(&mut self, v: &mut Value) -> Result<()> {
        let Value::Object(m) = v else { return Ok(()) };
        let mut out = Map::new();
        for (k, val) in std::mem::take(m) {
            let val = match val {
                Value::String(s) if KEEP_ANNOTATION_VALUES.contains(&k.as_str()) => Value::from(s),
                Value::String(s) => Value::from(self.hash(&s)?),
                other => other,
            };
            out.insert(self.label_key(&k)?, val);
        }
        *m = out;
        Ok(())
    }
}

fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn has_any(v: &Value, keys: &[&str]) -> bool {
    keys.iter().any(|k| v.get(*k).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anon(o: &Value) -> (Value, Anonymizer) {
        let mut a = Anonymizer::with_key(b"test");
        let mut o = o.clone();
        a.observe(&o).expect("observe");
        a.object(&mut o).expect("anonymize");
        (o, a)
    }

    #[test]
    fn references_follow_their_names_and_readable_parts_stay() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1", "labels": {"app": "web", "topology.kubernetes.io/zone": "z1"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": true}]},
            "spec": {
                "nodeName": "node-a", "schedulerName": "default-scheduler", "priorityClassName": "system-node-critical",
                "nodeSelector": {"kubernetes.io/hostname": "node-a", "disk": "ssd"},
                "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "500m", "example.com/gpu": "1"}}}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]},
                    {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}]}}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"]}],
                "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}],
            },
        });
        let (p, mut a) = anon(&pod);
        let h = |a: &mut Anonymizer, s: &str| a.hash(s).expect("hash");
        assert_eq!(p["metadata"]["name"], h(&mut a, "web-1"));
        assert_eq!(p["metadata"]["namespace"], h(&mut a, "shop"));
        assert_eq!(p["spec"]["nodeName"], h(&mut a, "node-a"));
        assert_eq!(p["spec"]["nodeSelector"]["kubernetes.io/hostname"], h(&mut a, "node-a"));
        assert_eq!(p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0], h(&mut a, "node-a"));
        let gt = &p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]["matchExpressions"][0];
        assert_eq!((gt["key"].clone(), gt["values"][0].clone()), (json!(h(&mut a, "gen")), json!("3")));
        assert_eq!(p["metadata"]["labels"][h(&mut a, "app")], h(&mut a, "web"));
        assert_eq!(p["metadata"]["labels"]["topology.kubernetes.io/zone"], h(&mut a, "z1"));
        assert_eq!(p["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"][h(&mut a, "app")], h(&mut a, "web"));
        assert_eq!(p["spec"]["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
        assert_eq!(p["metadata"]["ownerReferences"][0]["name"], h(&mut a, "web"));
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], h(&mut a, "rs-1"));
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(p["spec"]["containers"][0]["image"], h(&mut a, "nginx:latest"));
        assert_eq!(p["spec"]["containers"][0]["resources"], pod["spec"]["containers"][0]["resources"]);
        assert_eq!(p["spec"]["tolerations"][0], json!({"key": h(&mut a, "dedicated"), "operator": "Equal", "value": h(&mut a, "web"), "effect": "NoSchedule"}));
        assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(p["spec"]["priorityClassName"], "system-node-critical");
        // The ephemeral volume's claim is named from the hashed pod and volume.
        let claim = h(&mut a, "web-1-scratch");
        assert_eq!(claim, format!("{}-{}", h(&mut a, "web-1"), h(&mut a, "scratch")));
        // Nothing identifying is left.
        let text = p.to_string();
        for word in ["web", "shop", "node-a", "nginx", "dedicated", "ssd", "u-1"] {
            assert!(!text.contains(word), "{word} leaked: {text}");
        }
    }

    #[test]
    fn zones_split_drivers_kept_and_keys_of_other_domains_hashed() {
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv1", "labels": {"topology.kubernetes.io/zone": "z1__z2"}, "annotations": {"pv.kubernetes.io/bound-by-controller": "yes", "team.example.com/owner": "alice"}},
            "spec": {"capacity": {"storage": "10Gi"}, "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-123"}, "storageClassName": "fast",
                     "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "shop", "name": "data"}}});
        let (o, mut a) = anon(&pv);
        let z = format!("{}__{}", a.hash("z1").expect("h"), a.hash("z2").expect("h"));
        assert_eq!(o["metadata"]["labels"]["topology.kubernetes.io/zone"], z);
        assert_eq!(o["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"], "yes");
        assert_eq!(o["metadata"]["annotations"][a.hash("team.example.com/owner").expect("h")], a.hash("alice").expect("h"));
        assert_eq!(o["spec"]["csi"]["driver"], "ebs.csi.aws.com");
        assert_eq!(o["spec"]["capacity"]["storage"], "10Gi");
        assert_eq!(o["spec"]["claimRef"]["name"], a.hash("data").expect("h"));
        let driver = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "ebs.csi.aws.com"}, "spec": {}});
        assert_eq!(anon(&driver).0["metadata"]["name"], "ebs.csi.aws.com");
        let csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-a"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-123", "topologyKeys": ["topology.ebs.csi.aws.com/zone"]}]}});
        let (o, mut a) = anon(&csinode);
        assert_eq!(o["metadata"]["name"], a.hash("node-a").expect("h"));
        assert_eq!(o["spec"]["drivers"][0]["name"], "ebs.csi.aws.com");
        assert_eq!(o["spec"]["drivers"][0]["nodeID"], a.hash("i-123").expect("h"));
    }

    #[test]
    fn service_selectors_are_label_maps_and_label_selectors_are_structures() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "n"}, "spec": {"selector": {"app": "web"}}});
        let (o, mut a) = anon(&svc);
        assert_eq!(o["spec"]["selector"][a.hash("app").expect("h")], a.hash("web").expect("h"));
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r", "namespace": "n"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}});
        let (o, mut a) = anon(&rs);
        assert_eq!(o["spec"]["selector"]["matchExpressions"][0], json!({"key": a.hash("app").expect("h"), "operator": "In", "values": [a.hash("web").expect("h")]}));
    }

    #[test]
    fn device_claims_follow_their_classes_and_requests() {
        let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "gpu-claim", "namespace": "ml"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "big-gpu", "allocationMode": "ExactCount", "count": 1,
                    "tolerations": [{"key": "example.com/broken", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]}},
                {"name": "any", "firstAvailable": [{"name": "small", "deviceClassName": "small-gpu"}]}],
                "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.example.com", "parameters": {}}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "any/small", "driver": "gpu.example.com", "pool": "rack-1", "device": "gpu-0"}]}},
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "u-1"}]}});
        let (c, mut a) = anon(&claim);
        let h = |a: &mut Anonymizer, s: &str| a.hash(s).expect("hash");
        let r = &c["spec"]["devices"]["requests"];
        assert_eq!(r[0]["name"], h(&mut a, "gpu"));
        assert_eq!(r[0]["exactly"]["deviceClassName"], h(&mut a, "big-gpu"));
        assert_eq!(r[0]["exactly"]["tolerations"], claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]);
        assert_eq!(r[0]["exactly"]["allocationMode"], "ExactCount");
        assert_eq!(r[1]["firstAvailable"][0]["name"], h(&mut a, "small"));
        assert_eq!(r[1]["firstAvailable"][0]["deviceClassName"], h(&mut a, "small-gpu"));
        assert_eq!(c["spec"]["devices"]["config"][0]["requests"][0], h(&mut a, "gpu"));
        let res = &c["status"]["allocation"]["devices"]["results"][0];
        assert_eq!(res["request"], format!("{}/{}", h(&mut a, "any"), h(&mut a, "small")));
        assert_eq!((res["driver"].as_str(), res["device"].as_str()), (Some("gpu.example.com"), Some("gpu-0")));
        assert_eq!(res["pool"], h(&mut a, "rack-1"));
        assert_eq!(c["status"]["reservedFor"][0]["name"], h(&mut a, "trainer"));
        // The class and the slice's pool under the same names.
        let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "big-gpu"}});
        let mut k = class.clone();
        a.object(&mut k).expect("anonymize");
        assert_eq!(k["metadata"]["name"], h(&mut a, "big-gpu"));
        let slice = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": "gpu.example.com", "pool": {"name": "rack-1", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n1",
                "devices": [{"name": "gpu-0", "taints": [{"key": "example.com/broken", "value": "yes", "effect": "NoSchedule"}]}]}});
        let mut sl = slice.clone();
        a.object(&mut sl).expect("anonymize");
        assert_eq!(sl["spec"]["pool"]["name"], h(&mut a, "rack-1"));
        assert_eq!(sl["spec"]["nodeName"], h(&mut a, "n1"));
        assert_eq!(sl["spec"]["devices"], slice["spec"]["devices"]);
        // A pod's claim references.
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu", "request": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}, {"name": "t", "resourceClaimTemplateName": "gpu-template"}]}});
        let mut p = pod.clone();
        a.object(&mut p).expect("anonymize");
        assert_eq!(p["spec"]["resourceClaims"][0]["resourceClaimName"], c["metadata"]["name"]);
        assert_eq!(p["spec"]["resourceClaims"][1]["resourceClaimTemplateName"], h(&mut a, "gpu-template"));
        assert_eq!(p["spec"]["containers"][0]["resources"]["claims"][0]["request"], r[0]["name"]);
    }

    #[test]
    fn well_known_keys() {
        for k in ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "node.kubernetes.io/instance-type", "scheduling.x-k8s.io/pod-group", "app.kubernetes.io/name", "metadata.name"] {
            assert!(well_known_key(k), "{k}");
        }
        for k in ["app", "example.com/team", "notkubernetes.io/x", "notk8s.io/x", "kubernetes.io.evil.com/x"] {
            assert!(!well_known_key(k), "{k}");
        }
    }

    /// Every conformance case (when ../shared/conformance is beside the
    /// checkout), anonymized: simulate places the same pods on the same
    /// nodes, under the mapping. Cases whose configuration names labels
    /// (addedAffinity, defaultConstraints) are left out: a configuration is
    /// not anonymized.
    /// Per pod: node, nominated node, victims.
    type Outcomes = std::collections::BTreeMap<String, (Option<String>, Option<String>, Vec<String>)>;

    #[test]
    fn conformance_cases_decide_alike_when_anonymized() {
        use berth_engine::config::Config;
        use berth_engine::offline::{Cluster, Engine};
        // The public cases ship with the repository (tests/conformance/cases).
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/cases");
        let areas = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("the conformance cases are missing from {}: {e}", root.display()));
        let mut cases: Vec<std::path::PathBuf> = areas.flatten().flat_map(|a| std::fs::read_dir(a.path()).into_iter().flatten().flatten().map(|c| c.path())).collect();
        cases.sort();
        let mut checked = 0;
        let mut failures = Vec::new();
        for case in cases {
            let Ok(text) = std::fs::read_to_string(case.join("cluster.yaml")) else { continue };
            let config_text = std::fs::read_to_string(case.join("config.yaml")).ok();
            if config_text.as_deref().is_some_and(|c| c.contains("addedAffinity") || c.contains("defaultConstraints")) {
                continue;
            }
            let config = match &config_text {
                Some(t) => Config::parse(t).expect("config"),
                None => Config::default_config(),
            };
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("case yaml");
            let docs: Vec<Value> = docs
                .into_iter()
                .flat_map(|d| match d.get("items").and_then(Value::as_array) {
                    Some(items) if d.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) => items.clone(),
                    _ => vec![d],
                })
                .collect();
            let mut a = Anonymizer::with_key(b"conformance");
            let mut hidden = docs.clone();
            for o in &hidden {
                a.observe(o).expect("observe");
            }
            for o in &mut hidden {
                a.object(o).expect("anonymize");
            }
            let run = |docs: Vec<Value>| {
                let cluster = Cluster::from_documents(docs, "case").expect("case loads");
                Engine::new(&config, cluster, 7).simulate()
            };
            let plain = run(docs);
            let secret = run(hidden);
            let map = a.mapping().clone();
            let m = |s: &str| map.get(s).cloned().unwrap_or_else(|| s.to_string());
            let key = |k: &str| k.split_once('/').map(|(ns, n)| format!("{}/{}", m(ns), m(n))).unwrap_or_default();
            let got: Outcomes =
                secret.placements.iter().map(|p| (p.pod.clone(), (p.node.clone(), p.nominated_node.clone(), p.victims.clone()))).collect();
            let want: Outcomes = plain
                .placements
                .iter()
                .map(|p| (key(&p.pod), (p.node.as_deref().map(m), p.nominated_node.as_deref().map(m), p.victims.iter().map(|v| key(v)).collect())))
                .collect();
            if got != want {
                failures.push(format!("{}:\n  want {want:?}\n  got  {got:?}", case.display()));
            }
            checked += 1;
        }
        eprintln!("{checked} conformance cases anonymized");
        assert!(checked >= 50, "only {checked} cases were compared");
        assert!(failures.is_empty(), "{} of {checked} cases decide differently:\n{}", failures.len(), failures.join("\n"));
    }
}
