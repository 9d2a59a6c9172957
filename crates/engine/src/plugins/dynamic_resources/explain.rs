//! What `explain` and `simulate` show of DynamicResources: for a node the
//! plugin rejected, which request cannot be met there and why ("request
//! gpu: 2 devices of class gpu on this node, both allocated to
//! default/train-3-gpu-x7k2p"); for the selected node, the devices the
//! pod's claims would get; for a placed pod, the devices Reserve assumed.

use std::collections::{BTreeSet, HashMap};

use berth_dra::allocator::DEFAULT_MAX_STEPS;
use berth_dra::{AllocateInput, DeviceId, NodeRef, RequestDiagnosis};
use berth_model::NodeInfo;

use super::binding::reserved;
use super::filtering::allocation;
use super::State;
use crate::cache::Snapshot;
use crate::framework::{CycleState, DeviceChoice};


/// The devices the pod's unallocated claims get on `node`, as Filter found
/// them (empty when the pod has none or the node was not feasible).
pub fn node_allocations(state: &CycleState, node: &str) -> Vec<DeviceChoice> {
    let Some(s) = state.get::<State>() else { return vec![] };
    let Some(a) = allocation(state, node) else { return vec![] };
    let keys = s.claims.iter().filter(|c| c.allocated.is_none()).map(|c| c.key.clone());
    let mut out = Vec::new();
    for (key, ca) in keys.zip(&a.claims) {
        out.extend(ca.results.iter().map(|r| DeviceChoice { claim: key.clone(), request: r.request.clone(), device: format!("{}/{}/{}", r.driver, r.pool, r.device) }));
    }
    if let Some((ca, view)) = &a.extended {
        let key = view.key();
        out.extend(ca.results.iter().map(|r| DeviceChoice { claim: key.clone(), request: r.request.clone(), device: format!("{}/{}/{}", r.driver, r.pool, r.device) }));
    }
    out
}

/// The devices Reserve assumed for the pod (after the framework's assume step).
pub fn reserved_allocations(state: &CycleState) -> Vec<DeviceChoice> {
    let Some(d) = reserved(state) else { return vec![] };
    let mut out = Vec::new();
    for c in &d.claims {
        if let Some((results, _)) = &c.allocation {
            out.extend(results.iter().map(|r| DeviceChoice { claim: c.key.clone(), request: r.request.clone(), device: format!("{}/{}/{}", r.driver, r.pool, r.device) }));
        }
    }
    if let Some((results, _, _)) = &d.extended {
        let key = format!("{}/{}-extended-resources", d.namespace, d.pod_name);
        out.extend(results.iter().map(|r| DeviceChoice { claim: key.clone(), request: r.request.clone(), device: format!("{}/{}/{}", r.driver, r.pool, r.device) }));
    }
    out
}

/// Why `node` cannot serve the pod's unallocated claims: one line per
/// request that the node's free devices cannot meet (or one line saying
/// that each request alone could be met, when only their combination
/// fails). Empty when the plugin has nothing to allocate.
pub fn node_reasons(state: &CycleState, snap: &Snapshot, node: &NodeInfo) -> Vec<String> {
    let Some(s) = state.get::<State>() else { return vec![] };
    let Some(prepared) = &s.prepared else { return vec![] };
    let input = AllocateInput { node: NodeRef { name: node.name(), labels: &node.node.labels }, inventory: &s.inventory, in_use: &s.in_use, max_steps: DEFAULT_MAX_STEPS };
    let diags = match prepared.diagnose(input) {
        Ok(d) => d,
        Err(e) => return vec![e.to_string()],
    };
    let owners = owners(snap);
    let claims: BTreeSet<&str> = diags.iter().map(|d| d.claim.as_str()).collect();
    let mut out: Vec<String> = diags.iter().filter_map(|d| reason(d, claims.len() > 1, &owners, s)).collect();
    if out.is_empty() && !diags.is_empty() {
        out.push("each request alone has enough free devices on this node, but not all requests together (constraints, shared counters or capacity)".into());
    }
    out
}

/// Which claims hold each allocated device (`driver/pool/device`).
fn owners(snap: &Snapshot) -> HashMap<String, BTreeSet<String>> {
    let mut m: HashMap<String, BTreeSet<String>> = HashMap::new();
    for c in snap.devices.claims() {
        let Some(results) = c.allocation.as_ref().and_then(|a| a.devices.as_ref()).and_then(|d| d.results.as_ref()) else { continue };
        for r in results {
            m.entry(format!("{}/{}/{}", r.driver, r.pool, r.device)).or_default().insert(c.key());
        }
    }
    m
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
}

fn reason(d: &RequestDiagnosis, name_claim: bool, owners: &HashMap<String, BTreeSet<String>>, s: &State) -> Option<String> {
    let free = d.matching.len() - d.in_use.len() - d.tainted.len();
    if d.wanted.is_some_and(|w| free >= w) || (d.wanted.is_none() && d.in_use.is_empty() && d.tainted.is_empty() && !d.matching.is_empty()) {
        return None;
    }
    let who = if name_claim { format!("claim {}, request {}", d.claim, d.request) } else { format!("request {}", d.request) };
    let m = d.matching.len();
    if m == 0 {
        return Some(format!("{who}: no device of class {} on this node matches its selectors", d.class));
    }
    let id = |x: &DeviceId| s.inventory.device_id_string(*x);
    let mut held: BTreeSet<String> = BTreeSet::new();
    for x in &d.in_use {
        match owners.get(&id(x)) {
            Some(o) => held.extend(o.iter().cloned()),
            None => {
                held.insert("a pod's extended resources".into());
            }
        }
    }
    let held = held.into_iter().collect::<Vec<_>>().join(", ");
    let u = d.in_use.len();
    let mut line = format!("{who}: {} of class {} on this node", plural(m, "device"), d.class);
    if u > 0 {
        let how = match (u == m, m) {
            (true, 1) => "allocated".to_string(),
            (true, 2) => "both allocated".to_string(),
            (true, _) => "all allocated".to_string(),
            (false, _) => format!("{u} allocated"),
        };
        line.push_str(&format!(", {how} to {held}"));
    }
    if !d.tainted.is_empty() {
        line.push_str(&format!(", {} with a taint the request does not tolerate", d.tainted.len()));
    }
    match d.wanted {
        Some(w) => line.push_str(&format!("; {w} wanted")),
        None => line.push_str("; all wanted"),
    }
    Some(line)
}
