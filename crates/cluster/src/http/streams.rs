//! The pod subresources a kubelet serves through the API server:
//! `pods/log` (GET) and `pods/exec`, `pods/attach`, `pods/portforward`
//! (GET or POST upgrade requests). The local cluster's kubelets run no
//! containers, so none of them streams anything: each answers as
//! kube-apiserver and a kubelet would before a container runs, with a
//! metav1.Status that says why.
//!
//! - a container name is checked as kube-apiserver checks it
//!   (`validateContainer`): none given for a pod with several containers,
//!   or one the pod does not have, is 400 with upstream's message;
//! - `log` of a pod not yet bound is an empty 200 (upstream's `LogLocation`
//!   has no node to ask); `exec`/`attach`/`portforward` of one is 400
//!   `pod p does not have a host assigned`;
//! - a container still waiting (or with no status yet, which a real
//!   kubelet reports as `ContainerCreating`) is 400 with the kubelet's
//!   `container "c" in pod "p" is waiting to start: REASON`;
//! - a container the simulated kubelet reports running or terminated is
//!   400 saying that the local cluster's kubelets run no containers.

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use std::collections::HashMap;

use super::{Error, HResult};
use crate::jsonptr::Pointer as _;
use crate::resources::PODS;
use crate::store::Store;

/// The subresources served here.
pub(super) const SUBRESOURCES: &[&str] = &["log", "exec", "attach", "portforward"];

/// What the kubelet says instead of streaming.
const NO_RUNTIME: &str = "the local cluster's kubelets (berth cluster) simulate pods and run no containers";

/// Answer a `pods/{log,exec,attach,portforward}` request.
pub(super) fn answer(store: &Store, method: &Method, sub: &str, ns: &str, name: &str, q: &HashMap<String, String>) -> HResult<Response> {
    let allowed = match sub {
        "log" => *method == Method::GET,
        _ => *method == Method::GET || *method == Method::POST,
    };
    if !allowed {
        return Err(Error::MethodNotAllowed);
    }
    let pod = store.get(PODS, ns, name)?;
    let v = &pod.value;
    if sub == "portforward" {
        return match node(v) {
            None => Err(Error::BadRequest(format!("pod {name} does not have a host assigned"))),
            Some(n) => Err(Error::BadRequest(format!("unable to forward ports of pod {name} on node {n:?}: {NO_RUNTIME}"))),
        };
    }
    let container = container(v, name, q.get("container").map(String::as_str).unwrap_or(""))?;
    let Some(node) = node(v) else {
        if sub == "log" {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::OK;
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Ok(r);
        }
        return Err(Error::BadRequest(format!("pod {name} does not have a host assigned")));
    };
    if let Some(reason) = waiting(v, &container) {
        return Err(Error::BadRequest(format!("container {container:?} in pod {name:?} is waiting to start: {reason}")));
    }
    let what = match sub {
        "log" => "has no logs",
        "exec" => "cannot run commands",
        _ => "cannot be attached to",
    };
    Err(Error::BadRequest(format!("container {container:?} in pod {name:?} on node {node:?} {what}: {NO_RUNTIME}")))
}

fn node(v: &Value) -> Option<&str> {
    v.at("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
}

/// The names of a pod's containers: init, regular, ephemeral (upstream's
/// `VisitContainers` order).
fn names(v: &Value) -> Vec<&str> {
    ["/spec/initContainers", "/spec/containers", "/spec/ephemeralContainers"]
        .iter()
        .flat_map(|p| v.at(p).and_then(Value::as_array).into_iter().flatten())
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect()
}

/// The container a request names, or the pod's only one (upstream's
/// `validateContainer`).
fn container(v: &Value, pod: &str, asked: &str) -> HResult<String> {
    let all = names(v);
    if asked.is_empty() {
        let regular: Vec<&str> = v.at("/spec/containers").and_then(Value::as_array).into_iter().flatten().filter_map(|c| c.get("name").and_then(Value::as_str)).collect();
        return match regular.as_slice() {
            [one] => Ok((*one).to_string()),
            [] => Err(Error::BadRequest(format!("a container name must be specified for pod {pod}"))),
            _ => Err(Error::BadRequest(format!("a container name must be specified for pod {pod}, choose one of: [{}]", all.join(" ")))),
        };
    }
    if all.contains(&asked) { Ok(asked.to_string()) } else { Err(Error::BadRequest(format!("container {asked} is not valid for pod {pod}"))) }
}

/// Why a container is waiting, if it is: its status's waiting reason, or
/// `ContainerCreating` while the kubelet has reported no status for it.
fn waiting(v: &Value, container: &str) -> Option<String> {
    let status = ["/status/initContainerStatuses", "/status/containerStatuses", "/status/ephemeralContainerStatuses"]
        .iter()
        .flat_map(|p| v.at(p).and_then(Value::as_array).into_iter().flatten())
        .find(|c| c.get("name").and_then(Value::as_str) == Some(container));
    let Some(status) = status else { return Some("ContainerCreating".into()) };
    let state = status.get("state");
    if state.and_then(|s| s.get("running")).is_some() || state.and_then(|s| s.get("terminated")).is_some() {
        return None;
    }
    let reason = state.and_then(|s| s.at("/waiting/reason")).and_then(Value::as_str).unwrap_or("ContainerCreating");
    Some(reason.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_are_checked_as_upstream_checks_them() {
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(container(&two, "p", "b").ok().as_deref(), Some("b"));
        assert_eq!(container(&two, "p", "i").ok().as_deref(), Some("i"));
        let msg = |r: HResult<String>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(msg(container(&two, "p", "")), "a container name must be specified for pod p, choose one of: [i a b]");
        assert_eq!(msg(container(&two, "p", "x")), "container x is not valid for pod p");
        let one = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(container(&one, "p", "").ok().as_deref(), Some("c"));
    }

    #[test]
    fn waiting_reads_the_kubelets_status() {
        let pod = |st: Value| json!({"status": {"containerStatuses": [{"name": "c", "state": st}]}});
        assert_eq!(waiting(&json!({}), "c").as_deref(), Some("ContainerCreating"));
        assert_eq!(waiting(&pod(json!({"waiting": {"reason": "ImagePullBackOff"}})), "c").as_deref(), Some("ImagePullBackOff"));
        assert_eq!(waiting(&pod(json!({"running": {}})), "c"), None);
    }
}
