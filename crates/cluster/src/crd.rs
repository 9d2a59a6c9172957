//! CustomResourceDefinitions: what the API server checks in a CRD, the
//! status it writes (NamesAccepted, Established), the served resources it
//! defines, and what the schema of a version does to a custom object
//! (pruning of unknown fields, defaults, and a structural validation:
//! types, `required`, `enum`, numeric bounds, string and list lengths).
//!
//! Not done (the local cluster's simplifications): CEL rules
//! (`x-kubernetes-validations`), `pattern`/`format` checks, conversion
//! webhooks (every version is served from one store with its apiVersion
//! rewritten, as the `None` conversion strategy does), the `scale`
//! subresource, and metadata pruning beyond what ObjectMeta keeps.

use std::sync::Arc;

use super::jsonptr::Pointer as _;
use serde_json::{Map, Value, json};

use super::resources::{self as res, CustomInfo, ResourceInfo};

/// The served versions of a CRD as resources, and its storage version.
#[derive(Debug)]
pub struct Definition {
    /// One description per served version, in the CRD's order.
    pub versions: Vec<ResourceInfo>,
    /// `spec.versions[*].name` of the one with `storage: true`.
    pub storage_version: String,
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, p: &str) -> Vec<String> {
    v.at(p).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
}

/// Upstream's CRD validation, the checks a client is likely to meet;
/// returns field errors as upstream prints them.
pub fn validate(crd: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let name = s(crd, "/metadata/name");
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    if group.is_empty() {
        errs.push("spec.group: Required value".to_string());
    } else if !group.contains('.') {
        errs.push(format!("spec.group: Invalid value: \"{group}\": should be a domain with at least one dot"));
    }
    if plural.is_empty() {
        errs.push("spec.names.plural: Required value".to_string());
    }
    if s(crd, "/spec/names/kind").is_empty() {
        errs.push("spec.names.kind: Required value".to_string());
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push(format!("metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"));
    }
    match s(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        "" => errs.push("spec.scope: Required value".to_string()),
        other => errs.push(format!("spec.scope: Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\"")),
    }
    let versions = crd.at("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push("spec.versions: Invalid value: null: must have exactly one version marked as storage version".to_string());
        return errs;
    }
    let storage = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if storage != 1 {
        errs.push(format!(
            "spec.versions: Invalid value: {}: must have exactly one version marked as storage version",
            Value::Array(versions.clone())
        ));
    }
    if !versions.iter().any(|v| v.get("served").and_then(Value::as_bool) == Some(true)) {
        errs.push(format!("spec.versions: Invalid value: {}: must have at least one version served", Value::Array(versions.clone())));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vn = s(v, "/name");
        if vn.is_empty() {
            errs.push(format!("spec.versions[{i}].name: Required value"));
        } else if seen.contains(&vn) {
            errs.push(format!("spec.versions[{i}].name: Duplicate value: \"{vn}\""));
        } else if res::validate_name(vn).is_some() || vn.contains('.') {
            errs.push(format!("spec.versions[{i}].name: Invalid value: \"{vn}\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"));
        }
        seen.push(vn);
        if v.at("/schema/openAPIV3Schema").is_none() {
            errs.push(format!("spec.versions[{i}].schema.openAPIV3Schema: Required value: schemas are required"));
        }
    }
    errs
}

/// The CRD's status as the API server's controllers write it: names
/// accepted, established, and the stored versions.
pub fn status(crd: &Value, old_status: Option<&Value>, now: &str) -> Value {
    let names = accepted_names(crd);
    let storage = crd
        .at("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true)))
        .map(|v| s(v, "/name").to_string())
        .unwrap_or_default();
    let mut stored = old_status.map(|st| strings(st, "/storedVersions")).unwrap_or_default();
    if !storage.is_empty() && !stored.contains(&storage) {
        stored.push(storage);
    }
    let since = |ty: &str| {
        old_status
            .and_then(|st| st.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty)))
            .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str))
            .unwrap_or(now)
            .to_string()
    };
    json!({
        "acceptedNames": names,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": since("Established")},
        ],
        "storedVersions": stored,
    })
}

/// `spec.names` with upstream's defaults (singular: the lowercased kind;
/// listKind: kind + "List").
fn accepted_names(crd: &Value) -> Value {
    let mut names = crd.at("/spec/names").cloned().unwrap_or_else(|| json!({}));
    let kind = s(crd, "/spec/names/kind").to_string();
    if let Some(m) = names.as_object_mut() {
        if m.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if m.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    names
}

/// The resources a (valid) CRD defines: one per served version.
pub fn definition(crd: &Value) -> Definition {
    let names = accepted_names(crd);
    let group = res::intern(s(crd, "/spec/group"));
    let plural = res::intern(s(&names, "/plural"));
    let singular = res::intern(s(&names, "/singular"));
    let kind = res::intern(s(&names, "/kind"));
    let short_names = res::intern_list(&strings(&names, "/shortNames"));
    let namespaced = s(crd, "/spec/scope") == "Namespaced";
    let name = s(crd, "/metadata/name").to_string();
    let mut versions = Vec::new();
    let mut storage_version = String::new();
    for v in crd.at("/spec/versions").and_then(Value::as_array).into_iter().flatten() {
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage_version = s(v, "/name").to_string();
        }
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let has_status = v.at("/subresources/status").is_some_and(|x| !x.is_null());
        let pointer = |p: &str| -> String { p.trim_start_matches('.').split('.').map(|seg| format!("/{seg}")).collect() };
        let scale = v.at("/subresources/scale").filter(|x| x.is_object()).map(|sc| res::ScalePaths {
            spec_replicas: pointer(s(sc, "/specReplicasPath")),
            status_replicas: pointer(s(sc, "/statusReplicasPath")),
            label_selector: sc.get("labelSelectorPath").and_then(Value::as_str).filter(|p| !p.is_empty()).map(pointer),
        });
        let fields: Vec<String> = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
            .map(|p| p.trim_start_matches('.').to_string())
            .collect();
        versions.push(ResourceInfo {
            group,
            version: res::intern(s(v, "/name")),
            plural,
            singular,
            kind,
            namespaced,
            short_names,
            subresources: res::custom_subresources(kind, has_status, scale.is_some()),
            has_status,
            create_on_update: false,
            fields: res::intern_list(&fields),
            normalize: res::norm_custom,
            normalize_slice: res::norm_custom_slice,
            admission: res::Admission::NONE,
            custom: Some(Arc::new(CustomInfo {
                crd: name.clone(),
                list_kind: s(&names, "/listKind").to_string(),
                categories: strings(&names, "/categories"),
                schema: v.at("/schema/openAPIV3Schema").cloned(),
                printer_columns: v.get("additionalPrinterColumns").and_then(Value::as_array).cloned().unwrap_or_default(),
                scale,
            })),
        });
    }
    Definition { versions, storage_version }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// Apply a structural schema to a custom object at its root: drop
/// unknown fields (unless `x-kubernetes-preserve-unknown-fields`), fill
/// defaults, and return the validation errors (`field: Invalid value: …`,
/// as upstream words them). `apiVersion`, `kind` and `metadata` are left
/// to the store.
pub fn apply_schema(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut errs = Vec::new();
    let Some(map) = obj.as_object_mut() else { return errs };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(sub) => {
                if let Some(v) = map.get_mut(&k) {
                    walk(sub, v, &k, &mut errs);
                }
            }
            None if preserve => {}
            None => {
                map.remove(&k);
            }
        }
    }
    defaults_and_required(schema, map, "", &mut errs);
    errs
}

fn defaults_and_required(schema: &Value, map: &mut Map<String, Value>, path: &str, errs: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            if !map.contains_key(k)
                && let Some(d) = sub.get("default")
            {
                map.insert(k.clone(), d.clone());
            }
        }
    }
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if map.get(r).is_none_or(Value::is_null) {
            errs.push(format!("{}: Required value", join(path, r)));
        }
    }
}

fn walk(schema: &Value, v: &mut Value, path: &str, errs: &mut Vec<String>) {
    if v.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true) && schema.get("type").is_some() {
            errs.push(format!("{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"", s(schema, "/type")));
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    let ty = s(schema, "/type");
    let actual = type_name(v);
    let type_ok = int_or_string && matches!(actual, "integer" | "string")
        || ty.is_empty()
        || ty == actual
        || (ty == "number" && actual == "integer");
    if !type_ok {
        errs.push(format!("{path}: Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(show).collect();
        errs.push(format!("{path}: Unsupported value: {}: supported values: {}", show(v), list.join(", ")));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errs.push(format!("{path}: Invalid value: {v}: {path} in body should be greater than or equal to {}", schema["minimum"]));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errs.push(format!("{path}: Invalid value: {v}: {path} in body should be less than or equal to {}", schema["maximum"]));
        }
    }
    if let (Some(t), Some(max)) = (v.as_str(), schema.get("maxLength").and_then(Value::as_u64))
        && t.chars().count() as u64 > max
    {
        errs.push(format!("{path}: Too long: may not be more than {max} bytes"));
    }
    match v {
        Value::Object(map) => {
            let preserve = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
                || schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let sub = props.and_then(|p| p.get(&k)).or(additional.filter(|a| a.is_object()));
                match sub {
                    Some(sub) => {
                        if let Some(child) = map.get_mut(&k) {
                            walk(sub, child, &join(path, &k), errs);
                        }
                    }
                    None if preserve || additional.and_then(Value::as_bool) == Some(true) => {}
                    None => {
                        map.remove(&k);
                    }
                }
            }
            defaults_and_required(schema, map, path, errs);
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errs.push(format!("{path}: Too many: {}: must have at most {max} items", items.len()));
            }
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(sub, item, &format!("{path}[{i}]"), errs);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "color": {"type": "string", "default": "blue", "enum": ["blue", "red"]},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}}
                        }},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }}}
                }]
            }
        })
    }

    #[test]
    fn a_valid_crd_defines_its_served_versions() {
        let c = crd();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        let d = definition(&c);
        assert_eq!(d.storage_version, "v1");
        assert_eq!(d.versions.len(), 1);
        let v = &d.versions[0];
        assert_eq!((v.group, v.version, v.plural, v.singular, v.kind), ("example.com", "v1", "widgets", "widget", "Widget"));
        assert!(v.has_status && v.namespaced);
        assert_eq!(v.short_names, &["wd"]);
        let st = status(&c, None, "t");
        assert_eq!(st["conditions"][1]["type"], "Established");
        assert_eq!(st["storedVersions"], json!(["v1"]));
        assert_eq!(st["acceptedNames"]["listKind"], "WidgetList");
    }

    #[test]
    fn crd_errors_name_the_field() {
        let mut c = crd();
        c["metadata"]["name"] = json!("gadgets.example.com");
        c["spec"]["versions"][0]["storage"] = json!(false);
        let errs = validate(&c);
        assert!(errs[0].starts_with("metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural"), "{errs:?}");
        assert!(errs[1].ends_with("must have exactly one version marked as storage version"), "{errs:?}");
    }

    #[test]
    fn the_schema_prunes_defaults_and_validates() {
        let c = crd();
        let schema = &c["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"size": 2, "unknown": true, "extra": {"kept": 1}, "limits": {"cpu": "1", "mem": 3}}});
        assert!(apply_schema(schema, &mut o).is_empty());
        assert!(o.get("junk").is_none());
        assert!(o["spec"].get("unknown").is_none());
        assert_eq!(o["spec"]["extra"]["kept"], 1);
        assert_eq!(o["spec"]["color"], "blue");
        let mut bad = json!({"spec": {"size": "big", "color": "green"}});
        let errs = apply_schema(schema, &mut bad);
        assert_eq!(errs[0], "spec.color: Unsupported value: \"green\": supported values: \"blue\", \"red\"");
        assert_eq!(errs[1], "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"");
        let mut missing = json!({"spec": {"size": 0}});
        let errs = apply_schema(schema, &mut missing);
        assert_eq!(errs, vec!["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1".to_string()]);
        let mut none = json!({"spec": {}});
        assert_eq!(apply_schema(schema, &mut none), vec!["spec.size: Required value".to_string()]);
    }
}
