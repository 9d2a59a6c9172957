//! Server-side printer columns of the built-in kinds, as kube-apiserver
//! 1.32 prints them (`pkg/printers/internalversion/printers.go`): the same
//! column names, in the same order, with the same `-o wide` (priority 1)
//! columns; one registry, by API group and plural. A kind not listed here
//! gets upstream's default (Name, Age).

use serde_json::{Value, json};

use super::{age, int, or_none, s};
use crate::jsonptr::Pointer as _;

/// One column: name, type, priority (1 shows only with `-o wide`).
type Col = (&'static str, &'static str, u8);

/// The cells of one row: the object, its name and its age.
type Cells = fn(&Value, &str, &str) -> Vec<Value>;

/// The printer of a built-in kind, by API group and plural.
pub(super) fn printer(group: &str, plural: &str) -> Option<(&'static [Col], Cells)> {
    let p: (&'static [Col], Cells) = match (group, plural) {
        ("", "pods") => (
            &[
                N,
                ("Ready", "string", 0),
                ("Status", "string", 0),
                ("Restarts", "string", 0),
                A,
                ("IP", "string", 1),
                ("Node", "string", 1),
                ("Nominated Node", "string", 1),
                ("Readiness Gates", "string", 1),
            ],
            pod,
        ),
        ("", "nodes") => (
            &[
                N,
                ("Status", "string", 0),
                ("Roles", "string", 0),
                A,
                ("Version", "string", 0),
                ("Internal-IP", "string", 1),
                ("External-IP", "string", 1),
                ("OS-Image", "string", 1),
                ("Kernel-Version", "string", 1),
                ("Container-Runtime", "string", 1),
            ],
            node,
        ),
        ("", "events") => (
            &[
                ("Last Seen", "string", 0),
                ("Type", "string", 0),
                ("Reason", "string", 0),
                ("Object", "string", 0),
                ("Message", "string", 0),
                ("Subobject", "string", 1),
                ("Source", "string", 1),
                ("First Seen", "string", 1),
                ("Count", "string", 1),
                ("Name", "string", 1),
            ],
            event,
        ),
        ("", "namespaces") => (&[N, ("Status", "string", 0), A], |v, n, a| vec![json!(n), json!(s(v, "/status/phase")), json!(a)]),
        ("", "persistentvolumeclaims") => (
            &[
                N,
                ("Status", "string", 0),
                ("Volume", "string", 0),
                ("Capacity", "string", 0),
                ("Access Modes", "string", 0),
                ("StorageClass", "string", 0),
                ("VolumeAttributesClass", "string", 0),
                A,
                ("VolumeMode", "string", 1),
            ],
            pvc,
        ),
        ("", "persistentvolumes") => (
            &[
                N,
                ("Capacity", "string", 0),
                ("Access Modes", "string", 0),
                ("Reclaim Policy", "string", 0),
                ("Status", "string", 0),
                ("Claim", "string", 0),
                ("StorageClass", "string", 0),
                ("VolumeAttributesClass", "string", 0),
                ("Reason", "string", 0),
                A,
                ("VolumeMode", "string", 1),
            ],
            pv,
        ),
        ("apps", "deployments") => (&[N, ("Ready", "string", 0), ("Up-to-date", "string", 0), ("Available", "string", 0), A, CONTAINERS, IMAGES, SELECTOR], |v, n, a| {
            let ready = format!("{}/{}", int(v, "/status/readyReplicas"), int(v, "/spec/replicas"));
            with_template(v, vec![json!(n), json!(ready), json!(int(v, "/status/updatedReplicas").to_string()), json!(int(v, "/status/availableReplicas").to_string()), json!(a)], true)
        }),
        ("apps", "replicasets") => (&[N, ("Desired", "string", 0), ("Current", "string", 0), ("Ready", "string", 0), A, CONTAINERS, IMAGES, SELECTOR], |v, n, a| {
            with_template(v, vec![json!(n), json!(int(v, "/spec/replicas").to_string()), json!(int(v, "/status/replicas").to_string()), json!(int(v, "/status/readyReplicas").to_string()), json!(a)], true)
        }),
        ("apps", "statefulsets") => (&[N, ("Ready", "string", 0), A, CONTAINERS, IMAGES], |v, n, a| {
            with_template(v, vec![json!(n), json!(format!("{}/{}", int(v, "/status/readyReplicas"), int(v, "/spec/replicas"))), json!(a)], false)
        }),
        ("apps", "daemonsets") => (
            &[
                N,
                ("Desired", "integer", 0),
                ("Current", "integer", 0),
                ("Ready", "integer", 0),
                ("Up-to-date", "integer", 0),
                ("Available", "integer", 0),
                ("Node Selector", "string", 0),
                A,
                CONTAINERS,
                IMAGES,
                SELECTOR,
            ],
            |v, n, a| {
                let selector = label_map(v.at("/spec/template/spec/nodeSelector"));
                let cells = vec![
                    json!(n),
                    json!(int(v, "/status/desiredNumberScheduled")),
                    json!(int(v, "/status/currentNumberScheduled")),
                    json!(int(v, "/status/numberReady")),
                    json!(int(v, "/status/updatedNumberScheduled")),
                    json!(int(v, "/status/numberAvailable")),
                    json!(or_none(&selector)),
                    json!(a),
                ];
                with_template(v, cells, true)
            },
        ),
        ("batch", "jobs") => (&[N, ("Status", "string", 0), ("Completions", "string", 0), ("Duration", "string", 0), A, CONTAINERS, IMAGES, SELECTOR], job),
        ("", "services") => (
            &[N, ("Type", "string", 0), ("Cluster-IP", "string", 0), ("External-IP", "string", 0), ("Port(s)", "string", 0), A, ("Selector", "string", 1)],
            service,
        ),
        ("", "configmaps") => (&[N, ("Data", "string", 0), A], |v, n, a| vec![json!(n), json!(len(v, "/data") + len(v, "/binaryData")), json!(a)]),
        ("", "secrets") => (&[N, ("Type", "string", 0), ("Data", "string", 0), A], |v, n, a| {
            vec![json!(n), json!(s(v, "/type")), json!(len(v, "/data") + len(v, "/stringData")), json!(a)]
        }),
        ("", "serviceaccounts") => (&[N, ("Secrets", "string", 0), A], |v, n, a| vec![json!(n), json!(len(v, "/secrets")), json!(a)]),
        ("", "endpoints") => (&[N, ("Endpoints", "string", 0), A], endpoints),
        ("", "limitranges") => (&[N, CREATED], |v, n, _| vec![json!(n), json!(created_at(v))]),
        ("", "resourcequotas") => (&[N, A, ("Request", "string", 0), ("Limit", "string", 0)], quota),
        ("", "podtemplates") => (&[N, ("Containers", "string", 0), ("Images", "string", 0), ("Pod Labels", "string", 0)], |v, n, _| {
            let (c, i) = containers(v, "/template/spec/containers");
            vec![json!(n), json!(c), json!(i), json!(or_none(&label_map(v.at("/template/metadata/labels"))))]
        }),
        ("", "replicationcontrollers") => (
            &[N, ("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0), A, CONTAINERS, IMAGES, SELECTOR],
            |v, n, a| {
                let (c, i) = containers(v, "/spec/template/spec/containers");
                vec![
                    json!(n),
                    json!(int(v, "/spec/replicas")),
                    json!(int(v, "/status/replicas")),
                    json!(int(v, "/status/readyReplicas")),
                    json!(a),
                    json!(c),
                    json!(i),
                    json!(or_none(&label_map(v.at("/spec/selector")))),
                ]
            },
        ),
        ("coordination.k8s.io", "leases") => (&[N, ("Holder", "string", 0), A], |v, n, a| {
            let holder = v.at("/spec/holderIdentity").and_then(Value::as_str).unwrap_or("<unknown>");
            vec![json!(n), json!(holder), json!(a)]
        }),
        ("scheduling.k8s.io", "priorityclasses") => (
            &[N, ("Value", "integer", 0), ("Global-Default", "boolean", 0), A, ("PreemptionPolicy", "string", 0)],
            |v, n, a| {
                let policy = v.at("/preemptionPolicy").and_then(Value::as_str).unwrap_or("<unset>");
                vec![json!(n), json!(int(v, "/value")), json!(flag(v, "/globalDefault", false)), json!(a), json!(policy)]
            },
        ),
        ("policy", "poddisruptionbudgets") => (
            &[N, ("Min Available", "string", 0), ("Max Unavailable", "string", 0), ("Allowed Disruptions", "integer", 0), A],
            |v, n, a| vec![json!(n), json!(int_or_na(v, "/spec/minAvailable")), json!(int_or_na(v, "/spec/maxUnavailable")), json!(int(v, "/status/disruptionsAllowed")), json!(a)],
        ),
        ("storage.k8s.io", "storageclasses") => (
            &[N, ("Provisioner", "string", 0), ("ReclaimPolicy", "string", 0), ("VolumeBindingMode", "string", 0), ("AllowVolumeExpansion", "string", 0), A],
            |v, n, a| {
                let default = s(v, "/metadata/annotations/storageclass.kubernetes.io~1is-default-class") == "true"
                    || s(v, "/metadata/annotations/storageclass.beta.kubernetes.io~1is-default-class") == "true";
                let name = if default { format!("{n} (default)") } else { n.to_string() };
                vec![
                    json!(name),
                    json!(s(v, "/provisioner")),
                    json!(or(s(v, "/reclaimPolicy"), "Delete")),
                    json!(or(s(v, "/volumeBindingMode"), "Immediate")),
                    json!(flag(v, "/allowVolumeExpansion", false)),
                    json!(a),
                ]
            },
        ),
        ("storage.k8s.io", "csinodes") => (&[N, ("Drivers", "integer", 0), A], |v, n, a| vec![json!(n), json!(len(v, "/spec/drivers")), json!(a)]),
        ("storage.k8s.io", "csidrivers") => (
            &[
                N,
                ("AttachRequired", "boolean", 0),
                ("PodInfoOnMount", "boolean", 0),
                ("StorageCapacity", "boolean", 0),
                ("TokenRequests", "string", 0),
                ("RequiresRepublish", "boolean", 0),
                ("SELinuxMount", "boolean", 0),
                ("Modes", "string", 0),
                A,
            ],
            |v, n, a| {
                let audiences: Vec<&str> = arr(v, "/spec/tokenRequests").filter_map(|t| t.get("audience").and_then(Value::as_str)).collect();
                let modes: Vec<&str> = arr(v, "/spec/volumeLifecycleModes").filter_map(Value::as_str).collect();
                vec![
                    json!(n),
                    json!(flag(v, "/spec/attachRequired", true)),
                    json!(flag(v, "/spec/podInfoOnMount", false)),
                    json!(flag(v, "/spec/storageCapacity", false)),
                    json!(if audiences.is_empty() { "<unset>".to_string() } else { audiences.join(",") }),
                    json!(flag(v, "/spec/requiresRepublish", false)),
                    json!(flag(v, "/spec/seLinuxMount", false)),
                    json!(or_none(&modes.join(","))),
                    json!(a),
                ]
            },
        ),
        ("storage.k8s.io", "csistoragecapacities") => (&[N, ("StorageClassName", "string", 0), ("Capacity", "string", 0), A], |v, n, a| {
            vec![json!(n), json!(s(v, "/storageClassName")), json!(or(s(v, "/capacity"), "<unset>")), json!(a)]
        }),
        ("storage.k8s.io", "volumeattachments") => (
            &[N, ("Attacher", "string", 0), ("PV", "string", 0), ("Node", "string", 0), ("Attached", "boolean", 0), A],
            |v, n, a| {
                vec![
                    json!(n),
                    json!(s(v, "/spec/attacher")),
                    json!(s(v, "/spec/source/persistentVolumeName")),
                    json!(s(v, "/spec/nodeName")),
                    json!(flag(v, "/status/attached", false)),
                    json!(a),
                ]
            },
        ),
        ("storage.k8s.io", "volumeattributesclasses") => (&[N, ("DriverName", "string", 0), A], |v, n, a| vec![json!(n), json!(s(v, "/driverName")), json!(a)]),
        ("apps", "controllerrevisions") => (&[N, ("Controller", "string", 0), ("Revision", "integer", 0), A], |v, n, a| {
            vec![json!(n), json!(controller(v)), json!(int(v, "/revision")), json!(a)]
        }),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => (&[N, CREATED], |v, n, _| vec![json!(n), json!(created_at(v))]),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => (
            &[N, ("Role", "string", 0), A, ("Users", "string", 1), ("Groups", "string", 1), ("ServiceAccounts", "string", 1)],
            binding,
        ),
        ("resource.k8s.io", "resourceclaims") => (&[N, ("State", "string", 0), A], |v, n, a| vec![json!(n), json!(claim_state(v)), json!(a)]),
        ("resource.k8s.io", "resourceslices") => (&[N, ("Node", "string", 0), ("Driver", "string", 0), ("Pool", "string", 0), A], |v, n, a| {
            vec![json!(n), json!(or_none(s(v, "/spec/nodeName"))), json!(s(v, "/spec/driver")), json!(s(v, "/spec/pool/name")), json!(a)]
        }),
        ("discovery.k8s.io", "endpointslices") => (&[N, ("AddressType", "string", 0), ("Ports", "string", 0), ("Endpoints", "string", 0), A], |v, n, a| {
            let ports: Vec<String> = arr(v, "/ports").filter_map(|p| p.get("port").and_then(Value::as_i64)).map(|p| p.to_string()).collect();
            let addrs: Vec<String> = arr(v, "/endpoints").flat_map(|e| e.get("addresses").and_then(Value::as_array).into_iter().flatten()).filter_map(Value::as_str).map(str::to_string).collect();
            vec![json!(n), json!(s(v, "/addressType")), json!(if ports.is_empty() { "<unset>".into() } else { ports.join(",") }), json!(first_three(&addrs, "<unset>")), json!(a)]
        }),
        ("batch", "cronjobs") => (
            &[
                N,
                ("Schedule", "string", 0),
                ("Timezone", "string", 0),
                ("Suspend", "boolean", 0),
                ("Active", "integer", 0),
                ("Last Schedule", "string", 0),
                A,
                ("Containers", "string", 1),
                ("Images", "string", 1),
                ("Selector", "string", 1),
            ],
            |v, n, a| {
                let (c, i) = containers(v, "/spec/jobTemplate/spec/template/spec/containers");
                let last = v.at("/status/lastScheduleTime").and_then(Value::as_str).map_or_else(|| "<none>".to_string(), age);
                let suspend = v.at("/spec/suspend").and_then(Value::as_bool).map_or("<unset>", |b| if b { "True" } else { "False" });
                let selector = v.at("/spec/jobTemplate/spec/selector").map(crate::scale::selector_string).unwrap_or_default();
                vec![
                    json!(n),
                    json!(s(v, "/spec/schedule")),
                    json!(or_none(s(v, "/spec/timeZone"))),
                    json!(suspend),
                    json!(len(v, "/status/active")),
                    json!(last),
                    json!(a),
                    json!(c),
                    json!(i),
                    json!(or_none(&selector)),
                ]
            },
        ),
        ("autoscaling", "horizontalpodautoscalers") => (
            &[N, ("Reference", "string", 0), ("Targets", "string", 0), ("MinPods", "string", 0), ("MaxPods", "string", 0), ("Replicas", "string", 0), A],
            |v, n, a| {
                let reference = format!("{}/{}", s(v, "/spec/scaleTargetRef/kind"), s(v, "/spec/scaleTargetRef/name"));
                let targets = if len(v, "/spec/metrics") == 0 { "<none>".to_string() } else { format!("{} metric(s)", len(v, "/spec/metrics")) };
                let min = v.at("/spec/minReplicas").and_then(Value::as_i64).map_or_else(|| "<unset>".to_string(), |m| m.to_string());
                vec![json!(n), json!(reference), json!(targets), json!(min), json!(int(v, "/spec/maxReplicas")), json!(int(v, "/status/currentReplicas")), json!(a)]
            },
        ),
        ("networking.k8s.io", "ingresses") => (&[N, ("Class", "string", 0), ("Hosts", "string", 0), ("Address", "string", 0), ("Ports", "string", 0), A], |v, n, a| {
            let hosts: Vec<&str> = arr(v, "/spec/rules").filter_map(|r| r.get("host").and_then(Value::as_str)).collect();
            let addrs: Vec<String> = arr(v, "/status/loadBalancer/ingress")
                .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")).and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            let ports = if len(v, "/spec/tls") > 0 { "80, 443" } else { "80" };
            vec![
                json!(n),
                json!(or_none(s(v, "/spec/ingressClassName"))),
                json!(if hosts.is_empty() { "*".to_string() } else { hosts.join(",") }),
                json!(addrs.join(",")),
                json!(ports),
                json!(a),
            ]
        }),
        ("networking.k8s.io", "ingressclasses") => (&[N, ("Controller", "string", 0), ("Parameters", "string", 0), A], |v, n, a| {
            let params = match v.at("/spec/parameters") {
                Some(p) if p.is_object() => format!("{}/{}", s(p, "/kind"), s(p, "/name")),
                _ => "<none>".to_string(),
            };
            vec![json!(n), json!(s(v, "/spec/controller")), json!(params), json!(a)]
        }),
        ("networking.k8s.io", "networkpolicies") => (&[N, ("Pod-Selector", "string", 0), A], |v, n, a| {
            let sel = v.at("/spec/podSelector").map(crate::scale::selector_string).unwrap_or_default();
            vec![json!(n), json!(or_none(&sel)), json!(a)]
        }),
        ("networking.k8s.io", "ipaddresses") => (&[N, ("ParentRef", "string", 0), A], |v, n, a| {
            let r = s(v, "/spec/parentRef/resource").to_lowercase();
            let g = s(v, "/spec/parentRef/group");
            let kind = if g.is_empty() { r } else { format!("{r}.{g}") };
            vec![json!(n), json!(format!("{kind}/{}/{}", s(v, "/spec/parentRef/namespace"), s(v, "/spec/parentRef/name"))), json!(a)]
        }),
        ("networking.k8s.io", "servicecidrs") => (&[N, ("CIDRs", "string", 0), A], |v, n, a| {
            let cidrs: Vec<&str> = arr(v, "/spec/cidrs").filter_map(Value::as_str).collect();
            vec![json!(n), json!(cidrs.join(",")), json!(a)]
        }),
        ("node.k8s.io", "runtimeclasses") => (&[N, ("Handler", "string", 0), A], |v, n, a| vec![json!(n), json!(s(v, "/handler")), json!(a)]),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations" | "validatingwebhookconfigurations") => {
            (&[N, ("Webhooks", "integer", 0), A], |v, n, a| vec![json!(n), json!(len(v, "/webhooks")), json!(a)])
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => (&[N, ("Validations", "integer", 0), ("ParamKind", "string", 0), A], |v, n, a| {
            vec![json!(n), json!(len(v, "/spec/validations")), json!(param_kind(v)), json!(a)]
        }),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies") => (&[N, ("Mutations", "integer", 0), ("ParamKind", "string", 0), A], |v, n, a| {
            vec![json!(n), json!(len(v, "/spec/mutations")), json!(param_kind(v)), json!(a)]
        }),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings" | "mutatingadmissionpolicybindings") => {
            (&[N, ("PolicyName", "string", 0), ("ParamRef", "string", 0), A], |v, n, a| {
                let param = match v.at("/spec/paramRef") {
                    Some(p) if p.is_object() => {
                        let ns = s(p, "/namespace");
                        let name = or(s(p, "/name"), "*");
                        if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") }
                    }
                    _ => "<unset>".to_string(),
                };
                vec![json!(n), json!(s(v, "/spec/policyName")), json!(param), json!(a)]
            })
        }
        ("certificates.k8s.io", "certificatesigningrequests") => (
            &[N, A, ("SignerName", "string", 0), ("Requestor", "string", 0), ("RequestedDuration", "string", 0), ("Condition", "string", 0)],
            |v, n, a| {
                let conds: Vec<&str> = arr(v, "/status/conditions").filter_map(|c| c.get("type").and_then(Value::as_str)).collect();
                let duration = v.at("/spec/expirationSeconds").and_then(Value::as_i64).map_or_else(|| "<none>".to_string(), short_duration);
                vec![json!(n), json!(a), json!(s(v, "/spec/signerName")), json!(s(v, "/spec/username")), json!(duration), json!(if conds.is_empty() { "Pending".to_string() } else { conds.join(",") })]
            },
        ),
        ("certificates.k8s.io", "clustertrustbundles") => (&[N, ("SignerName", "string", 0)], |v, n, _| vec![json!(n), json!(or(s(v, "/spec/signerName"), "<none>"))]),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => (
            &[N, ("PriorityLevel", "string", 0), ("MatchingPrecedence", "string", 0), ("DistinguisherMethod", "string", 0), A, ("MissingPL", "string", 0)],
            |v, n, a| {
                let missing = arr(v, "/status/conditions")
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Dangling"))
                    .and_then(|c| c.get("status").and_then(Value::as_str))
                    .unwrap_or("?");
                vec![
                    json!(n),
                    json!(s(v, "/spec/priorityLevelConfiguration/name")),
                    json!(int(v, "/spec/matchingPrecedence").to_string()),
                    json!(or(s(v, "/spec/distinguisherMethod/type"), "<none>")),
                    json!(a),
                    json!(missing),
                ]
            },
        ),
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => (
            &[N, ("Type", "string", 0), ("NominalConcurrencyShares", "string", 0), ("Queues", "string", 0), ("HandSize", "string", 0), ("QueueLengthLimit", "string", 0), A],
            |v, n, a| {
                let limited = v.at("/spec/limited");
                let get = |p: &str| limited.and_then(|l| l.at(p)).and_then(Value::as_i64).map_or_else(|| "<none>".to_string(), |x| x.to_string());
                vec![
                    json!(n),
                    json!(s(v, "/spec/type")),
                    json!(get("/nominalConcurrencyShares")),
                    json!(get("/limitResponse/queuing/queues")),
                    json!(get("/limitResponse/queuing/handSize")),
                    json!(get("/limitResponse/queuing/queueLengthLimit")),
                    json!(a),
                ]
            },
        ),
        ("apiregistration.k8s.io", "apiservices") => (&[N, ("Service", "string", 0), ("Available", "string", 0), A], |v, n, a| {
            let service = match (s(v, "/spec/service/namespace"), s(v, "/spec/service/name")) {
                (_, "") => "Local".to_string(),
                (ns, name) => format!("{ns}/{name}"),
            };
            let avail = arr(v, "/status/conditions").find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
            let available = match avail {
                None => "Unknown".to_string(),
                Some(c) if s(c, "/status") == "True" => "True".to_string(),
                Some(c) => format!("{} ({})", s(c, "/status"), s(c, "/reason")),
            };
            vec![json!(n), json!(service), json!(available), json!(a)]
        }),
        _ => return None,
    };
    Some(p)
}

const N: Col = ("Name", "string", 0);
const A: Col = ("Age", "string", 0);
const CREATED: Col = ("Created At", "date", 0);
const CONTAINERS: Col = ("Containers", "string", 1);
const IMAGES: Col = ("Images", "string", 1);
const SELECTOR: Col = ("Selector", "string", 1);

fn arr<'a>(v: &'a Value, p: &str) -> impl Iterator<Item = &'a Value> + 'a {
    v.at(p).and_then(Value::as_array).into_iter().flatten()
}

/// The number of entries of a list or map (0 when absent).
fn len(v: &Value, p: &str) -> usize {
    match v.at(p) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    }
}

fn or<'a>(x: &'a str, default: &'a str) -> &'a str {
    if x.is_empty() { default } else { x }
}

fn flag(v: &Value, p: &str, default: bool) -> bool {
    v.at(p).and_then(Value::as_bool).unwrap_or(default)
}

/// An int-or-string field, `N/A` when unset (PDB's columns).
fn int_or_na(v: &Value, p: &str) -> String {
    match v.at(p) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(t)) => t.clone(),
        _ => "N/A".into(),
    }
}

/// `creationTimestamp` as RFC 3339 in UTC (the "Created At" column).
fn created_at(v: &Value) -> String {
    let t = s(v, "/metadata/creationTimestamp");
    chrono::DateTime::parse_from_rfc3339(t).map_or_else(|_| t.to_string(), |d| d.with_timezone(&chrono::Utc).format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// A label map as `k=v,k2=v2`, sorted by key.
fn label_map(m: Option<&Value>) -> String {
    let mut pairs: Vec<String> = m.and_then(Value::as_object).into_iter().flatten().map(|(k, x)| format!("{k}={}", x.as_str().unwrap_or(""))).collect();
    pairs.sort();
    pairs.join(",")
}

/// Container names and images of a container list, comma-separated.
fn containers(v: &Value, p: &str) -> (String, String) {
    let c: Vec<&Value> = arr(v, p).collect();
    let join = |f: &str| c.iter().map(|x| x.get(f).and_then(Value::as_str).unwrap_or("")).collect::<Vec<_>>().join(",");
    (join("name"), join("image"))
}

/// The first three entries and `+ N more...`, as upstream abbreviates
/// addresses.
fn first_three(items: &[String], empty: &str) -> String {
    match items.len() {
        0 => empty.to_string(),
        n if n <= 3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

/// A duration in seconds as kube's short form (`1h`, `10m`, `30s`).
fn short_duration(secs: i64) -> String {
    if secs % 86400 == 0 {
        format!("{}d", secs / 86400)
    } else if secs % 3600 == 0 {
        format!("{}h", secs / 3600)
    } else if secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

fn deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

fn pod(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let total = len(v, "/spec/containers");
    let statuses = v.at("/status/containerStatuses").and_then(Value::as_array);
    let ready = statuses.map_or(0, |l| l.iter().filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true)).count());
    let restarts: i64 = statuses.map_or(0, |l| l.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum());
    let status = if deleting(v) {
        "Terminating".to_string()
    } else if s(v, "/status/phase") == "Succeeded" {
        "Completed".to_string()
    } else {
        or_none(s(v, "/status/phase"))
    };
    vec![
        json!(n),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        json!(a),
        json!(or_none(s(v, "/status/podIP"))),
        json!(or_none(s(v, "/spec/nodeName"))),
        json!(or_none(s(v, "/status/nominatedNodeName"))),
        json!("<none>"),
    ]
}

fn node(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let ready = arr(v, "/status/conditions").find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")).and_then(|c| c.get("status").and_then(Value::as_str)) == Some("True");
    let mut status = if ready { "Ready".to_string() } else { "NotReady".to_string() };
    if v.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let addr = |ty: &str| {
        arr(v, "/status/addresses")
            .find(|x| x.get("type").and_then(Value::as_str) == Some(ty))
            .and_then(|x| x.get("address").and_then(Value::as_str))
            .unwrap_or("<none>")
            .to_string()
    };
    vec![
        json!(n),
        json!(status),
        json!("<none>"),
        json!(a),
        json!(s(v, "/status/nodeInfo/kubeletVersion")),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(s(v, "/status/nodeInfo/osImage")),
        json!(s(v, "/status/nodeInfo/kernelVersion")),
        json!(s(v, "/status/nodeInfo/containerRuntimeVersion")),
    ]
}

fn event(v: &Value, n: &str, _: &str) -> Vec<Value> {
    let first_set = |paths: [&str; 3]| paths.into_iter().map(|p| s(v, p)).find(|x| !x.is_empty()).unwrap_or("");
    let last = first_set(["/lastTimestamp", "/eventTime", "/metadata/creationTimestamp"]);
    let first = first_set(["/firstTimestamp", "/eventTime", "/metadata/creationTimestamp"]);
    let obj = format!("{}/{}", s(v, "/involvedObject/kind").to_lowercase(), s(v, "/involvedObject/name"));
    let source = [s(v, "/source/component"), s(v, "/source/host")].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>().join(", ");
    let count = v.at("/count").and_then(Value::as_i64).or_else(|| v.at("/series/count").and_then(Value::as_i64)).unwrap_or(1);
    vec![
        json!(age(last)),
        json!(s(v, "/type")),
        json!(s(v, "/reason")),
        json!(obj),
        json!(s(v, "/message")),
        json!(s(v, "/involvedObject/fieldPath")),
        json!(source),
        json!(age(first)),
        json!(count.to_string()),
        json!(n),
    ]
}

fn pvc(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let phase = if deleting(v) { "Terminating" } else { s(v, "/status/phase") };
    vec![
        json!(n),
        json!(phase),
        json!(s(v, "/spec/volumeName")),
        json!(s(v, "/status/capacity/storage")),
        json!(access_modes(v, "/status/accessModes")),
        json!(s(v, "/spec/storageClassName")),
        json!(or(s(v, "/spec/volumeAttributesClassName"), "<unset>")),
        json!(a),
        json!(or(s(v, "/spec/volumeMode"), "Filesystem")),
    ]
}

fn pv(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let claim = match (s(v, "/spec/claimRef/namespace"), s(v, "/spec/claimRef/name")) {
        (_, "") => String::new(),
        (ns, c) => format!("{ns}/{c}"),
    };
    let phase = if deleting(v) { "Terminating" } else { s(v, "/status/phase") };
    vec![
        json!(n),
        json!(s(v, "/spec/capacity/storage")),
        json!(access_modes(v, "/spec/accessModes")),
        json!(s(v, "/spec/persistentVolumeReclaimPolicy")),
        json!(phase),
        json!(claim),
        json!(s(v, "/spec/storageClassName")),
        json!(or(s(v, "/spec/volumeAttributesClassName"), "<unset>")),
        json!(s(v, "/status/reason")),
        json!(a),
        json!(or(s(v, "/spec/volumeMode"), "Filesystem")),
    ]
}

fn job(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let succeeded = int(v, "/status/succeeded");
    let completions = match v.at("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match v.at("/spec/parallelism").and_then(Value::as_i64).unwrap_or(1) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = s(v, "/status/startTime");
    let duration = if start.is_empty() { String::new() } else { between(start, s(v, "/status/completionTime")) };
    with_template(v, vec![json!(n), json!(job_status(v)), json!(completions), json!(duration), json!(a)], true)
}

/// `cells` and the wide columns of a kind with a pod template: its
/// containers' names and images and (with `selector`) its selector.
fn with_template(v: &Value, mut cells: Vec<Value>, selector: bool) -> Vec<Value> {
    let (c, i) = containers(v, "/spec/template/spec/containers");
    cells.extend([json!(c), json!(i)]);
    if selector {
        let sel = v.at("/spec/selector").map(crate::scale::selector_string).unwrap_or_default();
        cells.push(json!(or_none(&sel)));
    }
    cells
}

/// Access modes as kubectl abbreviates them.
fn access_modes(v: &Value, p: &str) -> String {
    arr(v, p)
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A Job's Status column (upstream's printer, 1.32): from its conditions.
fn job_status(v: &Value) -> &'static str {
    let has = |ty: &str| arr(v, "/status/conditions").any(|c| c.get("type").and_then(Value::as_str) == Some(ty) && c.get("status").and_then(Value::as_str) == Some("True"));
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if deleting(v) {
        "Terminating"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    }
}

/// The time from `from` to `to` (now when unset), as a Job's Duration.
fn between(from: &str, to: &str) -> String {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&chrono::Utc));
    let (Some(a), end) = (parse(from), parse(to).unwrap_or_else(chrono::Utc::now)) else { return String::new() };
    let secs = (end - a).num_seconds().max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 7200 {
        format!("{}m", secs / 60)
    } else {
        format!("{}h", secs / 3600)
    }
}

fn service(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let ty = or(s(v, "/spec/type"), "ClusterIP");
    let external_ips: Vec<String> = arr(v, "/spec/externalIPs").filter_map(Value::as_str).map(str::to_string).collect();
    let external = match ty {
        "ExternalName" => s(v, "/spec/externalName").to_string(),
        "LoadBalancer" => {
            let mut ips: Vec<String> = arr(v, "/status/loadBalancer/ingress")
                .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")).and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            ips.extend(external_ips);
            if ips.is_empty() { "<pending>".to_string() } else { ips.join(",") }
        }
        _ => or_none(&external_ips.join(",")),
    };
    let ports: Vec<String> = arr(v, "/spec/ports")
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) if np != 0 => format!("{port}:{np}/{proto}"),
                _ => format!("{port}/{proto}"),
            }
        })
        .collect();
    vec![
        json!(n),
        json!(ty),
        json!(or_none(s(v, "/spec/clusterIP"))),
        json!(external),
        json!(or_none(&ports.join(","))),
        json!(a),
        json!(or_none(&label_map(v.at("/spec/selector")))),
    ]
}

fn endpoints(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let mut items = Vec::new();
    for subset in arr(v, "/subsets") {
        let ports: Vec<i64> = subset.get("ports").and_then(Value::as_array).into_iter().flatten().filter_map(|p| p.get("port").and_then(Value::as_i64)).collect();
        for addr in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
            let ip = addr.get("ip").and_then(Value::as_str).unwrap_or("");
            if ports.is_empty() {
                items.push(ip.to_string());
            }
            items.extend(ports.iter().map(|p| format!("{ip}:{p}")));
        }
    }
    vec![json!(n), json!(first_three(&items, "<none>")), json!(a)]
}

fn quota(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let mut request = Vec::new();
    let mut limit = Vec::new();
    let mut hard: Vec<(&String, &Value)> = v.at("/status/hard").and_then(Value::as_object).into_iter().flatten().collect();
    hard.sort_by(|x, y| x.0.cmp(y.0));
    for (k, h) in hard {
        let used = v.at("/status/used").and_then(|u| u.get(k)).and_then(Value::as_str).unwrap_or("0");
        let text = format!("{k}: {used}/{}", h.as_str().unwrap_or(""));
        if k.starts_with("limits.") { limit.push(text) } else { request.push(text) }
    }
    vec![json!(n), json!(a), json!(request.join(", ")), json!(limit.join(", "))]
}

/// `<kind>.<group>/<name>` of the controller owner, `<none>` without one.
fn controller(v: &Value) -> String {
    arr(v, "/metadata/ownerReferences")
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map_or_else(
            || "<none>".to_string(),
            |o| {
                let kind = s(o, "/kind").to_lowercase();
                let group = s(o, "/apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
                let gk = if group.is_empty() { kind } else { format!("{kind}.{group}") };
                format!("{gk}/{}", s(o, "/name"))
            },
        )
}

fn binding(v: &Value, n: &str, a: &str) -> Vec<Value> {
    let role = format!("{}/{}", s(v, "/roleRef/kind"), s(v, "/roleRef/name"));
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for subj in arr(v, "/subjects") {
        let name = s(subj, "/name");
        match s(subj, "/kind") {
            "User" => users.push(name.to_string()),
            "Group" => groups.push(name.to_string()),
            "ServiceAccount" => sas.push(format!("{}:{name}", s(subj, "/namespace"))),
            _ => {}
        }
    }
    vec![json!(n), json!(role), json!(a), json!(users.join(", ")), json!(groups.join(", ")), json!(sas.join(", "))]
}

/// A ResourceClaim's State: `pending`, or `allocated` and `reserved`,
/// and `deleted` while it is being deleted.
fn claim_state(v: &Value) -> String {
    let mut states = Vec::new();
    if v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
        states.push("deleted");
    }
    if v.at("/status/allocation").is_none_or(Value::is_null) {
        if states.is_empty() {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if len(v, "/status/reservedFor") > 0 {
            states.push("reserved");
        }
    }
    states.join(",")
}

fn param_kind(v: &Value) -> String {
    match v.at("/spec/paramKind") {
        Some(p) if p.is_object() => format!("{}/{}", s(p, "/apiVersion"), s(p, "/kind")),
        _ => "<unset>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_cell_per_column() {
        let kinds = [
            ("", "pods"),
            ("", "nodes"),
            ("", "events"),
            ("", "namespaces"),
            ("", "persistentvolumeclaims"),
            ("", "persistentvolumes"),
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
            ("", "services"),
            ("", "configmaps"),
            ("", "secrets"),
            ("", "serviceaccounts"),
            ("", "endpoints"),
            ("", "limitranges"),
            ("", "resourcequotas"),
            ("", "podtemplates"),
            ("", "replicationcontrollers"),
            ("coordination.k8s.io", "leases"),
            ("scheduling.k8s.io", "priorityclasses"),
            ("policy", "poddisruptionbudgets"),
            ("storage.k8s.io", "storageclasses"),
            ("storage.k8s.io", "csinodes"),
            ("storage.k8s.io", "csidrivers"),
            ("storage.k8s.io", "csistoragecapacities"),
            ("storage.k8s.io", "volumeattachments"),
            ("storage.k8s.io", "volumeattributesclasses"),
            ("apps", "controllerrevisions"),
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "clusterrolebindings"),
            ("resource.k8s.io", "resourceclaims"),
            ("resource.k8s.io", "resourceslices"),
            ("discovery.k8s.io", "endpointslices"),
            ("batch", "cronjobs"),
            ("autoscaling", "horizontalpodautoscalers"),
            ("networking.k8s.io", "ingresses"),
            ("networking.k8s.io", "ingressclasses"),
            ("networking.k8s.io", "networkpolicies"),
            ("networking.k8s.io", "ipaddresses"),
            ("networking.k8s.io", "servicecidrs"),
            ("node.k8s.io", "runtimeclasses"),
            ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
            ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
            ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
            ("certificates.k8s.io", "certificatesigningrequests"),
            ("certificates.k8s.io", "clustertrustbundles"),
            ("flowcontrol.apiserver.k8s.io", "flowschemas"),
            ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
            ("apiregistration.k8s.io", "apiservices"),
        ];
        for (g, p) in kinds {
            let Some((cols, cells)) = printer(g, p) else { panic!("no printer for {p}") };
            assert_eq!(cells(&json!({}), "x", "1s").len(), cols.len(), "{p}");
        }
    }

    /// A row of a kind: its column names and its cells.
    fn row_of(group: &str, plural: &str, v: &Value) -> (Vec<&'static str>, Vec<Value>) {
        let Some((cols, cells)) = printer(group, plural) else { panic!("no printer for {plural}") };
        (cols.iter().map(|c| c.0).collect(), cells(v, s(v, "/metadata/name"), "1s"))
    }

    #[test]
    fn storage_and_job_rows_show_what_kubectl_shows() {
        let pvc = json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv-1", "storageClassName": "standard"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}});
        let (names, row) = row_of("", "persistentvolumeclaims", &pvc);
        assert_eq!(names, ["Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "VolumeAttributesClass", "Age", "VolumeMode"]);
        assert_eq!(row.len(), names.len());
        assert_eq!((&row[1], &row[2], &row[3], &row[4], &row[6], &row[8]), (&json!("Bound"), &json!("pv-1"), &json!("1Gi"), &json!("RWO,ROX"), &json!("<unset>"), &json!("Filesystem")));
        let pv = json!({"metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": "default", "name": "c"}}, "status": {"phase": "Bound"}});
        let (names, row) = row_of("", "persistentvolumes", &pv);
        assert_eq!(row.len(), names.len());
        assert_eq!(row[5], "default/c");
        let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 3, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}, "selector": {"matchLabels": {"job": "j"}}},
            "status": {"succeeded": 1}});
        let (names, row) = row_of("batch", "jobs", &job);
        assert_eq!(row.len(), names.len());
        assert_eq!((&row[1], &row[2], &row[5], &row[6], &row[7]), (&json!("Running"), &json!("1/3"), &json!("c"), &json!("busybox"), &json!("job=j")));
    }

    #[test]
    fn cells_read_as_upstream_prints_them() {
        let svc = json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.1", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"app": "web"}}});
        assert_eq!(service(&svc, "s", "1s"), vec![json!("s"), json!("NodePort"), json!("10.0.0.1"), json!("<none>"), json!("80:30080/TCP"), json!("1s"), json!("app=web")]);
        let rb = json!({"roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "ServiceAccount", "name": "b", "namespace": "berth"}, {"kind": "User", "name": "u"}]});
        assert_eq!(binding(&rb, "rb", "1s"), vec![json!("rb"), json!("ClusterRole/view"), json!("1s"), json!("u"), json!(""), json!("berth:b")]);
        let cr = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]}});
        assert_eq!(controller(&cr), "statefulset.apps/web");
        assert_eq!(claim_state(&json!({"status": {"allocation": {}, "reservedFor": [{}]}})), "allocated,reserved");
        assert_eq!(claim_state(&json!({})), "pending");
    }
}
