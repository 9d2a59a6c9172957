//! The offline commands from the outside: clear errors for bad input, and
//! explain agreeing with simulate.

use std::io::Write;
use std::process::Command;

fn berth(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_berth")).args(args).output().expect("berth runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn temp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("berth-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::File::create(&p).and_then(|mut f| f.write_all(text.as_bytes())).expect("write temp file");
    p.to_string_lossy().into_owned()
}

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status: {allocatable: {cpu: "2", memory: 4Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: ok, namespace: default}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad-selector, namespace: default}
spec:
  topologySpreadConstraints:
  - maxSkew: 0
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: x}}
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad-quantity, namespace: default}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: lots}}}]
"#;

#[test]
fn bad_config_is_refused_naming_the_field() {
    let cluster = temp("c1.yaml", CLUSTER);
    let cfg = temp("bad.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled:\n      - name: NoSuchPlugin\n");
    let (ok, _, err) = berth(&["simulate", "--cluster", &cluster, "--config", &cfg]);
    assert!(!ok);
    assert!(err.contains("profiles[0].plugins.filter.enabled[0].name") && err.contains("NoSuchPlugin"), "{err}");
    let cfg = temp("bad2.yaml", "profiles:\n- schedulerName: x\n  bogusField: 1\n");
    let (ok, _, err) = berth(&["simulate", "--cluster", &cluster, "--config", &cfg]);
    assert!(!ok);
    assert!(err.contains("bogusField") && err.contains("line"), "{err}");
}

#[test]
fn bad_pods_are_unschedulable_with_the_field_and_others_are_placed() {
    let cluster = temp("c2.yaml", CLUSTER);
    let (ok, out, err) = berth(&["simulate", "--cluster", &cluster, "--output", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let placements = v["placements"].as_array().expect("placements");
    let get = |n: &str| placements.iter().find(|p| p["pod"] == format!("default/{n}")).cloned().expect("pod reported");
    assert_eq!(get("ok")["node"], "n1");
    let bad = get("bad-selector");
    assert!(bad["node"].is_null());
    assert!(bad["message"].as_str().unwrap_or("").contains("spec.topologySpreadConstraints[0].maxSkew"), "{bad}");
    let bad = get("bad-quantity");
    assert!(bad["node"].is_null());
    assert!(bad["message"].as_str().unwrap_or("").contains("spec.containers[0].resources.requests[cpu]"), "{bad}");
}

#[test]
fn missing_files_and_pods_give_clear_errors() {
    let (ok, _, err) = berth(&["simulate", "--cluster", "/nonexistent/cluster.yaml"]);
    assert!(!ok && err.contains("/nonexistent/cluster.yaml"), "{err}");
    let cluster = temp("c3.yaml", CLUSTER);
    let (ok, _, err) = berth(&["explain", "--cluster", &cluster, "--pod", "default/nope"]);
    assert!(!ok && err.contains("default/nope") && err.contains("default/ok"), "{err}");
    let broken = temp("broken.yaml", "kind: Node\nmetadata: {name: [oops\n");
    let (ok, _, err) = berth(&["simulate", "--cluster", &broken]);
    assert!(!ok && err.contains("broken.yaml"), "{err}");
}

#[test]
fn explain_table_is_readable() {
    let cluster = temp("c4.yaml", CLUSTER);
    let (ok, out, err) = berth(&["explain", "--cluster", &cluster, "--pod", "ok"]);
    assert!(ok, "{err}");
    assert!(out.contains("NODE") && out.contains("n1") && out.contains("Selected: n1"), "{out}");
}

#[test]
fn large_multi_document_dumps_load() {
    // More documents than a YAML parser's configuration-sized default budget.
    let mut text = String::new();
    for i in 0..2500 {
        text += &format!("---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n{i}\nstatus:\n  allocatable: {{cpu: \"4\", memory: 8Gi, pods: \"110\"}}\n");
    }
    text += "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers: [{name: c, image: x}]\n";
    let cluster = temp("big.yaml", &text);
    let (ok, out, err) = berth(&["simulate", "--cluster", &cluster]);
    assert!(ok, "{err}");
    assert!(out.contains("1/1 pods placed"), "{out}");
}

fn berth_run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("run")
        .args(args)
        .env_remove("BERTH_CONFIG")
        // Nothing to reach: refusals come before any API server is contacted.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("berth runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn run_refuses_configurations_that_would_take_every_default_scheduler_pod() {
    let (ok, err) = berth_run(&[]);
    assert!(!ok);
    assert!(err.contains("no --config given") && err.contains("race the cluster's own scheduler"), "{err}");

    let (ok, err) = berth_run(&["--config", "/dev/null"]);
    assert!(!ok);
    assert!(err.contains("/dev/null: (file): the configuration is empty"), "{err}");

    let empty = temp("empty.yaml", "# nothing here\n");
    let (ok, err) = berth_run(&["--config", &empty]);
    assert!(!ok);
    assert!(err.contains("the configuration is empty"), "{err}");

    let headless = temp("headless.yaml", "profiles:\n- schedulerName: berth\n");
    let (ok, err) = berth_run(&["--config", &headless]);
    assert!(!ok);
    assert!(err.contains("apiVersion: missing"), "{err}");

    let none = temp("no-profiles.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles: []\n");
    let (ok, err) = berth_run(&["--config", &none]);
    assert!(!ok);
    assert!(err.contains("profiles: empty") && err.contains("schedulerName"), "{err}");

    // A real configuration gets past these checks (and fails later, on the missing kubeconfig).
    let good = temp("good.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n");
    let (ok, err) = berth_run(&["--config", &good]);
    assert!(!ok);
    assert!(err.contains("--kubeconfig /nonexistent/kubeconfig"), "{err}");
}

/// `bench --e2e` runs the local cluster and the daemon as processes and
/// prints its figures; every measured pod is bound (a small run: speed is
/// the benchmark's business, not a test's).
#[test]
fn bench_e2e_runs_the_pipeline_end_to_end() {
    for workload in ["SchedulingBasic", "Unschedulable"] {
        let (ok, out, err) = berth(&["bench", "--e2e", "--workload", workload, "--nodes", "20", "--pods", "60", "--output", "json"]);
        assert!(ok, "{workload}: {err}");
        let f: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!((f["workload"].as_str(), f["pods"].as_u64()), (Some(workload), Some(60)), "{f}");
        assert!(f["pods_per_second"].as_f64().is_some_and(|p| p > 0.0) && f["p99_ms"].as_f64().is_some_and(|p| p >= f["p50_ms"].as_f64().unwrap_or(0.0)), "{f}");
        assert!(f["scheduler_peak_rss_mb"].as_f64().is_some_and(|m| m > 0.0) && f["cluster_peak_rss_mb"].as_f64().is_some_and(|m| m > 0.0), "{f}");
    }
    let (ok, _, err) = berth(&["bench", "--e2e", "--workload", "Nope"]);
    assert!(!ok && err.contains("--workload"), "{err}");
}

/// `bench --e2e --workload SchedulingWithResourceClaimTemplate`: the
/// cluster's simulated driver publishes 10 devices per node, init pods take
/// half of them, and the measured pods (at most the free half) each get a
/// claim generated from the template, allocated and bound; the benchmark
/// reads the claims back (all allocated, no device twice) before printing.
#[test]
fn bench_e2e_runs_the_dra_workload() {
    let w = "SchedulingWithResourceClaimTemplate";
    let (ok, out, err) = berth(&["bench", "--e2e", "--workload", w, "--nodes", "6", "--pods", "100", "--output", "json"]);
    assert!(ok, "{err}");
    let f: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // 60 devices: 30 to init pods, 30 left for the 100 asked.
    assert_eq!((f["workload"].as_str(), f["pods"].as_u64(), f["init_pods"].as_u64()), (Some(w), Some(30), Some(30)), "{f}");
    assert_eq!(f["claims_allocated"].as_u64(), Some(60), "{f}");
    let (ok, _, err) = berth(&["bench", "--e2e", "--workload", "SchedulingWithExtendedResource"]);
    assert!(!ok && err.contains("does not run end to end"), "{err}");
}
