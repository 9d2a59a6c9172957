//! Field validation as kube-apiserver's `pkg/apis/core/validation` does
//! it, for the parts the local cluster covers: quantities (decoding and
//! values), resource requirements, topology spread constraints,
//! tolerations, the pod's restart and DNS policies, and the total size of
//! annotations. Errors are written as upstream's `field.Error` prints them
//! (`spec.x: Invalid value: "v": why`).

use serde_json::Value;

use super::names::{self, invalid_each, quoted};
use berth_model::quantity::{self, Quantity};
use crate::jsonptr::Pointer as _;

/// Upstream's `TotalAnnotationSizeLimitB`.
pub const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// Where a kind keeps pod specs (JSON pointers, `*` for every element of
/// an array), for the quantities of its containers and templates.
fn pod_spec_pointers(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["/spec"],
        "PodTemplate" => &["/template/spec"],
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicationController" => &["/spec/template/spec"],
        "CronJob" => &["/spec/jobTemplate/spec/template/spec"],
        _ => &[],
    }
}

/// The pod templates of a workload kind (Deployment, ReplicaSet,
/// StatefulSet, DaemonSet, Job, CronJob, ReplicationController,
/// PodTemplate), checked as a pod's spec is (upstream's
/// `ValidatePodTemplateSpec`, its pod spec part), each error under the
/// template's path (`spec.template.spec.containers[0].name: ...`).
pub fn pod_templates(kind: &str, v: &Value) -> Vec<String> {
    if kind == "Pod" {
        return Vec::new();
    }
    let mut errs = Vec::new();
    for pointer in pod_spec_pointers(kind) {
        if let Some(spec) = v.at(pointer).filter(|s| s.is_object()) {
            errs.extend(pod_spec_of(spec, &pointer.trim_start_matches('/').replace('/', "."), Of::Template));
        }
    }
    errs
}

/// Resource lists (maps of quantities) inside a pod spec.
const POD_SPEC_LISTS: &[&str] = &[
    "/containers/*/resources/requests",
    "/containers/*/resources/limits",
    "/initContainers/*/resources/requests",
    "/initContainers/*/resources/limits",
    "/ephemeralContainers/*/resources/requests",
    "/ephemeralContainers/*/resources/limits",
    "/resources/requests",
    "/resources/limits",
    "/overhead",
    "/volumes/*/ephemeral/volumeClaimTemplate/spec/resources/requests",
    "/volumes/*/ephemeral/volumeClaimTemplate/spec/resources/limits",
];

/// Resource lists of other kinds.
fn other_lists(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["/status/containerStatuses/*/allocatedResources", "/status/initContainerStatuses/*/allocatedResources"],
        "Node" => &["/status/capacity", "/status/allocatable"],
        "PersistentVolumeClaim" => &["/spec/resources/requests", "/spec/resources/limits", "/status/capacity", "/status/allocatedResources"],
        "PersistentVolume" => &["/spec/capacity"],
        "StatefulSet" => &["/spec/volumeClaimTemplates/*/spec/resources/requests", "/spec/volumeClaimTemplates/*/spec/resources/limits"],
        "ResourceQuota" => &["/spec/hard", "/status/hard", "/status/used"],
        "LimitRange" => &["/spec/limits/*/max", "/spec/limits/*/min", "/spec/limits/*/default", "/spec/limits/*/defaultRequest", "/spec/limits/*/maxLimitRequestRatio"],
        _ => &[],
    }
}

/// Every value at `pointer` (with `*` wildcards) under `v`.
fn each_at<'a>(v: &'a Value, pointer: &str, out: &mut Vec<&'a Value>) {
    let pointer = pointer.trim_start_matches('/');
    if pointer.is_empty() {
        out.push(v);
        return;
    }
    let (head, rest) = pointer.split_once('/').unwrap_or((pointer, ""));
    match (head, v) {
        ("*", Value::Array(a)) => a.iter().for_each(|e| each_at(e, rest, out)),
        (_, Value::Object(m)) => {
            if let Some(next) = m.get(head) {
                each_at(next, rest, out);
            }
        }
        _ => {}
    }
}

/// The first quantity of `kind`'s object that does not parse: the decoding
/// error kube-apiserver answers 400 (its message, without the
/// "cannot be handled as" prefix the caller adds).
pub fn quantity_decode_error(kind: &str, v: &Value) -> Option<quantity::SyntaxError> {
    let mut lists = Vec::new();
    for spec in pod_spec_pointers(kind) {
        let mut specs = Vec::new();
        each_at(v, spec, &mut specs);
        for s in specs {
            for l in POD_SPEC_LISTS {
                each_at(s, l, &mut lists);
            }
            each_at(s, "/volumes/*/emptyDir/sizeLimit", &mut lists);
        }
    }
    for l in other_lists(kind) {
        each_at(v, l, &mut lists);
    }
    lists.iter().find_map(|l| match l {
        Value::Object(m) => m.values().find_map(quantity_error),
        // A single quantity (sizeLimit).
        q => quantity_error(q),
    })
}

fn quantity_error(q: &Value) -> Option<quantity::SyntaxError> {
    match q {
        Value::String(s) => Quantity::parse(s).err(),
        Value::Number(n) => Quantity::parse(&n.to_string()).err(),
        _ => None,
    }
}

/// `metadata.annotations`: at most 256 KiB of keys and values together.
pub fn annotations(v: &Value) -> Option<String> {
    let total: usize = v.at("/metadata/annotations").and_then(Value::as_object)?.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum();
    (total > ANNOTATIONS_LIMIT).then(|| format!("metadata.annotations: Too long: may not be more than {ANNOTATIONS_LIMIT} bytes"))
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}


/// A container's name must not repeat one `seen` before it (across
/// containers, init and ephemeral containers), as upstream's
/// `validateContainers` checks, an empty name included.
fn unique(seen: &mut Vec<String>, name: String, path: &str, errs: &mut Vec<String>) {
    if seen.contains(&name) {
        errs.push(format!("{path}.name: Duplicate value: {}", quoted(&name)));
    } else {
        seen.push(name);
    }
}

/// Upstream's `ValidatePodSpec`, the parts covered here, at `path`
/// (`spec`, `spec.template.spec`), in upstream's order: volumes,
/// containers, init and ephemeral containers, restart and DNS policies,
/// nodeSelector, affinity, scheduling gates, spread constraints,
/// activeDeadlineSeconds, tolerations, overhead.
pub fn pod_spec(spec: &Value, path: &str) -> Vec<String> {
    pod_spec_of(spec, path, Of::Pod)
}

/// Whose spec is checked: a pod's, or a workload's pod template's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Of {
    /// A pod: every container names its image.
    Pod,
    /// A template: its containers may leave the image out (upstream
    /// requires it of pods only, "to allow higher level config management
    /// to default or override container images").
    Template,
}

fn pod_spec_of(spec: &Value, path: &str, of: Of) -> Vec<String> {
    let mut errs = Vec::new();
    let volumes = volumes(spec, &format!("{path}.volumes"), &mut errs);
    let list = |key: &str| spec.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let name_of = |c: &Value| text(c, "name");
    // Regular containers: names unique among themselves.
    let mut seen: Vec<String> = Vec::new();
    for (i, c) in list("containers").iter().enumerate() {
        let p = format!("{path}.containers[{i}]");
        container(c, &p, &volumes, of, &mut errs);
        unique(&mut seen, name_of(c), &p, &mut errs);
        if let Some(l) = c.get("lifecycle").filter(|l| !l.is_null()) {
            for hook in ["postStart", "preStop"] {
                if let Some(h) = l.get(hook).filter(|h| !h.is_null()) {
                    handler(h, &format!("{p}.lifecycle.{hook}"), &["exec", "httpGet", "tcpSocket", "sleep"], &mut errs);
                }
            }
        }
        probes(c, &p, &mut errs);
        if c.get("restartPolicy").is_some_and(|r| !r.is_null()) {
            errs.push(format!("{p}.restartPolicy: Forbidden: may not be set for non-init containers"));
        }
    }
    // Init containers: names unique across regular and init containers.
    for (i, c) in list("initContainers").iter().enumerate() {
        let p = format!("{path}.initContainers[{i}]");
        container(c, &p, &volumes, of, &mut errs);
        let restart = c.get("restartPolicy").and_then(Value::as_str);
        if let Some(r) = restart.filter(|r| *r != "Always") {
            errs.push(format!("{p}.restartPolicy: Unsupported value: {}: supported values: \"Always\"", quoted(r)));
        }
        unique(&mut seen, name_of(c), &p, &mut errs);
        if restart == Some("Always") {
            probes(c, &p, &mut errs);
        } else {
            for f in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if c.get(f).is_some_and(|v| !v.is_null()) {
                    errs.push(format!("{p}.{f}: Forbidden: may not be set for init containers without restartPolicy=Always"));
                }
            }
        }
    }
    // Ephemeral containers: names unique across every container.
    for (i, c) in list("ephemeralContainers").iter().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        container(c, &p, &volumes, of, &mut errs);
        unique(&mut seen, name_of(c), &p, &mut errs);
    }
    if let Some(r) = spec.get("resources") {
        errs.extend(resource_requirements(r, &format!("{path}.resources"), false));
    }
    if let Some(p) = spec.get("restartPolicy").and_then(Value::as_str)
        && !matches!(p, "Always" | "OnFailure" | "Never")
    {
        errs.push(format!("{path}.restartPolicy: Unsupported value: {}: supported values: \"Always\", \"OnFailure\", \"Never\"", quoted(p)));
    }
    if let Some(p) = spec.get("dnsPolicy").and_then(Value::as_str)
        && !matches!(p, "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None")
    {
        errs.push(format!(
            "{path}.dnsPolicy: Unsupported value: {}: supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            quoted(p)
        ));
    }
    if let Some(m) = spec.get("nodeSelector").and_then(Value::as_object) {
        labels(m, &format!("{path}.nodeSelector"), &mut errs);
    }
    if let Some(a) = spec.get("affinity").filter(|a| !a.is_null()) {
        affinity(a, &format!("{path}.affinity"), &mut errs);
    }
    let mut gates: Vec<String> = Vec::new();
    for (i, g) in list("schedulingGates").iter().enumerate() {
        let (p, name) = (format!("{path}.schedulingGates[{i}]"), text(g, "name"));
        errs.extend(invalid_each(&p, &name, names::qualified_name(&name)));
        if gates.contains(&name) {
            errs.push(format!("{p}: Duplicate value: {}", quoted(&name)));
        }
        gates.push(name);
    }
    if let Some(cs) = spec.get("topologySpreadConstraints").and_then(Value::as_array) {
        errs.extend(topology_spread_constraints(cs, &format!("{path}.topologySpreadConstraints")));
    }
    if let Some(s) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&s)
    {
        errs.push(format!("{path}.activeDeadlineSeconds: Invalid value: {s}: must be between 1 and 2147483647, inclusive"));
    }
    if let Some(ts) = spec.get("tolerations").and_then(Value::as_array) {
        errs.extend(tolerations(ts, &format!("{path}.tolerations")));
    }
    if let Some(o) = spec.get("overhead").and_then(Value::as_object) {
        for (name, q) in o {
            if let Some(q) = parsed(q) {
                errs.extend(nonnegative(&q, &format!("{path}.overhead[{name}]")));
            }
        }
    }
    errs
}

/// Upstream's `ValidateVolumes` (names only: a volume without a source is
/// defaulted to emptyDir, as upstream's defaulting does): each name a DNS
/// label, once. Returns the names that are valid, which mounts may name.
fn volumes(spec: &Value, path: &str, errs: &mut Vec<String>) -> Vec<String> {
    let mut valid: Vec<String> = Vec::new();
    for (i, v) in spec.get("volumes").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let (p, name) = (format!("{path}[{i}].name"), text(v, "name"));
        let mut el: Vec<String> = Vec::new();
        if name.is_empty() {
            el.push(format!("{p}: Required value"));
        } else {
            el.extend(invalid_each(&p, &name, names::dns1123_label(&name)));
        }
        if valid.contains(&name) {
            el.push(format!("{p}: Duplicate value: {}", quoted(&name)));
        }
        if el.is_empty() {
            valid.push(name);
        } else {
            errs.extend(el);
        }
    }
    valid
}

/// Upstream's `validateContainerCommon`: name (a DNS label), image,
/// ports, env, volume mounts and resources.
fn container(c: &Value, p: &str, volumes: &[String], of: Of, errs: &mut Vec<String>) {
    let name = text(c, "name");
    if name.is_empty() {
        errs.push(format!("{p}.name: Required value"));
    } else {
        errs.extend(invalid_each(&format!("{p}.name"), &name, names::dns1123_label(&name)));
    }
    if of == Of::Pod && text(c, "image").is_empty() {
        errs.push(format!("{p}.image: Required value"));
    }
    let mut port_names: Vec<String> = Vec::new();
    for (i, port) in c.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let pp = format!("{p}.ports[{i}]");
        let pname = text(port, "name");
        if !pname.is_empty() {
            let msgs = names::port_name(&pname);
            if !msgs.is_empty() {
                errs.extend(invalid_each(&format!("{pp}.name"), &pname, msgs));
            } else if port_names.contains(&pname) {
                errs.push(format!("{pp}.name: Duplicate value: {}", quoted(&pname)));
            } else {
                port_names.push(pname);
            }
        }
        match port.get("containerPort").and_then(Value::as_i64).unwrap_or(0) {
            0 => errs.push(format!("{pp}.containerPort: Required value")),
            n => errs.extend(names::port_number(n).map(|m| format!("{pp}.containerPort: Invalid value: {n}: {m}"))),
        }
        if let Some(n) = port.get("hostPort").and_then(Value::as_i64).filter(|n| *n != 0) {
            errs.extend(names::port_number(n).map(|m| format!("{pp}.hostPort: Invalid value: {n}: {m}")));
        }
        // An absent protocol is defaulted to TCP.
        if let Some(proto) = port.get("protocol").and_then(Value::as_str)
            && !matches!(proto, "TCP" | "UDP" | "SCTP")
        {
            errs.push(format!("{pp}.protocol: Unsupported value: {}: supported values: \"SCTP\", \"TCP\", \"UDP\"", quoted(proto)));
        }
    }
    for (i, e) in c.get("env").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let (ep, ename) = (format!("{p}.env[{i}].name"), text(e, "name"));
        if ename.is_empty() {
            errs.push(format!("{ep}: Required value"));
        } else {
            errs.extend(invalid_each(&ep, &ename, names::env_var_name(&ename)));
        }
    }
    let mut mount_paths: Vec<String> = Vec::new();
    for (i, m) in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let mp = format!("{p}.volumeMounts[{i}]");
        let (vname, path) = (text(m, "name"), text(m, "mountPath"));
        if vname.is_empty() {
            errs.push(format!("{mp}.name: Required value"));
        }
        if !volumes.contains(&vname) {
            errs.push(format!("{mp}.name: Not found: {}", quoted(&vname)));
        }
        if path.is_empty() {
            errs.push(format!("{mp}.mountPath: Required value"));
        }
        if mount_paths.contains(&path) {
            errs.push(format!("{mp}.mountPath: Invalid value: {}: must be unique", quoted(&path)));
        }
        mount_paths.push(path);
    }
    if let Some(r) = c.get("resources") {
        errs.extend(resource_requirements(r, &format!("{p}.resources"), true));
    }
}

/// The liveness, readiness and startup probes of a container.
fn probes(c: &Value, p: &str, errs: &mut Vec<String>) {
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = c.get(kind).filter(|v| !v.is_null()) else { continue };
        let pp = format!("{p}.{kind}");
        handler(probe, &pp, &["exec", "httpGet", "tcpSocket", "grpc"], errs);
        for f in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
            if let Some(n) = probe.get(f).and_then(Value::as_i64).filter(|n| *n < 0) {
                errs.push(format!("{pp}.{f}: Invalid value: {n}: must be greater than or equal to 0"));
            }
        }
        let grace = probe.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
        if let Some(g) = grace.filter(|g| *g <= 0) {
            errs.push(format!("{pp}.terminationGracePeriodSeconds: Invalid value: {g}: must be greater than 0"));
        }
        match kind {
            "readinessProbe" => {
                if let Some(g) = grace {
                    errs.push(format!("{pp}.terminationGracePeriodSeconds: Invalid value: {g}: must not be set for readinessProbes"));
                }
            }
            // An absent successThreshold is defaulted to 1.
            _ => {
                if let Some(n) = probe.get("successThreshold").and_then(Value::as_i64).filter(|n| *n != 1) {
                    errs.push(format!("{pp}.successThreshold: Invalid value: {n}: must be 1"));
                }
            }
        }
    }
}

/// Upstream's `validateHandler`: exactly one of `kinds`, and that one's
/// own fields (an exec command, a port number or name).
fn handler(h: &Value, p: &str, kinds: &[&str], errs: &mut Vec<String>) {
    let mut found = 0;
    for kind in kinds {
        let Some(action) = h.get(*kind).filter(|v| !v.is_null()) else { continue };
        if found > 0 {
            errs.push(format!("{p}.{kind}: Forbidden: may not specify more than 1 handler type"));
            continue;
        }
        found += 1;
        let ap = format!("{p}.{kind}");
        match *kind {
            "exec" if action.get("command").and_then(Value::as_array).is_none_or(|c| c.is_empty()) => {
                errs.push(format!("{ap}.command: Required value"));
            }
            "exec" => {}
            "httpGet" | "tcpSocket" | "grpc" => match action.get("port") {
                Some(Value::String(name)) => errs.extend(invalid_each(&format!("{ap}.port"), name, names::port_name(name))),
                Some(n) => {
                    let n = n.as_i64().unwrap_or(0);
                    errs.extend(names::port_number(n).map(|m| format!("{ap}.port: Invalid value: {n}: {m}")));
                }
                None => errs.push(format!("{ap}.port: Invalid value: 0: must be between 1 and 65535, inclusive")),
            },
            _ => {}
        }
    }
    if found == 0 {
        errs.push(format!("{p}: Required value: must specify a handler type"));
    }
}

/// Upstream's `ValidateLabels` on a map at `path`: keys are qualified
/// names, values label values (in key order: upstream walks a Go map).
pub fn labels(m: &serde_json::Map<String, Value>, path: &str, errs: &mut Vec<String>) {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for k in keys {
        errs.extend(invalid_each(path, k, names::qualified_name(k)));
        let v = m.get(k.as_str()).and_then(Value::as_str).unwrap_or("");
        errs.extend(invalid_each(path, v, names::label_value(v)));
    }
}

/// `metadata.labels` and the keys of `metadata.annotations` (upstream's
/// `ValidateObjectMeta`: annotation keys are qualified names, lowercased).
pub fn metadata_labels_and_annotations(v: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    if let Some(m) = v.at("/metadata/labels").and_then(Value::as_object) {
        labels(m, "metadata.labels", &mut errs);
    }
    if let Some(m) = v.at("/metadata/annotations").and_then(Value::as_object) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            errs.extend(invalid_each("metadata.annotations", k, names::qualified_name(&k.to_lowercase())));
        }
    }
    errs
}

/// Upstream's `ValidateLabelSelector` (with label values checked, as for
/// new objects): matchLabels, and each requirement's operator, values
/// and key.
fn label_selector(s: &Value, p: &str, errs: &mut Vec<String>) {
    if let Some(m) = s.get("matchLabels").and_then(Value::as_object) {
        labels(m, &format!("{p}.matchLabels"), errs);
    }
    for (i, r) in s.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let rp = format!("{p}.matchExpressions[{i}]");
        let values: Vec<&str> = r.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        match text(r, "operator").as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(format!("{rp}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(format!("{rp}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"));
                }
            }
            op => errs.push(format!("{rp}.operator: Invalid value: {}: not a valid selector operator", quoted(op))),
        }
        let key = text(r, "key");
        errs.extend(invalid_each(&format!("{rp}.key"), &key, names::qualified_name(&key)));
        for (j, v) in values.iter().enumerate() {
            errs.extend(invalid_each(&format!("{rp}.values[{j}]"), v, names::label_value(v)));
        }
    }
}

/// Upstream's `ValidateNodeSelectorTerm`: matchExpressions on labels,
/// matchFields on `metadata.name` only.
fn node_selector_term(t: &Value, p: &str, errs: &mut Vec<String>) {
    for (i, r) in t.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let rp = format!("{p}.matchExpressions[{i}]");
        let n = r.get("values").and_then(Value::as_array).map_or(0, Vec::len);
        match text(r, "operator").as_str() {
            "In" | "NotIn" if n == 0 => errs.push(format!("{rp}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")),
            "Exists" | "DoesNotExist" if n > 0 => {
                errs.push(format!("{rp}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"));
            }
            "Gt" | "Lt" if n != 1 => errs.push(format!("{rp}.values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'")),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            op => errs.push(format!("{rp}.operator: Invalid value: {}: not a valid selector operator", quoted(op))),
        }
        let key = text(r, "key");
        errs.extend(invalid_each(&format!("{rp}.key"), &key, names::qualified_name(&key)));
    }
    for (i, r) in t.get("matchFields").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let rp = format!("{p}.matchFields[{i}]");
        let n = r.get("values").and_then(Value::as_array).map_or(0, Vec::len);
        match text(r, "operator").as_str() {
            "In" | "NotIn" if n != 1 => {
                errs.push(format!("{rp}.values: Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector"));
            }
            "In" | "NotIn" => {}
            op => errs.push(format!("{rp}.operator: Invalid value: {}: not a valid selector operator", quoted(op))),
        }
        let key = text(r, "key");
        if key != "metadata.name" {
            errs.push(format!("{rp}.key: Invalid value: {}: not a valid field selector key", quoted(&key)));
        }
    }
}

fn weight(t: &Value, p: &str, errs: &mut Vec<String>) {
    let w = t.get("weight").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=100).contains(&w) {
        errs.push(format!("{p}.weight: Invalid value: {w}: must be in the range 1-100"));
    }
}

/// Upstream's `validatePodAffinityTerm`: selectors, namespaces (DNS
/// labels), a topologyKey that is a qualified name.
fn pod_affinity_term(t: &Value, p: &str, errs: &mut Vec<String>) {
    for sel in ["labelSelector", "namespaceSelector"] {
        if let Some(s) = t.get(sel).filter(|s| !s.is_null()) {
            label_selector(s, &format!("{p}.{sel}"), errs);
        }
    }
    for ns in t.get("namespaces").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        errs.extend(invalid_each(&format!("{p}.namespace"), ns, names::dns1123_label(ns)));
    }
    let key = text(t, "topologyKey");
    if key.is_empty() {
        errs.push(format!("{p}.topologyKey: Required value: can not be empty"));
    }
    errs.extend(invalid_each(&format!("{p}.topologyKey"), &key, names::qualified_name(&key)));
}

/// Upstream's `validateAffinity`: node affinity (at least one term when
/// required; weights 1-100), pod affinity and anti-affinity terms.
fn affinity(a: &Value, p: &str, errs: &mut Vec<String>) {
    const REQ: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREF: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(na) = a.get("nodeAffinity").filter(|v| !v.is_null()) {
        let np = format!("{p}.nodeAffinity");
        if let Some(req) = na.get(REQ).filter(|v| !v.is_null()) {
            let tp = format!("{np}.{REQ}.nodeSelectorTerms");
            let terms = req.get("nodeSelectorTerms").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            if terms.is_empty() {
                errs.push(format!("{tp}: Required value: must have at least one node selector term"));
            }
            for (i, t) in terms.iter().enumerate() {
                node_selector_term(t, &format!("{tp}[{i}]"), errs);
            }
        }
        for (i, t) in na.get(PREF).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let tp = format!("{np}.{PREF}[{i}]");
            weight(t, &tp, errs);
            node_selector_term(t.get("preference").unwrap_or(&Value::Null), &format!("{tp}.preference"), errs);
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = a.get(kind).filter(|v| !v.is_null()) else { continue };
        let pp = format!("{p}.{kind}");
        for (i, t) in pa.get(REQ).and_then(Value::as_array).into_iter().flatten().enumerate() {
            pod_affinity_term(t, &format!("{pp}.{REQ}[{i}]"), errs);
        }
        for (i, t) in pa.get(PREF).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let tp = format!("{pp}.{PREF}[{i}]");
            weight(t, &tp, errs);
            pod_affinity_term(t.get("podAffinityTerm").unwrap_or(&Value::Null), &format!("{tp}.podAffinityTerm"), errs);
        }
    }
}

fn parsed(q: &Value) -> Option<Quantity> {
    match q {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

fn nonnegative(q: &Quantity, path: &str) -> Option<String> {
    q.is_negative().then(|| format!("{path}: Invalid value: \"{q}\": must be greater than or equal to 0"))
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Native resources (no domain, or a `kubernetes.io/` one).
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Requests may be below limits only for native resources other than
/// hugepages (upstream's `IsOvercommitAllowed`).
fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

/// Upstream's `validateResourceRequirements`: names, non-negative values,
/// whole numbers for extended resources, requests at most limits (equal
/// for resources that cannot be overcommitted), and hugepages only with
/// cpu or memory. Errors in sorted resource order (upstream walks a map).
fn resource_requirements(r: &Value, path: &str, container: bool) -> Vec<String> {
    let mut errs = Vec::new();
    let list = |key: &str| -> Vec<(String, Quantity)> {
        r.get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, q)| parsed(q).map(|q| (name.clone(), q)))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect()
    };
    let (limits, requests) = (list("limits"), list("requests"));
    let mut cpu_or_memory = false;
    let mut hugepages = false;
    let mut check = |name: &str, q: &Quantity, field: &str, errs: &mut Vec<String>| {
        if container {
            if !name.contains('/') {
                if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_hugepages(name) {
                    errs.push(format!("{field}: Invalid value: {}: must be a standard resource for containers", quoted(name)));
                }
            } else if !is_native(name) && name.contains("requests.") {
                errs.push(format!("{field}: Invalid value: {}: doesn't follow extended resource name standard", quoted(name)));
            }
        }
        errs.extend(nonnegative(q, field));
        if !is_native(name) && !q.is_integer() {
            errs.push(format!("{field}: Invalid value: \"{q}\": must be an integer"));
        }
        cpu_or_memory |= matches!(name, "cpu" | "memory");
        hugepages |= is_hugepages(name);
    };
    for (name, q) in &limits {
        check(name, q, &format!("{path}.limits[{name}]"), &mut errs);
    }
    for (name, q) in &requests {
        check(name, q, &format!("{path}.requests[{name}]"), &mut errs);
        match limits.iter().find(|(n, _)| n == name) {
            Some((_, limit)) if q != limit && !overcommit_allowed(name) => {
                errs.push(format!("{path}.requests: Invalid value: \"{q}\": must be equal to {name} limit of {limit}"));
            }
            Some((_, limit)) if q > limit => {
                errs.push(format!("{path}.requests: Invalid value: \"{q}\": must be less than or equal to {name} limit of {limit}"));
            }
            Some(_) => {}
            None if !overcommit_allowed(name) => errs.push(format!("{path}.limits: Required value: Limit must be set for non overcommitable resources")),
            None => {}
        }
    }
    if container && hugepages && !cpu_or_memory {
        errs.push(format!("{path}: Forbidden: HugePages require cpu or memory"));
    }
    errs
}

/// Upstream's `ValidateTolerations`.
fn tolerations(ts: &[Value], path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, t) in ts.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let (key, op, value, effect) = (text(t, "key"), text(t, "operator"), text(t, "value"), text(t, "effect"));
        if !key.is_empty() {
            errs.extend(invalid_each(&format!("{p}.key"), &key, names::qualified_name(&key)));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(format!("{p}.operator: Invalid value: {}: operator must be Exists when `key` is empty, which means \"match all values and all keys\"", quoted(&op)));
        }
        if t.get("tolerationSeconds").is_some_and(|s| !s.is_null()) && effect != "NoExecute" {
            errs.push(format!("{p}.effect: Invalid value: {}: effect must be 'NoExecute' when `tolerationSeconds` is set", quoted(&effect)));
        }
        match op.as_str() {
            "" | "Equal" => {}
            "Exists" => {
                if !value.is_empty() {
                    errs.push(format!("{p}.operator: Invalid value: {}: value must be empty when `operator` is 'Exists'", quoted(&value)));
                }
            }
            _ => errs.push(format!("{p}.operator: Unsupported value: {}: supported values: \"Equal\", \"Exists\"", quoted(&op))),
        }
        if !effect.is_empty() && !matches!(effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            errs.push(format!("{p}.effect: Unsupported value: {}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"", quoted(&effect)));
        }
    }
    errs
}

/// Upstream's `validateTopologySpreadConstraints` (label selectors left
/// to the typed decoding): maxSkew positive, a topologyKey, a known
/// whenUnsatisfiable, each {topologyKey, whenUnsatisfiable} once, minDomains
/// positive and only with DoNotSchedule, known inclusion policies.
pub fn topology_spread_constraints(cs: &[Value], path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let skew = c.get("maxSkew").and_then(Value::as_i64).unwrap_or(0);
        if skew <= 0 {
            errs.push(format!("{p}.maxSkew: Invalid value: {skew}: must be greater than zero"));
        }
        let key = text(c, "topologyKey");
        if key.is_empty() {
            errs.push(format!("{p}.topologyKey: Required value: can not be empty"));
        }
        let when = text(c, "whenUnsatisfiable");
        if !matches!(when.as_str(), "DoNotSchedule" | "ScheduleAnyway") {
            errs.push(format!("{p}.whenUnsatisfiable: Unsupported value: {}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"", quoted(&when)));
        }
        if cs[i + 1..].iter().any(|o| text(o, "topologyKey") == key && text(o, "whenUnsatisfiable") == when) {
            errs.push(format!("{p}.{{topologyKey, whenUnsatisfiable}}: Duplicate value: {}", quoted(&format!("{{{key}, {when}}}"))));
        }
        if let Some(m) = c.get("minDomains").and_then(Value::as_i64) {
            if m <= 0 {
                errs.push(format!("{p}.minDomains: Invalid value: {m}: must be greater than zero"));
            }
            if when != "DoNotSchedule" {
                errs.push(format!("{p}.minDomains: Invalid value: {m}: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when}"));
            }
        }
        for policy in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            if let Some(v) = c.get(policy).and_then(Value::as_str)
                && !matches!(v, "Honor" | "Ignore")
            {
                errs.push(format!("{p}.{policy}: Unsupported value: {}: supported values: \"Honor\", \"Ignore\"", quoted(v)));
            }
        }
        for (j, k) in c.get("matchLabelKeys").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let k = k.as_str().unwrap_or("");
            let in_selector = c.at("/labelSelector/matchLabels").and_then(Value::as_object).is_some_and(|m| m.contains_key(k))
                || c.at("/labelSelector/matchExpressions")
                    .and_then(Value::as_array)
                    .is_some_and(|es| es.iter().any(|e| e.get("key").and_then(Value::as_str) == Some(k)));
            if in_selector {
                errs.push(format!("{p}.matchLabelKeys[{j}]: Invalid value: {}: exists in both matchLabelKeys and labelSelector", quoted(k)));
            }
        }
    }
    errs
}

/// Upstream's `SetDefaults_Pod` for resources: a container's requests
/// default to its limits, resource by resource.
pub fn default_requests_from_limits(spec: &mut Value) {
    for key in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(key).and_then(Value::as_array_mut) else { continue };
        for c in cs {
            let Some(limits) = c.at("/resources/limits").and_then(Value::as_object).cloned() else { continue };
            let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else { continue };
            let requests = resources.entry("requests").or_insert_with(|| Value::Object(Default::default()));
            if requests.is_null() {
                *requests = Value::Object(Default::default());
            }
            if let Some(req) = requests.as_object_mut() {
                for (name, q) in limits {
                    req.entry(name).or_insert(q);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn workload_templates_are_checked_as_pods_under_their_path() {
        let template = json!({"spec": {"containers": [{"name": "Bad_Name", "image": "i"}, {"name": "ok", "image": "i"}]}});
        let deployment = json!({"spec": {"template": template}});
        let errs = pod_templates("Deployment", &deployment);
        assert!(errs.len() == 1 && errs[0].starts_with("spec.template.spec.containers[0].name: Invalid value: \"Bad_Name\""), "{errs:?}");
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": template}}}});
        let errs = pod_templates("CronJob", &cron);
        assert!(errs.len() == 1 && errs[0].starts_with("spec.jobTemplate.spec.template.spec.containers[0].name:"), "{errs:?}");
        // A pod is checked by its own admission; a template-less object passes.
        assert!(pod_templates("Pod", &json!({"spec": {"containers": [{"name": "Bad_Name"}]}})).is_empty());
        assert!(pod_templates("Deployment", &json!({"spec": {}})).is_empty());
        let good = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert!(pod_templates("StatefulSet", &good).is_empty());
        // Unlike a pod's, a template's image may be left out.
        let no_image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}});
        assert!(pod_templates("ReplicaSet", &no_image).is_empty());
    }

    #[test]
    fn resources_are_checked_as_upstream_does() {
        let spec = json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "-4", "memory": "2Gi"}, "limits": {"memory": "1Gi"}}}]});
        assert_eq!(
            pod_spec(&spec, "spec"),
            vec![
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"-4\": must be greater than or equal to 0".to_string(),
                "spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi".to_string(),
            ]
        );
        let gpu = json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"example.com/gpu": "1"}}}]});
        assert_eq!(pod_spec(&gpu, "spec"), vec!["spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources".to_string()]);
    }

    #[test]
    fn duplicate_spread_constraints_are_refused() {
        let c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"});
        let errs = topology_spread_constraints(&[c.clone(), c], "spec.topologySpreadConstraints");
        assert_eq!(errs, vec!["spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: Duplicate value: \"{zone, DoNotSchedule}\"".to_string()]);
    }

    #[test]
    fn bad_quantities_anywhere_in_a_pod_are_found() {
        let pod = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "lots"}}}]}});
        assert_eq!(quantity_decode_error("Pod", &pod), Some(quantity::SyntaxError::Format));
        let dep = json!({"spec": {"template": {"spec": {"volumes": [{"emptyDir": {"sizeLimit": "1Xi"}}]}}}});
        assert_eq!(quantity_decode_error("Deployment", &dep), Some(quantity::SyntaxError::Format));
        assert_eq!(quantity_decode_error("Node", &json!({"status": {"capacity": {"cpu": "4"}}})), None);
    }
}
