//! Bad input gets kube-apiserver's answers: quantities that do not parse
//! (400 from decoding), negative requests, requests above limits, too
//! much annotation, duplicate topology spread constraints (422, each with
//! upstream's message), and the server stays up.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use serde_json::{Value, json};

use crate::support::raw_http;

/// One HTTP/1.1 request: (status, body as JSON or a string).
pub(crate) async fn call(addr: &LocalCluster, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let (code, body) = raw_http(addr, method, path, &format!("Content-Type: {content_type}\r\n"), body).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

fn pod(name: &str, container: Value, extra: Value) -> Value {
    let mut c = json!({"name": "c", "image": "busybox"});
    crate::support::merge(&mut c, &container);
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [c]}});
    crate::support::merge(&mut p, &extra);
    p
}

const QUANTITY_RE: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pods_get_upstreams_answers() {
    crate::support::init_logs();
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let addr = &c;
    let pods = "/api/v1/namespaces/default/pods";
    let spread = |key: &str, when: &str| json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"app": "a"}}});
    let cases: Vec<(Value, u16, String)> = vec![
        (
            pod("lots", json!({"resources": {"requests": {"cpu": "lots"}}}), json!({})),
            400,
            format!("Pod in version \"v1\" cannot be handled as a Pod: {QUANTITY_RE}"),
        ),
        (
            pod("suffix", json!({"resources": {"limits": {"memory": "1KK"}}}), json!({})),
            400,
            "Pod in version \"v1\" cannot be handled as a Pod: unable to parse quantity's suffix".into(),
        ),
        (
            pod("negative", json!({"resources": {"requests": {"cpu": "-4"}}}), json!({})),
            422,
            "Pod \"negative\" is invalid: spec.containers[0].resources.requests[cpu]: Invalid value: \"-4\": must be greater than or equal to 0".into(),
        ),
        (
            pod("negative-limit", json!({"resources": {"limits": {"memory": "-1Gi"}, "requests": {"memory": "0"}}}), json!({})),
            422,
            "Pod \"negative-limit\" is invalid: [spec.containers[0].resources.limits[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests: Invalid value: \"0\": must be less than or equal to memory limit of -1Gi]".into(),
        ),
        (
            pod("above", json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}}), json!({})),
            422,
            "Pod \"above\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1500m".into(),
        ),
        (
            pod("notes", json!({}), json!({"metadata": {"annotations": {"big": "x".repeat(256 * 1024)}}})),
            422,
            "Pod \"notes\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes".into(),
        ),
        (
            pod("spread", json!({}), json!({"spec": {"topologySpreadConstraints": [spread("zone", "DoNotSchedule"), spread("host", "DoNotSchedule"), spread("zone", "DoNotSchedule")]}})),
            422,
            "Pod \"spread\" is invalid: spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: Duplicate value: \"{zone, DoNotSchedule}\"".into(),
        ),
    ];
    for (body, code, message) in &cases {
        let (got, status) = call(addr, "POST", pods, "application/json", &body.to_string()).await;
        assert_eq!((got, status["message"].as_str().unwrap_or("")), (*code, message.as_str()), "{status}");
        let reason = if *code == 400 { "BadRequest" } else { "Invalid" };
        assert_eq!((status["code"].as_u64(), status["reason"].as_str()), (Some(u64::from(*code)), Some(reason)));
    }
    // The 422s name the field in their causes.
    let (_, status) = call(addr, "POST", pods, "application/json", &cases[2].0.to_string()).await;
    assert_eq!(status["details"]["causes"][0]["field"], "spec.containers[0].resources.requests[cpu]");
    // A bad quantity in a workload's template, and through a patch, is refused too.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "many"}}}]}}}});
    let (code, status) = call(addr, "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", &dep.to_string()).await;
    assert_eq!((code, status["message"].as_str().unwrap()), (400, format!("Deployment in version \"v1\" cannot be handled as a Deployment: {QUANTITY_RE}").as_str()));
    let good = pod("good", json!({"resources": {"limits": {"cpu": "1"}}}), json!({}));
    let (code, created) = call(addr, "POST", pods, "application/json", &good.to_string()).await;
    assert_eq!(code, 201, "{created}");
    // Requests default to limits, as upstream's defaulting does.
    assert_eq!(created["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
    let patch = json!({"metadata": {"annotations": {"big": "x".repeat(300 * 1024)}}});
    let (code, status) = call(addr, "PATCH", &format!("{pods}/good"), "application/merge-patch+json", &patch.to_string()).await;
    assert_eq!((code, status["message"].as_str().unwrap()), (422, "Pod \"good\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"));
    // The server is still up, and nothing bad was stored.
    let (code, list) = call(addr, "GET", pods, "application/json", "").await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"].as_array().unwrap().iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["good"]);
    c.shutdown().await;
}

const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const KEY_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// The rest of upstream's ValidatePodSpec / ValidatePodCreate: one bad
/// pod per row, each answered 422 with upstream's message (a single error
/// bare, several in brackets), and nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_specs_are_validated_as_upstream_does() {
    crate::support::init_logs();
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let pods = "/api/v1/namespaces/default/pods";
    let raw = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
    let ok = || json!({"name": "c", "image": "busybox"});
    let term = |exprs: Value| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}});
    let cases: Vec<(Value, String)> = vec![
        (raw("noname", json!({"containers": [{"image": "busybox"}]})), "spec.containers[0].name: Required value".into()),
        (pod("badname", json!({"name": "Bad_Name"}), json!({})), format!("spec.containers[0].name: Invalid value: \"Bad_Name\": {DNS_LABEL_MSG}")),
        (raw("twice", json!({"containers": [ok(), ok()]})), "spec.containers[1].name: Duplicate value: \"c\"".into()),
        (raw("init-twice", json!({"containers": [ok()], "initContainers": [ok()]})), "spec.initContainers[0].name: Duplicate value: \"c\"".into()),
        (raw("noimage", json!({"containers": [{"name": "c"}]})), "spec.containers[0].image: Required value".into()),
        (
            pod("bigport", json!({"ports": [{"containerPort": 70000}]}), json!({})),
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
        ),
        (pod("noport", json!({"ports": [{"name": "http"}]}), json!({})), "spec.containers[0].ports[0].containerPort: Required value".into()),
        (
            pod("proto", json!({"ports": [{"containerPort": 80, "protocol": "HTTP"}]}), json!({})),
            "spec.containers[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"".into(),
        ),
        (
            pod("portnames", json!({"ports": [{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}]}), json!({})),
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"".into(),
        ),
        (
            pod("portname", json!({"ports": [{"name": "8080", "containerPort": 80}]}), json!({})),
            "spec.containers[0].ports[0].name: Invalid value: \"8080\": must contain at least one letter (a-z)".into(),
        ),
        (
            pod("twohandlers", json!({"livenessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}}), json!({})),
            "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type".into(),
        ),
        (
            pod("nohandler", json!({"readinessProbe": {"periodSeconds": 5}}), json!({})),
            "spec.containers[0].readinessProbe: Required value: must specify a handler type".into(),
        ),
        (
            pod("liveness", json!({"livenessProbe": {"httpGet": {"port": 8080}, "successThreshold": 2}}), json!({})),
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".into(),
        ),
        (
            raw("initprobe", json!({"containers": [ok()], "initContainers": [{"name": "i", "image": "busybox", "readinessProbe": {"exec": {"command": ["true"]}}}]})),
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always".into(),
        ),
        (
            pod("restart", json!({}), json!({"spec": {"restartPolicy": "Sometimes"}})),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into(),
        ),
        (
            pod("dns", json!({}), json!({"spec": {"dnsPolicy": "Google"}})),
            "spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"".into(),
        ),
        (pod("labelkey", json!({}), json!({"metadata": {"labels": {"bad key": "v"}}})), format!("metadata.labels: Invalid value: \"bad key\": {KEY_NAME_MSG}")),
        (
            pod("labelvalue", json!({}), json!({"metadata": {"labels": {"app": "x".repeat(64)}}})),
            format!("metadata.labels: Invalid value: \"{}\": must be no more than 63 bytes", "x".repeat(64)),
        ),
        (
            pod("annotation", json!({}), json!({"metadata": {"annotations": {"a/b/c": "v"}}})),
            "metadata.annotations: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
        ),
        (
            pod("nodesel", json!({}), json!({"spec": {"nodeSelector": {"zone": "a b"}}})),
            "spec.nodeSelector: Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
        ),
        (
            pod("in-novalues", json!({}), json!({"spec": {"affinity": term(json!([{"key": "zone", "operator": "In"}]))}})),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'".into(),
        ),
        (
            pod("exists-values", json!({}), json!({"spec": {"affinity": term(json!([{"key": "zone", "operator": "Exists", "values": ["a"]}]))}})),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".into(),
        ),
        (
            pod("badop", json!({}), json!({"spec": {"affinity": term(json!([{"key": "zone", "operator": "Equals", "values": ["a"]}]))}})),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: \"Equals\": not a valid selector operator".into(),
        ),
        (
            pod("noterms", json!({}), json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}})),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value: must have at least one node selector term".into(),
        ),
        (
            pod("weight", json!({}), json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}}}})),
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100".into(),
        ),
        (
            pod("podaff", json!({}), json!({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": ""}]}}}})),
            format!("[spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty, spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": name part must be non-empty, spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": {KEY_NAME_MSG}]"),
        ),
        (
            pod("antiaff", json!({}), json!({"spec": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn"}]}, "topologyKey": "zone"}}]}}}})),
            "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'".into(),
        ),
        (
            pod("tolerate", json!({}), json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]}})),
            "spec.tolerations[0].operator: Invalid value: \"yes\": value must be empty when `operator` is 'Exists'".into(),
        ),
        (
            raw("volumes", json!({"containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "logs", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}, {"name": "logs", "emptyDir": {}}]})),
            "[spec.volumes[1].name: Duplicate value: \"data\", spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/data\": must be unique]".into(),
        ),
        (
            pod("mount", json!({"volumeMounts": [{"name": "nosuch", "mountPath": "/x"}]}), json!({})),
            "spec.containers[0].volumeMounts[0].name: Not found: \"nosuch\"".into(),
        ),
        (
            pod("env", json!({"env": [{"name": "A=B", "value": "1"}, {"value": "2"}]}), json!({})),
            "[spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '=', spec.containers[0].env[1].name: Required value]".into(),
        ),
        (
            pod("resname", json!({"resources": {"requests": {"cpus": "1"}}}), json!({})),
            "spec.containers[0].resources.requests[cpus]: Invalid value: \"cpus\": must be a standard resource for containers".into(),
        ),
        (
            pod("gates", json!({}), json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}, {"name": "example.com/wait"}]}})),
            "spec.schedulingGates[1]: Duplicate value: \"example.com/wait\"".into(),
        ),
    ];
    for (body, message) in &cases {
        let name = body["metadata"]["name"].as_str().unwrap();
        let (code, status) = call(&c, "POST", pods, "application/json", &body.to_string()).await;
        let want = format!("Pod \"{name}\" is invalid: {message}");
        assert_eq!((code, status["message"].as_str().unwrap_or("")), (422, want.as_str()), "{status}");
        assert_eq!(status["reason"], "Invalid");
    }
    let (code, list) = call(&c, "GET", pods, "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    c.shutdown().await;
}

/// Upstream's ValidatePodUpdate: images, activeDeadlineSeconds (set or
/// lowered), added tolerations and removed gates may change; anything
/// else in the spec is refused with the catch-all message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_updates_change_only_what_upstream_allows() {
    crate::support::init_logs();
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let pods = "/api/v1/namespaces/default/pods";
    let body = pod("u", json!({}), json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}],
        "schedulingGates": [{"name": "example.com/one"}, {"name": "example.com/two"}]}}));
    let (code, created) = call(&c, "POST", pods, "application/json", &body.to_string()).await;
    assert_eq!(code, 201, "{created}");
    let patch = |p: Value| {
        let c = &c;
        async move { call(c, "PATCH", &format!("{pods}/u"), "application/merge-patch+json", &p.to_string()).await }
    };
    const CATCH_ALL: &str = "Pod \"u\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n";
    let allowed = [
        json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}),
        json!({"spec": {"activeDeadlineSeconds": 600}}),
        json!({"spec": {"activeDeadlineSeconds": 300}}),
        json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}, {"key": "b", "operator": "Exists"}]}}),
        json!({"spec": {"schedulingGates": [{"name": "example.com/one"}]}}),
        // While gated, nodeSelector may change (upstream: additions).
        json!({"spec": {"nodeSelector": {"zone": "a"}}}),
    ];
    for p in allowed {
        let (code, v) = patch(p.clone()).await;
        assert_eq!(code, 200, "{p}: {v}");
    }
    let refused: Vec<(Value, &str)> = vec![
        (json!({"spec": {"activeDeadlineSeconds": 900}}), "Pod \"u\" is invalid: spec.activeDeadlineSeconds: Invalid value: 900: must be less than or equal to previous value"),
        (json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}), "Pod \"u\" is invalid: spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"),
        (
            json!({"spec": {"schedulingGates": [{"name": "example.com/one"}, {"name": "example.com/three"}]}}),
            "Pod \"u\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'example.com/three'",
        ),
        (
            json!({"spec": {"containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "busybox"}]}}),
            "Pod \"u\" is invalid: spec.containers: Forbidden: pod updates may not add or remove containers",
        ),
        (json!({"spec": {"containers": [{"name": "c", "image": ""}]}}), "Pod \"u\" is invalid: spec.containers[0].image: Required value"),
    ];
    for (p, message) in refused {
        let (code, v) = patch(p.clone()).await;
        assert_eq!((code, v["message"].as_str().unwrap_or("")), (422, message), "{p}");
    }
    // Anything else: the catch-all, with a diff naming the field.
    for p in [json!({"spec": {"containers": [{"name": "c", "image": "busybox:2", "workingDir": "/tmp"}]}}), json!({"spec": {"restartPolicy": "Never"}}), json!({"spec": {"hostname": "h"}})] {
        let (code, v) = patch(p.clone()).await;
        let message = v["message"].as_str().unwrap_or("");
        assert!(code == 422 && message.starts_with(CATCH_ALL), "{p}: {code} {v}");
    }
    // Once ungated, nodeSelector is fixed too.
    let (code, v) = patch(json!({"spec": {"schedulingGates": null}})).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = patch(json!({"spec": {"nodeSelector": {"zone": "b"}}})).await;
    assert!(code == 422 && v["message"].as_str().unwrap_or("").starts_with(CATCH_ALL), "{v}");
    // What was allowed is what is stored.
    let (_, got) = call(&c, "GET", &format!("{pods}/u"), "application/json", "").await;
    assert_eq!(got["spec"]["containers"][0]["image"], "busybox:2");
    assert_eq!(got["spec"]["activeDeadlineSeconds"], 300);
    assert_eq!(got["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    assert_eq!(got["spec"]["restartPolicy"], "Always");
    c.shutdown().await;
}

/// Events expire after `event_ttl` from their last write (kube-apiserver's
/// `--event-ttl`): a watcher sees them deleted; one written again lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_after_the_event_ttl() {
    crate::support::init_logs();
    let ttl = Duration::from_secs(3);
    let c = LocalCluster::start(ClusterConfig { nodes: 1, event_ttl: ttl, ..Default::default() }).await.unwrap();
    let addr = &c;
    let event = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Tested", "message": "m", "type": "Normal", "source": {"component": "test"}})
        .to_string()
    };
    let events = "/api/v1/namespaces/default/events";
    for name in ["a", "b"] {
        let (code, v) = call(addr, "POST", events, "application/json", &event(name)).await;
        assert_eq!(code, 201, "{v}");
    }
    let names = || async {
        let (_, list) = call(addr, "GET", events, "application/json", "").await;
        let mut n: Vec<String> = list["items"].as_array().unwrap().iter().filter_map(|e| e["metadata"]["name"].as_str().map(str::to_string)).filter(|n| n == "a" || n == "b").collect();
        n.sort();
        n
    };
    tokio::time::sleep(ttl / 2).await;
    // Writing "b" again renews its lease.
    let patch = json!({"message": "again"}).to_string();
    let (code, _) = call(addr, "PATCH", &format!("{events}/b"), "application/merge-patch+json", &patch).await;
    assert_eq!(code, 200);
    tokio::time::sleep(ttl * 3 / 4).await;
    crate::support::eventually(10, "event a expired", || async { (names().await == ["b"]).then_some(()) }).await;
    crate::support::eventually(10, "event b expired", || async { names().await.is_empty().then_some(()) }).await;
    c.shutdown().await;
}
