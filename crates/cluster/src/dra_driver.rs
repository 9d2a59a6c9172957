//! A simulated DRA driver: what a real driver's kubelet plugin publishes
//! (upstream `k8s.io/dynamic-resource-allocation/resourceslice`), one
//! node-local ResourceSlice per node and driver, and a DeviceClass per
//! driver selecting its devices.
//!
//! Each slice is named `<node>-<driver>-<5 random>` (generateName, as the
//! kubelet plugin helper names them), is owned by its Node (controller
//! reference) and describes one pool named after the node, generation 1,
//! one slice: `spec.driver`, `spec.nodeName`, `spec.pool` and
//! `spec.devices` (name, `attributes`, `capacity`). Slices appear when a
//! node is created and go when it is deleted; a resync repairs what was
//! missed (a node recreated under the same name gets fresh slices). Only
//! the slices this driver made (label [`SIMULATED`]) are touched. Each
//! driver's DeviceClass is named after the driver and selects it with the
//! CEL expression `device.driver == "<driver>"`.
//!
//! Devices come from [`DevicesConfig`]: `berth cluster --devices-per-node
//! N` ([`DevicesConfig::per_node`]: driver [`DEFAULT_DRIVER`], devices
//! `gpu-0` .. `gpu-<N-1>` on every node with the attributes `model`
//! (string), `index` (int), `pcieRoot` (string, shared by two consecutive
//! GPUs, so a claim can `matchAttribute` on it), `driverVersion` (version)
//! and the capacity `memory: 80Gi`), or `--devices FILE`
//! ([`DevicesConfig::from_file`]), YAML of this shape:
//!
//! ```yaml
//! driver: gpu.example.com        # the default driver of the devices below (optional)
//! nodes:
//!   "*":                         # every node without an entry of its own
//!     - name: gpu-0              # a DNS label, unique per node and driver
//!       attributes:              # name -> value: a string, an integer, a boolean,
//!         model: H100            #   or one of {string: ..}, {int: ..}, {bool: ..}, {version: ..}
//!         pcieRoot: pci0
//!         driverVersion: {version: 1.2.0}
//!       capacity:                # name -> quantity
//!         memory: 80Gi
//!   node-1:                      # this node's devices (replaces "*" for it)
//!     - name: nic-0
//!       driver: nic.example.com  # a device's own driver (default: the file's `driver`,
//!       attributes: {speed: 100} #   else gpu.example.com)
//! ```
//!
//! A node matching no entry has no devices. Unknown keys are refused.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::jsonptr::Pointer as _;
use super::resources::{DEVICECLASSES, NODES, RESOURCESLICES};
use super::selector::Filter;
use super::store::{self, DeleteOpts, EventType, Obj, Store};

/// The driver of `--devices-per-node` (and of a devices file's devices
/// that name none).
pub const DEFAULT_DRIVER: &str = "gpu.example.com";
/// The key of [`DevicesConfig::nodes`] that stands for every node
/// without an entry of its own.
pub const ALL_NODES: &str = "*";
/// The label on the ResourceSlices the simulated driver publishes (the
/// only ones it updates or deletes).
pub const SIMULATED: &str = "berth.dev/simulated-driver";
/// The capacity `memory` of each `--devices-per-node` device.
pub const GPU_MEMORY: &str = "80Gi";
/// The `model` attribute of each `--devices-per-node` device.
pub const GPU_MODEL: &str = "LATEST-GPU-MODEL";
/// How often published slices are compared with the nodes.
const RESYNC: Duration = Duration::from_secs(5);

/// Errors of the simulated driver's configuration and publication.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The devices file could not be read.
    #[error("cannot read devices file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The devices file is not YAML of the documented shape.
    #[error("devices file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// A name, attribute or quantity is invalid.
    #[error("devices: {0}")]
    Invalid(String),
    /// Publishing a slice or a class failed.
    #[error("publishing devices failed: {0}")]
    Store(#[from] store::Error),
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// A device attribute's value, as a ResourceSlice types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// `{string: ..}`.
    String(String),
    /// `{int: ..}`.
    Int(i64),
    /// `{bool: ..}`.
    Bool(bool),
    /// `{version: ..}` (semantic version).
    Version(String),
}

impl Attribute {
    fn to_json(&self) -> Value {
        match self {
            Attribute::String(s) => json!({"string": s}),
            Attribute::Int(i) => json!({"int": i}),
            Attribute::Bool(b) => json!({"bool": b}),
            Attribute::Version(v) => json!({"version": v}),
        }
    }
}

/// One simulated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its name in the slice (a DNS label).
    pub name: String,
    /// The driver that publishes it.
    pub driver: String,
    /// Attributes by name.
    pub attributes: BTreeMap<String, Attribute>,
    /// Capacities by name (quantities).
    pub capacity: BTreeMap<String, String>,
}

/// The devices of the simulated driver(s), by node. Empty: no driver,
/// no slices, no classes (the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevicesConfig {
    /// Devices by node name; [`ALL_NODES`] for every node without an
    /// entry of its own.
    pub nodes: BTreeMap<String, Vec<Device>>,
}

/// The raw YAML of a devices file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    driver: Option<String>,
    #[serde(default)]
    nodes: BTreeMap<String, Vec<FileDevice>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDevice {
    name: String,
    #[serde(default)]
    driver: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, FileAttribute>,
    #[serde(default)]
    capacity: BTreeMap<String, FileQuantity>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileAttribute {
    Bool(bool),
    Int(i64),
    String(String),
    Typed(TypedAttribute),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedAttribute {
    #[serde(default)]
    string: Option<String>,
    #[serde(default)]
    int: Option<i64>,
    #[serde(default)]
    bool: Option<bool>,
    #[serde(default)]
    version: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileQuantity {
    Int(i64),
    String(String),
}

impl DevicesConfig {
    /// `n` GPUs of [`DEFAULT_DRIVER`] on every node (`--devices-per-node`).
    pub fn per_node(n: usize) -> Self {
        let devices = (0..n)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                driver: DEFAULT_DRIVER.into(),
                attributes: BTreeMap::from([
                    ("model".into(), Attribute::String(GPU_MODEL.into())),
                    ("index".into(), Attribute::Int(i64::try_from(i).unwrap_or(i64::MAX))),
                    ("pcieRoot".into(), Attribute::String(format!("pci{:04x}:00", i / 2))),
                    ("driverVersion".into(), Attribute::Version("1.0.0".into())),
                ]),
                capacity: BTreeMap::from([("memory".into(), GPU_MEMORY.into())]),
            })
            .collect::<Vec<_>>();
        let mut nodes = BTreeMap::new();
        if !devices.is_empty() {
            nodes.insert(ALL_NODES.to_string(), devices);
        }
        Self { nodes }
    }

    /// The devices described by a YAML file (format in the module doc).
    pub fn from_file(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: shown.clone(), source })?;
        Self::from_yaml(&text).map_err(|e| match e {
            Error::Parse { message, .. } => Error::Parse { path: shown, message },
            other => other,
        })
    }

    /// The devices described by YAML text (format in the module doc).
    pub fn from_yaml(text: &str) -> Result<Self> {
        let spec: FileSpec = serde_saphyr::from_str(text).map_err(|e| Error::Parse { path: "<text>".into(), message: e.to_string() })?;
        let default_driver = spec.driver.unwrap_or_else(|| DEFAULT_DRIVER.to_string());
        let mut nodes = BTreeMap::new();
        for (node, devices) in spec.nodes {
            let mut out = Vec::with_capacity(devices.len());
            for d in devices {
                let mut attributes = BTreeMap::new();
                for (k, a) in d.attributes {
                    let v = match a {
                        FileAttribute::Bool(b) => Attribute::Bool(b),
                        FileAttribute::Int(i) => Attribute::Int(i),
                        FileAttribute::String(s) => Attribute::String(s),
                        FileAttribute::Typed(t) => match (t.string, t.int, t.bool, t.version) {
                            (Some(s), None, None, None) => Attribute::String(s),
                            (None, Some(i), None, None) => Attribute::Int(i),
                            (None, None, Some(b), None) => Attribute::Bool(b),
                            (None, None, None, Some(v)) => Attribute::Version(v),
                            _ => return Err(Error::Invalid(format!("node {node}, device {}: attribute {k} must have exactly one of string, int, bool, version", d.name))),
                        },
                    };
                    attributes.insert(k, v);
                }
                let capacity = d
                    .capacity
                    .into_iter()
                    .map(|(k, q)| {
                        let q = match q {
                            FileQuantity::Int(i) => i.to_string(),
                            FileQuantity::String(s) => s,
                        };
                        (k, q)
                    })
                    .collect();
                out.push(Device { name: d.name, driver: d.driver.unwrap_or_else(|| default_driver.clone()), attributes, capacity });
            }
            nodes.insert(node, out);
        }
        let cfg = Self { nodes };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Whether there are devices at all (a driver to run).
    pub fn enabled(&self) -> bool {
        self.nodes.values().any(|d| !d.is_empty())
    }

    /// The drivers named by any device.
    pub fn drivers(&self) -> BTreeSet<&str> {
        self.nodes.values().flatten().map(|d| d.driver.as_str()).collect()
    }

    /// The devices of node `node`, by driver.
    pub fn devices_of(&self, node: &str) -> BTreeMap<&str, Vec<&Device>> {
        let mut out: BTreeMap<&str, Vec<&Device>> = BTreeMap::new();
        for d in self.nodes.get(node).or_else(|| self.nodes.get(ALL_NODES)).into_iter().flatten() {
            out.entry(d.driver.as_str()).or_default().push(d);
        }
        out
    }

    /// Names, drivers and quantities as the API validates them; device
    /// names unique per node and driver.
    pub fn validate(&self) -> Result<()> {
        for (node, devices) in &self.nodes {
            let mut seen = BTreeSet::new();
            for d in devices {
                let at = format!("node {node}, device {}", d.name);
                if !is_dns_label(&d.name) {
                    return Err(Error::Invalid(format!("{at}: the name must be a DNS label (lowercase alphanumerics and '-', at most 63)")));
                }
                if super::resources::validate_name(&d.driver).is_some() || !d.driver.contains('.') {
                    return Err(Error::Invalid(format!("{at}: driver {:?} must be a DNS subdomain with a dot", d.driver)));
                }
                if !seen.insert((d.driver.as_str(), d.name.as_str())) {
                    return Err(Error::Invalid(format!("{at}: duplicate device name for driver {}", d.driver)));
                }
                for (k, q) in &d.capacity {
                    if berth_model::quantity::parse_value(q).is_err() {
                        return Err(Error::Invalid(format!("{at}: capacity {k}: {q:?} is not a quantity")));
                    }
                }
                if let Some(k) = d.attributes.keys().chain(d.capacity.keys()).find(|k| k.is_empty()) {
                    return Err(Error::Invalid(format!("{at}: empty attribute or capacity name {k:?}")));
                }
            }
        }
        Ok(())
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The DeviceClass of `driver`: named after it, selecting its devices.
pub fn device_class_json(driver: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == {}", serde_json::to_string(driver).unwrap_or_default())}}]},
    })
}

/// The ResourceSlice `driver` publishes for `devices` of node `node` (uid `node_uid`).
pub fn slice_json(node: &str, node_uid: &str, driver: &str, devices: &[&Device]) -> Value {
    let devices: Vec<Value> = devices
        .iter()
        .map(|d| {
            let mut dev = Map::new();
            dev.insert("name".into(), json!(d.name));
            if !d.attributes.is_empty() {
                dev.insert("attributes".into(), Value::Object(d.attributes.iter().map(|(k, a)| (k.clone(), a.to_json())).collect()));
            }
            if !d.capacity.is_empty() {
                dev.insert("capacity".into(), Value::Object(d.capacity.iter().map(|(k, q)| (k.clone(), json!({"value": q}))).collect()));
            }
            Value::Object(dev)
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": format!("{node}-{driver}-"),
            "labels": {SIMULATED: "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true}],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

/// Create each driver's DeviceClass (kept when it exists) and the slices
/// of the nodes that exist.
pub fn seed(store: &Store, cfg: &DevicesConfig) -> Result<()> {
    cfg.validate()?;
    for driver in cfg.drivers() {
        match store.create(DEVICECLASSES, "", device_class_json(driver)) {
            Ok(_) => {}
            Err(e) if e.code() == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    reconcile(store, cfg)
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

/// The uid of the Node that controls a slice.
fn owner_node_uid(v: &Value) -> &str {
    v.at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| refs.iter().find(|r| r.get("kind").and_then(Value::as_str) == Some("Node")))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn delete_slice(store: &Store, o: &Obj) {
    let opts = DeleteOpts { uid: Some(o.uid().to_string()), ..Default::default() };
    if let Err(e) = store.delete(RESOURCESLICES, "", o.name(), &opts)
        && e.code() != 404
    {
        tracing::debug!(slice = o.name(), error = %e, "deleting a ResourceSlice failed");
    }
}

/// Make the published slices match the nodes: a slice for each node and
/// driver with devices, none for nodes that are gone or were recreated.
pub fn reconcile(store: &Store, cfg: &DevicesConfig) -> Result<()> {
    let nodes: HashMap<String, String> = store
        .list_bytes(NODES, &Filter::default(), None, None)
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .map(|n| (n.name().to_string(), n.uid().to_string()))
        .collect();
    let slices = store.list(RESOURCESLICES, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default();
    let mut published: BTreeSet<(String, String)> = BTreeSet::new();
    for o in slices.iter().filter(|o| s(&o.value, "/metadata/labels/berth.dev~1simulated-driver") == "true") {
        let node = s(&o.value, "/spec/nodeName");
        let driver = s(&o.value, "/spec/driver");
        let wanted = nodes.get(node).is_some_and(|uid| uid == owner_node_uid(&o.value)) && cfg.devices_of(node).contains_key(driver);
        if wanted && published.insert((node.to_string(), driver.to_string())) {
            continue;
        }
        delete_slice(store, o);
    }
    for (node, uid) in &nodes {
        for (driver, devices) in cfg.devices_of(node) {
            if !published.contains(&(node.clone(), driver.to_string())) {
                store.create(RESOURCESLICES, "", slice_json(node, uid, driver, &devices))?;
            }
        }
    }
    Ok(())
}

/// Publish the slices of a node that was just created.
fn publish(store: &Store, cfg: &DevicesConfig, node: &Obj) -> Result<()> {
    for (driver, devices) in cfg.devices_of(node.name()) {
        store.create(RESOURCESLICES, "", slice_json(node.name(), node.uid(), driver, &devices))?;
    }
    Ok(())
}

/// Withdraw the slices of a node that was deleted.
fn withdraw(store: &Store, node: &Obj) {
    let slices = store.list(RESOURCESLICES, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default();
    for o in slices.iter().filter(|o| s(&o.value, "/spec/nodeName") == node.name() && owner_node_uid(&o.value) == node.uid()) {
        if s(&o.value, "/metadata/labels/berth.dev~1simulated-driver") == "true" {
            delete_slice(store, o);
        }
    }
}

/// Start the driver: it publishes the slices of nodes created from now
/// on, withdraws those of deleted nodes, and resyncs every few seconds.
/// It stops when `stop` changes.
pub fn spawn(store: Arc<Store>, cfg: DevicesConfig, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    // Subscribed before the task runs: a node created as soon as the
    // cluster is up is not missed.
    let mut nodes = store.subscribe(NODES);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RESYNC);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => reconcile(&store, &cfg),
                ev = nodes.recv() => match ev {
                    Ok(ev) if ev.ty == EventType::Added => publish(&store, &cfg, &ev.obj),
                    Ok(ev) if ev.ty == EventType::Deleted => {
                        withdraw(&store, &ev.obj);
                        Ok(())
                    }
                    Ok(_) => Ok(()),
                    Err(broadcast::error::RecvError::Lagged(_)) => reconcile(&store, &cfg),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "the simulated DRA driver could not publish its devices");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_node_gpus_share_a_pcie_root_in_pairs() {
        let cfg = DevicesConfig::per_node(4);
        let devices = cfg.devices_of("node-7");
        let gpus = devices.get(DEFAULT_DRIVER).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(gpus.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]);
        let root = |i: usize| gpus[i].attributes.get("pcieRoot").cloned();
        assert_eq!(root(0), root(1));
        assert_ne!(root(1), root(2));
        assert!(!DevicesConfig::per_node(0).enabled());
        let slice = slice_json("node-7", "u1", DEFAULT_DRIVER, gpus);
        assert_eq!(slice["spec"]["pool"]["name"], "node-7");
        assert_eq!(slice["spec"]["devices"][0]["capacity"]["memory"]["value"], "80Gi");
        assert_eq!(slice["spec"]["devices"][1]["attributes"]["index"]["int"], 1);
        assert_eq!(device_class_json(DEFAULT_DRIVER)["spec"]["selectors"][0]["cel"]["expression"], "device.driver == \"gpu.example.com\"");
    }

    #[test]
    fn a_devices_file_types_attributes_and_overrides_per_node() {
        let cfg = DevicesConfig::from_yaml(
            "driver: gpu.example.com\nnodes:\n  \"*\":\n    - name: gpu-0\n      attributes: {model: H100, cores: 132, mig: false, driverVersion: {version: 1.2.0}}\n      capacity: {memory: 80Gi, slots: 7}\n  node-1:\n    - name: nic-0\n      driver: nic.example.com\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let any = cfg.devices_of("node-0");
        let gpu = any.get("gpu.example.com").and_then(|d| d.first()).unwrap_or_else(|| panic!("no gpu"));
        assert_eq!(gpu.attributes.get("model"), Some(&Attribute::String("H100".into())));
        assert_eq!(gpu.attributes.get("cores"), Some(&Attribute::Int(132)));
        assert_eq!(gpu.attributes.get("mig"), Some(&Attribute::Bool(false)));
        assert_eq!(gpu.attributes.get("driverVersion"), Some(&Attribute::Version("1.2.0".into())));
        assert_eq!(gpu.capacity.get("slots").map(String::as_str), Some("7"));
        assert_eq!(cfg.devices_of("node-1").keys().copied().collect::<Vec<_>>(), ["nic.example.com"]);
        assert_eq!(cfg.drivers().into_iter().collect::<Vec<_>>(), ["gpu.example.com", "nic.example.com"]);
    }

    #[test]
    fn bad_devices_files_are_refused_with_the_place() {
        for (yaml, want) in [
            ("nodes:\n  n:\n    - name: GPU_0\n", "DNS label"),
            ("nodes:\n  n:\n    - name: g\n      driver: nodot\n", "DNS subdomain"),
            ("nodes:\n  n:\n    - name: g\n    - name: g\n", "duplicate"),
            ("nodes:\n  n:\n    - name: g\n      capacity: {memory: lots}\n", "not a quantity"),
            ("nodes:\n  n:\n    - name: g\n      attributes: {a: {int: 1, bool: true}}\n", "exactly one"),
            ("nodes:\n  n:\n    - name: g\n      colour: red\n", ""),
        ] {
            let e = DevicesConfig::from_yaml(yaml).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(!e.is_empty() && e.contains(want), "{yaml}: {e}");
        }
    }

    #[test]
    fn slices_follow_nodes() {
        let store = Store::new(store::StoreConfig::default());
        let cfg = DevicesConfig::per_node(2);
        let node = |n: &str| json!({"metadata": {"name": n}});
        let n0 = store.create(NODES, "", node("n0")).unwrap_or_else(|e| panic!("{e}"));
        seed(&store, &cfg).unwrap_or_else(|e| panic!("{e}"));
        seed(&store, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let slices = || store.list(RESOURCESLICES, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default();
        assert_eq!(slices().len(), 1);
        assert!(store.get(DEVICECLASSES, "", DEFAULT_DRIVER).is_ok());
        let n1 = store.create(NODES, "", node("n1")).unwrap_or_else(|e| panic!("{e}"));
        publish(&store, &cfg, &n1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(slices().len(), 2);
        // A slice made by someone else is left alone.
        let mut other = slice_json("n0", n0.uid(), "other.example.com", &[]);
        other["metadata"]["labels"] = json!({});
        store.create(RESOURCESLICES, "", other).unwrap_or_else(|e| panic!("{e}"));
        let _ = store.delete(NODES, "", "n0", &DeleteOpts::default());
        withdraw(&store, &n0);
        let left: Vec<String> = slices().iter().map(|o| format!("{}/{}", s(&o.value, "/spec/nodeName"), s(&o.value, "/spec/driver"))).collect();
        assert_eq!(left, ["n0/other.example.com", "n1/gpu.example.com"]);
        // n1 recreated under the same name: its old slice goes, a new one comes.
        let _ = store.delete(NODES, "", "n1", &DeleteOpts::default());
        let n1b = store.create(NODES, "", node("n1")).unwrap_or_else(|e| panic!("{e}"));
        reconcile(&store, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let mine = slices().into_iter().filter(|o| s(&o.value, "/spec/driver") == DEFAULT_DRIVER).collect::<Vec<_>>();
        assert_eq!(mine.len(), 1);
        assert_eq!(owner_node_uid(&mine[0].value), n1b.uid());
    }
}
