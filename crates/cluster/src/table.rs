//! meta.k8s.io/v1 Table output (server-side printing) for kubectl `get`.

use super::jsonptr::Pointer as _;
use serde_json::{Value, json};

use super::resources::{EVENTS, NAMESPACES, NODES, PODS, ResId, ResourceInfo};
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

fn columns(r: ResId) -> Vec<Value> {
    match r {
        PODS => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            col("Age", "string", 0),
            col("IP", "string", 1),
            col("Node", "string", 1),
            col("Nominated Node", "string", 1),
            col("Readiness Gates", "string", 1),
        ],
        NODES => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Roles", "string", 0),
            col("Age", "string", 0),
            col("Version", "string", 0),
            col("Internal-IP", "string", 1),
            col("External-IP", "string", 1),
            col("OS-Image", "string", 1),
            col("Kernel-Version", "string", 1),
            col("Container-Runtime", "string", 1),
        ],
        EVENTS => vec![
            col("Last Seen", "string", 0),
            col("Type", "string", 0),
            col("Reason", "string", 0),
            col("Object", "string", 0),
            col("Message", "string", 0),
        ],
        NAMESPACES => vec![col("Name", "string", 0), col("Status", "string", 0), col("Age", "string", 0)],
        _ => vec![col("Name", "string", 0), col("Age", "string", 0)],
    }
}

fn cells(r: ResId, v: &Value) -> Vec<Value> {
    let name = s(v, "/metadata/name");
    let created = age(s(v, "/metadata/creationTimestamp"));
    match r {
        PODS => {
            let total = v.at("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let statuses = v.at("/status/containerStatuses").and_then(Value::as_array);
            let ready = statuses.map_or(0, |a| a.iter().filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true)).count());
            let restarts: i64 = statuses.map_or(0, |a| a.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum());
            let status = if v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
                "Terminating".to_string()
            } else if s(v, "/status/phase") == "Succeeded" {
                "Completed".to_string()
            } else {
                or_none(s(v, "/status/phase"))
            };
            vec![
                json!(name),
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                json!(created),
                json!(or_none(s(v, "/status/podIP"))),
                json!(or_none(s(v, "/spec/nodeName"))),
                json!(or_none(s(v, "/status/nominatedNodeName"))),
                json!("<none>"),
            ]
        }
        NODES => {
            let ready = v
                .at("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")))
                .and_then(|c| c.get("status").and_then(Value::as_str))
                == Some("True");
            let mut status = if ready { "Ready".to_string() } else { "NotReady".to_string() };
            if v.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let addr = |ty: &str| {
                v.at("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|x| x.get("type").and_then(Value::as_str) == Some(ty)))
                    .and_then(|x| x.get("address").and_then(Value::as_str))
                    .unwrap_or("<none>")
                    .to_string()
            };
            vec![
                json!(name),
                json!(status),
                json!("<none>"),
                json!(created),
                json!(s(v, "/status/nodeInfo/kubeletVersion")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(s(v, "/status/nodeInfo/osImage")),
                json!(s(v, "/status/nodeInfo/kernelVersion")),
                json!(s(v, "/status/nodeInfo/containerRuntimeVersion")),
            ]
        }
        EVENTS => {
            let last = [s(v, "/lastTimestamp"), s(v, "/eventTime"), s(v, "/metadata/creationTimestamp")]
                .into_iter()
                .find(|x| !x.is_empty())
                .unwrap_or("");
            let obj = format!("{}/{}", s(v, "/involvedObject/kind").to_lowercase(), s(v, "/involvedObject/name"));
            vec![json!(age(last)), json!(s(v, "/type")), json!(s(v, "/reason")), json!(obj), json!(s(v, "/message"))]
        }
        NAMESPACES => vec![json!(name), json!(s(v, "/status/phase")), json!(created)],
        _ => vec![json!(name), json!(created)],
    }
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
pub fn table(r: ResId, info: &ResourceInfo, lr: &ListResult, include: Include) -> Value {
    let printer = info.custom.as_ref().map(|c| c.printer_columns.clone()).filter(|c| !c.is_empty());
    let rows: Vec<Value> = lr
        .items
        .iter()
        .map(|o| {
            let cells = match &printer {
                Some(cols) => custom_cells(cols, &o.value),
                None => cells(r, &o.value),
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
        None if info.custom.is_some() => vec![col("Name", "string", 0), col("Age", "string", 0)],
        None => columns(r),
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": column_defs, "rows": rows})
}
