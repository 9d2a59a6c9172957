//! meta.k8s.io/v1 Table output (server-side printing) for kubectl `get`.

mod printers;

use super::jsonptr::Pointer as _;
use serde_json::{Value, json};

use super::resources::ResourceInfo;
use super::store::ListResult;

fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else { return "<unknown>".into() };
    let s = (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    if s < 120 {
        format!("{s}s")
    } else if s < 7200 {
        format!("{}m", s / 60)
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86400)
    }
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

fn or_none(x: &str) -> String {
    if x.is_empty() { "<none>".into() } else { x.to_string() }
}

fn col(name: &str, ty: &str, priority: u8) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority})
}

fn int(v: &Value, p: &str) -> i64 {
    v.at(p).and_then(Value::as_i64).unwrap_or(0)
}

/// The value at a printer column's simple JSONPath (`.status.phase`,
/// `.spec.items[0].name`), rendered as kubectl shows it.
fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for part in path.trim_start_matches('{').trim_end_matches('}').trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (key, index) = match part.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = cur.get(key)?;
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn custom_cells(columns: &[Value], v: &Value) -> Vec<Value> {
    let mut out = vec![json!(s(v, "/metadata/name"))];
    for c in columns {
        let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
        let cell = match (json_path(v, path), c.get("type").and_then(Value::as_str)) {
            (None, _) | (Some(Value::Null), _) => json!("<none>"),
            (Some(Value::String(t)), Some("date")) => json!(age(t)),
            (Some(x), _) => x.clone(),
        };
        out.push(cell);
    }
    out
}

/// What each row of a Table carries of its object (`includeObject`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Include {
    /// Nothing (`"object": null`).
    None,
    /// Its metadata, as a PartialObjectMetadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl Include {
    /// The `includeObject` query parameter; an unknown value is refused
    /// with upstream's message (`ValidateTableOptions`).
    pub fn parse(v: Option<&str>) -> Result<Include, String> {
        match v.unwrap_or("") {
            "" | "Metadata" => Ok(Include::Metadata),
            "None" => Ok(Include::None),
            "Object" => Ok(Include::Object),
            other => Err(format!("includeObject: Invalid value: {other:?}: must be 'Metadata', 'Object', 'None', or empty")),
        }
    }
}

/// An object's metadata as the wire shows it: the store keeps
/// `managedFields` as its JSON text, which a row shows as the list it
/// stands for.
fn wire_meta(meta: &Value) -> Value {
    let mut meta = meta.clone();
    if let Some(m) = meta.get_mut("managedFields")
        && let Value::String(text) = m
        && let Ok(list) = serde_json::from_str::<Value>(text)
    {
        *m = list;
    }
    meta
}

/// An object as the wire shows it (see [`wire_meta`]).
fn wire(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata") {
        *m = wire_meta(m);
    }
    v
}

/// Render a list as a Table (rows carry what `include` asks for of each
/// object); custom resources get their CRD's additionalPrinterColumns.
pub fn table(info: &ResourceInfo, lr: &ListResult, include: Include) -> Value {
    let printer = info.custom.as_ref().map(|c| c.printer_columns.clone()).filter(|c| !c.is_empty());
    let builtin = if info.custom.is_none() { printers::printer(info.group, info.plural) } else { None };
    let rows: Vec<Value> = lr
        .items
        .iter()
        .map(|o| {
            let (name, created) = (s(&o.value, "/metadata/name"), age(s(&o.value, "/metadata/creationTimestamp")));
            let cells = match (&printer, builtin) {
                (Some(cols), _) => custom_cells(cols, &o.value),
                (None, Some((_, f))) => f(&o.value, name, &created),
                (None, None) => vec![json!(name), json!(created)],
            };
            let object = match include {
                Include::None => Value::Null,
                Include::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.value.get("metadata").map_or_else(|| json!({}), wire_meta),
                }),
                Include::Object => wire(&o.value),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    let mut meta = json!({"resourceVersion": lr.rv.to_string()});
    if let Some(c) = &lr.cont {
        meta["continue"] = json!(c);
    }
    let column_defs = match &printer {
        Some(cols) => std::iter::once(col("Name", "string", 0))
            .chain(cols.iter().map(|c| {
                let ty = match c.get("type").and_then(Value::as_str) {
                    Some("date") | None => "string",
                    Some(t) => t,
                };
                let priority = c.get("priority").and_then(Value::as_u64).unwrap_or(0).min(255) as u8;
                col(c.get("name").and_then(Value::as_str).unwrap_or(""), ty, priority)
            }))
            .collect(),
        None => match builtin {
            Some((cols, _)) => cols.iter().map(|(name, ty, priority)| col(name, ty, *priority)).collect(),
            None => vec![col("Name", "string", 0), col("Age", "string", 0)],
        },
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": column_defs, "rows": rows})
}
