//! core/v1 Events as a view of events.k8s.io/v1 Events.
//!
//! The API server stores an Event once and serves it through both groups,
//! converting on the way in and out; a write through either is read
//! through the other at the same resourceVersion. The local cluster does
//! the same: events live in the events.k8s.io/v1 store (the form a
//! scheduler writes, so its writes are never converted) and core/v1 is a
//! view of it. The two forms differ only in the names of some top-level
//! fields, so the conversion is a renaming, both ways.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::managed::Entry;
use crate::resources::ResourceInfo;

/// The core/v1 apiVersion.
pub const CORE: &str = "v1";

/// The events.k8s.io/v1 apiVersion (the stored form).
pub const STORED: &str = "events.k8s.io/v1";

/// Top-level fields named differently: (core/v1, events.k8s.io/v1).
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// An object's top-level fields moved from one form's names to the
/// other's. A field named as the target form names it, but unknown to the
/// source form, is dropped first (the API server drops unknown fields;
/// left in, it would be read as the renamed field).
fn rename(m: &mut Map<String, Value>, to_stored: bool) {
    let way = |&(core, stored): &(&'static str, &'static str)| if to_stored { (core, stored) } else { (stored, core) };
    for (_, to) in RENAMED.iter().map(way) {
        m.remove(to);
    }
    for (from, to) in RENAMED.iter().map(way) {
        if let Some(v) = m.remove(from) {
            m.insert(to.to_string(), v);
        }
    }
}

/// Whether a resource is the Events store (events.k8s.io/v1, which core/v1 shows).
pub fn is_events(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.kind == "Event"
}

/// managedFields entries of a stored Event, as the store tracks them: every
/// field set in the stored form's names. An entry written through core/v1
/// (its apiVersion `v1`) names its fields as core/v1 does on the wire, as
/// the API server keeps each entry in its own version; `to_stored` moves
/// such entries' names to the stored form's, `!to_stored` back.
pub fn entries_to(entries: &mut [Entry], to_stored: bool) {
    for e in entries.iter_mut().filter(|e| e.api_version == CORE) {
        let way = |&(core, stored): &(&'static str, &'static str)| if to_stored { (core, stored) } else { (stored, core) };
        // As `rename`: a target name unknown to the source form goes first.
        for (_, to) in RENAMED.iter().map(way) {
            e.set.remove_field(to);
        }
        for (from, to) in RENAMED.iter().map(way) {
            e.set.rename_field(from, to);
        }
    }
}

/// A core/v1 Event (or a patch shaped like one) in the stored form. Its
/// apiVersion is changed when it is core/v1's, so that a wrong one is
/// still refused by name.
pub fn to_stored(v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        rename(m, true);
        if m.get("apiVersion").and_then(Value::as_str) == Some(CORE) {
            m.insert("apiVersion".into(), Value::String(STORED.into()));
        }
    }
}

/// A stored Event in its core/v1 form.
pub fn to_core(v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        rename(m, false);
        if m.get("apiVersion").and_then(Value::as_str) == Some(STORED) {
            m.insert("apiVersion".into(), Value::String(CORE.into()));
        }
    }
}

/// A JSON Pointer into a core/v1 Event, into the stored form (its first
/// token renamed).
pub fn pointer_to_stored(pointer: &str) -> Cow<'_, str> {
    let Some(rest) = pointer.strip_prefix('/') else {
        return Cow::Borrowed(pointer);
    };
    let (first, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match RENAMED.iter().find(|(core, _)| *core == first) {
        Some((_, stored)) => Cow::Owned(format!("/{stored}{tail}")),
        // A name only the stored form has is unknown to core/v1: keep it
        // out of reach of a core/v1 patch.
        None if RENAMED.iter().any(|(_, stored)| *stored == first) => Cow::Owned(format!("/-core-unknown-{first}{tail}")),
        None => Cow::Borrowed(pointer),
    }
}

/// A JSON patch (RFC 6902) written against the core/v1 form, against the
/// stored form: every `path` and `from` renamed, and a whole-object value
/// converted.
pub fn json_patch_to_stored(ops: &mut Value) {
    let Some(ops) = ops.as_array_mut() else { return };
    for op in ops.iter_mut().filter_map(Value::as_object_mut) {
        for key in ["path", "from"] {
            if let Some(Value::String(p)) = op.get_mut(key)
                && let Cow::Owned(q) = pointer_to_stored(p)
            {
                *p = q;
            }
        }
        if op.get("path").and_then(Value::as_str) == Some("")
            && let Some(v) = op.get_mut("value")
        {
            to_stored(v);
        }
    }
}

/// A core/v1 field selector's field (JSON Pointer), as the stored form
/// keeps it: `involvedObject.*` is `regarding.*`, `reportingComponent` is
/// `reportingController`; `source` is [`source`], kept under its own name.
pub fn selector_to_stored(pointer: &str) -> Cow<'_, str> {
    if pointer == "/source" { Cow::Borrowed(pointer) } else { pointer_to_stored(pointer) }
}

/// The `source` field selectors compare, of a stored Event.
pub fn source(stored: &Value) -> &str {
    let text = |p: &[&str]| p.iter().try_fold(stored, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or("");
    match text(&["deprecatedSource", "component"]) {
        "" => text(&["reportingController"]),
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_written_through_core_v1_name_their_fields_as_core_v1() {
        use crate::managed::{FieldSet, Operation};
        let set = |v: Value| FieldSet::from_fields_v1(&v).unwrap();
        let entry = |api_version: &str, fields: Value| Entry {
            manager: "m".into(),
            operation: Operation::Update,
            api_version: api_version.into(),
            subresource: String::new(),
            time: None,
            set: set(fields),
        };
        let core_fields = json!({"f:message": {}, "f:involvedObject": {"f:name": {}}, "f:reason": {}, "f:note": {}});
        let mut entries = vec![entry(CORE, core_fields), entry(STORED, json!({"f:note": {}, "f:message": {}}))];
        entries_to(&mut entries, true);
        // core/v1's names become the stored ones; `note` is no core/v1 field.
        assert_eq!(entries[0].set, set(json!({"f:note": {}, "f:regarding": {"f:name": {}}, "f:reason": {}})));
        // An events.k8s.io/v1 entry is left as it is.
        assert_eq!(entries[1].set, set(json!({"f:note": {}, "f:message": {}})));
        entries_to(&mut entries, false);
        assert_eq!(entries[0].set, set(json!({"f:message": {}, "f:involvedObject": {"f:name": {}}, "f:reason": {}})));
    }

    fn core_event() -> Value {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}, "message": "bound", "reason": "Scheduled",
            "type": "Normal", "reportingComponent": "berth", "reportingInstance": "b-0", "source": {"component": "berth", "host": "h"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:01Z", "count": 2,
            "eventTime": null, "action": "Binding", "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}})
    }

    /// Every core/v1 field lands on its events.k8s.io/v1 name and back,
    /// the same object again.
    #[test]
    fn an_event_goes_to_the_stored_form_and_back_unchanged() {
        let core = core_event();
        let mut v = core.clone();
        to_stored(&mut v);
        assert_eq!(v["apiVersion"], STORED);
        assert_eq!(v["regarding"]["name"], "p");
        assert_eq!(v["note"], "bound");
        assert_eq!(v["reportingController"], "berth");
        assert_eq!(v["deprecatedSource"]["host"], "h");
        assert_eq!(v["deprecatedCount"], 2);
        assert_eq!(v["deprecatedLastTimestamp"], "2026-01-01T00:00:01Z");
        assert_eq!(v["series"]["count"], 2);
        for (c, _) in RENAMED {
            assert!(v.get(c).is_none(), "{c} left in the stored form");
        }
        to_core(&mut v);
        assert_eq!(v, core);
    }

    /// A field core/v1 does not have is not smuggled in under the stored
    /// form's name (`note` in a core/v1 body is unknown there, dropped).
    #[test]
    fn a_stored_forms_name_in_a_core_body_is_dropped() {
        let mut v = json!({"apiVersion": "v1", "note": "smuggled", "regarding": {"name": "x"}, "reason": "R"});
        to_stored(&mut v);
        assert_eq!(v, json!({"apiVersion": STORED, "reason": "R"}));
        let mut w = json!({"apiVersion": "events.k8s.io/v1", "message": "m", "note": "n"});
        to_core(&mut w);
        assert_eq!(w, json!({"apiVersion": "v1", "message": "n"}));
        // Another apiVersion is left for the store to refuse by name.
        let mut x = json!({"apiVersion": "apps/v1", "message": "m"});
        to_stored(&mut x);
        assert_eq!(x, json!({"apiVersion": "apps/v1", "note": "m"}));
    }

    #[test]
    fn patches_and_selectors_are_renamed() {
        assert_eq!(pointer_to_stored("/involvedObject/name"), "/regarding/name");
        assert_eq!(pointer_to_stored("/count"), "/deprecatedCount");
        assert_eq!(pointer_to_stored("/reason"), "/reason");
        assert_eq!(pointer_to_stored("/metadata/labels/a"), "/metadata/labels/a");
        assert_eq!(pointer_to_stored(""), "");
        assert!(pointer_to_stored("/note").starts_with("/-core-unknown-"));
        assert_eq!(selector_to_stored("/involvedObject/uid"), "/regarding/uid");
        assert_eq!(selector_to_stored("/reportingComponent"), "/reportingController");
        assert_eq!(selector_to_stored("/source"), "/source");
        let mut ops = json!([
            {"op": "replace", "path": "/message", "value": "m"},
            {"op": "move", "from": "/firstTimestamp", "path": "/lastTimestamp"},
            {"op": "replace", "path": "", "value": {"apiVersion": "v1", "message": "whole"}},
        ]);
        json_patch_to_stored(&mut ops);
        assert_eq!(ops, json!([
            {"op": "replace", "path": "/note", "value": "m"},
            {"op": "move", "from": "/deprecatedFirstTimestamp", "path": "/deprecatedLastTimestamp"},
            {"op": "replace", "path": "", "value": {"apiVersion": STORED, "note": "whole"}},
        ]));
    }

    #[test]
    fn the_source_is_the_deprecated_source_or_the_reporting_controller() {
        assert_eq!(source(&json!({"deprecatedSource": {"component": "kubelet"}, "reportingController": "x"})), "kubelet");
        assert_eq!(source(&json!({"deprecatedSource": {}, "reportingController": "berth"})), "berth");
        assert_eq!(source(&json!({})), "");
    }
}
