//! A stored object: its JSON value with the serialized bytes of exactly
//! that value, and the lean copy kept for versions no longer current (and
//! for the kinds stored by the thousand, current ones too).

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::eventview;
use crate::jsonptr::Pointer as _;
use crate::resources::{self as res, PODS, ResId, ResourceInfo};
use crate::selector::Filter;

use super::{Error, Result, meta_str};

/// A stored object: its JSON value and the serialized bytes of exactly
/// that value (so lists and watches never reserialize).
///
/// Versions that are no longer current (replaced or deleted) stay in the
/// watch history *lean*: their bytes, and of the value only what selectors
/// read (see [`Lean`]). A replayed event is sent as its bytes, so nothing
/// is lost, and a past version costs little more than its bytes.
#[derive(Debug)]
pub struct Obj {
    /// The object (`Value::Null` for a lean history copy; see
    /// [`Obj::full`]).
    pub value: Value,
    /// `value` serialized (`metadata.managedFields`, kept in `value` as
    /// its JSON text to save memory, written as the list).
    pub bytes: Bytes,
    /// Its resourceVersion.
    pub rv: u64,
    /// Set on a lean history copy.
    lean: Option<Box<Lean>>,
}

/// What selectors read of a lean copy, in one piece of text: the
/// namespace, name, uid and controller uid, then each of the kind's extra
/// field-selector fields (as a field selector compares it), then each
/// label's key and value. Two allocations, whatever the object.
#[derive(Debug)]
pub(super) struct Lean {
    text: Box<str>,
    /// Where each piece of `text` ends.
    ends: Box<[u32]>,
    /// The kind's extra field-selector fields (dotted, as the kind lists
    /// them): the pieces after the first four are their values.
    fields: &'static [&'static str],
    /// Has a controlling owner reference (the fourth piece is its uid).
    controlled: bool,
}

/// The pieces of a [`Lean`] before its field values.
pub(super) const LEAN_FIXED: usize = 4;

impl Lean {
    pub(super) fn new<'a>(fixed: [&'a str; LEAN_FIXED], controlled: bool, fields: &'static [&'static str], rest: impl Iterator<Item = Cow<'a, str>>) -> Option<Lean> {
        let mut text = String::new();
        let mut ends = Vec::with_capacity(LEAN_FIXED + fields.len() + 4);
        for piece in fixed.into_iter().map(Cow::Borrowed).chain(rest) {
            text.push_str(&piece);
            ends.push(u32::try_from(text.len()).ok()?);
        }
        Some(Lean { text: text.into_boxed_str(), ends: ends.into_boxed_slice(), fields, controlled })
    }

    /// Piece `i` ("" past the end).
    pub(super) fn piece(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends.get(i - 1).map_or(usize::MAX, |e| *e as usize) };
        let end = self.ends.get(i).map_or(0, |e| *e as usize);
        self.text.get(start..end).unwrap_or("")
    }

    /// The value of a label, if the object has it.
    pub(super) fn label(&self, key: &str) -> Option<&str> {
        let first = LEAN_FIXED + self.fields.len();
        (first..self.ends.len()).step_by(2).find(|i| self.piece(*i) == key).map(|i| self.piece(i + 1))
    }

    /// A field by JSON pointer: name, namespace or one of the kind's
    /// extra fields ("" for any other).
    pub(super) fn field_at(&self, pointer: &str) -> &str {
        match pointer {
            "/metadata/namespace" => self.piece(0),
            "/metadata/name" => self.piece(1),
            p => self.fields.iter().position(|f| is_pointer_of(p, f)).map_or("", |i| self.piece(LEAN_FIXED + i)),
        }
    }
}

impl Obj {
    pub(super) fn new(value: Value, rv: u64) -> Result<Arc<Obj>> {
        let bytes = wire_bytes(&value).map_err(|e| Error::Internal(e.to_string()))?;
        // Exactly sized: every version in the history keeps its bytes. A
        // copy of the written text costs less than growing the buffer as
        // it is written and shrinking it after (two reallocations).
        Ok(Arc::new(Obj { value, bytes: Bytes::copy_from_slice(&bytes), rv, lean: None }))
    }

    /// An object built from a value alone (its bytes are empty): for
    /// callers that only read the value.
    pub fn from_value(value: Value, rv: u64) -> Arc<Obj> {
        Arc::new(Obj { value, bytes: Bytes::new(), rv, lean: None })
    }

    /// The history copy of a version that is no longer current: the same
    /// bytes, and what selectors of this kind read (`fields`: its extra
    /// field-selector fields, dotted).
    pub(super) fn lean(self: &Arc<Self>, fields: &'static [&'static str]) -> Arc<Obj> {
        if self.lean.is_some() {
            return self.clone();
        }
        let meta = self.value.get("metadata");
        let text = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("");
        let controller = controller_of(&self.value);
        let values = fields.iter().map(|f| lean_field(&self.value, fields, f));
        let labels = meta.and_then(|m| m.get("labels")).and_then(Value::as_object).into_iter().flatten();
        let labels = labels.flat_map(|(k, v)| [Cow::Borrowed(k.as_str()), Cow::Borrowed(v.as_str().unwrap_or(""))]);
        let fixed = [text("namespace"), text("name"), text("uid"), controller.unwrap_or("")];
        // Text past 4 GiB cannot be indexed: such an object stays whole.
        let Some(lean) = Lean::new(fixed, controller.is_some(), fields, values.chain(labels)) else {
            return self.clone();
        };
        Arc::new(Obj { value: Value::Null, bytes: self.bytes.clone(), rv: self.rv, lean: Some(Box::new(lean)) })
    }

    /// Is this a lean history copy?
    pub fn is_lean(&self) -> bool {
        self.lean.is_some()
    }

    /// The whole object: itself, or for a lean copy the value read back
    /// from its bytes.
    pub fn full(self: &Arc<Self>) -> Arc<Obj> {
        if self.lean.is_none() {
            return self.clone();
        }
        match serde_json::from_slice::<Value>(&self.bytes) {
            Ok(mut value) => {
                if let Some(m) = value.at_mut("/metadata/managedFields")
                    && m.is_array()
                {
                    *m = Value::String(m.to_string());
                }
                Arc::new(Obj { value, bytes: self.bytes.clone(), rv: self.rv, lean: None })
            }
            Err(_) => self.clone(),
        }
    }

    /// Does the object pass a list or watch filter?
    pub fn matches(&self, f: &Filter) -> bool {
        let Some(l) = &self.lean else {
            return f.matches(&self.value);
        };
        if f.namespace.as_deref().is_some_and(|ns| ns != l.piece(0)) {
            return false;
        }
        f.labels.matches_with(|k| l.label(k)) && f.fields.matches_with(|p| l.field_at(p).to_string())
    }

    /// A field as a field selector compares it (see
    /// `selector::field_text`), by its dotted name: for a lean copy, only
    /// `metadata.name`, `metadata.namespace` and the kind's extra
    /// field-selector fields are known ("" for any other), which is what
    /// controllers scanning every pod read without parsing it back.
    pub fn field(&self, dotted: &str) -> Cow<'_, str> {
        let pointer = crate::selector::field_pointer(dotted);
        match &self.lean {
            Some(l) => Cow::Borrowed(l.field_at(&pointer)),
            None => Cow::Owned(crate::selector::field_text(self.value.at(&pointer))),
        }
    }

    /// metadata.name.
    pub fn name(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "name"), |l| l.piece(1))
    }

    /// metadata.namespace ("" for cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "namespace"), |l| l.piece(0))
    }

    /// metadata.uid.
    pub fn uid(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "uid"), |l| l.piece(2))
    }

    /// The uid of the controlling owner reference, if any.
    pub fn controller_uid(&self) -> Option<&str> {
        match &self.lean {
            Some(l) => l.controlled.then(|| l.piece(3)),
            None => controller_of(&self.value),
        }
    }

    /// Decode into a typed object.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K> {
        serde_json::from_slice(&self.bytes).map_err(|e| Error::Internal(e.to_string()))
    }
}

/// The bytes of a stored value: `metadata.managedFields`, held as its JSON
/// text (see `managed::encode`), is written as the list it stands for,
/// verbatim (checked to be JSON, not parsed into a value and written again).
pub(super) fn wire_bytes(value: &Value) -> serde_json::Result<Vec<u8>> {
    pub(super) fn map(out: &mut Vec<u8>, m: &Map<String, Value>, top: bool) -> serde_json::Result<()> {
        out.push(b'{');
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k)?;
            out.push(b':');
            match (top, k.as_str(), v) {
                (true, "metadata", Value::Object(meta)) => map(out, meta, false)?,
                (false, "managedFields", Value::String(text)) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                    out.extend_from_slice(text.as_bytes());
                }
                _ => serde_json::to_writer(&mut *out, v)?,
            }
        }
        out.push(b'}');
        Ok(())
    }
    let mut out = Vec::with_capacity(4096);
    match value {
        Value::Object(m) => map(&mut out, m, true)?,
        other => serde_json::to_writer(&mut out, other)?,
    }
    Ok(out)
}

/// Is `pointer` the JSON pointer of the dotted field name `dotted` (see
/// `selector::field_pointer`)?
pub(super) fn is_pointer_of(pointer: &str, dotted: &str) -> bool {
    pointer.strip_prefix('/').is_some_and(|p| p.len() == dotted.len() && p.bytes().zip(dotted.bytes()).all(|(a, b)| if b == b'.' { a == b'/' } else { a == b }))
}

/// The uid of the owner reference of `v` marked `controller: true`.
pub(crate) fn controller_of(v: &Value) -> Option<&str> {
    v.at("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|o| o.get("uid").and_then(Value::as_str))
}

/// Kinds whose current objects are also kept lean (their bytes and what
/// selectors read; see [`Obj::full`]): those stored by the thousand,
/// where a parsed value costs several times the bytes (a node's value
/// about 11 KB, its bytes under 2 KB). Every read of a
/// stored object of these kinds goes through [`Obj::full`].
pub(super) fn kept_lean(r: ResId) -> bool {
    matches!(r, PODS | res::EVENTS_V1 | res::NODES)
}

/// A field a lean copy keeps, as a field selector compares it; the Events
/// store's `source` is computed (see `eventview::source`).
pub(super) fn lean_field<'a>(v: &'a Value, fields: &[&str], dotted: &str) -> Cow<'a, str> {
    // Only the Events lists offer `source` (core/v1's; events.k8s.io/v1's
    // refuses it at parse time). A content check, not an address one: a
    // `const` slice has no fixed address, and comparing addresses failed in
    // release builds once the list moved to another module.
    if dotted == "source" && fields.contains(&"source") {
        Cow::Borrowed(eventview::source(v))
    } else {
        crate::selector::field_text_at(v, dotted)
    }
}

/// The field-selector fields a kind's lean copies keep: its own, or for
/// Events those of both views (core/v1 Events are a view of the
/// events.k8s.io/v1 store; see `eventview`).
pub(super) fn lean_fields(r: ResId, info: &ResourceInfo) -> &'static [&'static str] {
    if r == res::EVENTS_V1 { res::EVENTS_SELECTABLE } else { info.fields }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{self as res, PODS, RESOURCES};
    use crate::selector::LabelSelector;
    use crate::store::{PatchType, Store, StoreConfig, WatchStart};
    use serde_json::json;

    /// A lean copy answers every accessor as the object it stands for,
    /// and a superseded version in the history reads back equal to the
    /// object as it was committed.
    #[test]
    fn lean_copies_read_back_as_committed() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a", "empty": "", "tier": "web"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "o", "uid": "u-0", "controller": false},
                                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}], "serviceAccountName": "sa", "nodeName": "n1"}});
        let created = store.create(PODS, "ns", pod).unwrap_or_else(|e| panic!("{e}"));
        let lean = created.lean(RESOURCES[PODS].fields);
        assert!(lean.is_lean() && lean.value.is_null());
        assert_eq!((lean.namespace(), lean.name(), lean.uid()), (created.namespace(), created.name(), created.uid()));
        assert_eq!(lean.controller_uid(), Some("u-1"));
        for f in RESOURCES[PODS].fields.iter().chain(&["metadata.name", "metadata.namespace"]) {
            assert_eq!(lean.field(f), created.field(f), "{f}");
        }
        assert_eq!(lean.field("spec.nodeName"), "n1");
        assert_eq!(lean.field("spec.restartPolicy"), "Always");
        assert_eq!(lean.field("spec.notAField"), "");
        let labels = |sel: &str| Filter { namespace: Some("ns".into()), labels: LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{e}")), ..Default::default() };
        for (sel, want) in [("app=a", true), ("empty=", true), ("empty", true), ("tier=web", true), ("app!=a", false), ("missing", false), ("!missing", true)] {
            assert_eq!(lean.matches(&labels(sel)), want, "{sel}");
            assert_eq!(created.matches(&labels(sel)), want, "{sel}");
        }
        assert!(!lean.matches(&Filter { namespace: Some("other".into()), ..Default::default() }));
        // Without labels or a controller.
        let bare = Obj::new(json!({"metadata": {"name": "b"}}), 1).unwrap_or_else(|e| panic!("{e}")).lean(&[]);
        assert_eq!((bare.name(), bare.namespace(), bare.uid(), bare.controller_uid()), ("b", "", "", None));
        assert!(!bare.matches(&labels("!app")) && bare.matches(&Filter::default()));
        // The superseded first version, as the history keeps it.
        let patch = br#"{"metadata": {"labels": {"app": "b"}}}"#;
        store.patch(PODS, "ns", "p", PatchType::Merge, patch, false).unwrap_or_else(|e| panic!("{e}"));
        let sub = store.watch(PODS, WatchStart::After(created.rv - 1)).unwrap_or_else(|e| panic!("{e}"));
        let first = sub.backlog.iter().find(|e| e.rv == created.rv).map(|e| e.obj.clone());
        let first = first.unwrap_or_else(|| panic!("the first version is in the history"));
        assert!(first.is_lean());
        assert_eq!(first.bytes, created.bytes);
        assert_eq!(first.full().value, created.value);
        assert!(first.matches(&labels("app=a")) && !first.matches(&labels("app=b")));
        assert!(store.exists(PODS, "ns", "p") && !store.exists(PODS, "ns", "q") && !store.exists(PODS, "other", "p"));
        // Nodes are kept lean too, and read whole.
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}, "spec": {"unschedulable": true}});
        let n1 = store.create(res::NODES, "", node).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.lock().kinds[res::NODES].objects.values().all(|o| o.is_lean() && o.bytes == n1.bytes));
        assert_eq!(store.get(res::NODES, "", "n1").map(|o| o.value.clone()).ok(), Some(n1.value.clone()));
        assert_eq!(store.list(res::NODES, &Filter::default(), None, None).map(|l| l.items[0].value.clone()).ok(), Some(n1.value.clone()));
        assert!(store.exists(res::NODES, "", "n1"));
    }

    #[test]
    fn pointers_of_dotted_fields() {
        assert!(is_pointer_of("/spec/nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("/spec.nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("spec/nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("/spec/node", "spec.nodeName"));
        assert!(is_pointer_of("/a/b/c", "a.b.c"));
    }

    #[test]
    fn managed_fields_text_is_written_as_its_list() {
        let list = json!([{"manager": "m", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}}]);
        let stored = json!({"kind": "ConfigMap", "metadata": {"name": "c", "managedFields": list.to_string()}, "data": {"a": "x\"y"}});
        let bytes = wire_bytes(&stored).unwrap_or_default();
        let back: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(back, json!({"kind": "ConfigMap", "metadata": {"name": "c", "managedFields": list}, "data": {"a": "x\"y"}}));
        // Text that is not JSON stays a string; only metadata's field is read.
        let odd = json!({"metadata": {"managedFields": "[oops"}, "spec": {"managedFields": "[]"}});
        let back: Value = serde_json::from_slice(&wire_bytes(&odd).unwrap_or_default()).unwrap_or_default();
        assert_eq!(back, odd);
    }
}
