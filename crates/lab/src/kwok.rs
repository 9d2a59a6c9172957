//! Nodes on an API server whose nodes nobody runs: KWOK's fake nodes. KWOK
//! (the community's tool for this, started by `tools/kube/up`) takes over
//! every node annotated `kwok.x-k8s.io/node: fake`: it reports the node
//! Ready, starts the pods bound to it and finishes their deletion. berth's
//! local cluster serves such nodes with its own kubelets and ignores the
//! annotation, so the same nodes work on both.
//!
//! Devices for dynamic resource allocation are published as the local
//! cluster's simulated driver publishes them (one DeviceClass named after
//! the driver, one node-local ResourceSlice per node), so a DRA workload
//! finds the same devices on a real control plane.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use berth_cluster::dra_driver::{self, DevicesConfig};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

/// The annotation KWOK selects the nodes it manages by, and its value.
pub const ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Why nodes could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The nodes did not become schedulable in time.
    #[error("{ready} of {want} nodes schedulable after {secs} s: is KWOK running (tools/kube/up starts it)?")]
    NotReady {
        /// Nodes ready.
        ready: usize,
        /// Nodes created.
        want: usize,
        /// How long it waited.
        secs: u64,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// A node to create.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Its name (also its `kubernetes.io/hostname`).
    pub name: String,
    /// Its `topology.kubernetes.io/zone`.
    pub zone: String,
    /// Allocatable CPU (a quantity).
    pub cpu: String,
    /// Allocatable memory (a quantity).
    pub memory: String,
    /// Pod slots.
    pub pods: u32,
    /// Labels beside the zone, hostname, os, arch and `type: kwok`.
    pub labels: BTreeMap<String, String>,
    /// Taints: (key, value, effect).
    pub taints: Vec<(String, String, String)>,
    /// Extended resources (name, quantity) beside cpu, memory and pods.
    pub extended: BTreeMap<String, String>,
    /// Created Ready, for a control plane with no KWOK (`tools/kube/up
    /// --static-nodes`): nothing initializes or heartbeats the node, as
    /// scheduler_perf's nodes. (KWOK leaves a node created Ready alone, so
    /// this is for static nodes only.)
    pub ready_at_create: bool,
}

impl NodeSpec {
    /// `name` in `zone` with `cpu` cores, 64 GiB and 110 pod slots.
    pub fn new(name: &str, zone: &str, cpu: &str) -> NodeSpec {
        NodeSpec { name: name.into(), zone: zone.into(), cpu: cpu.into(), memory: "64Gi".into(), pods: 110, labels: BTreeMap::new(), taints: Vec::new(), extended: BTreeMap::new(), ready_at_create: false }
    }

    /// With a label.
    pub fn label(mut self, k: &str, v: &str) -> NodeSpec {
        self.labels.insert(k.into(), v.into());
        self
    }

    /// With a taint.
    pub fn taint(mut self, k: &str, v: &str, effect: &str) -> NodeSpec {
        self.taints.push((k.into(), v.into(), effect.into()));
        self
    }

    /// The Node object, status included (kube-apiserver keeps a node's
    /// status on create, so its allocatable holds from the start).
    pub fn object(&self) -> Value {
        let mut labels = self.labels.clone();
        labels.insert("topology.kubernetes.io/zone".into(), self.zone.clone());
        labels.insert("kubernetes.io/hostname".into(), self.name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert("type".into(), "kwok".into());
        let taints: Vec<Value> = self.taints.iter().map(|(k, v, e)| json!({"key": k, "value": v, "effect": e})).collect();
        let mut resources = json!({"cpu": self.cpu, "memory": self.memory, "pods": self.pods.to_string()});
        for (k, v) in &self.extended {
            resources[k] = json!(v);
        }
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": {ANNOTATION.0: ANNOTATION.1, "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": taints},
            "status": {"allocatable": resources, "capacity": resources}
        });
        if self.ready_at_create {
            node["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "StaticNode", "message": "created Ready; no kubelet"}]);
        }
        node
    }
}

/// `n` nodes named `<prefix>-<i>`, round robin over zones `zone-a`,
/// `zone-b`, `zone-c`, each with `cpu` cores, `memory` and `pods` slots.
pub fn spread_nodes(prefix: &str, n: usize, cpu: &str, memory: &str, pods: u32) -> Vec<NodeSpec> {
    (0..n)
        .map(|i| NodeSpec { memory: memory.into(), pods, ..NodeSpec::new(&format!("{prefix}-{i}"), ["zone-a", "zone-b", "zone-c"][i % 3], cpu) })
        .collect()
}

/// Creates the nodes (replacing any of the same name an interrupted run
/// left), `conc` at a time; returns each node's name and uid.
pub async fn create_nodes(client: &kube::Client, specs: &[NodeSpec], conc: usize) -> Result<Vec<(String, String)>, Error> {
    use futures::StreamExt;
    let nodes: Api<Node> = Api::all(client.clone());
    let results: Vec<Result<(String, String), Error>> = futures::stream::iter(specs)
        .map(|s| {
            let nodes = nodes.clone();
            async move {
                if nodes.get_opt(&s.name).await.map_err(api(format!("reading node {}", s.name)))?.is_some() {
                    delete_and_wait(&nodes, &s.name).await?;
                }
                let obj: Node = serde_json::from_value(s.object()).map_err(|e| api(format!("node {}", s.name))(kube::Error::SerdeError(e)))?;
                let made = nodes.create(&PostParams::default(), &obj).await.map_err(api(format!("creating node {}", s.name)))?;
                Ok((s.name.clone(), made.metadata.uid.unwrap_or_default()))
            }
        })
        .buffer_unordered(conc.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

async fn delete_and_wait(nodes: &Api<Node>, name: &str) -> Result<(), Error> {
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(api(format!("deleting node {name}"))(e)),
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes.get_opt(name).await.map_err(api(format!("reading node {name}")))?.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits until every named node is Ready and carries none of the taints the
/// node lifecycle controller puts on a node that is not (`not-ready`,
/// `unreachable`). On the local cluster, whose nodes report no conditions,
/// pass `need_ready` false: the taints alone are checked.
pub async fn wait_schedulable(client: &kube::Client, names: &[String], need_ready: bool, secs: u64) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let want: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let all = nodes.list(&ListParams::default()).await.map_err(api("listing nodes"))?.items;
        let ready = all.iter().filter(|n| n.metadata.name.as_deref().is_some_and(|x| want.contains(x)) && schedulable(n, need_ready)).count();
        if ready == want.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NotReady { ready, want: want.len(), secs });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn schedulable(n: &Node, need_ready: bool) -> bool {
    let ready = n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| matches!(t.key.as_str(), "node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable" | "node.kubernetes.io/network-unavailable")));
    (ready || !need_ready) && !tainted
}

/// Deletes the named nodes (their pods are then the pod garbage
/// collector's); errors are ignored, as in a cleanup.
pub async fn delete_nodes(client: &kube::Client, names: &[String]) {
    let nodes: Api<Node> = Api::all(client.clone());
    for n in names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
}

/// Publishes the simulated driver's devices `cfg` gives each node (name,
/// uid), as the local cluster's simulated driver does
/// (`DevicesConfig::per_node(n)`: its `--devices-per-node n`): the driver's
/// DeviceClass (kept when it exists) and one ResourceSlice per node, owned
/// by the node so that deleting the node deletes its slice.
pub async fn publish_devices(client: &kube::Client, nodes: &[(String, String)], cfg: &DevicesConfig) -> Result<(), Error> {
    use futures::StreamExt;
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
    let driver = dra_driver::DEFAULT_DRIVER;
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let class: DeviceClass = serde_json::from_value(dra_driver::device_class_json(driver)).map_err(|e| api("the DeviceClass")(kube::Error::SerdeError(e)))?;
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(api(format!("creating DeviceClass {driver}"))(e)),
    }
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    // A node without devices gets no slice.
    let bodies: Vec<(&String, Value)> = nodes
        .iter()
        .filter_map(|(name, uid)| {
            let devices = cfg.devices_of(name);
            let of_driver: Vec<&dra_driver::Device> = devices.get(driver).map(|d| d.to_vec()).unwrap_or_default();
            (!of_driver.is_empty()).then(|| (name, dra_driver::slice_json(name, uid, driver, &of_driver)))
        })
        .collect();
    let results: Vec<Result<(), Error>> = futures::stream::iter(bodies)
        .map(|(name, body)| {
            let slices = slices.clone();
            async move {
                let slice: ResourceSlice = serde_json::from_value(body).map_err(|e| api(format!("the slice of {name}"))(kube::Error::SerdeError(e)))?;
                slices.create(&PostParams::default(), &slice).await.map_err(api(format!("creating the ResourceSlice of {name}")))?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_kwoks_with_its_zone_taints_and_allocatable() {
        let n = NodeSpec::new("n-1", "zone-b", "4").label("pool", "batch").taint("dedicated", "batch", "NoSchedule");
        let v = n.object();
        assert_eq!(v["metadata"]["annotations"][ANNOTATION.0], ANNOTATION.1);
        assert_eq!(v["metadata"]["labels"]["topology.kubernetes.io/zone"], "zone-b");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "n-1");
        assert_eq!(v["metadata"]["labels"]["pool"], "batch");
        assert_eq!(v["spec"]["taints"][0]["effect"], "NoSchedule");
        assert_eq!(v["status"]["allocatable"]["cpu"], "4");
        assert_eq!(v["status"]["allocatable"]["pods"], "110");
        assert!(serde_json::from_value::<Node>(v).is_ok());
    }

    /// A static node (no KWOK to initialize it) is Ready from its create;
    /// a KWOK node is not (KWOK's node-initialize stage would skip a node
    /// created Ready, and nothing would then heartbeat it).
    #[test]
    fn only_a_static_node_is_created_ready() {
        let kwok = NodeSpec::new("n-1", "zone-a", "4");
        assert!(kwok.object()["status"]["conditions"].is_null());
        let v = NodeSpec { ready_at_create: true, ..kwok }.object();
        assert_eq!((v["status"]["conditions"][0]["type"].as_str(), v["status"]["conditions"][0]["status"].as_str()), (Some("Ready"), Some("True")));
        assert!(serde_json::from_value::<Node>(v).is_ok());
    }

    #[test]
    fn spread_nodes_go_round_robin_over_three_zones() {
        let zones: Vec<String> = spread_nodes("b", 4, "32", "256Gi", 110).into_iter().map(|n| n.zone).collect();
        assert_eq!(zones, ["zone-a", "zone-b", "zone-c", "zone-a"]);
    }
}
