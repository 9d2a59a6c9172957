//! Deletes: preconditions, finalizers, the namespace lifecycle
//! (Terminating, content removal, the namespace controller's conditions)
//! and a CRD's removal with its objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::object::{now_rfc3339, set_condition, set_path};
use crate::resources::{self as res, RESOURCES, ResId};

use super::obj::Obj;
use super::watch::EventType;
use super::{Inner, Result, Store, conflict, has_finalizers, has_metadata_finalizers, refused, is_deleting, meta_mut, not_found, qualified};

/// Delete options.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// gracePeriodSeconds.
    pub grace: Option<i64>,
    /// preconditions.uid.
    pub uid: Option<String>,
    /// preconditions.resourceVersion.
    pub rv: Option<String>,
}

/// Does the object name `kind`/`uid` among its ownerReferences?
pub(super) fn owned_by(v: &Value, kind: &str, uid: &str) -> bool {
    v.at("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
        refs.iter().any(|o| o.get("kind").and_then(Value::as_str) == Some(kind) && o.get("uid").and_then(Value::as_str) == Some(uid))
    })
}

impl Store {
    /// Delete an object. Bound running pods are deleted gracefully (the
    /// returned object carries deletionTimestamp); others go at once.
    pub fn delete(&self, r: ResId, ns: &str, name: &str, opts: &DeleteOpts) -> Result<Arc<Obj>> {
        let info = self.info(r);
        if let Some(admit) = info.admission.delete {
            admit(name).map_err(|e| refused(&info, name, e))?;
        }
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let old = inner.kinds[r].objects.get(&key).map(Obj::full).ok_or_else(|| not_found(&self.info(r), name))?;
        if let Some(uid) = &opts.uid
            && uid != old.uid() {
                return Err(conflict(&info,
                    name,
                    format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", old.uid()),
                ));
            }
        if let Some(rv) = &opts.rv
            && *rv != old.rv.to_string() {
                return Err(conflict(&info,
                    name,
                    format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", old.rv),
                ));
            }
        self.delete_as_kind(&mut inner, r, old, opts.grace)
    }

    /// Delete any object but a pod or a namespace: finalizers hold it
    /// (deletionTimestamp set, deletionGracePeriodSeconds 0), otherwise it goes.
    pub(super) fn delete_object_locked(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>) -> Result<Arc<Obj>> {
        if has_finalizers(r, &old.value) {
            if is_deleting(&old.value) {
                return Ok(old);
            }
            let mut v = old.value.clone();
            let meta = meta_mut(&mut v)?;
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return self.commit(inner, r, EventType::Modified, v, Some(old));
        }
        self.remove_locked(inner, r, &old)
    }

    /// Remove an object from the store now (with the PDB resync a pod needs).
    pub(super) fn remove_locked(&self, inner: &mut Inner, r: ResId, old: &Arc<Obj>) -> Result<Arc<Obj>> {
        let obj = self.commit(inner, r, EventType::Deleted, old.value.clone(), None)?;
        self.after_remove(inner, r, &obj);
        Ok(obj)
    }

    /// Delete a namespace as the API server and the namespace controller
    /// do: it goes Terminating (creation in it is refused), its pods are
    /// deleted gracefully and everything else at once (finalizers hold
    /// what they hold), and it is removed once empty.
    pub(super) fn delete_namespace_locked(&self, inner: &mut Inner, old: Arc<Obj>) -> Result<Arc<Obj>> {
        if is_deleting(&old.value) {
            return Ok(old);
        }
        let name = old.name().to_string();
        let mut v = old.value.clone();
        let meta = meta_mut(&mut v)?;
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        set_path(&mut v, &["status", "phase"], json!("Terminating"));
        self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(old))?;
        inner.terminating_ns.insert(name.clone());
        for (kr, info) in self.registry.all().iter().enumerate() {
            if !info.namespaced {
                continue;
            }
            let victims: Vec<Arc<Obj>> = inner.kinds[kr].range_ns(Some(&name)).map(|(_, o)| o.clone()).collect();
            for o in victims {
                // Earlier removals may have taken this one.
                let Some(current) = inner.kinds[kr].objects.get(&(name.clone(), o.name().to_string())).map(Obj::full) else { continue };
                self.delete_as_kind(inner, kr, current, None)?;
            }
        }
        self.finish_namespace(inner, &name, true)?;
        let key = (String::new(), name);
        match inner.kinds[res::NAMESPACES].objects.get(&key) {
            Some(o) => Ok(o.clone()),
            None => inner.kinds[res::NAMESPACES].history.back().map(|e| e.obj.full()).ok_or_else(|| not_found(&RESOURCES[res::NAMESPACES], &key.1)),
        }
    }

    /// The namespace controller's last step: remove a terminating namespace
    /// once nothing is left in it; with `report`, record what remains in
    /// its conditions (NamespaceContentRemaining, NamespaceFinalizersRemaining).
    pub(super) fn finish_namespace(&self, inner: &mut Inner, ns: &str, report: bool) -> Result<()> {
        let key = (String::new(), ns.to_string());
        let Some(nso) = inner.kinds[res::NAMESPACES].objects.get(&key).map(Obj::full) else {
            inner.terminating_ns.remove(ns);
            return Ok(());
        };
        let mut remaining: Vec<String> = Vec::new();
        let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
        for (kr, info) in self.registry.all().iter().enumerate() {
            if !info.namespaced {
                continue;
            }
            let mut count = 0;
            for (_, o) in inner.kinds[kr].range_ns(Some(ns)) {
                count += 1;
                if !report {
                    break;
                }
                let o = o.full();
                for f in o.value.at("/metadata/finalizers").and_then(Value::as_array).into_iter().flatten() {
                    *finalizers.entry(f.as_str().unwrap_or("").to_string()).or_default() += 1;
                }
            }
            if count > 0 {
                if !report {
                    return Ok(());
                }
                remaining.push(format!("{} has {count} resource instances", qualified(info)));
            }
        }
        if remaining.is_empty() {
            if has_metadata_finalizers(&nso.value) {
                // Other finalizers than the controller's own still hold it.
                let mut v = nso.value.clone();
                set_path(&mut v, &["spec", "finalizers"], json!([]));
                self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(nso))?;
                return Ok(());
            }
            inner.terminating_ns.remove(ns);
            self.commit(inner, res::NAMESPACES, EventType::Deleted, nso.value.clone(), None)?;
            return Ok(());
        }
        let now = now_rfc3339();
        let mut v = nso.value.clone();
        set_condition(&mut v, json!({"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
            "message": format!("Some resources are remaining: {}", remaining.join(", ")), "lastTransitionTime": now}));
        if !finalizers.is_empty() {
            let list: Vec<String> = finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
            set_condition(&mut v, json!({"type": "NamespaceFinalizersRemaining", "status": "True", "reason": "SomeFinalizersRemain",
                "message": format!("Some content in the namespace has finalizers remaining: {}", list.join(", ")), "lastTransitionTime": now}));
        }
        self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(nso))?;
        Ok(())
    }

    /// Delete a CRD: its objects go (DELETED to their watchers), then its
    /// resources stop being served, then the CRD (upstream does the same
    /// asynchronously behind the `customresourcecleanup` finalizer).
    pub(super) fn delete_crd_locked(&self, inner: &mut Inner, old: Arc<Obj>) -> Result<Arc<Obj>> {
        let ids = self.registry.of_crd(old.name());
        for id in ids {
            let victims: Vec<Arc<Obj>> = inner.kinds[id].objects.values().cloned().collect();
            for o in victims {
                self.commit(inner, id, EventType::Deleted, o.value.clone(), None)?;
            }
        }
        self.registry.retire(old.name());
        self.remove_locked(inner, res::CRDS, &old)
    }
}
