//! Field ownership for the local cluster, as the API server's
//! structured-merge-diff keeps it: `metadata.managedFields` (one entry per
//! manager, operation, apiVersion for updates, and subresource, with the
//! fields it owns in the `FieldsV1` format), server-side apply's merge of
//! an applied configuration into the live object, the removal of fields a
//! manager stopped applying, and conflicts with other managers.
//!
//! List and map types come from one table ([`list_type`], [`map_type`])
//! for built-in kinds (the `+listType`/`+listMapKey`/`+mapType`/
//! `+structType` markers of the Kubernetes types, by field name), which the
//! strategic merge patch also reads; custom resources read their schema's
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and
//! `x-kubernetes-map-type` (lists are atomic by default, as upstream).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// Errors from reading managed fields.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `metadata.managedFields` (or an entry's `fieldsV1`) is malformed.
    #[error("metadata.managedFields: Invalid value: {0}")]
    Invalid(String),
}

/// A set of field paths, as a tree keyed by the `FieldsV1` path elements
/// (`f:<field>`, `k:<json of the key fields>`, `v:<json value>`,
/// `i:<index>`); `member` says the path to this node is itself in the set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// Whether the set has no path.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Add a path.
    pub fn insert(&mut self, path: &[String]) {
        let mut node = self;
        for pe in path {
            // The element is copied only when it is new to the set.
            if !node.children.contains_key(pe) {
                node.children.insert(pe.clone(), FieldSet::default());
            }
            let Some(next) = node.children.get_mut(pe) else { return };
            node = next;
        }
        node.member = true;
    }

    /// Whether the path is in the set.
    pub fn has(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    fn node(&self, path: &[String]) -> Option<&FieldSet> {
        let mut node = self;
        for pe in path {
            node = node.children.get(pe)?;
        }
        Some(node)
    }

    /// Whether the path or anything below it is in the set.
    pub fn has_self_or_below(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| !n.is_empty())
    }

    /// Whether anything strictly below the path is in the set.
    pub fn has_below(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| n.children.values().any(|c| !c.is_empty()))
    }

    fn combine(&self, other: &FieldSet, member: fn(bool, bool) -> bool, keep_unmatched: bool) -> FieldSet {
        let mut out = FieldSet { member: member(self.member, other.member), children: BTreeMap::new() };
        for (k, c) in &self.children {
            let merged = match other.children.get(k) {
                Some(o) => c.combine(o, member, keep_unmatched),
                None if keep_unmatched => c.clone(),
                None => c.combine(&FieldSet::default(), member, keep_unmatched),
            };
            if !merged.is_empty() {
                out.children.insert(k.clone(), merged);
            }
        }
        if keep_unmatched {
            for (k, o) in &other.children {
                if !self.children.contains_key(k) && !o.is_empty() {
                    out.children.insert(k.clone(), o.clone());
                }
            }
        }
        out
    }

    /// Paths in either set.
    /// Drops the top-level field `name` (without its `f:` prefix) and all below it.
    pub fn remove_field(&mut self, name: &str) {
        self.children.remove(&format!("f:{name}"));
    }

    /// Moves the top-level field `from` (and all below it) to `to`, names
    /// without their `f:` prefix; what `to` held is replaced.
    pub fn rename_field(&mut self, from: &str, to: &str) {
        if let Some(c) = self.children.remove(&format!("f:{from}")) {
            self.children.insert(format!("f:{to}"), c);
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        self.combine(other, |a, b| a || b, true)
    }

    /// Paths in this set and not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        self.combine(other, |a, b| a && !b, false)
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && other.member, children: BTreeMap::new() };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Every path in the set, parents before children.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect(&mut prefix, &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` form.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, c) in &self.children {
            if !c.is_empty() {
                m.insert(k.clone(), c.to_fields_v1());
            }
        }
        Value::Object(m)
    }

    /// [`FieldSet::to_fields_v1`]'s text ("." sorts before every path
    /// element, as in a `serde_json` map).
    fn write_fields_v1(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        if self.member && !self.children.is_empty() {
            out.extend_from_slice(b"\".\":{}");
            first = false;
        }
        for (k, c) in &self.children {
            if c.is_empty() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            push_json_str(out, k);
            out.push(b':');
            c.write_fields_v1(out);
        }
        out.push(b'}');
    }

    /// Read the `fieldsV1` form.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, Error> {
        let mut root = FieldSet::default();
        let Value::Object(m) = v else {
            return Err(Error::Invalid("fieldsV1 must be an object".into()));
        };
        for (k, c) in m {
            if k == "." {
                continue;
            }
            root.children.insert(k.clone(), Self::child_from_fields_v1(k, c)?);
        }
        Ok(root)
    }

    fn child_from_fields_v1(key: &str, v: &Value) -> Result<FieldSet, Error> {
        if !(key.starts_with("f:") || key.starts_with("k:") || key.starts_with("v:") || key.starts_with("i:")) {
            return Err(Error::Invalid(format!("fieldsV1: unknown path element {key:?}")));
        }
        let Value::Object(m) = v else {
            return Err(Error::Invalid(format!("fieldsV1: {key}: must be an object")));
        };
        let mut node = FieldSet { member: m.is_empty() || m.contains_key("."), children: BTreeMap::new() };
        for (k, c) in m {
            if k != "." {
                node.children.insert(k.clone(), Self::child_from_fields_v1(k, c)?);
            }
        }
        Ok(node)
    }
}

/// A path as upstream prints it (`.spec.replicas`,
/// `.spec.containers[name="app"].image`, `.metadata.finalizers[="x"]`).
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for pe in path {
        if let Some(f) = pe.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = pe.strip_prefix("k:") {
            let fields: Vec<String> = match serde_json::from_str::<Map<String, Value>>(k) {
                Ok(m) => m.iter().map(|(n, v)| format!("{n}={v}")).collect(),
                Err(_) => vec![k.to_string()],
            };
            s.push_str(&format!("[{}]", fields.join(",")));
        } else if let Some(v) = pe.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else if let Some(i) = pe.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        }
    }
    s
}

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// An associative list, merged by these key fields.
    Map(Vec<String>),
}

/// How an object merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// Declared fields, each owned on its own.
    Struct,
    /// A map from keys to values (labels, data, resource lists), each key
    /// owned on its own.
    Granular,
    /// Replaced as a whole (label selectors, `nodeSelector`, key refs).
    Atomic,
}

/// Where in a schema a value sits: a built-in kind (the table) or a
/// custom resource's structural schema.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'a> {
    /// Built-in kinds: types by field name.
    Builtin,
    /// A custom resource schema node.
    Custom(&'a Value),
}

impl<'a> Shape<'a> {
    /// The shape of field `field` of an object of this shape.
    pub fn field(self, field: &str, root: bool) -> Shape<'a> {
        match self {
            Shape::Builtin => Shape::Builtin,
            Shape::Custom(_) if root && field == "metadata" => Shape::Builtin,
            Shape::Custom(s) => match s.get("properties").and_then(|p| p.get(field)) {
                Some(c) => Shape::Custom(c),
                None => match s.get("additionalProperties") {
                    Some(c) if c.is_object() => Shape::Custom(c),
                    _ => Shape::Builtin,
                },
            },
        }
    }

    /// The shape of the items of a list of this shape.
    pub fn item(self) -> Shape<'a> {
        match self {
            Shape::Custom(s) => s.get("items").map_or(Shape::Builtin, Shape::Custom),
            Shape::Builtin => Shape::Builtin,
        }
    }
}

/// The list type of field `field` (whose items are `items`).
pub fn list_type(field: &str, shape: Shape<'_>, items: &[Value]) -> ListType {
    if let Shape::Custom(s) = shape {
        return match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => {
                let keys: Vec<String> = s
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                if keys.is_empty() { ListType::Atomic } else { ListType::Map(keys) }
            }
            _ => ListType::Atomic,
        };
    }
    builtin_list_type(field, items)
}

fn keys(k: &[&str]) -> ListType {
    ListType::Map(k.iter().map(|s| s.to_string()).collect())
}

/// Built-in list types by field name (Kubernetes 1.37's markers).
fn builtin_list_type(field: &str, items: &[Value]) -> ListType {
    match field {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets" | "resourceClaims"
        | "schedulingGates" | "claims" | "drivers" | "versions" => keys(&["name"]),
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "conditions" | "addresses" => keys(&["type"]),
        "hostAliases" | "podIPs" | "hostIPs" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "ownerReferences" => keys(&["uid"]),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                keys(&["containerPort", "protocol"])
            } else if items.iter().any(|i| i.get("port").is_some()) {
                keys(&["port", "protocol"])
            } else {
                ListType::Atomic
            }
        }
        "finalizers" => ListType::Set,
        _ => ListType::Atomic,
    }
}

/// The map type of field `field`.
pub fn map_type(field: &str, shape: Shape<'_>) -> MapType {
    if let Shape::Custom(s) = shape {
        if s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
            return MapType::Atomic;
        }
        if s.get("properties").is_some() {
            return MapType::Struct;
        }
        if s.get("additionalProperties").is_some() || s.get("x-kubernetes-preserve-unknown-fields").is_some() {
            return MapType::Granular;
        }
        return MapType::Struct;
    }
    match field {
        "labels" | "annotations" | "data" | "binaryData" | "stringData" | "limits" | "requests" | "capacity" | "allocatable"
        | "overhead" | "parameters" | "hard" | "used" | "volumeAttributes" => MapType::Granular,
        "selector" | "nodeSelector" | "labelSelector" | "namespaceSelector" | "fieldRef" | "resourceFieldRef" | "configMapKeyRef"
        | "secretKeyRef" | "roleRef" => MapType::Atomic,
        _ => MapType::Struct,
    }
}

/// Non-pointer structs Go always serializes: never "added" themselves.
fn always_present(field: &str) -> bool {
    matches!(field, "metadata" | "spec" | "status" | "template" | "strategy" | "resources" | "updateStrategy")
}

fn field_pe(name: &str) -> String {
    // Not `format!`: its machinery costs more than the copy.
    let mut pe = String::with_capacity(name.len() + 2);
    pe.push_str("f:");
    pe.push_str(name);
    pe
}

/// The path element of an associative list's item, or None when a key
/// field is missing (`protocol` defaults to TCP, as upstream defaults it).
pub fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        match item.get(k) {
            Some(v) if !v.is_null() => {
                m.insert(k.clone(), v.clone());
            }
            _ if k == "protocol" => {
                m.insert(k.clone(), json!("TCP"));
            }
            _ => return None,
        }
    }
    Some(format!("k:{}", Value::Object(m)))
}

fn value_pe(v: &Value) -> String {
    format!("v:{v}")
}

/// The fields an applied configuration sets (upstream's `ToFieldSet`).
pub fn applied_set(obj: &Value, shape: Shape<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    let mut path = Vec::new();
    if let Value::Object(m) = obj {
        applied_object(m, MapType::Struct, shape, true, &mut path, &mut set);
    }
    set
}

fn applied_object(m: &Map<String, Value>, mt: MapType, shape: Shape<'_>, root: bool, path: &mut Vec<String>, set: &mut FieldSet) {
    for (k, v) in m {
        path.push(field_pe(k));
        let child = shape.field(k, root);
        let empty_obj = v.as_object().is_some_and(Map::is_empty);
        if v.is_null() || empty_obj || mt == MapType::Granular {
            set.insert(path);
        }
        applied_value(k, v, child, path, set);
        path.pop();
    }
}

fn applied_value(field: &str, v: &Value, shape: Shape<'_>, path: &mut Vec<String>, set: &mut FieldSet) {
    match v {
        Value::Object(m) => match map_type(field, shape) {
            MapType::Atomic => set.insert(path),
            mt => applied_object(m, mt, shape, false, path, set),
        },
        Value::Array(items) => list_members(field, shape, items, path, set, |i, item_shape, path, set| {
            set.insert(path);
            if let Value::Object(m) = i {
                applied_object(m, MapType::Struct, item_shape, false, path, set);
            }
        }),
        _ => set.insert(path),
    }
}

/// A list's members in a field set: the list itself when atomic, each
/// value of a set, and each item of an associative list by its key, which
/// `item` walks into (its path pushed).
fn list_members(field: &str, shape: Shape<'_>, items: &[Value], path: &mut Vec<String>, set: &mut FieldSet, mut item: impl FnMut(&Value, Shape<'_>, &mut Vec<String>, &mut FieldSet)) {
    match list_type(field, shape, items) {
        ListType::Atomic => set.insert(path),
        ListType::Set => {
            for i in items {
                path.push(value_pe(i));
                set.insert(path);
                path.pop();
            }
        }
        ListType::Map(keys) => {
            for i in items {
                let Some(pe) = item_key(i, &keys) else { continue };
                path.push(pe);
                item(i, shape.item(), path, set);
                path.pop();
            }
        }
    }
}

/// What changed between two versions of an object (upstream's
/// `Compare`): fields added or modified, and fields removed.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Added or modified.
    pub changed: FieldSet,
    /// Removed.
    pub removed: FieldSet,
    /// `changed` as FieldsV1 JSON, written on first use (a comparison
    /// shared by [`created_shared`] is written once for all its creates).
    changed_v1: std::sync::OnceLock<Box<str>>,
}

impl PartialEq for Comparison {
    fn eq(&self, other: &Self) -> bool {
        self.changed == other.changed && self.removed == other.removed
    }
}

impl Comparison {
    fn changed_fields_v1(&self) -> &str {
        self.changed_v1.get_or_init(|| {
            let mut out = Vec::new();
            self.changed.write_fields_v1(&mut out);
            String::from_utf8(out).unwrap_or_default().into_boxed_str()
        })
    }
}

/// The managedFields of a new object written by one manager's Update,
/// when the request brought no entries of its own: what [`record`] and
/// [`encode`] give then (the one entry, owning what the create changed),
/// without building the entry's field set, and writing the fields as the
/// comparison remembers them. `None` when the create sets no field
/// (there are then no managedFields).
pub fn encode_created(manager: &str, api_version: &str, subresource: &str, time: &str, cmp: &Comparison) -> Option<Value> {
    if cmp.changed.is_empty() {
        return None;
    }
    let fields = cmp.changed_fields_v1();
    let mut out = Vec::with_capacity(fields.len() + 160);
    out.push(b'[');
    write_entry_json(&mut out, api_version, |out| out.extend_from_slice(fields.as_bytes()), manager, Operation::Update.as_str(), subresource, Some(time));
    out.push(b']');
    String::from_utf8(out).ok().map(Value::String)
}

/// One managedFields entry's JSON text, keys in sorted order.
fn write_entry_json(out: &mut Vec<u8>, api_version: &str, fields_v1: impl FnOnce(&mut Vec<u8>), manager: &str, operation: &str, subresource: &str, time: Option<&str>) {
    out.extend_from_slice(b"{\"apiVersion\":");
    push_json_str(out, api_version);
    out.extend_from_slice(b",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":");
    fields_v1(out);
    out.extend_from_slice(b",\"manager\":");
    push_json_str(out, manager);
    out.extend_from_slice(b",\"operation\":");
    push_json_str(out, operation);
    if !subresource.is_empty() {
        out.extend_from_slice(b",\"subresource\":");
        push_json_str(out, subresource);
    }
    if let Some(t) = time {
        out.extend_from_slice(b",\"time\":");
        push_json_str(out, t);
    }
    out.push(b'}');
}

/// Compare two (tracked) objects.
pub fn compare(old: &Value, new: &Value, shape: Shape<'_>) -> Comparison {
    let mut c = Comparison::default();
    let mut path = Vec::new();
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => cmp_object(o, n, shape, true, &mut path, &mut c),
        _ => {
            all_paths("", new, shape, &mut path, &mut c.changed, false);
        }
    }
    c
}

fn cmp_object(o: &Map<String, Value>, n: &Map<String, Value>, shape: Shape<'_>, root: bool, path: &mut Vec<String>, c: &mut Comparison) {
    for (k, nv) in n {
        path.push(field_pe(k));
        let child = shape.field(k, root);
        match o.get(k) {
            None => all_paths(k, nv, child, path, &mut c.changed, !always_present(k)),
            Some(ov) => cmp_value(k, ov, nv, child, path, c),
        }
        path.pop();
    }
    for (k, ov) in o {
        if !n.contains_key(k) {
            path.push(field_pe(k));
            all_paths(k, ov, shape.field(k, root), path, &mut c.removed, true);
            path.pop();
        }
    }
}

fn cmp_value(field: &str, ov: &Value, nv: &Value, shape: Shape<'_>, path: &mut Vec<String>, c: &mut Comparison) {
    if ov == nv {
        return;
    }
    match (ov, nv) {
        (Value::Object(o), Value::Object(n)) if map_type(field, shape) != MapType::Atomic => {
            cmp_object(o, n, shape, false, path, c);
            if o.is_empty() != n.is_empty() {
                c.changed.insert(path);
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            let lt = list_type(field, shape, if n.is_empty() { o } else { n });
            match lt {
                ListType::Atomic => c.changed.insert(path),
                ListType::Set => {
                    for i in n.iter().filter(|i| !o.contains(i)) {
                        path.push(value_pe(i));
                        c.changed.insert(path);
                        path.pop();
                    }
                    for i in o.iter().filter(|i| !n.contains(i)) {
                        path.push(value_pe(i));
                        c.removed.insert(path);
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    let olds: BTreeMap<String, &Value> = o.iter().filter_map(|i| item_key(i, &keys).map(|k| (k, i))).collect();
                    let mut seen = Vec::new();
                    for ni in n {
                        let Some(pe) = item_key(ni, &keys) else { continue };
                        path.push(pe.clone());
                        match olds.get(&pe) {
                            Some(oi) => match (oi, ni) {
                                (Value::Object(om), Value::Object(nm)) => cmp_object(om, nm, shape.item(), false, path, c),
                                _ if *oi != ni => c.changed.insert(path),
                                _ => {}
                            },
                            None => all_paths("", ni, shape.item(), path, &mut c.changed, true),
                        }
                        path.pop();
                        seen.push(pe);
                    }
                    for (pe, oi) in &olds {
                        if !seen.contains(pe) {
                            path.push(pe.clone());
                            all_paths("", oi, shape.item(), path, &mut c.removed, true);
                            path.pop();
                        }
                    }
                }
            }
        }
        _ => {
            // Scalar changed, atomic replaced, or the type changed.
            if ov.is_object() || ov.is_array() {
                let mut gone = FieldSet::default();
                all_paths(field, ov, shape, path, &mut gone, false);
                c.removed = c.removed.union(&gone);
            }
            c.changed.insert(path);
        }
    }
}

/// Insert `path` (when `this`) and every path below it in `v`.
fn all_paths(field: &str, v: &Value, shape: Shape<'_>, path: &mut Vec<String>, set: &mut FieldSet, this: bool) {
    // Non-atomic lists are never members themselves (their items are).
    let empty_obj = v.as_object().is_some_and(Map::is_empty);
    if ((this && !v.is_array()) || empty_obj || !(v.is_object() || v.is_array())) && !path.is_empty() {
        set.insert(path);
    }
    match v {
        Value::Object(m) => {
            if map_type(field, shape) == MapType::Atomic {
                set.insert(path);
                return;
            }
            let root = path.is_empty();
            for (k, c) in m {
                path.push(field_pe(k));
                all_paths(k, c, shape.field(k, root), path, set, !always_present(k));
                path.pop();
            }
        }
        Value::Array(items) => list_members(field, shape, items, path, set, |i, item_shape, path, set| all_paths("", i, item_shape, path, set, true)),
        _ => {}
    }
}

/// Merge an applied configuration into the live object (upstream's
/// `Merge`): objects merged field by field, associative lists by key, sets
/// by value, atomic lists and scalars replaced; a null removes the field.
pub fn merge(live: &mut Value, cfg: &Value, shape: Shape<'_>) {
    merge_value("", live, cfg, shape, true);
}

fn merge_value(field: &str, live: &mut Value, cfg: &Value, shape: Shape<'_>, root: bool) {
    match (&mut *live, cfg) {
        (Value::Object(lm), Value::Object(cm)) if root || map_type(field, shape) != MapType::Atomic => {
            for (k, cv) in cm {
                if cv.is_null() {
                    lm.remove(k);
                    continue;
                }
                let child = shape.field(k, root);
                match lm.get_mut(k) {
                    Some(lv) => merge_value(k, lv, cv, child, false),
                    None => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(la), Value::Array(ca)) => match list_type(field, shape, ca) {
            ListType::Atomic => *live = cfg.clone(),
            ListType::Set => {
                for i in ca {
                    if !la.contains(i) {
                        la.push(i.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                for ci in ca {
                    let key = item_key(ci, &keys);
                    let pos = key.as_ref().and_then(|k| la.iter().position(|li| item_key(li, &keys).as_ref() == Some(k)));
                    match pos {
                        Some(p) => merge_value("", &mut la[p], ci, shape.item(), false),
                        None => la.push(ci.clone()),
                    }
                }
            }
        },
        _ => *live = cfg.clone(),
    }
}

/// Remove the field at `path` from `obj` (nothing when absent).
pub fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cur = obj;
    for pe in parents {
        let Some(next) = step(cur, pe) else { return };
        cur = next;
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Value::Object(m) = cur {
            m.remove(f);
        }
    } else if let Value::Array(a) = cur
        && let Some(i) = a.iter().position(|item| matches_pe(item, last))
    {
        a.remove(i);
    }
}

fn matches_pe(item: &Value, pe: &str) -> bool {
    if let Some(k) = pe.strip_prefix("k:") {
        let Ok(Value::Object(km)) = serde_json::from_str::<Value>(k) else { return false };
        let keys: Vec<String> = km.keys().cloned().collect();
        item_key(item, &keys).as_deref() == Some(pe)
    } else if let Some(v) = pe.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| &v == item)
    } else if let Some(i) = pe.strip_prefix("i:") {
        let _ = i;
        false
    } else {
        false
    }
}

fn step<'v>(cur: &'v mut Value, pe: &str) -> Option<&'v mut Value> {
    if let Some(f) = pe.strip_prefix("f:") {
        return cur.as_object_mut()?.get_mut(f);
    }
    let a = cur.as_array_mut()?;
    let i = a.iter().position(|item| matches_pe(item, pe))?;
    a.get_mut(i)
}

/// A managedFields operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The apiVersion of the write.
    pub api_version: String,
    /// `status` for the status subresource, else empty.
    pub subresource: String,
    /// When the entry last changed.
    pub time: Option<String>,
    /// The fields owned.
    pub set: FieldSet,
}

impl Entry {
    /// Whether `other` is the same manager (appliers are one manager
    /// whatever the apiVersion, as upstream's manager identifier).
    pub fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// The manager as upstream prints it in conflicts.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// [`Entry::to_json`]'s text, keys in sorted order.
    fn write_json(&self, out: &mut Vec<u8>) {
        let set = &self.set;
        write_entry_json(out, &self.api_version, |out| set.write_fields_v1(out), &self.manager, self.operation.as_str(), &self.subresource, self.time.as_deref());
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }
}

/// Read `metadata.managedFields` (a request's list, or the stored JSON
/// text [`encode`] makes).
pub fn decode(list: &Value) -> Result<Vec<Entry>, Error> {
    if let Value::String(text) = list {
        let parsed: Value = serde_json::from_str(text).map_err(|e| Error::Invalid(e.to_string()))?;
        return decode(&parsed);
    }
    let Value::Array(items) = list else {
        return Err(Error::Invalid("must be a list".into()));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, e) in items.iter().enumerate() {
        let s = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(Error::Invalid(format!("[{i}].operation: {other:?} is not Apply or Update"))),
        };
        let set = match e.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::default(),
        };
        out.push(Entry {
            manager: s("manager"),
            operation,
            api_version: s("apiVersion"),
            subresource: s("subresource"),
            time: e.get("time").and_then(Value::as_str).map(String::from),
            set,
        });
    }
    Ok(out)
}

/// Write `metadata.managedFields`, sorted as upstream (operation, time,
/// manager), as the stored form: the list's JSON text. Field sets are
/// trees of small maps that as a `Value` cost several KiB per object and
/// per stored version; `store::Obj` writes the text as the list on the wire.
///
/// The text is written directly (every write of an object pays for it),
/// byte for byte what serializing [`encode_list`] gives: keys in sorted
/// order, as `serde_json`'s maps keep them.
pub fn encode(entries: &[Entry]) -> Value {
    let mut out: Vec<u8> = Vec::with_capacity(512);
    out.push(b'[');
    for (i, e) in sorted_entries(entries).into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        e.write_json(&mut out);
    }
    out.push(b']');
    match String::from_utf8(out) {
        Ok(text) => Value::String(text),
        Err(_) => Value::String(encode_list(entries).to_string()),
    }
}

fn sorted_entries(entries: &[Entry]) -> Vec<&Entry> {
    let mut sorted: Vec<&Entry> = entries.iter().filter(|e| !e.set.is_empty()).collect();
    sorted.sort_by(|a, b| {
        (a.operation.as_str(), a.time.as_deref().unwrap_or(""), a.manager.as_str())
            .cmp(&(b.operation.as_str(), b.time.as_deref().unwrap_or(""), b.manager.as_str()))
    });
    sorted
}

/// A JSON string (quoted and escaped) into `out`.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

/// `metadata.managedFields` as the list itself.
pub fn encode_list(entries: &[Entry]) -> Value {
    Value::Array(sorted_entries(entries).into_iter().map(Entry::to_json).collect())
}

/// Whether a request's `managedFields` asks for a reset (`[]` or `[{}]`).
pub fn is_reset(list: &Value) -> bool {
    match list {
        Value::Array(a) if a.is_empty() => true,
        Value::Array(a) if a.len() == 1 => a[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// An apply conflict: the other manager and the path.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// The other manager, as printed.
    pub manager: String,
    /// The path, as printed.
    pub field: String,
}

/// Upstream's message for apply conflicts.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", c.manager, c.field);
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in conflicts {
        by_manager.entry(&c.manager).or_default().push(&c.field);
    }
    let mut lines = Vec::new();
    for (m, fields) in by_manager {
        lines.push(format!("conflicts with {m}:"));
        for f in fields {
            lines.push(format!("- {f}"));
        }
    }
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

/// Record a write by `me` that changed the object as `cmp` says: for an
/// Apply, `me`'s set is what it applied and fields other managers own
/// with a different value are conflicts (unless `force`, which takes them
/// over); for an Update, `me` gains what changed and others lose it.
/// Removed fields leave every manager. Returns the conflicts when refused.
pub fn record(entries: &mut Vec<Entry>, me: Entry, cmp: &Comparison, force: bool) -> Result<(), Vec<Conflict>> {
    let apply = me.operation == Operation::Apply;
    let mut conflicts = Vec::new();
    let mut taken: Vec<FieldSet> = Vec::with_capacity(entries.len());
    for e in entries.iter() {
        if e.same_manager(&me) {
            taken.push(FieldSet::default());
            continue;
        }
        let c = e.set.intersection(&cmp.changed);
        if apply && !force {
            for p in c.paths() {
                conflicts.push(Conflict { manager: e.describe(), field: path_string(&p) });
            }
        }
        taken.push(c);
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut prev = FieldSet::default();
    let mut prev_time = None;
    let mut kept = Vec::with_capacity(entries.len() + 1);
    for (e, c) in entries.drain(..).zip(taken) {
        if e.same_manager(&me) {
            prev = prev.union(&e.set);
            prev_time = e.time.clone();
            continue;
        }
        let set = e.set.difference(&c).difference(&cmp.removed);
        if !set.is_empty() {
            kept.push(Entry { set, ..e });
        }
    }
    let set = if apply { me.set.clone() } else { prev.difference(&cmp.removed).union(&cmp.changed) };
    // An entry whose fields did not change keeps its time (so a write
    // that changes nothing stays a no-op).
    let time = if set == prev && prev_time.is_some() { prev_time } else { me.time.clone() };
    if !set.is_empty() {
        kept.push(Entry { set, time, ..me });
    }
    *entries = kept;
    Ok(())
}

/// The manager a request without `fieldManager` gets: its User-Agent up
/// to the first `/`, printable characters only, at most 128 bytes.
pub fn manager_from_user_agent(ua: &str) -> String {
    let head = ua.split('/').next().unwrap_or("");
    let mut out = String::new();
    for ch in head.chars().filter(|c| !c.is_control()) {
        if out.len() + ch.len_utf8() > 128 {
            break;
        }
        out.push(ch);
    }
    out
}

/// The part of an object whose fields are tracked: no apiVersion, kind or
/// server-set metadata; only `status` for status writes, no `status` for
/// main-resource writes of kinds with a status subresource.
pub fn tracked(obj: &Value, has_status: bool, status_only: bool) -> Value {
    let Value::Object(m) = obj else { return json!({}) };
    let mut out = Map::new();
    for (k, v) in m {
        match tracked_part(k, v, has_status, status_only) {
            Tracked::No => {}
            Tracked::Whole => {
                out.insert(k.clone(), v.clone());
            }
            Tracked::Meta(mm) => {
                out.insert(k.clone(), Value::Object(mm));
            }
        }
    }
    Value::Object(out)
}

/// The metadata fields the server sets, which no manager owns.
const SERVER_METADATA: [&str; 10] =
    ["name", "namespace", "uid", "creationTimestamp", "selfLink", "generation", "managedFields", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"];

/// How much of a top-level field [`tracked`] keeps.
enum Tracked {
    No,
    Whole,
    /// The metadata map without [`SERVER_METADATA`] (never empty).
    Meta(Map<String, Value>),
}

fn tracked_part(k: &str, v: &Value, has_status: bool, status_only: bool) -> Tracked {
    match k {
        "apiVersion" | "kind" => Tracked::No,
        "status" if has_status && !status_only => Tracked::No,
        "status" => Tracked::Whole,
        _ if status_only => Tracked::No,
        "metadata" => match v {
            Value::Object(meta) => {
                let mm: Map<String, Value> = meta.iter().filter(|(f, _)| !SERVER_METADATA.contains(&f.as_str())).map(|(f, x)| (f.clone(), x.clone())).collect();
                if mm.is_empty() { Tracked::No } else { Tracked::Meta(mm) }
            }
            _ => Tracked::No,
        },
        _ => Tracked::Whole,
    }
}

/// What creating `new` changes: `compare(&json!({}), &tracked(new, ..))`
/// without copying the object (only its metadata's few kept fields).
pub fn created(new: &Value, has_status: bool, status_only: bool, shape: Shape<'_>) -> Comparison {
    let mut c = Comparison::default();
    let Value::Object(m) = new else { return c };
    let mut path = Vec::new();
    for (k, v) in m {
        let meta;
        let v = match tracked_part(k, v, has_status, status_only) {
            Tracked::No => continue,
            Tracked::Whole => v,
            Tracked::Meta(mm) => {
                meta = Value::Object(mm);
                &meta
            }
        };
        path.push(field_pe(k));
        all_paths(k, v, shape.field(k, true), &mut path, &mut c.changed, !always_present(k));
        path.pop();
    }
    c
}

/// How many shapes [`created_shared`] remembers per thread (then it
/// starts over).
const SHAPES_KEPT: usize = 64;

thread_local! {
    static CREATED: RefCell<HashMap<Vec<u8>, Arc<Comparison>>> = RefCell::new(HashMap::new());
}

/// [`created`] for built-in kinds, remembered by the object's shape.
///
/// What a create changes depends on the object's field names and the
/// kinds of its values (object, list or scalar), and on the values inside
/// lists (a set's items, an associative list's keys), but never on a
/// scalar's value outside a list: replicas of one template (every pod of a
/// ReplicaSet, every event of one reason) differ only there, and share one
/// answer. The shape is written out whole (nothing is hashed away), so two
/// objects share an answer only when `created` would give them the same.
/// Custom resources, whose list types come from their schema, are not
/// remembered.
pub fn created_shared(new: &Value, has_status: bool, status_only: bool, shape: Shape<'_>) -> Arc<Comparison> {
    if !matches!(shape, Shape::Builtin) {
        return Arc::new(created(new, has_status, status_only, shape));
    }
    let mut key = vec![u8::from(has_status), u8::from(status_only)];
    write_shape(new, &mut key);
    let hit = CREATED.with(|c| c.try_borrow().ok().and_then(|m| m.get(&key).cloned()));
    if let Some(c) = hit {
        return c;
    }
    let c = Arc::new(created(new, has_status, status_only, shape));
    CREATED.with(|cell| {
        if let Ok(mut m) = cell.try_borrow_mut() {
            if m.len() >= SHAPES_KEPT {
                m.clear();
            }
            m.insert(key, c.clone());
        }
    });
    c
}

/// The shape of `v` as [`created_shared`] keys it: objects as their keys
/// (length-prefixed) and the shapes of their values, scalars outside lists
/// as their type only, lists as their items' whole JSON text.
fn write_shape(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            out.push(b'{');
            for (k, c) in m {
                out.extend_from_slice(&(k.len() as u64).to_le_bytes());
                out.extend_from_slice(k.as_bytes());
                write_shape(c, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for i in items {
                // JSON text is self-delimiting; a value always serializes.
                let _ = serde_json::to_writer(&mut *out, i);
                out.push(b',');
            }
            out.push(b']');
        }
        Value::Null => out.push(b'n'),
        Value::Bool(_) => out.push(b'b'),
        Value::Number(_) => out.push(b'd'),
        Value::String(_) => out.push(b's'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a create changes is what comparing the tracked object with
    /// nothing gives.
    #[test]
    fn created_is_compare_with_nothing() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"a": "b"}, "annotations": {}, "finalizers": ["x"], "managedFields": "[]"},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}], "tolerations": [{"key": "k"}], "nodeSelector": {}},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}});
        let bare = json!({"metadata": {"name": "only-server-fields", "uid": "u"}, "data": {"k": "v"}, "binaryData": null});
        for obj in [pod, bare, deploy(2, "nginx"), json!({"metadata": "odd", "spec": 1}), json!([])] {
            for (has_status, status_only) in [(true, false), (true, true), (false, false)] {
                let want = compare(&json!({}), &tracked(&obj, has_status, status_only), Shape::Builtin);
                assert_eq!(created(&obj, has_status, status_only, Shape::Builtin), want, "{obj} {has_status} {status_only}");
            }
        }
    }

    /// A remembered answer is the answer: objects that differ only in
    /// scalars outside lists share one, any other difference does not.
    #[test]
    fn a_shared_create_is_the_create() {
        let pod = |name: &str, label: &str, image: &str, port: Option<u64>| {
            let mut c = json!({"name": "c", "image": image});
            if let Some(p) = port {
                c["ports"] = json!([{"containerPort": p}]);
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "d", "uid": name, "labels": {label: name}, "finalizers": ["x", name]},
                "spec": {"containers": [c], "nodeName": name, "priority": 1, "tolerations": [{"key": name}]},
                "status": {"phase": "Pending", "conditions": [{"type": name, "status": "True"}]}})
        };
        let objects = [
            pod("a", "app", "i", None),
            pod("b", "app", "i", None),
            pod("c", "tier", "i", None),
            pod("a", "app", "j", None),
            pod("a", "app", "i", Some(80)),
            pod("b", "app", "i", Some(81)),
            deploy(2, "nginx"),
            deploy(3, "nginx"),
            json!({"metadata": {"name": "x"}, "data": {"k": "v", "n": null, "o": {}}}),
            json!({"metadata": {"name": "x"}, "data": {"k": "v", "n": "w", "o": {}}}),
            json!({"metadata": "odd", "spec": 1}),
            json!([]),
        ];
        for _ in 0..2 {
            for obj in &objects {
                for (has_status, status_only) in [(true, false), (true, true), (false, false)] {
                    let want = created(obj, has_status, status_only, Shape::Builtin);
                    assert_eq!(*created_shared(obj, has_status, status_only, Shape::Builtin), want, "{obj} {has_status} {status_only}");
                }
            }
        }
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"l": {"type": "array", "x-kubernetes-list-type": "set"}}}}});
        let cr = json!({"metadata": {"name": "x"}, "spec": {"l": ["a", "b"]}});
        assert_eq!(*created_shared(&cr, false, false, Shape::Custom(&schema)), created(&cr, false, false, Shape::Custom(&schema)));
        // What a plain create records, written from the shared comparison,
        // is what recording and encoding its entry gives.
        for _ in 0..2 {
            for obj in objects.iter().chain([&cr, &json!({"metadata": {"name": "x"}})]) {
                for (has_status, status_only) in [(true, false), (true, true), (false, false)] {
                    let cmp = created_shared(obj, has_status, status_only, Shape::Builtin);
                    let sub = if status_only { "status" } else { "" };
                    let me = Entry {
                        manager: "m\"1".into(),
                        operation: Operation::Update,
                        api_version: "v1".into(),
                        subresource: sub.into(),
                        time: Some("2026-01-01T00:00:00Z".into()),
                        set: FieldSet::default(),
                    };
                    let mut entries = Vec::new();
                    assert!(record(&mut entries, me, &cmp, false).is_ok());
                    let want = (!entries.iter().all(|e| e.set.is_empty())).then(|| encode(&entries));
                    assert_eq!(encode_created("m\"1", "v1", sub, "2026-01-01T00:00:00Z", &cmp), want, "{obj} {has_status} {status_only}");
                }
            }
        }
    }

    /// The text `encode` writes is what serializing `encode_list` gives.
    #[test]
    fn encoded_text_is_the_list_serialized() {
        let p = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut a = FieldSet::default();
        a.insert(&p(&["f:metadata", "f:labels", "f:app"]));
        a.insert(&p(&["f:metadata", "f:labels"]));
        a.insert(&p(&["f:spec", "f:containers", r#"k:{"name":"c\"x"}"#, "f:image"]));
        a.insert(&p(&["f:spec", "f:containers", r#"k:{"name":"c\"x"}"#]));
        a.insert(&p(&["f:spec", "f:finalizers", r#"v:"a""#]));
        let mut b = FieldSet::default();
        b.insert(&p(&["f:status", "f:phase"]));
        let entry = |manager: &str, operation, subresource: &str, time: Option<&str>, set: &FieldSet| Entry {
            manager: manager.into(),
            operation,
            api_version: "apps/v1".into(),
            subresource: subresource.into(),
            time: time.map(str::to_string),
            set: set.clone(),
        };
        let entries = vec![
            entry("kubelet", Operation::Update, "status", Some("2026-01-01T00:00:01Z"), &b),
            entry("kubectl", Operation::Apply, "", None, &a),
            entry("é\u{1}", Operation::Update, "", Some("2026-01-01T00:00:00Z"), &a),
            entry("empty", Operation::Update, "", None, &FieldSet::default()),
        ];
        assert_eq!(encode(&entries), Value::String(encode_list(&entries).to_string()));
        assert_eq!(encode(&[]), Value::String("[]".into()));
    }

    fn deploy(replicas: i64, image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": image, "ports": [{"containerPort": 80}]}]}}}})
    }

    #[test]
    fn applied_set_in_upstream_format() {
        let set = applied_set(&deploy(2, "nginx"), Shape::Builtin);
        let v = set.to_fields_v1();
        assert_eq!(v["f:metadata"], json!({"f:labels": {"f:app": {}}}));
        assert_eq!(v["f:spec"]["f:selector"], json!({}));
        assert_eq!(v["f:spec"]["f:replicas"], json!({}));
        let c = &v["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
        assert_eq!(c["."], json!({}));
        assert_eq!(c["f:image"], json!({}));
        assert_eq!(c["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["f:containerPort"], json!({}));
        assert_eq!(FieldSet::from_fields_v1(&v).ok(), Some(set));
    }

    #[test]
    fn path_strings_as_upstream() {
        let p = vec!["f:spec".to_string(), "f:containers".into(), "k:{\"name\":\"app\"}".into(), "f:image".into()];
        assert_eq!(path_string(&p), ".spec.containers[name=\"app\"].image");
        assert_eq!(path_string(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]), ".metadata.finalizers[=\"x\"]");
    }

    #[test]
    fn compare_finds_changes_and_removals() {
        let c = compare(&deploy(1, "a"), &deploy(2, "b"), Shape::Builtin);
        let paths: Vec<String> = c.changed.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(paths, vec![".spec.replicas", ".spec.template.spec.containers[name=\"app\"].image"]);
        let mut old = deploy(1, "a");
        old["metadata"]["labels"]["tier"] = json!("x");
        let c = compare(&old, &deploy(1, "a"), Shape::Builtin);
        assert_eq!(c.removed.paths().iter().map(|p| path_string(p)).collect::<Vec<_>>(), vec![".metadata.labels.tier"]);
    }

    #[test]
    fn merge_by_key_and_remove() {
        let mut live = deploy(1, "a");
        if let Some(a) = live["spec"]["template"]["spec"]["containers"].as_array_mut() {
            a.push(json!({"name": "side", "image": "s"}));
        }
        merge(&mut live, &json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "b"}]}}}}), Shape::Builtin);
        assert_eq!(live["spec"]["template"]["spec"]["containers"][0]["image"], json!("b"));
        assert_eq!(live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], json!(80));
        assert_eq!(live["spec"]["template"]["spec"]["containers"][1]["name"], json!("side"));
        remove_path(&mut live, &["f:spec".into(), "f:template".into(), "f:spec".into(), "f:containers".into(), "k:{\"name\":\"side\"}".into()]);
        assert_eq!(live["spec"]["template"]["spec"]["containers"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn conflicts_unless_same_value_or_forced() {
        let other = Entry {
            manager: "kubectl-client-side-apply".into(),
            operation: Operation::Update,
            api_version: "apps/v1".into(),
            subresource: String::new(),
            time: None,
            set: applied_set(&deploy(1, "a"), Shape::Builtin),
        };
        let me = Entry { manager: "kubectl".into(), operation: Operation::Apply, set: applied_set(&json!({"spec": {"replicas": 3}}), Shape::Builtin), ..other.clone() };
        let cmp = compare(&deploy(1, "a"), &deploy(3, "a"), Shape::Builtin);
        let mut entries = vec![other.clone()];
        let err = record(&mut entries, me.clone(), &cmp, false).err().unwrap_or_default();
        assert_eq!(conflict_message(&err), "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas");
        // Same value: shared.
        let same = compare(&deploy(1, "a"), &deploy(1, "a"), Shape::Builtin);
        let mut entries = vec![other.clone()];
        assert!(record(&mut entries, me.clone(), &same, false).is_ok());
        assert_eq!(entries.len(), 2);
        assert!(entries.iter().all(|e| e.set.has(&["f:spec".into(), "f:replicas".into()])));
        // Forced: taken over.
        let mut entries = vec![other];
        assert!(record(&mut entries, me, &cmp, true).is_ok());
        assert!(!entries[0].set.has(&["f:spec".into(), "f:replicas".into()]));
        assert!(entries[1].set.has(&["f:spec".into(), "f:replicas".into()]));
    }

    #[test]
    fn managers_from_user_agents() {
        assert_eq!(manager_from_user_agent("kubectl/v1.32.0 (linux/amd64) kubernetes/abc"), "kubectl");
        assert_eq!(manager_from_user_agent(&"x".repeat(300)).len(), 128);
    }

    #[test]
    fn crd_schema_list_types() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"], "items": {"type": "object", "properties": {"id": {"type": "string"}, "v": {"type": "integer"}}}},
            "tags": {"type": "array", "items": {"type": "string"}}}}}});
        let set = applied_set(&json!({"spec": {"items": [{"id": "a", "v": 1}], "tags": ["x"]}}), Shape::Custom(&schema));
        let v = set.to_fields_v1();
        assert_eq!(v["f:spec"]["f:items"]["k:{\"id\":\"a\"}"]["f:v"], json!({}));
        assert_eq!(v["f:spec"]["f:tags"], json!({}));
    }
}
