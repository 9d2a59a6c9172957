//! The live commands against the local cluster: `explain` and `simulate`
//! with `--kubeconfig` say what they say on `berth dump`'s file, the
//! anonymized dump places the same pods on the same nodes under other names,
//! and a dump that fails leaves no file; a kind the account may not list is
//! named with the RBAC verb it needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_cluster::{FaultConfig, LocalCluster};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::cluster_support::{cluster, pod};
use crate::fault_proxy::{Fault, FaultProxy, Rule};

/// Runs the berth binary off the runtime's threads (the cluster serves meanwhile).
async fn berth(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_berth")).args(&args).env_remove("RUST_BACKTRACE").env_remove("RUST_LIB_BACKTRACE").output().expect("berth runs");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await
    .expect("berth's thread")
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_string()).collect()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-live-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A kubeconfig for a server without auth or TLS (the fault proxy, which
/// adds the admin's credentials upstream).
fn write_kubeconfig(dir: &Path, url: &str) -> String {
    let p = dir.join("kubeconfig");
    std::fs::write(&p, berth_cluster::kubeconfig_yaml(url)).expect("kubeconfig");
    p.to_string_lossy().into_owned()
}

/// The cluster's own kubeconfig (HTTPS, its CA, the admin token).
fn cluster_kubeconfig(dir: &Path, c: &berth_cluster::LocalCluster) -> String {
    let p = dir.join("kubeconfig");
    c.write_kubeconfig(&p).expect("kubeconfig");
    p.to_string_lossy().into_owned()
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Three nodes over three zones (2 cpus each); node-2 tainted and labelled
/// disk=ssd; a namespace with labels, a Service, a PriorityClass; one bound
/// pod and pending pods: one that fits nowhere, one spread and kept off
/// node-2 by affinity, one that tolerates node-2's taint and selects it,
/// one of another scheduler, a high-priority one that must preempt.
async fn seed(c: &LocalCluster) {
    let client = c.client().expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {"disk": "ssd"}}, "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
    nodes.patch("node-2", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("taint node-2");
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop", "labels": {"team": "payments"}}})).expect("namespace");
    Api::<Namespace>::all(client.clone()).create(&pp, &ns).await.expect("namespace");
    let pc: Value = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000});
    let pcs: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
    pcs.create(&pp, &serde_json::from_value(pc).expect("priority class")).await.expect("priority class");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})).expect("service");
    Api::<Service>::namespaced(client.clone(), "shop").create(&pp, &svc).await.expect("service");

    let pods: Api<Pod> = Api::namespaced(client, "shop");
    let web = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": "default-scheduler"}});
    let mut bound = web.clone();
    crate::cluster_support::merge(&mut bound, &json!({"spec": {"nodeName": "node-0"}}));
    let spread = json!({"metadata": {"labels": {"app": "web"}}, "spec": {
        "schedulerName": "default-scheduler",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-2"]}]}]}}},
    }});
    let db = json!({"metadata": {"labels": {"app": "db"}}, "spec": {
        "schedulerName": "default-scheduler",
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
    }});
    let list = vec![
        pod("web-0", "1500m", bound),
        pod("web-1", "500m", spread.clone()),
        pod("web-2", "500m", spread),
        pod("huge", "64", json!({"spec": {"schedulerName": "default-scheduler"}})),
        pod("db-0", "1", db),
        pod("other", "100m", json!({"spec": {"schedulerName": "other-scheduler"}})),
        pod("low-1", "1500m", json!({"spec": {"schedulerName": "default-scheduler", "nodeName": "node-1"}})),
        pod("urgent", "1", json!({"spec": {"schedulerName": "default-scheduler", "priorityClassName": "high", "nodeSelector": {"kubernetes.io/hostname": "node-1"}}})),
    ];
    for p in list {
        pods.create(&pp, &p).await.expect("pod");
    }
    // The simulated kubelets start the pods created with a nodeName: wait
    // for it, so that every command below reads one unchanging cluster.
    berth_cluster::testing::eventually(30, "the pods given a node running", || async {
        let all = pods.list(&Default::default()).await.ok()?.items;
        all.iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .then_some(())
    })
    .await;
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_explain_and_simulate_match_the_dump_and_the_anonymized_dump() {
    let c = cluster(3, 3, "2", 20, FaultConfig::default()).await;
    seed(&c).await;
    let dir = temp_dir("same");
    let kc = cluster_kubeconfig(&dir, &c);
    let dump = dir.join("cluster.yaml");

    // A pod that fits nowhere: every node, with its reason.
    let (ok, live_huge, err) = berth(args(&["explain", "--kubeconfig", &kc, "--chunk-size", "2", "--pod", "shop/huge", "--output", "json"])).await;
    assert!(ok, "{err}");
    let x = json_of(&live_huge);
    let nodes = x["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.iter().map(|n| n["name"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["node-0", "node-1", "node-2"]);
    for n in nodes {
        assert_eq!(n["feasible"], false, "{n}");
        let reasons = n["reasons"].to_string();
        assert!(reasons.contains("Insufficient cpu") || reasons.contains("taint"), "{n}");
    }
    assert!(x["selected"].is_null());
    // A kind the local cluster does not serve (scheduler-plugins' PodGroup
    // CRD) is skipped; the note is a debug log line, not printed every run.
    assert!(!err.contains("podgroups.scheduling.x-k8s.io"), "{err}");

    // The dump, then the same commands on it: the same output.
    let (ok, _, err) = berth(args(&["dump", "--kubeconfig", &kc, "--chunk-size", "3", "-f", &s(&dump)])).await;
    assert!(ok, "{err}");
    assert!(err.contains("wrote ") && err.contains(" pods"), "{err}");
    let text = std::fs::read_to_string(&dump).expect("dump written");
    // Without -f, the same dump on standard output.
    let (ok, stdout_dump, err) = berth(args(&["dump", "--kubeconfig", &kc])).await;
    assert!(ok && err.contains("to standard output"), "{err}");
    assert_eq!(stdout_dump, text, "dump to stdout and dump -f write the same");
    // A reader that goes away: quiet, 141, no partial file anywhere.
    let kc2 = kc.clone();
    let (code, err) = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth")).args(["dump", "--kubeconfig", &kc2]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("berth runs");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("berth ends");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await
    .expect("berth's thread");
    assert_eq!(code, Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!text.contains("managedFields"));
    for kind in ["kind: Node", "kind: Pod", "kind: Namespace", "kind: PriorityClass", "kind: Service", "apiVersion: scheduling.k8s.io/v1"] {
        assert!(text.contains(kind), "{kind} missing from the dump");
    }
    let (ok, dump_huge, err) = berth(args(&["explain", "--cluster", &s(&dump), "--pod", "shop/huge", "--output", "json"])).await;
    assert!(ok, "{err}");
    assert_eq!(dump_huge, live_huge);
    for pod in ["shop/web-1", "shop/db-0", "shop/urgent"] {
        for output in ["json", "table"] {
            let (ok1, live, e1) = berth(args(&["explain", "--kubeconfig", &kc, "--pod", pod, "--output", output])).await;
            let (ok2, offline, e2) = berth(args(&["explain", "--cluster", &s(&dump), "--pod", pod, "--output", output])).await;
            assert!(ok1 && ok2, "{e1}\n{e2}");
            assert_eq!(live, offline, "explain {pod} ({output})");
        }
    }
    let (ok1, live_sim, e1) = berth(args(&["simulate", "--kubeconfig", &kc, "--output", "json"])).await;
    let (ok2, dump_sim, e2) = berth(args(&["simulate", "--cluster", &s(&dump), "--output", "json"])).await;
    assert!(ok1 && ok2, "{e1}\n{e2}");
    assert_eq!(live_sim, dump_sim);
    let placements: BTreeMap<String, Value> = json_of(&live_sim)["placements"].as_array().expect("placements").iter().map(|p| (p["pod"].as_str().unwrap_or("").to_string(), p.clone())).collect();
    assert_eq!(placements["shop/db-0"]["node"], "node-2", "{live_sim}");
    assert!(placements["shop/huge"]["node"].is_null());
    assert_eq!(placements["shop/urgent"]["victims"], json!(["shop/low-1"]), "{live_sim}");
    assert!(!placements.contains_key("shop/other"), "another scheduler's pod is not simulated");
    // ... and it is named, with the reason, not left out without a word.
    assert!(e1.contains(r#"skipped: schedulerName "other-scheduler" names no profile"#) && e1.contains("shop/other"), "{e1}");
    assert!(live_sim.contains("\"skipped\"") && live_sim.contains("other-scheduler"), "{live_sim}");
    for p in ["shop/web-1", "shop/web-2"] {
        let n = placements[p]["node"].as_str().unwrap_or("");
        assert!(n == "node-0" || n == "node-1", "{p} on {n:?}: {live_sim}");
    }

    // A pod of another scheduler, and a bound one, are explained with the default profile.
    for pod in ["shop/other", "shop/web-0"] {
        let (ok1, live, e1) = berth(args(&["explain", "--kubeconfig", &kc, "--pod", pod, "--output", "json"])).await;
        let (ok2, offline, e2) = berth(args(&["explain", "--cluster", &s(&dump), "--pod", pod, "--output", "json"])).await;
        assert!(ok1 && ok2, "{e1}\n{e2}");
        assert!(e1.contains(&format!("note: pod {pod}")), "{e1}");
        assert_eq!(live, offline);
        let x = json_of(&live);
        assert_eq!(x["profile"], "default-scheduler");
        assert!(x["selected"].is_string(), "{live}");
    }

    // The anonymized dump: nothing readable of the names, the same decisions under the mapping.
    let anon = dir.join("anon.yaml");
    let map_file = dir.join("map.json");
    let (ok, _, err) = berth(args(&["dump", "--kubeconfig", &kc, "-f", &s(&anon), "--anonymize", "--anonymize-map", &s(&map_file)])).await;
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&anon).expect("anonymized dump");
    for word in ["shop", "web-1", "huge", "node-1", "payments", "dedicated", "nginx", "zone-"] {
        assert!(!text.contains(word), "{word} is readable in the anonymized dump");
    }
    for kept in ["topology.kubernetes.io/zone", "kubernetes.io/hostname", "NoSchedule", "1500m", "default-scheduler"] {
        assert!(text.contains(kept), "{kept} should stay readable");
    }
    let map: BTreeMap<String, String> = serde_json::from_str(&std::fs::read_to_string(&map_file).expect("map")).expect("map json");
    let m = |s: &str| map.get(s).cloned().unwrap_or_else(|| panic!("{s} not in the map"));
    let key = |k: &str| k.split_once('/').map(|(ns, n)| format!("{}/{}", m(ns), m(n))).unwrap_or_default();
    // Messages name taints and the like: read the anonymized ones back through the map.
    let unhash = |v: &Value| -> String {
        let mut t = v.to_string();
        for (orig, hashed) in &map {
            t = t.replace(hashed.as_str(), orig);
        }
        t
    };
    let (ok, anon_sim, err) = berth(args(&["simulate", "--cluster", &s(&anon), "--output", "json"])).await;
    assert!(ok, "{err}");
    let anon_placements: BTreeMap<String, Value> = json_of(&anon_sim)["placements"].as_array().expect("placements").iter().map(|p| (p["pod"].as_str().unwrap_or("").to_string(), p.clone())).collect();
    assert_eq!(anon_placements.len(), placements.len(), "{anon_sim}");
    for (pod, p) in &placements {
        let a = &anon_placements.get(&key(pod)).unwrap_or_else(|| panic!("{pod} missing: {anon_sim}"));
        let node = |v: &Value| v.as_str().map(m);
        assert_eq!(a["node"].as_str().map(String::from), node(&p["node"]), "{pod}");
        assert_eq!(a["nominated_node"].as_str().map(String::from), node(&p["nominated_node"]), "{pod}");
        let victims: Vec<String> = p["victims"].as_array().into_iter().flatten().filter_map(Value::as_str).map(key).collect();
        assert_eq!(a["victims"], json!(victims), "{pod}");
        assert_eq!(unhash(&a["message"]), p["message"].to_string(), "{pod}");
    }
    // explain on the anonymized dump: the same feasibility and scores, node by node.
    for pod in ["shop/huge", "shop/web-1", "shop/db-0"] {
        let (ok1, plain, e1) = berth(args(&["explain", "--cluster", &s(&dump), "--pod", pod, "--output", "json"])).await;
        let (ok2, hidden, e2) = berth(args(&["explain", "--cluster", &s(&anon), "--pod", &key(pod), "--output", "json"])).await;
        assert!(ok1 && ok2, "{e1}\n{e2}");
        let (plain, hidden) = (json_of(&plain), json_of(&hidden));
        let by_name = |x: &Value| -> BTreeMap<String, Value> { x["nodes"].as_array().into_iter().flatten().map(|n| (n["name"].as_str().unwrap_or("").to_string(), n.clone())).collect() };
        let hidden_nodes = by_name(&hidden);
        for (name, n) in by_name(&plain) {
            let h = &hidden_nodes[&m(&name)];
            assert_eq!((&h["feasible"], &h["scores"], &h["total"]), (&n["feasible"], &n["scores"], &n["total"]), "{pod} on {name}");
            assert_eq!(unhash(&h["reasons"]), n["reasons"].to_string(), "{pod} on {name}");
        }
        assert_eq!(hidden["selected"].as_str().map(String::from), plain["selected"].as_str().map(m), "{pod}");
        assert_eq!(unhash(&hidden["message"]), plain["message"].to_string(), "{pod}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_cut_short_leaves_no_file_and_a_forbidden_kind_is_named() {
    let c = cluster(2, 1, "2", 20, FaultConfig::default()).await;
    seed_small(&c).await;
    let proxy = FaultProxy::start(c.client().expect("client")).await;
    let dir = temp_dir("cut");
    let kc = write_kubeconfig(&dir, &format!("http://{}", proxy.addr));

    // The server goes away after the core and apps lists: every storage.k8s.io list is reset.
    proxy.set_rules(vec![Rule::new(None, "/apis/storage.k8s.io/", Fault::ResetBefore, 1.0)]);
    let out = dir.join("cluster.yaml");
    let (ok, _, err) = berth(args(&["dump", "--kubeconfig", &kc, "-f", &s(&out)])).await;
    assert!(!ok);
    assert!(err.contains("cannot list storageclasses.storage.k8s.io: the API server did not answer"), "{err}");
    assert!(!out.exists(), "a partial dump was left behind");
    // An earlier dump at the same path stays as it was.
    std::fs::write(&out, "earlier dump\n").expect("earlier dump");
    let (ok, _, _) = berth(args(&["dump", "--kubeconfig", &kc, "-f", &s(&out), "--anonymize"])).await;
    assert!(!ok);
    assert_eq!(std::fs::read_to_string(&out).expect("still there"), "earlier dump\n");
    let left: Vec<String> = std::fs::read_dir(&dir).expect("dir").filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(left.iter().all(|n| !n.contains("partial")), "temporary files left: {left:?}");

    // An account that may not list ResourceSlices: one line naming the kind and the verb.
    proxy.set_rules(vec![Rule::new(None, "/resourceslices", Fault::Status(403), 1.0)]);
    for cmd in [vec!["simulate"], vec!["explain", "--pod", "default/p"]] {
        let mut a = args(&cmd);
        a.extend(args(&["--kubeconfig", &kc]));
        let (ok, _, err) = berth(a).await;
        assert!(!ok);
        assert!(err.contains(r#"cannot list resourceslices.resource.k8s.io: forbidden (needs "list" on resourceslices in API group "resource.k8s.io")"#), "{err}");
        assert!(err.lines().count() <= 3, "one clear error, not a stack: {err}");
    }
    let (ok, _, err) = berth(args(&["dump", "--kubeconfig", &kc, "-f", &s(&out)])).await;
    assert!(!ok && err.contains("forbidden (needs \"list\" on resourceslices"), "{err}");

    // Without faults the same proxy serves a whole dump.
    proxy.set_rules(vec![]);
    let (ok, _, err) = berth(args(&["dump", "--kubeconfig", &kc, "-f", &s(&out)])).await;
    assert!(ok, "{err}");
    assert!(std::fs::read_to_string(&out).expect("dump").contains("kind: Node"));
    let _ = std::fs::remove_dir_all(&dir);
}

async fn seed_small(c: &LocalCluster) {
    let pods: Api<Pod> = Api::namespaced(c.client().expect("client"), "default");
    pods.create(&PostParams::default(), &pod("p", "100m", json!({"spec": {"schedulerName": "default-scheduler"}}))).await.expect("pod");
}
