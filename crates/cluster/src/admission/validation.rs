//! Field validation as kube-apiserver's `pkg/apis/core/validation` does
//! it, for the parts the local cluster covers: quantities (decoding and
//! values), resource requirements, topology spread constraints,
//! tolerations, the pod's restart and DNS policies, and the total size of
//! annotations. Errors are written as upstream's `field.Error` prints them
//! (`spec.x: Invalid value: "v": why`).

use serde_json::Value;

use super::quantity::{self, Quantity};
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
pub fn quantity_decode_error(kind: &str, v: &Value) -> Option<quantity::Error> {
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

fn quantity_error(q: &Value) -> Option<quantity::Error> {
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

/// A Go `%q` of a string (the common cases: quotes and backslashes).
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// Upstream's `ValidatePodSpec`, the parts covered here, at `path`
/// (`spec`, `spec.template.spec`).
pub fn pod_spec(spec: &Value, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(r) = c.get("resources") {
                errs.extend(resource_requirements(r, &format!("{path}.{key}[{i}].resources"), true));
            }
        }
    }
    if let Some(r) = spec.get("resources") {
        errs.extend(resource_requirements(r, &format!("{path}.resources"), false));
    }
    if let Some(o) = spec.get("overhead").and_then(Value::as_object) {
        for (name, q) in o {
            if let Some(q) = parsed(q) {
                errs.extend(nonnegative(&q, &format!("{path}.overhead[{name}]")));
            }
        }
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
            "{path}.dnsPolicy: Unsupported value: {}: supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\"",
            quoted(p)
        ));
    }
    if let Some(s) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && s <= 0
    {
        errs.push(format!("{path}.activeDeadlineSeconds: Invalid value: {s}: must be between 1 and 2147483647, inclusive"));
    }
    if let Some(ts) = spec.get("tolerations").and_then(Value::as_array) {
        errs.extend(tolerations(ts, &format!("{path}.tolerations")));
    }
    if let Some(cs) = spec.get("topologySpreadConstraints").and_then(Value::as_array) {
        errs.extend(topology_spread_constraints(cs, &format!("{path}.topologySpreadConstraints")));
    }
    errs
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
    fn resources_are_checked_as_upstream_does() {
        let spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "-4", "memory": "2Gi"}, "limits": {"memory": "1Gi"}}}]});
        assert_eq!(
            pod_spec(&spec, "spec"),
            vec![
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"-4\": must be greater than or equal to 0".to_string(),
                "spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi".to_string(),
            ]
        );
        let gpu = json!({"containers": [{"resources": {"requests": {"example.com/gpu": "1"}}}]});
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
        assert_eq!(quantity_decode_error("Pod", &pod), Some(quantity::Error::Format));
        let dep = json!({"spec": {"template": {"spec": {"volumes": [{"emptyDir": {"sizeLimit": "1Xi"}}]}}}});
        assert_eq!(quantity_decode_error("Deployment", &dep), Some(quantity::Error::Format));
        assert_eq!(quantity_decode_error("Node", &json!({"status": {"capacity": {"cpu": "4"}}})), None);
    }
}
