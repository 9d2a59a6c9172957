//! PodGC's orphan collection (upstream `pkg/controller/podgc`): a pod
//! bound to a node that no longer exists is, once the node has stayed
//! missing for the quarantine period, marked Failed with the
//! DisruptionTarget condition (reason DeletionByPodGC) and force-deleted.
//! Node deletions are noticed at once; a periodic scan finds pods bound
//! to nodes that never existed.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::resources::{NODES, PODS};
use super::selector::Filter;
use super::store::{EventType, Store};

/// PodGC settings.
#[derive(Debug, Clone)]
pub struct PodGcConfig {
    /// Run PodGC at all.
    pub enabled: bool,
    /// How long a node must stay missing before its pods are collected
    /// (upstream: 40 s).
    pub quarantine: Duration,
    /// Period of the scan for pods bound to missing nodes (upstream: 20 s).
    pub period: Duration,
}

impl Default for PodGcConfig {
    fn default() -> Self {
        Self { enabled: true, quarantine: Duration::from_secs(40), period: Duration::from_secs(20) }
    }
}

/// Spawn PodGC. It stops when `stop` changes.
pub fn spawn(store: Arc<Store>, cfg: PodGcConfig, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut nodes = store.subscribe(NODES);
        // Missing node name -> when its pods may be collected.
        let mut missing: HashMap<String, Instant> = HashMap::new();
        let mut scan = tokio::time::interval(cfg.period.max(Duration::from_millis(10)));
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = missing.values().min().copied();
            tokio::select! {
                _ = stop.changed() => break,
                _ = scan.tick() => {
                    for node in orphan_nodes(&store) {
                        missing.entry(node).or_insert_with(|| Instant::now() + cfg.quarantine);
                    }
                }
                ev = nodes.recv() => match ev {
                    Ok(ev) if ev.ty == EventType::Deleted => {
                        missing.entry(ev.obj.name().to_string()).or_insert_with(|| Instant::now() + cfg.quarantine);
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if next.is_some() => {
                    let now = Instant::now();
                    let due: Vec<String> = missing.iter().filter(|(_, t)| **t <= now).map(|(n, _)| n.clone()).collect();
                    for node in due {
                        missing.remove(&node);
                        collect(&store, &node);
                    }
                }
            }
        }
    })
}

/// Names of the missing nodes that pods are bound to. The pods are read
/// as stored (lean; see `Obj::field`), not parsed back whole.
fn orphan_nodes(store: &Store) -> Vec<String> {
    let Ok(pods) = store.list_bytes(PODS, &Filter::default(), None, None) else { return Vec::new() };
    let bound: std::collections::HashSet<Cow<'_, str>> = pods.items.iter().map(|p| p.field("spec.nodeName")).filter(|n| !n.is_empty()).collect();
    bound.into_iter().filter(|n| !store.exists(NODES, "", n)).map(Cow::into_owned).collect()
}

/// Collect the pods of `node` if it is still missing.
fn collect(store: &Store, node: &str) {
    if store.exists(NODES, "", node) {
        return;
    }
    let Ok(pods) = store.list_bytes(PODS, &Filter::default(), None, None) else { return };
    for p in pods.items.iter().filter(|p| p.field("spec.nodeName") == node) {
        match store.gc_orphan_pod(p.namespace(), p.name(), p.uid()) {
            Ok(true) => tracing::info!(pod = %format!("{}/{}", p.namespace(), p.name()), node, "PodGC: forced deletion of orphaned pod"),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "PodGC could not delete an orphaned pod"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::NAMESPACES;
    use crate::store::StoreConfig;

    /// The periodic scan finds pods bound to a node that never existed
    /// from the pods as stored, and collecting them deletes only those.
    #[test]
    fn scan_finds_pods_bound_to_missing_nodes() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}});
        store.create(NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "real"}});
        store.create(NODES, "", node).unwrap_or_else(|e| panic!("{e}"));
        let pod = |name: &str, node: Option<&str>| {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            store.create(PODS, "default", p).unwrap_or_else(|e| panic!("{e}"));
        };
        pod("on-real", Some("real"));
        pod("on-ghost", Some("ghost"));
        pod("also-on-ghost", Some("ghost"));
        pod("pending", None);
        assert_eq!(orphan_nodes(&store), ["ghost"]);
        collect(&store, "real");
        assert_eq!(store.count(PODS), 4);
        collect(&store, "ghost");
        let left: Vec<String> = store.list_bytes(PODS, &Filter::default(), None, None).map(|l| l.items.iter().map(|p| p.name().to_string()).collect()).unwrap_or_default();
        assert_eq!(left, ["on-real", "pending"]);
        assert!(orphan_nodes(&store).is_empty());
    }
}
