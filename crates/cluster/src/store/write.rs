//! Writes: create, update (PUT), patch (merge, strategic, JSON patch) and
//! server-side apply, through one update path. Each kind's admission
//! rules are reached through the kind table's hooks
//! ([`crate::resources::Admission`]); nothing here names a kind for them.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::managed;
use crate::object::{now_rfc3339, set_path};
use crate::resources::{self as res, ResId, ResourceInfo};

use super::fields::{WriteCtx, decode_fields};
use super::obj::Obj;
use super::watch::EventType;
use super::{Error, Inner, KindStore, Result, Store, conflict, has_finalizers, refused, get_str, invalid, invalid_all, is_deleting, meta_mut, meta_str, new_uid, not_found, patch_options_invalid, qualified, random_suffix};

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// application/merge-patch+json (RFC 7386).
    Merge,
    /// application/strategic-merge-patch+json.
    Strategic,
    /// application/json-patch+json (RFC 6902).
    Json,
    /// application/apply-patch+yaml: server-side apply with field
    /// ownership ([`crate::managed`]); creates the object when missing.
    Apply,
}

/// What admission rules read: the store's current objects, under its lock.
pub(super) struct AdmissionView<'a> {
    inner: &'a Inner,
    storage_protection: bool,
}

impl res::View for AdmissionView<'_> {
    fn get(&self, r: ResId, ns: &str, name: &str) -> Option<&Value> {
        self.inner.kinds.get(r)?.objects.get(&(ns.to_string(), name.to_string())).map(|o| &o.value)
    }

    fn each(&self, r: ResId) -> Box<dyn Iterator<Item = &Value> + '_> {
        match self.inner.kinds.get(r) {
            Some(ks) => Box::new(ks.objects.values().map(|o| &o.value)),
            None => Box::new(std::iter::empty()),
        }
    }

    fn storage_protection(&self) -> bool {
        self.storage_protection
    }
}

pub(super) const STALE: &str = "the object has been modified; please apply your changes to the latest version and try again";

/// Check the type, then the typed round trip (built-ins) or the CRD's
/// schema (custom resources: pruning, defaults, validation).
pub(super) fn normalize(info: &ResourceInfo, mut v: Value) -> Result<Value> {
    res::check_type(&mut v, &info.api_version(), info.kind).map_err(|e| Error::BadRequest(e.to_string()))?;
    // The stored form of managedFields (JSON text, see `managed::encode`)
    // is not the typed form: it goes around the round trip unchanged.
    let stored_managed = match v.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(meta) if meta.get("managedFields").is_some_and(Value::is_string) => meta.remove("managedFields"),
        _ => None,
    };
    let mut v = (info.normalize)(v).map_err(|e| Error::BadRequest(e.to_string()))?;
    decoded(info, &v)?;
    custom_schema(info, &mut v)?;
    if let (Some(m), Some(meta)) = (stored_managed, v.get_mut("metadata").and_then(Value::as_object_mut)) {
        meta.insert("managedFields".into(), m);
    }
    Ok(v)
}

/// What kube-apiserver's decoder refuses of a built-in kind beyond its
/// JSON shape: a quantity that does not parse (400, with its message).
pub(super) fn decoded(info: &ResourceInfo, v: &Value) -> Result<()> {
    if info.custom.is_some() {
        return Ok(());
    }
    match crate::admission::validation::quantity_decode_error(info.kind, v) {
        None => Ok(()),
        Some(e) => Err(Error::BadRequest(format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {e}", kind = info.kind, version = info.version))),
    }
}

/// Object metadata every kind's validation checks (upstream's
/// `ValidateObjectMeta`, the parts not checked elsewhere): label keys and
/// values, annotation keys, and the total size of annotations.
pub(super) fn validate_meta(info: &ResourceInfo, name: &str, v: &Value) -> Result<()> {
    let mut errs = crate::admission::validation::metadata_labels_and_annotations(v);
    errs.extend(crate::admission::validation::annotations(v));
    if errs.is_empty() { Ok(()) } else { Err(invalid_all(info, name, &errs)) }
}

/// A workload's pod templates, checked as pods are (see
/// [`crate::admission::validation::pod_templates`]).
pub(super) fn validate_templates(info: &ResourceInfo, name: &str, v: &Value) -> Result<()> {
    if info.custom.is_some() {
        return Ok(());
    }
    let errs = crate::admission::validation::pod_templates(info.kind, v);
    if errs.is_empty() { Ok(()) } else { Err(invalid_all(info, name, &errs)) }
}

/// A custom resource's schema, applied to an object already checked.
pub(super) fn custom_schema(info: &ResourceInfo, v: &mut Value) -> Result<()> {
    if let Some(schema) = info.custom.as_ref().and_then(|c| c.schema.as_ref()) {
        let errs = crate::crd::apply_schema(schema, v);
        if !errs.is_empty() {
            return Err(invalid_all(info, meta_str(v, "name"), &errs));
        }
    }
    Ok(())
}

/// Strategic-merge-patch list merge key, by field name: the first key of
/// the associative lists of [`managed::list_type`] (one table for both),
/// plus the container statuses, which merge by name.
pub(super) fn merge_key(field: &str, items: &[Value]) -> Option<String> {
    if matches!(field, "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses") {
        return Some("name".into());
    }
    match managed::list_type(field, managed::Shape::Builtin, items) {
        managed::ListType::Map(keys) => keys.into_iter().next(),
        _ => None,
    }
}

/// Apply a strategic merge patch: merge-patch semantics, except lists with
/// a known merge key are merged element-wise by that key (`$patch: delete`
/// removes an element) and `$`-directives are otherwise ignored.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(pm) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(tm) = target.as_object_mut() else { return };
    for (k, pv) in pm {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        let mk = match pv {
            Value::Array(items) => merge_key(k, items),
            _ => None,
        };
        match (mk.as_deref(), pv) {
            (Some(mk), Value::Array(items)) => {
                let entry = tm.entry(k.clone()).or_insert_with(|| json!([]));
                if !entry.is_array() {
                    *entry = json!([]);
                }
                if let Value::Array(existing) = entry {
                    for item in items {
                        let key = item.get(mk).cloned();
                        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                        let pos = key.as_ref().and_then(|kv| existing.iter().position(|e| e.get(mk) == Some(kv)));
                        match (pos, delete) {
                            (Some(i), true) => {
                                existing.remove(i);
                            }
                            (Some(i), false) => strategic_merge(&mut existing[i], item),
                            (None, true) => {}
                            (None, false) => {
                                let mut fresh = json!({});
                                strategic_merge(&mut fresh, item);
                                existing.push(fresh);
                            }
                        }
                    }
                }
            }
            (_, Value::Object(_)) => {
                let entry = tm.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(entry, pv);
            }
            _ => {
                tm.insert(k.clone(), pv.clone());
            }
        }
    }
}

pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

impl Store {
    /// Create an object (already JSON-parsed) in namespace `ns` ("" for cluster-scoped).
    pub fn create(&self, r: ResId, ns: &str, body: Value) -> Result<Arc<Obj>> {
        self.create_with(r, ns, body, &WriteCtx::default())
    }

    /// [`Store::create`] by a field manager (see [`WriteCtx`]).
    pub fn create_with(&self, r: ResId, ns: &str, body: Value, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let v = normalize(&self.info(r), body)?;
        self.create_normalized(r, ns, v, ctx)
    }

    /// Create from a JSON body (bytes straight into the typed object).
    pub fn create_from_slice(&self, r: ResId, ns: &str, body: &[u8]) -> Result<Arc<Obj>> {
        self.create_from_slice_with(r, ns, body, &WriteCtx::default())
    }

    /// [`Store::create_from_slice`] by a field manager (see [`WriteCtx`]).
    pub fn create_from_slice_with(&self, r: ResId, ns: &str, body: &[u8], ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        if info.custom.is_some() {
            let v: Value = serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("the body of the request was in an unknown format: {e}")))?;
            return self.create_with(r, ns, v, ctx);
        }
        let v = (info.normalize_slice)(body).map_err(|e| Error::BadRequest(e.to_string()))?;
        if !v.is_object() {
            return Err(Error::BadRequest("the body of the request must be a JSON object".into()));
        }
        decoded(&info, &v)?;
        self.create_normalized(r, ns, v, ctx)
    }

    pub(super) fn create_normalized(&self, r: ResId, ns: &str, mut v: Value, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let meta = meta_mut(&mut v)?;
        let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
        if info.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(Error::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let gen_name = meta.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
        if name.is_empty() && gen_name.is_empty() {
            return Err(invalid(&info, "", "metadata.name: Required value: name or generateName is required"));
        }
        if !name.is_empty()
            && let Some(msg) = res::validate_object_name(&info, &name) {
                return Err(invalid(&info, &name, msg));
            }
        for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
            meta.remove(f);
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));

        let mut inner = self.lock();
        if info.namespaced && !inner.kinds[res::NAMESPACES].objects.contains_key(&(String::new(), ns.to_string())) {
            return Err(Error::NotFound { resource: "namespaces".into(), name: ns.to_string() });
        }
        if info.namespaced && inner.terminating_ns.contains(ns) {
            return Err(Error::NamespaceTerminating { resource: qualified(&info), name: name.clone(), namespace: ns.to_string() });
        }
        let name = if name.is_empty() {
            let mut chosen = None;
            for _ in 0..16 {
                let candidate = format!("{gen_name}{}", random_suffix());
                if !inner.kinds[r].objects.contains_key(&(ns.to_string(), candidate.clone())) {
                    chosen = Some(candidate);
                    break;
                }
            }
            let n = chosen.ok_or_else(|| Error::AlreadyExists { resource: qualified(&info), name: gen_name.clone() })?;
            if let Some(msg) = res::validate_object_name(&info, &n) {
                return Err(invalid(&info, &n, msg));
            }
            meta_mut(&mut v)?.insert("name".into(), json!(n));
            n
        } else {
            name
        };
        // generateName is validated as the name it prefixes (a trailing
        // '-' allowed), as kube-apiserver's ValidateObjectMeta does: "pod."
        // is refused, since a DNS subdomain does not end in a dot.
        if !gen_name.is_empty() {
            let masked = match gen_name.strip_suffix('-') {
                Some(base) if !base.is_empty() => format!("{base}a"),
                _ => gen_name.clone(),
            };
            if let Some(msg) = res::validate_object_name(&info, &masked) {
                let why = msg.rsplit_once("\": ").map_or(msg.as_str(), |(_, w)| w);
                return Err(invalid(&info, &name, format!("metadata.generateName: Invalid value: \"{gen_name}\": {why}")));
            }
        }
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.clone());
        if inner.kinds[r].objects.contains_key(&key) {
            return Err(Error::AlreadyExists { resource: qualified(&info), name });
        }
        validate_meta(&info, &name, &v)?;
        validate_templates(&info, &name, &v)?;
        self.admit_create(&inner, &info, &name, &mut v)?;
        if ctx.manager.is_some() {
            self.record_fields(&info, None, &mut v, ctx, false)?;
        }
        if ctx.dry_run {
            let o = Obj::new(v, inner.rv)?;
            super::limits::storable(&info, &name, &o.bytes)?;
            return Ok(o);
        }
        let obj = self.commit(&mut inner, r, EventType::Added, v, None)?;
        self.after_write(&mut inner, r, None, &obj.value);
        Ok(obj)
    }

    /// The kind's create admission (defaults, checks; see `admission`),
    /// reading the cluster as it stands under the lock.
    pub(super) fn admit_create(&self, inner: &Inner, info: &ResourceInfo, name: &str, v: &mut Value) -> Result<()> {
        let Some(create) = info.admission.create else { return Ok(()) };
        let view = AdmissionView { inner, storage_protection: self.storage_protection.load(std::sync::atomic::Ordering::Relaxed) };
        create(&view, name, v).map_err(|e| refused(info, name, e))
    }

    /// Serve what a CRD defines (new versions get their stores).
    pub(super) fn define_crd(&self, inner: &mut Inner, crd: &Value) {
        let d = crate::crd::definition(crd);
        let (_, added) = self.registry.define(meta_str(crd, "name"), d.versions, &d.storage_version);
        for _ in 0..added {
            inner.kinds.push(KindStore::new(&self.cfg));
        }
    }

    /// Replace an object (PUT), or just its status when `status_only`.
    pub fn update(&self, r: ResId, ns: &str, name: &str, body: Value, status_only: bool) -> Result<Arc<Obj>> {
        self.update_with(r, ns, name, body, status_only, &WriteCtx::default())
    }

    /// [`Store::update`] by a field manager (see [`WriteCtx`]).
    pub fn update_with(&self, r: ResId, ns: &str, name: &str, body: Value, status_only: bool, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let mut v = normalize(&info, body)?;
        let meta = meta_mut(&mut v)?;
        let body_name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        if body_name != name {
            return Err(Error::BadRequest("the name of the object does not match the name on the URL".into()));
        }
        let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
        if info.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(Error::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let body_rv = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            drop(inner);
            if info.create_on_update && !status_only {
                return self.create_with(r, ns, v, ctx);
            }
            return Err(not_found(&info, name));
        };
        if !body_rv.is_empty() && body_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        self.apply_update(&mut inner, r, old, v, status_only, ctx)
    }

    /// Patch an object (or its status when `status_only`).
    pub fn patch(&self, r: ResId, ns: &str, name: &str, pt: PatchType, body: &[u8], status_only: bool) -> Result<Arc<Obj>> {
        self.patch_with(r, ns, name, pt, body, status_only, &WriteCtx::default()).map(|(o, _)| o)
    }

    /// [`Store::patch`] by a field manager (see [`WriteCtx`]); also says
    /// whether the object was created (an apply of a missing object).
    #[allow(clippy::too_many_arguments)]
    pub fn patch_with(
        &self,
        r: ResId,
        ns: &str,
        name: &str,
        pt: PatchType,
        body: &[u8],
        status_only: bool,
        ctx: &WriteCtx,
    ) -> Result<(Arc<Obj>, bool)> {
        let info = self.info(r);
        let patch: Value = match pt {
            PatchType::Apply => match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(_) => serde_saphyr::from_slice(body).map_err(|e| Error::BadRequest(format!("invalid apply patch: {e}")))?,
            },
            _ => serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("invalid patch: {e}")))?,
        };
        if pt == PatchType::Apply {
            return self.apply(r, ns, name, patch, status_only, ctx);
        }
        let json_ops: Option<json_patch::Patch> = if pt == PatchType::Json {
            Some(serde_json::from_value(patch.clone()).map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?)
        } else {
            if !patch.is_object() {
                return Err(Error::BadRequest("patch body must be a JSON object".into()));
            }
            None
        };
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            return Err(not_found(&info, name));
        };
        let mut v = old.value.clone();
        match pt {
            PatchType::Merge => merge_patch(&mut v, &patch),
            PatchType::Strategic | PatchType::Apply => strategic_merge(&mut v, &patch),
            PatchType::Json => {
                if let Some(ops) = &json_ops {
                    json_patch::patch(&mut v, ops).map_err(|e| invalid(&info, name, format!("JSON patch failed: {e}")))?;
                }
            }
        }
        let patched_rv = get_str(&v, "/metadata/resourceVersion");
        if !patched_rv.is_empty() && patched_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        if get_str(&v, "/metadata/name") != name || get_str(&v, "/metadata/namespace") != key.0 {
            return Err(invalid(&info, name, "metadata.name: Invalid value: field is immutable"));
        }
        let v = normalize(&info, v)?;
        self.apply_update(&mut inner, r, old, v, status_only, ctx).map(|o| (o, false))
    }

    /// Server-side apply of configuration `cfg` by `ctx`'s manager: creates
    /// the object when missing; else merges `cfg` into it, removes what the
    /// manager applied before and no longer applies (unless another applier
    /// owns it), and refuses fields other managers own with another value
    /// (409) unless forced.
    pub(super) fn apply(&self, r: ResId, ns: &str, name: &str, cfg: Value, status_only: bool, ctx: &WriteCtx) -> Result<(Arc<Obj>, bool)> {
        let info = self.info(r);
        let Some(manager) = ctx.manager.clone().filter(|m| !m.is_empty()) else {
            return Err(patch_options_invalid("fieldManager: Required value: is required for apply patch"));
        };
        if !cfg.is_object() {
            return Err(Error::BadRequest("the body of an apply patch must be an object".into()));
        }
        if cfg.at("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
            return Err(Error::BadRequest("metadata.managedFields must be nil".into()));
        }
        let kind = get_str(&cfg, "/kind");
        if kind.is_empty() {
            return Err(Error::BadRequest("invalid object: Object 'Kind' is missing".into()));
        }
        if kind != info.kind {
            return Err(Error::BadRequest(format!("the kind in the data ({kind}) does not match the expected kind ({})", info.kind)));
        }
        let cfg_name = get_str(&cfg, "/metadata/name");
        if !cfg_name.is_empty() && cfg_name != name {
            return Err(Error::BadRequest("the name of the object does not match the name on the URL".into()));
        }
        let schema = info.custom.as_ref().and_then(|c| c.schema.clone());
        let shape = schema.as_ref().map_or(managed::Shape::Builtin, managed::Shape::Custom);
        let applied = managed::applied_set(&managed::tracked(&cfg, info.has_status, status_only), shape);
        let actx = WriteCtx { applied: Some(applied.clone()), manager: Some(manager.clone()), ..ctx.clone() };
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            drop(inner);
            if status_only {
                return Err(not_found(&info, name));
            }
            let mut body = cfg;
            set_path(&mut body, &["metadata", "name"], json!(name));
            return self.create_with(r, ns, body, &actx).map(|o| (o, true));
        };
        let cfg_rv = get_str(&cfg, "/metadata/resourceVersion");
        if !cfg_rv.is_empty() && cfg_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        let mut v = old.value.clone();
        managed::merge(&mut v, &cfg, shape);
        // What this manager applied last time and no longer applies goes,
        // unless another applier owns it (or something below it).
        let entries = old.value.at("/metadata/managedFields").and_then(|m| decode_fields(&info, m).ok()).unwrap_or_default();
        let me = managed::Entry {
            manager,
            operation: managed::Operation::Apply,
            api_version: String::new(),
            subresource: if status_only { "status".into() } else { String::new() },
            time: None,
            set: managed::FieldSet::default(),
        };
        let mut last = managed::FieldSet::default();
        let mut others = managed::FieldSet::default();
        for e in &entries {
            if e.same_manager(&me) {
                last = last.union(&e.set);
            } else if e.operation == managed::Operation::Apply {
                others = others.union(&e.set);
            }
        }
        for p in last.difference(&applied).paths() {
            if !applied.has_self_or_below(&p) && !others.has_self_or_below(&p) {
                managed::remove_path(&mut v, &p);
            }
        }
        if get_str(&v, "/metadata/namespace") != key.0 {
            return Err(invalid(&info, name, "metadata.namespace: Invalid value: field is immutable"));
        }
        let v = normalize(&info, v)?;
        self.apply_update(&mut inner, r, old, v, status_only, &actx).map(|o| (o, false))
    }

    /// Shared update path: merge system fields, validate, commit.
    pub(super) fn apply_update(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>, v: Value, status_only: bool, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let name = old.name().to_string();
        let mut new = if status_only {
            let mut n = old.value.clone();
            if let Some(m) = n.as_object_mut() {
                match v.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
            n
        } else {
            let mut n = v;
            if let (Some(nm), Some(om)) = (n.as_object_mut(), old.value.as_object())
                && info.has_status {
                    match om.get("status") {
                        Some(s) => nm.insert("status".into(), s.clone()),
                        None => nm.remove("status"),
                    };
                }
            let om = old.value.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let meta = meta_mut(&mut n)?;
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "generation"] {
                match om.get(f) {
                    Some(x) => meta.insert(f.into(), x.clone()),
                    None => meta.remove(f),
                };
            }
            n
        };
        validate_meta(&info, &name, &new)?;
        if !status_only {
            validate_templates(&info, &name, &new)?;
            if let Some(update) = info.admission.update {
                update(&old.value, &mut new).map_err(|e| refused(&info, &name, e))?;
            }
            if old.value.get("spec") != new.get("spec") {
                let g = old.value.at("/metadata/generation").and_then(Value::as_i64).unwrap_or(1) + 1;
                meta_mut(&mut new)?.insert("generation".into(), json!(g));
            }
        }
        if ctx.manager.is_some() {
            self.record_fields(&info, Some(&old.value), &mut new, ctx, status_only)?;
        } else if !status_only {
            // The cluster's own writes keep the entries as they are.
            match old.value.at("/metadata/managedFields").cloned() {
                Some(m) => set_path(&mut new, &["metadata", "managedFields"], m),
                None => {
                    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("managedFields");
                    }
                }
            }
        }
        // No-op updates do not bump the resourceVersion.
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(old.rv.to_string()));
        }
        if new == old.value {
            return Ok(old);
        }
        if let Some(settle) = info.admission.settle {
            settle(&mut new);
            if new == old.value {
                return Ok(old);
            }
        }
        if ctx.dry_run {
            let o = Obj::new(new, old.rv)?;
            super::limits::storable(&info, &name, &o.bytes)?;
            return Ok(o);
        }
        self.commit_update(inner, r, old, new)
    }

    /// Commit a new version of an existing object: removes it when this
    /// write took its last finalizer off while it is being deleted with no
    /// grace period left (upstream's `shouldDeleteDuringUpdate`), then runs
    /// the per-kind hooks.
    pub(super) fn commit_update(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>, new: Value) -> Result<Arc<Obj>> {
        let name = old.name().to_string();
        let no_grace_left = new.at("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0;
        if is_deleting(&new) && !has_finalizers(r, &new) && no_grace_left && self.removed_by_update(inner, r, &old.value, &name) {
            return self.remove_locked(inner, r, &Obj::from_value(new, old.rv));
        }
        let obj = self.commit(inner, r, EventType::Modified, new, Some(old.clone()))?;
        self.after_write(inner, r, Some(&old.value), &obj.value);
        // Re-read: a hook (a PDB's status sync) may have committed a newer version of this object.
        let key = (obj.namespace().to_string(), obj.name().to_string());
        match inner.kinds[r].objects.get(&key) {
            Some(o) if o.rv != obj.rv => Ok(o.full()),
            _ => Ok(obj),
        }
    }

    /// Modify any object under the lock if it still exists (and has `uid`
    /// when given); `f` returns the new value or None to leave it. The
    /// write follows the update rules (finalizers, hooks). Used by the
    /// simulated controllers.
    pub fn modify(&self, r: ResId, ns: &str, name: &str, uid: Option<&str>, f: impl FnOnce(&Value) -> Option<Value>) -> Result<Option<Arc<Obj>>> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[r].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(None);
        };
        if uid.is_some_and(|u| u != old.uid()) {
            return Ok(None);
        }
        let Some(mut new) = f(&old.value) else { return Ok(None) };
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(old.rv.to_string()));
        }
        if new == old.value {
            return Ok(Some(old));
        }
        self.commit_update(&mut inner, r, old, new).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_conditions_merge_by_type() {
        let mut t = json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}});
        let p = json!({"status": {"conditions": [{"type": "B", "status": "True", "reason": "x"}, {"type": "C", "status": "True"}], "nominatedNodeName": "n1"}, "$setElementOrder/conditions": []});
        strategic_merge(&mut t, &p);
        assert_eq!(t["status"]["conditions"].as_array().map(Vec::len), Some(3));
        assert_eq!(t["status"]["conditions"][1]["reason"], "x");
        assert_eq!(t["status"]["nominatedNodeName"], "n1");
        let p = json!({"status": {"conditions": [{"type": "A", "$patch": "delete"}], "nominatedNodeName": null}});
        strategic_merge(&mut t, &p);
        assert_eq!(t["status"]["conditions"].as_array().map(Vec::len), Some(2));
        assert!(t["status"].get("nominatedNodeName").is_none());
    }
}
