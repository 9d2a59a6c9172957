//! Pods: the pod strategy's defaults, the Priority admission plugin, the
//! scheduling-gate rules, the immutable fields a scheduler relies on, and
//! the kubelet status manager's Ready condition for pods with
//! readinessGates (which the kubelet also uses).

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::object::{now_rfc3339, set_condition, set_path};
use super::validation;
use crate::resources::{self as res, Admission, Error, PRIORITY_CLASSES, View};

/// The Pod rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), settle: Some(settle), delete: None };

fn get_str<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

/// A new pod: required containers, the pod strategy's defaults, the
/// priority from its class (or the global default), no node while gated,
/// and its first status.
fn create(view: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    let invalid = |m: &str| Error::Invalid(vec![m.to_string()]);
    let spec = v.get_mut("spec").and_then(Value::as_object_mut).ok_or_else(|| invalid("spec: Required value"))?;
    if spec.get("containers").and_then(Value::as_array).is_none_or(|c| c.is_empty()) {
        return Err(invalid("spec.containers: Required value"));
    }
    spec.entry("schedulerName").or_insert_with(|| json!("default-scheduler"));
    spec.entry("restartPolicy").or_insert_with(|| json!("Always"));
    spec.entry("dnsPolicy").or_insert_with(|| json!("ClusterFirst"));
    spec.entry("terminationGracePeriodSeconds").or_insert_with(|| json!(30));
    let spec_value = v.get_mut("spec").ok_or_else(|| invalid("spec: Required value"))?;
    validation::default_requests_from_limits(spec_value);
    let errs = validation::pod_spec(spec_value, "spec");
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    let spec = v.get_mut("spec").and_then(Value::as_object_mut).ok_or_else(|| invalid("spec: Required value"))?;
    // Priority admission.
    let class_name = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("").to_string();
    let class = if class_name.is_empty() {
        view.each(PRIORITY_CLASSES)
            .filter(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true))
            .max_by_key(|pc| pc.get("value").and_then(Value::as_i64).unwrap_or(0))
    } else {
        match view.get(PRIORITY_CLASSES, "", &class_name) {
            Some(pc) => Some(pc),
            None => return Err(Error::Forbidden(format!("no PriorityClass with name {class_name} was found"))),
        }
    };
    let (prio, policy) = match class {
        Some(pc) => {
            spec.insert("priorityClassName".into(), json!(get_str(pc, "/metadata/name")));
            (
                pc.get("value").and_then(Value::as_i64).unwrap_or(0),
                pc.get("preemptionPolicy").and_then(Value::as_str).unwrap_or("PreemptLowerPriority").to_string(),
            )
        }
        None => (0, "PreemptLowerPriority".to_string()),
    };
    if let Some(p) = spec.get("priority").and_then(Value::as_i64)
        && p != prio
    {
        return Err(Error::Forbidden(format!(
            "the integer value of priority ({p}) must not be provided in pod spec; priority admission controller computed {prio} from the given PriorityClass name"
        )));
    }
    spec.insert("priority".into(), json!(prio));
    spec.entry("preemptionPolicy").or_insert_with(|| json!(policy));
    let gated = v.at("/spec/schedulingGates").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if gated && !get_str(v, "/spec/nodeName").is_empty() {
        return Err(invalid("spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"));
    }
    let qos = res::qos_class(v);
    let mut status = json!({"phase": "Pending", "qosClass": qos});
    if gated {
        status["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates", "lastTransitionTime": now_rfc3339()}]);
    }
    set_path(v, &["status"], status);
    Ok(())
}

/// An update of a pod's main resource (upstream's `ValidatePodUpdate`):
/// spec.nodeName changes only through a binding, the priority set at
/// admission stays, the new spec is valid, and only the fields upstream
/// lets change do: container images, activeDeadlineSeconds (set, or
/// lowered), tolerations (added; tolerationSeconds of existing ones),
/// scheduling gates (removed), terminationGracePeriodSeconds (a negative
/// one to 1) and, while the pod is gated, nodeSelector and affinity.
fn update(old: &Value, new: &mut Value) -> Result<(), Error> {
    let (o, n) = (get_str(old, "/spec/nodeName"), get_str(new, "/spec/nodeName"));
    if o != n {
        return Err(Error::Invalid(vec!["spec: Forbidden: pod updates may not change spec.nodeName (use the binding subresource)".into()]));
    }
    // Priority is set by admission and immutable.
    if let Some(p) = old.at("/spec/priority").cloned() {
        set_path(new, &["spec", "priority"], p);
    }
    // What create defaulted and this write left out is defaulted again
    // (upstream decodes every write through its defaulting).
    if let (Some(before), Some(after)) = (old.get("spec").and_then(Value::as_object), new.get_mut("spec").and_then(Value::as_object_mut)) {
        for key in DEFAULTED_AT_CREATE {
            if after.get(*key).is_none_or(Value::is_null)
                && let Some(v) = before.get(*key)
            {
                after.insert((*key).to_string(), v.clone());
            }
        }
    }
    if let Some(spec) = new.get_mut("spec") {
        validation::default_requests_from_limits(spec);
    }
    let mut errs = Vec::new();
    if let Some(spec) = new.get("spec") {
        errs.extend(validation::pod_spec(spec, "spec"));
    }
    errs.extend(spec_update(old, new));
    if !errs.is_empty() {
        // Upstream's aggregate drops repeated messages.
        let mut seen = std::collections::HashSet::new();
        errs.retain(|e| seen.insert(e.clone()));
        return Err(Error::Invalid(errs));
    }
    Ok(())
}

/// Spec fields the pod strategy and admission default at create.
const DEFAULTED_AT_CREATE: &[&str] = &["schedulerName", "restartPolicy", "dnsPolicy", "terminationGracePeriodSeconds", "priorityClassName", "preemptionPolicy"];

fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The update rules of upstream's `ValidatePodUpdate` after the new
/// spec's own validation.
fn spec_update(old: &Value, new: &Value) -> Vec<String> {
    let (os, ns) = (old.get("spec").unwrap_or(&Value::Null), new.get("spec").unwrap_or(&Value::Null));
    let mut errs = Vec::new();
    for key in ["containers", "initContainers"] {
        if items(os, key).len() != items(ns, key).len() {
            errs.push(format!("spec.{key}: Forbidden: pod updates may not add or remove containers"));
            return errs;
        }
        for (i, c) in items(ns, key).iter().enumerate() {
            if c.get("image").and_then(Value::as_str).unwrap_or("").is_empty() {
                errs.push(format!("spec.{key}[{i}].image: Required value"));
            }
        }
    }
    let deadline = |s: &Value| s.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (deadline(os), deadline(ns)) {
        (_, Some(n)) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            errs.push(format!("spec.activeDeadlineSeconds: Invalid value: {n}: must be between 0 and 2147483647, inclusive"));
            return errs;
        }
        (Some(o), Some(n)) if o < n => {
            errs.push(format!("spec.activeDeadlineSeconds: Invalid value: {n}: must be less than or equal to previous value"));
            return errs;
        }
        (Some(_), None) => errs.push("spec.activeDeadlineSeconds: Invalid value: \"null\": must not update from a positive integer to nil value".into()),
        _ => {}
    }
    // Tolerations: existing ones stay (their tolerationSeconds may change).
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        normalized(&t)
    };
    let new_tolerations: Vec<Value> = items(ns, "tolerations").iter().map(without_seconds).collect();
    if items(os, "tolerations").iter().any(|t| !new_tolerations.contains(&without_seconds(t))) {
        errs.push("spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds".into());
    }
    errs.extend(added_scheduling_gates(old, new));
    if let Some(e) = scheduling_group_changed(old, new) {
        errs.push(e);
        return errs;
    }
    // Everything else must be equal once the updatable fields are set
    // back to their old values.
    let mut munged = ns.clone();
    if let Some(m) = munged.as_object_mut() {
        for key in ["containers", "initContainers"] {
            if let Some(cs) = m.get_mut(key).and_then(Value::as_array_mut) {
                for (c, before) in cs.iter_mut().zip(items(os, key)) {
                    if let Some(c) = c.as_object_mut() {
                        match before.get("image") {
                            Some(image) => c.insert("image".into(), image.clone()),
                            None => c.remove("image"),
                        };
                    }
                }
            }
        }
        let gated = !items(os, "schedulingGates").is_empty();
        let mut restore = vec!["activeDeadlineSeconds", "tolerations", "schedulingGates", "schedulingGroup"];
        if gated {
            restore.extend(["nodeSelector", "affinity"]);
        }
        let grace = |s: &Value| s.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
        if grace(os).is_some_and(|g| g < 0) && grace(ns) == Some(1) {
            restore.push("terminationGracePeriodSeconds");
        }
        for key in restore {
            match os.get(key) {
                Some(v) => m.insert(key.into(), v.clone()),
                None => m.remove(key),
            };
        }
    }
    let (before, after) = (normalized(os), normalized(&munged));
    if before != after {
        errs.push(format!("spec: Forbidden: pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{}", spec_diff(&before, &after)));
    }
    errs
}

/// A value with nulls, empty lists and empty maps left out (upstream's
/// semantic equality treats nil and empty alike).
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(|o| o.is_empty())))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        v => v.clone(),
    }
}

/// The fields that differ, in the shape of the `cmp.Diff` upstream
/// appends (field names as Go's; values as JSON, not Go syntax).
fn spec_diff(before: &Value, after: &Value) -> String {
    let empty = serde_json::Map::new();
    let (b, a) = (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = String::from("  core.PodSpec{\n  \t... // other fields identical\n");
    for k in keys.into_iter().filter(|k| b.get(k.as_str()) != a.get(k.as_str())) {
        let go = format!("{}{}", k.get(..1).unwrap_or("").to_uppercase(), k.get(1..).unwrap_or(""));
        if let Some(v) = b.get(k.as_str()) {
            out.push_str(&format!("- \t{go}: {v},\n"));
        }
        if let Some(v) = a.get(k.as_str()) {
            out.push_str(&format!("+ \t{go}: {v},\n"));
        }
    }
    out.push_str("  }\n");
    out
}

/// The kubelet's status manager: Ready follows the readiness gates.
fn settle(new: &mut Value) {
    if let Some(ready) = gated_ready_condition(new) {
        set_condition(new, ready);
    }
}

/// Upstream's `validateOnlyDeletedSchedulingGates`: one error per gate
/// that the old pod did not have.
fn added_scheduling_gates(old: &Value, new: &Value) -> Vec<String> {
    let names = |p: &Value| -> Vec<String> {
        p.at("/spec/schedulingGates")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|g| g.get("name").and_then(Value::as_str).unwrap_or("").to_string()).collect())
            .unwrap_or_default()
    };
    let before = names(old);
    names(new)
        .iter()
        .enumerate()
        .filter(|(_, g)| !before.contains(g))
        .map(|(i, g)| format!("spec.schedulingGates[{i}].name: Forbidden: only deletion is allowed, but found new scheduling gate '{g}'"))
        .collect()
}

/// The `updatablePodSpecFields` of upstream's `ValidatePodUpdate`.
const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `spec.schedulingGroup` is immutable: upstream refuses the change with
/// ValidatePodUpdate's catch-all error and a diff of the field.
fn scheduling_group_changed(old: &Value, new: &Value) -> Option<String> {
    let (o, n) = (old.at("/spec/schedulingGroup").filter(|v| !v.is_null()), new.at("/spec/schedulingGroup").filter(|v| !v.is_null()));
    if o == n {
        return None;
    }
    let show = |v: Option<&Value>| match v.and_then(|g| g.get("podGroupName")).and_then(Value::as_str) {
        Some(name) => format!("&core.PodSchedulingGroup{{PodGroupName: &\"{name}\"}}"),
        None if v.is_some() => "&core.PodSchedulingGroup{}".to_string(),
        None => "nil".to_string(),
    };
    Some(format!(
        "spec: Forbidden: pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n  core.PodSpec{{\n  \t... // other fields identical\n- \tSchedulingGroup: {},\n+ \tSchedulingGroup: {},\n  }}\n",
        show(o),
        show(n)
    ))
}

fn condition<'a>(pod: &'a Value, ty: &str) -> Option<&'a Value> {
    pod.at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty)))
}

/// The Ready condition of a running pod with readinessGates, as the
/// kubelet computes it (`GeneratePodReadyCondition`): what ContainersReady
/// says when that is not True, else True only when every gate's condition
/// is True (reason ReadinessGatesNotReady otherwise). The transition time
/// moves only when the status does. None for a pod without gates or not running.
pub fn gated_ready_condition(pod: &Value) -> Option<Value> {
    let gates = pod.at("/spec/readinessGates").and_then(Value::as_array).filter(|g| !g.is_empty())?;
    if pod.at("/status/phase").and_then(Value::as_str) != Some("Running") {
        return None;
    }
    let text = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let (status, reason, message) = match condition(pod, "ContainersReady") {
        Some(c) if text(c, "status") != "True" => (text(c, "status"), text(c, "reason"), text(c, "message")),
        _ => {
            let unready: Vec<String> = gates
                .iter()
                .filter_map(|g| {
                    let ty = g.get("conditionType").and_then(Value::as_str).unwrap_or("");
                    match condition(pod, ty) {
                        None => Some(format!("corresponding condition of pod readiness gate \"{ty}\" does not exist.")),
                        Some(c) if text(c, "status") != "True" => {
                            Some(format!("the status of pod readiness gate \"{ty}\" is not \"True\", but {}", text(c, "status")))
                        }
                        Some(_) => None,
                    }
                })
                .collect();
            if unready.is_empty() {
                ("True".to_string(), String::new(), String::new())
            } else {
                ("False".to_string(), "ReadinessGatesNotReady".to_string(), unready.join(", "))
            }
        }
    };
    let previous = condition(pod, "Ready");
    let since = match previous {
        Some(c) if text(c, "status") == status => c.get("lastTransitionTime").cloned().unwrap_or_else(|| json!(now_rfc3339())),
        _ => json!(now_rfc3339()),
    };
    let mut c = json!({"type": "Ready", "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::Objects;

    #[test]
    fn only_deleting_scheduling_gates_is_allowed() {
        let gates = added_scheduling_gates(&json!({"spec": {"schedulingGates": [{"name": "a"}]}}), &json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}));
        assert_eq!(gates, vec!["spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'b'".to_string()]);
    }

    #[test]
    fn priority_comes_from_the_class_or_the_global_default() {
        let pc = |name: &str, value: i64, default: bool| (PRIORITY_CLASSES, json!({"metadata": {"name": name}, "value": value, "globalDefault": default}));
        let view = Objects { objects: vec![pc("low", 1, true), pc("high", 100, false)], ..Default::default() };
        let pod = |extra: Value| {
            let mut v = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
            if let (Some(s), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
                s.extend(e.clone());
            }
            v
        };
        let mut v = pod(json!({}));
        create(&view, "p", &mut v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v["spec"]["priorityClassName"].as_str(), v["spec"]["priority"].as_i64()), (Some("low"), Some(1)));
        assert_eq!(v["status"]["phase"], "Pending");
        let mut v = pod(json!({"priorityClassName": "high"}));
        create(&view, "p", &mut v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["spec"]["priority"], 100);
        assert!(matches!(create(&view, "p", &mut pod(json!({"priorityClassName": "none"}))), Err(Error::Forbidden(_))));
        assert!(matches!(create(&view, "p", &mut pod(json!({"priority": 7}))), Err(Error::Forbidden(_))));
        let gated = json!({"schedulingGates": [{"name": "g"}], "nodeName": "n"});
        assert!(matches!(create(&view, "p", &mut pod(gated)), Err(Error::Invalid(_))));
    }
}
