//! Pods: bindings, evictions (PodDisruptionBudgets), graceful deletion,
//! the kubelets' and PodGC's writes, the PDB status kept current, and the
//! recent whole values that spare a binding a parse.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::object::{now_rfc3339, set_condition, set_path};
use crate::resources::{self as res, PDBS, PODS, RESOURCES};
use crate::selector::LabelSelector;

use super::delete::DeleteOpts;
use super::obj::Obj;
use super::watch::EventType;
use super::{Error, Inner, KubeletMsg, Result, Store, get_str, has_finalizers, is_deleting, meta_mut, meta_str, not_found};

/// The whole values of the last [`RECENT_PODS`] pod versions written, by
/// resourceVersion. A pod is stored lean, so a write to it parses its
/// bytes back; the write that most often follows another is a binding
/// soon after the create, and it takes the value from here instead. An
/// entry serves one write (it is taken, so that write owns the value),
/// and the oldest are forgotten first: at most 512 values (a few
/// megabytes), about the pods between create and bind at the p99 of
/// `bench --e2e` at 5,000 pods/s.
#[derive(Default)]
pub(super) struct RecentPods {
    by_rv: HashMap<u64, Arc<Obj>>,
    order: VecDeque<u64>,
}

/// How many pod versions [`RecentPods`] keeps whole.
pub(super) const RECENT_PODS: usize = 512;

impl RecentPods {
    pub(super) fn keep(&mut self, obj: &Arc<Obj>) {
        if obj.is_lean() {
            return;
        }
        self.by_rv.insert(obj.rv, obj.clone());
        self.order.push_back(obj.rv);
        while self.order.len() > RECENT_PODS {
            if let Some(rv) = self.order.pop_front() {
                self.by_rv.remove(&rv);
            }
        }
    }

    /// The whole value of `stored` (the current version): taken from here
    /// when it is, else read back from its bytes.
    pub(super) fn take_full(&mut self, stored: &Arc<Obj>) -> Arc<Obj> {
        match self.by_rv.remove(&stored.rv) {
            Some(o) => o,
            None => stored.full(),
        }
    }
}

/// What of a pod can move a disruption budget: its labels, health and phase.
pub(super) fn pdb_facts(p: &Value) -> (Option<&Value>, bool, &str) {
    (p.at("/metadata/labels"), res::pod_healthy(p), get_str(p, "/status/phase"))
}

impl Store {
    /// Hooks after a pod write: kubelet notification and PDB status.
    pub(super) fn after_pod_write(&self, inner: &mut Inner, old: Option<&Value>, new: &Value) {
        let was_bound = old.is_some_and(|o| !get_str(o, "/spec/nodeName").is_empty());
        let bound = !get_str(new, "/spec/nodeName").is_empty();
        if bound && !was_bound {
            self.notify(KubeletMsg::Bound {
                ns: meta_str(new, "namespace").to_string(),
                name: meta_str(new, "name").to_string(),
                uid: meta_str(new, "uid").to_string(),
            });
        }
        let ns = meta_str(new, "namespace").to_string();
        // Only changes that can move a disruption budget trigger a resync.
        if inner.pdbs_per_ns.contains_key(&ns) && old.is_none_or(|o| pdb_facts(o) != pdb_facts(new)) {
            self.sync_pdbs(inner, &ns, None);
        }
    }

    /// Recompute the status of the PDBs of a namespace (or just one).
    pub(super) fn sync_pdbs(&self, inner: &mut Inner, ns: &str, only: Option<&str>) {
        let now = now_rfc3339();
        let pdbs: Vec<Arc<Obj>> = inner.kinds[PDBS]
            .range_ns(Some(ns))
            .filter(|(k, _)| only.is_none_or(|n| k.1 == n))
            .map(|(_, o)| o.clone())
            .collect();
        if pdbs.is_empty() {
            return;
        }
        let pods: Vec<Arc<Obj>> = inner.kinds[PODS].range_ns(Some(ns)).map(|(_, o)| o.full()).collect();
        let pod_vals: Vec<&Value> = pods.iter().map(|p| &p.value).collect();
        for pdb in pdbs {
            let status = res::pdb_status(&pdb.value, &pod_vals, &now);
            if pdb.value.get("status") != Some(&status) {
                let mut v = pdb.value.clone();
                set_path(&mut v, &["status"], status);
                let _ = self.commit(inner, PDBS, EventType::Modified, v, Some(pdb));
            }
        }
    }

    /// Delete a pod as the API server does (`CheckGracefulDelete`): the
    /// grace period is the request's, else the pod's
    /// terminationGracePeriodSeconds; 0 for a pod not bound or already
    /// terminal; a negative one becomes 1. A positive grace period marks
    /// the pod (deletionTimestamp) and leaves its removal to the kubelet;
    /// 0 removes it at once unless finalizers hold it. A second delete may
    /// only shorten the grace period.
    pub(super) fn delete_pod_locked(&self, inner: &mut Inner, old: Arc<Obj>, grace: Option<i64>) -> Result<Arc<Obj>> {
        let v = &old.value;
        let mut period = grace.or_else(|| v.at("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64)).unwrap_or(0);
        if get_str(v, "/spec/nodeName").is_empty() || matches!(get_str(v, "/status/phase"), "Succeeded" | "Failed") {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
        let now = chrono::Utc::now();
        let mut deadline_ts = now + chrono::Duration::seconds(period);
        if is_deleting(v) {
            let existing = v.at("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
            if period >= existing {
                return Ok(old);
            }
            // Shorten: the new deadline counts from the first request.
            if let Some(ts) = v
                .at("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            {
                deadline_ts = ts.with_timezone(&chrono::Utc) - chrono::Duration::seconds(existing) + chrono::Duration::seconds(period);
            }
        }
        if period == 0 && !has_finalizers(PODS, v) {
            return self.remove_locked(inner, PODS, &old);
        }
        let mut nv = old.value.clone();
        let meta = meta_mut(&mut nv)?;
        meta.insert("deletionTimestamp".into(), json!(deadline_ts.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(period));
        let obj = self.commit(inner, PODS, EventType::Modified, nv, Some(old.clone()))?;
        if period > 0 {
            let left = (deadline_ts - now).num_milliseconds().max(0).unsigned_abs();
            self.notify(KubeletMsg::Terminate {
                ns: obj.namespace().to_string(),
                name: obj.name().to_string(),
                uid: obj.uid().to_string(),
                deadline: Instant::now() + Duration::from_millis(left),
            });
        }
        self.after_pod_write(inner, Some(&old.value), &obj.value);
        Ok(obj)
    }

    /// POST pods/binding: assign a pod to a node.
    pub fn bind(&self, ns: &str, name: &str, body: Value) -> Result<()> {
        let mut b = body;
        res::check_type(&mut b, "v1", "Binding").map_err(|e| Error::BadRequest(e.to_string()))?;
        let b: k8s_openapi::api::core::v1::Binding =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid Binding: {e}")))?;
        let target = b.target.name.clone().unwrap_or_default();
        if target.is_empty() {
            return Err(Error::Invalid { kind: "Binding".into(), name: name.into(), message: "target.name: Required value".into() });
        }
        if let Some(bn) = b.metadata.name.as_deref()
            && !bn.is_empty() && bn != name {
                return Err(Error::BadRequest("the name of the binding does not match the pod name on the URL".into()));
            }
        if let Some(bns) = b.metadata.namespace.as_deref()
            && !bns.is_empty() && bns != ns {
                return Err(Error::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
        let mut inner = self.lock();
        let key = (ns.to_string(), name.to_string());
        let stored = inner.kinds[PODS].objects.get(&key).cloned().ok_or_else(|| not_found(&RESOURCES[PODS], name))?;
        let old = inner.recent_pods.take_full(&stored);
        let res_name = "pods/binding";
        let bconflict = |m: String| Error::Conflict { resource: res_name.into(), name: name.to_string(), message: m };
        if let Some(uid) = b.metadata.uid.as_deref()
            && uid != old.uid() {
                return Err(bconflict(format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", old.uid())));
            }
        if old.value.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
            return Err(bconflict(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let current = get_str(&old.value, "/spec/nodeName");
        if !current.is_empty() {
            return Err(bconflict(format!("pod {name} is already assigned to node \"{current}\"")));
        }
        // The old value, read back from the stored bytes, is this write's
        // own copy: it is changed in place rather than copied. What the
        // hooks compare of the old version is taken first.
        let pdbs = inner.pdbs_per_ns.contains_key(ns);
        let facts = |p: &Value| {
            let (labels, healthy, phase) = pdb_facts(p);
            (labels.cloned(), healthy, phase.to_string())
        };
        let before = pdbs.then(|| facts(&old.value));
        let mut v = match Arc::try_unwrap(old) {
            Ok(o) => o.value,
            Err(shared) => shared.value.clone(),
        };
        set_path(&mut v, &["spec", "nodeName"], json!(target));
        if let Some(ann) = &b.metadata.annotations {
            for (k, val) in ann {
                set_path(&mut v, &["metadata", "annotations", k.as_str()], json!(val));
            }
        }
        set_condition(&mut v, json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
        let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(stored))?;
        // As `after_pod_write` with the old version: it was not bound.
        self.notify(KubeletMsg::Bound { ns: ns.to_string(), name: name.to_string(), uid: obj.uid().to_string() });
        if before.is_some_and(|b| b != facts(&obj.value)) {
            self.sync_pdbs(&mut inner, ns, None);
        }
        Ok(())
    }

    /// POST pods/eviction: check PDBs, then delete gracefully.
    pub fn evict(&self, ns: &str, name: &str, body: Value) -> Result<()> {
        let mut b = body;
        res::check_type(&mut b, "policy/v1", "Eviction").map_err(|e| Error::BadRequest(e.to_string()))?;
        let ev: k8s_openapi::api::policy::v1::Eviction =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid Eviction: {e}")))?;
        if let Some(en) = ev.metadata.name.as_deref()
            && !en.is_empty() && en != name {
                return Err(Error::BadRequest("name in URL does not match name in Eviction object".into()));
            }
        let mut opts = DeleteOpts::default();
        if let Some(d) = &ev.delete_options {
            opts.grace = d.grace_period_seconds;
            if let Some(p) = &d.preconditions {
                opts.uid = p.uid.clone();
                opts.rv = p.resource_version.clone();
            }
        }
        {
            let mut inner = self.lock();
            let pod = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full).ok_or_else(|| not_found(&RESOURCES[PODS], name))?;
            let terminal = matches!(get_str(&pod.value, "/status/phase"), "Succeeded" | "Failed");
            let deleting = pod.value.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null());
            if !terminal && !deleting {
                self.sync_pdbs(&mut inner, ns, None);
                let labels = pod.value.at("/metadata/labels");
                let matching: Vec<Arc<Obj>> = inner.kinds[PDBS]
                    .range_ns(Some(ns))
                    .map(|(_, o)| o.clone())
                    .filter(|pdb| {
                        pdb.value
                            .at("/spec/selector")
                            .map(LabelSelector::from_structured)
                            .is_some_and(|s| s.is_ok_and(|s| s.matches_labels(labels)))
                    })
                    .collect();
                if matching.len() > 1 {
                    return Err(Error::Internal(
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                    ));
                }
                if let Some(pdb) = matching.first() {
                    let st = |f: &str| pdb.value.at(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
                    let allowed = if res::pod_healthy(&pod.value) {
                        st("disruptionsAllowed") > 0
                    } else {
                        st("currentHealthy") >= st("desiredHealthy")
                    };
                    if !allowed {
                        return Err(Error::TooManyRequests {
                            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                            causes: Some(json!([{
                                "reason": "DisruptionBudget",
                                "message": format!("The disruption budget {} needs {} healthy pods and has {} currently",
                                    pdb.name(), st("desiredHealthy"), st("currentHealthy")),
                            }])),
                        });
                    }
                }
            }
        }
        self.delete(PODS, ns, name, &opts).map(|_| ())
    }

    /// Modify a pod under the lock if it still has `uid`; `f` returns the
    /// new value or None to leave it. Used by the kubelets.
    pub fn modify_pod(&self, ns: &str, name: &str, uid: &str, f: impl FnOnce(&Value) -> Option<Value>) -> Result<Option<Arc<Obj>>> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(None);
        };
        if old.uid() != uid {
            return Ok(None);
        }
        let Some(new) = f(&old.value) else { return Ok(None) };
        let obj = self.commit(&mut inner, PODS, EventType::Modified, new, Some(old.clone()))?;
        self.after_pod_write(&mut inner, Some(&old.value), &obj.value);
        Ok(Some(obj))
    }

    /// The kubelet is done with a terminating pod (`uid`): it asks for
    /// its removal with no grace period left. Finalizers hold it, in a
    /// terminal phase (Succeeded: its containers stopped), until they are
    /// removed. Returns whether it is gone.
    pub fn finish_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        if old.uid() != uid {
            return Ok(false);
        }
        if !has_finalizers(PODS, &old.value) {
            self.remove_locked(&mut inner, PODS, &old)?;
            return Ok(true);
        }
        let mut v = old.value.clone();
        set_path(&mut v, &["metadata", "deletionGracePeriodSeconds"], json!(0));
        if !matches!(get_str(&v, "/status/phase"), "Succeeded" | "Failed") {
            set_path(&mut v, &["status", "phase"], json!("Succeeded"));
        }
        let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(old.clone()))?;
        self.after_pod_write(&mut inner, Some(&old.value), &obj.value);
        Ok(false)
    }

    /// PodGC's orphan collection for pod `uid`, bound to a node that no
    /// longer exists: a pod not yet terminal goes Failed with the
    /// DisruptionTarget condition (DeletionByPodGC), then it is deleted
    /// with no grace period. Returns whether it was collected.
    pub fn gc_orphan_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(mut pod) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        let node = get_str(&pod.value, "/spec/nodeName").to_string();
        if pod.uid() != uid || node.is_empty() || inner.kinds[res::NODES].objects.contains_key(&(String::new(), node)) {
            return Ok(false);
        }
        if !matches!(get_str(&pod.value, "/status/phase"), "Succeeded" | "Failed") {
            let mut v = pod.value.clone();
            set_path(&mut v, &["status", "phase"], json!("Failed"));
            set_condition(&mut v, json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
            let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(pod.clone()))?;
            self.after_pod_write(&mut inner, Some(&pod.value), &obj.value);
            pod = obj;
        }
        self.delete_pod_locked(&mut inner, pod, Some(0))?;
        Ok(true)
    }

    /// Remove a terminating pod now if it still has `uid`.
    pub fn remove_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        if old.uid() != uid {
            return Ok(false);
        }
        self.commit(&mut inner, PODS, EventType::Deleted, old.value.clone(), None)?;
        if inner.pdbs_per_ns.contains_key(ns) {
            self.sync_pdbs(&mut inner, ns, None);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{self as res, PODS, RESOURCES};
    use crate::selector::Filter;
    use crate::store::{StoreConfig, WriteCtx};

    /// Pods and events are kept lean while current: every read gives the
    /// whole object back, selectors and watchers see it as it is, and the
    /// controllers still find a pod's controller.
    #[test]
    fn pods_and_events_are_kept_lean_and_read_whole() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let ctx = WriteCtx::new("tester", "v1");
        let created = store.create_with(PODS, "ns", pod, &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert!(!created.is_lean(), "the writer gets the whole object");
        let rx_from = created.rv;
        let mut rx = store.subscribe(PODS);
        {
            let inner = store.lock();
            let stored = inner.kinds[PODS].objects.get(&("ns".to_string(), "p".to_string())).cloned();
            assert!(stored.is_some_and(|o| o.is_lean() && o.value.is_null() && o.bytes == created.bytes));
        }
        let got = store.get(PODS, "ns", "p").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.value, created.value);
        assert!(got.value.at("/metadata/managedFields").is_some_and(Value::is_string));
        store.bind("ns", "p", json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let bound = store.get(PODS, "ns", "p").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bound.value["spec"]["nodeName"], "n1");
        assert_eq!(bound.value["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(bound.value["metadata"]["managedFields"], created.value["metadata"]["managedFields"]);
        // The live event is lean, and selectors read it as the bound pod.
        let ev = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        assert!(ev.obj.is_lean() && ev.rv > rx_from);
        assert_eq!(ev.obj.controller_uid(), Some("u-1"));
        assert_eq!(created.controller_uid(), Some("u-1"));
        let filter = |labels: &str, fields: &str| Filter {
            namespace: Some("ns".into()),
            labels: LabelSelector::parse(labels).unwrap_or_else(|e| panic!("{e}")),
            fields: crate::selector::FieldSelector::parse(fields, RESOURCES[PODS].fields).unwrap_or_else(|e| panic!("{e}")),
        };
        assert!(ev.obj.matches(&filter("app=a", "spec.nodeName=n1")));
        assert!(!ev.obj.matches(&filter("app=a", "spec.nodeName=n2")));
        assert!(ev.old.as_ref().is_some_and(|o| o.matches(&filter("", "spec.nodeName="))));
        let listed = store.list(PODS, &filter("app=a", "spec.nodeName=n1"), None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(listed.items.len(), 1);
        assert_eq!(listed.items[0].value, bound.value);
        assert!(store.list(PODS, &filter("app=b", ""), None, None).is_ok_and(|l| l.items.is_empty()));
        // For a reader of the bytes, the items as stored.
        let raw = store.list_bytes(PODS, &filter("app=a", ""), None, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(raw.items.len() == 1 && raw.items[0].is_lean() && raw.items[0].bytes == bound.bytes);
        // An events.k8s.io Event: lean, whole when read, and selectors read
        // the fields of both views (`source` falls back to the reporting
        // controller).
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "p.1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u-p"}, "reason": "Scheduled", "type": "Normal", "action": "Binding",
            "reportingController": "berth", "reportingInstance": "berth-1", "note": "bound"});
        let created = store.create(res::EVENTS_V1, "ns", ev).unwrap_or_else(|e| panic!("{e}"));
        {
            let inner = store.lock();
            let stored = inner.kinds[res::EVENTS_V1].objects.get(&("ns".to_string(), "p.1".to_string())).cloned();
            assert!(stored.is_some_and(|o| o.is_lean() && o.bytes == created.bytes));
            assert!(inner.kinds[res::EVENTS].objects.is_empty(), "core/v1 Events are a view, not a copy");
        }
        let got = store.get(res::EVENTS_V1, "ns", "p.1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.value["regarding"]["name"], "p");
        let events = |fields: &str| {
            let fields = crate::selector::FieldSelector::parse(fields, crate::resources::EVENTS_SELECTABLE).unwrap_or_else(|e| panic!("{e}"));
            store.list(res::EVENTS_V1, &Filter { namespace: None, labels: LabelSelector::default(), fields }, None, None).map(|l| l.items.len()).unwrap_or(0)
        };
        assert_eq!(events("reason=Scheduled,regarding.uid=u-p,source=berth,reportingController=berth"), 1);
        assert_eq!(events("source=kubelet"), 0);
        assert_eq!(events("regarding.name!=p"), 0);
        // Deleting reads the whole pod (a graceful delete of a bound pod).
        let gone = store.delete(PODS, "ns", "p", &DeleteOpts { grace: Some(0), ..Default::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gone.value["spec"]["nodeName"], "n1");
    }

    /// A binding takes the pod's whole value from the recent ones when it
    /// is there and reads it back from the bytes when it is not: the same
    /// pod either way.
    #[test]
    fn a_bind_from_the_recent_values_writes_what_a_bind_from_the_bytes_writes() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}});
        let binding = |name: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": "n1"}});
        // The first is forgotten by the time it is bound; the last is not.
        let n = RECENT_PODS + 1;
        for i in 0..n {
            store.create(PODS, "ns", pod(&format!("p{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let last = format!("p{}", n - 1);
        assert_eq!(store.lock().recent_pods.by_rv.len(), RECENT_PODS);
        for name in ["p0", last.as_str()] {
            store.bind("ns", name, binding(name)).unwrap_or_else(|e| panic!("{e}"));
        }
        // Taken by the bind that used it; the bound version is recent now.
        let bound = |name: &str| store.get(PODS, "ns", name).unwrap_or_else(|e| panic!("{e}"));
        let (first, second) = (bound("p0"), bound(&last));
        assert_eq!(store.lock().recent_pods.by_rv.get(&second.rv).map(|o| o.value.clone()), Some(second.value.clone()));
        let strip = |o: &Obj| {
            let mut v = o.value.clone();
            for f in ["name", "uid", "resourceVersion", "creationTimestamp"] {
                v["metadata"].as_object_mut().map(|m| m.remove(f));
            }
            v["status"]["conditions"][0].as_object_mut().map(|c| c.remove("lastTransitionTime"));
            v["metadata"]["managedFields"] = Value::Null;
            v
        };
        assert_eq!(strip(&first), strip(&second));
        assert_eq!(second.value["spec"]["nodeName"], "n1");
    }
}
