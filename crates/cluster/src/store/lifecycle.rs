//! Lifecycles: what the store does beyond storing, for the few kinds whose
//! writes have consequences inside the store itself (upstream: the
//! registry strategies' AfterCreate/AfterUpdate/AfterDelete, the pods'
//! graceful deletion, the namespace and CRD finalizers, the garbage
//! collector's owner rules).
//!
//! The store's generic code (create, update, delete, commit) calls the
//! dispatching methods in `store/mod.rs`, which ask [`of`] for the kind's
//! [`Lifecycle`] and call its hooks; it names no kind, and imports point
//! one way: this module calls the store's parts, never the reverse. [`of`] is the one table that does, as `admission::rules` is for
//! admission. A kind without a lifecycle of its own gets [`Plain`]: its
//! objects are stored, finalizers hold them, and nothing else happens.

use std::sync::Arc;

use serde_json::Value;

use crate::jsonptr::Pointer as _;
use crate::resources::{self as res, ResId};

use super::delete::owned_by;
use super::ttl::key_of;
use super::{EventType, Inner, Obj, Result, Store, has_finalizers, is_deleting};

/// A kind's hooks. Every method has the plain behaviour as its default.
pub(super) trait Lifecycle: Sync {
    /// After a create (`old` None) or update committed `new`.
    fn after_write(&self, _store: &Store, _inner: &mut Inner, _old: Option<&Value>, _new: &Value) {}

    /// Delete `old` (preconditions already checked) with the request's
    /// grace period: finalizers hold it, otherwise it goes.
    fn delete(&self, store: &Store, inner: &mut Inner, r: ResId, old: Arc<Obj>, _grace: Option<i64>) -> Result<Arc<Obj>> {
        store.delete_object_locked(inner, r, old)
    }

    /// After `obj` was committed with event `ty` (under the lock, after
    /// the watchers were sent the event).
    fn committed(&self, _inner: &mut Inner, _ty: EventType, _obj: &Arc<Obj>) {}

    /// After `obj` was removed from the store.
    fn removed(&self, _store: &Store, _inner: &mut Inner, _obj: &Obj) {}

    /// Whether something besides `metadata.finalizers` still holds a
    /// deleting object.
    fn held(&self, _v: &Value) -> bool {
        false
    }

    /// Whether an update that leaves a deleting object with no finalizers
    /// and no grace removes it (upstream's `shouldDeleteDuringUpdate`);
    /// `old` is the stored version.
    fn removed_by_update(&self, _old: &Value) -> bool {
        true
    }

    /// The update that removes `name` was a finalizer taken off by hand.
    fn finalized_by_update(&self, _inner: &mut Inner, _name: &str) {}
}

/// The lifecycle of resource `r`.
pub(super) fn of(r: ResId) -> &'static dyn Lifecycle {
    match r {
        res::PODS => &Pods,
        res::PDBS => &Pdbs,
        res::NAMESPACES => &Namespaces,
        res::CRDS => &Crds,
        res::NODES => &Nodes,
        res::EVENTS_V1 => &Events,
        _ => &Plain,
    }
}


/// Stored, held by finalizers, nothing more.
pub(super) struct Plain;
impl Lifecycle for Plain {}

/// Pods: the kubelet hears of bindings, disruption budgets follow their
/// pods, deletion is graceful, and the recent writes are kept whole.
struct Pods;
impl Lifecycle for Pods {
    fn after_write(&self, store: &Store, inner: &mut Inner, old: Option<&Value>, new: &Value) {
        store.after_pod_write(inner, old, new);
    }

    fn delete(&self, store: &Store, inner: &mut Inner, _r: ResId, old: Arc<Obj>, grace: Option<i64>) -> Result<Arc<Obj>> {
        store.delete_pod_locked(inner, old, grace)
    }

    fn committed(&self, inner: &mut Inner, ty: EventType, obj: &Arc<Obj>) {
        if ty != EventType::Deleted {
            inner.recent_pods.keep(obj);
        }
    }

    fn removed(&self, store: &Store, inner: &mut Inner, obj: &Obj) {
        if inner.pdbs_per_ns.contains_key(obj.namespace()) {
            let ns = obj.namespace().to_string();
            store.sync_pdbs(inner, &ns, None);
        }
    }

    fn removed_by_update(&self, old: &Value) -> bool {
        // A pod goes on update only when that update took its last
        // finalizer off; the kubelet's final status does not remove it.
        has_finalizers(res::PODS, old)
    }
}

/// PodDisruptionBudgets: their status is computed from their pods, and
/// the store counts them per namespace so pod writes elsewhere skip it.
struct Pdbs;
impl Lifecycle for Pdbs {
    fn after_write(&self, store: &Store, inner: &mut Inner, _old: Option<&Value>, new: &Value) {
        let ns = super::meta_str(new, "namespace").to_string();
        let name = super::meta_str(new, "name").to_string();
        store.sync_pdbs(inner, &ns, Some(&name));
    }

    fn committed(&self, inner: &mut Inner, _ty: EventType, obj: &Arc<Obj>) {
        let ns = obj.namespace().to_string();
        let count = inner.kinds[res::PDBS].range_ns(Some(&ns)).count();
        if count == 0 {
            inner.pdbs_per_ns.remove(&ns);
        } else {
            inner.pdbs_per_ns.insert(ns, count);
        }
    }
}

/// Namespaces: deletion terminates them (their content goes first), and
/// `spec.finalizers` holds them too.
struct Namespaces;
impl Lifecycle for Namespaces {
    fn delete(&self, store: &Store, inner: &mut Inner, _r: ResId, old: Arc<Obj>, _grace: Option<i64>) -> Result<Arc<Obj>> {
        store.delete_namespace_locked(inner, old)
    }

    fn held(&self, v: &Value) -> bool {
        v.at("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
    }

    fn finalized_by_update(&self, inner: &mut Inner, name: &str) {
        // Finalized by hand: the namespace goes, as upstream, whatever is left in it.
        inner.terminating_ns.remove(name);
    }
}

/// CustomResourceDefinitions: writing one serves what it defines;
/// deleting one removes its objects and stops serving them.
struct Crds;
impl Lifecycle for Crds {
    fn after_write(&self, store: &Store, inner: &mut Inner, _old: Option<&Value>, new: &Value) {
        store.define_crd(inner, new);
    }

    fn delete(&self, store: &Store, inner: &mut Inner, _r: ResId, old: Arc<Obj>, _grace: Option<i64>) -> Result<Arc<Obj>> {
        store.delete_crd_locked(inner, old)
    }
}

/// Nodes: the garbage collector removes what a deleted node owns (its
/// CSINode).
struct Nodes;
impl Lifecycle for Nodes {
    fn delete(&self, store: &Store, inner: &mut Inner, r: ResId, old: Arc<Obj>, _grace: Option<i64>) -> Result<Arc<Obj>> {
        let name = old.name().to_string();
        let obj = store.delete_object_locked(inner, r, old)?;
        if !is_deleting(&obj.value)
            && let Some(csinode) = inner.kinds[res::CSINODES].objects.get(&(String::new(), name)).map(Obj::full)
            && owned_by(&csinode.value, "Node", obj.uid())
        {
            store.delete_object_locked(inner, res::CSINODES, csinode)?;
        }
        Ok(obj)
    }
}

/// Events (their storage, events.k8s.io/v1): each write starts the
/// event's time to live again (`--event-ttl`), a deletion ends it.
struct Events;
impl Lifecycle for Events {
    fn committed(&self, inner: &mut Inner, ty: EventType, obj: &Arc<Obj>) {
        inner.written_event(key_of(obj), ty == EventType::Deleted);
    }
}
