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
    // $KUBECONFIG names no file that exists (skipped, as kubectl skips it): named in the error.
    assert!(err.contains("$KUBECONFIG (=/nonexistent/kubeconfig: no such file)") && err.contains("give --kubeconfig FILE"), "{err}");
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

/// `bench --e2e --workload PreemptionBasic`: every node is filled with four
/// low-priority victims (900m of 4 CPUs), then one 3-CPU preemptor per node
/// is measured; each is bound only once the daemon has preempted three
/// victims on its node (deleted at once: grace 0).
#[test]
fn bench_e2e_runs_the_preemption_workload() {
    let (ok, out, err) = berth(&["bench", "--e2e", "--workload", "PreemptionBasic", "--nodes", "6", "--pods", "100", "--output", "json"]);
    assert!(ok, "{err}");
    let f: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // One preemptor per node, whatever --pods asks.
    assert_eq!((f["workload"].as_str(), f["pods"].as_u64()), (Some("PreemptionBasic"), Some(6)), "{f}");
}

/// `bench --e2e --bind-directly`: no daemon; the creating clients bind each
/// pod themselves, and the figures are the API server's alone (no
/// scheduler process, so no scheduler CPU or RSS). It refuses the DRA
/// workload, whose claims need an allocator.
#[test]
fn bench_e2e_bind_directly_measures_the_server_alone() {
    let (ok, out, err) = berth(&["bench", "--e2e", "--bind-directly", "--workload", "SchedulingBasic", "--nodes", "5", "--pods", "40", "--output", "json"]);
    assert!(ok, "{err}");
    let f: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((f["scheduler"].as_str(), f["pods"].as_u64()), (Some("none-the-bench-binds"), Some(40)), "{f}");
    assert_eq!((f["scheduler_peak_rss_mb"].as_f64(), f["scheduler_cpu_s_per_1000_pods"].as_f64()), (Some(0.0), Some(0.0)), "{f}");
    let (ok, _, err) = berth(&["bench", "--e2e", "--bind-directly", "--workload", "SchedulingWithResourceClaimTemplate", "--nodes", "2"]);
    assert!(!ok && err.contains("--bind-directly"), "{err}");
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

/// Runs berth with stdout a pipe whose reader is closed before berth
/// starts, or after the first line; returns (status code, stderr).
fn berth_into_closed_pipe(args: &[&str], after_one_line: bool) -> (Option<i32>, String) {
    use std::io::BufRead as _;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
    cmd.args(args).env_remove("RUST_BACKTRACE").stderr(std::process::Stdio::piped());
    if after_one_line {
        let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().expect("berth runs");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let out = child.wait_with_output().expect("berth ends");
        return (out.status.code(), String::from_utf8_lossy(&out.stderr).into());
    }
    // The reader is gone before berth writes a byte: its first write fails,
    // however fast it is (a help text is written within a millisecond).
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = cmd.stdout(writer).output().expect("berth runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into())
}

/// `berth simulate ... | head -1` and the like: a reader that goes away
/// ends every printing command quietly with 141 (128 + SIGPIPE, what a
/// shell reports for kubectl or coreutils there), never a panic.
#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let cluster = temp("pipe.yaml", CLUSTER);
    let commands: Vec<Vec<&str>> = vec![
        vec!["simulate", "--cluster", &cluster],
        vec!["simulate", "--cluster", &cluster, "--output", "json"],
        vec!["explain", "--cluster", &cluster, "--pod", "default/ok"],
        vec!["explain", "--cluster", &cluster, "--pod", "default/ok", "-o", "json"],
        vec!["bench", "--workload", "SchedulingBasic", "--nodes", "50", "--percentage-of-nodes-to-score", "100"],
        vec!["bench", "--workload", "SchedulingBasic", "--nodes", "50", "--percentage-of-nodes-to-score", "100", "-o", "json"],
        vec!["simulate", "--help"],
    ];
    for args in &commands {
        let (code, err) = berth_into_closed_pipe(args, false);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert_eq!(code, Some(141), "{args:?}: {err}");
        // Closed after the first line: done already (0) or cut short (141), quietly.
        let (code, err) = berth_into_closed_pipe(args, true);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert!(matches!(code, Some(0) | Some(141)), "{args:?}: {code:?} {err}");
    }
    // The table of bench prints a header first, then each figure as it is
    // measured: a reader gone after the header cuts it short. 5,000 nodes,
    // so that the first figure comes long after the header (at 50 nodes it
    // came within a millisecond, and a reader slower than that under load
    // read the whole table: exit 0).
    let (code, err) = berth_into_closed_pipe(&["bench", "--workload", "SchedulingBasic", "--nodes", "5000", "--percentage-of-nodes-to-score", "100"], true);
    assert_eq!(code, Some(141), "{err}");
}

const SCHEDULERS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: shop}
spec:
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: mine-1, namespace: shop}
spec:
  schedulerName: berth
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: mine-2, namespace: shop}
spec:
  schedulerName: berth
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: going, namespace: shop, deletionTimestamp: "2024-01-01T00:00:00Z"}
spec:
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: bound, namespace: shop}
spec:
  nodeName: n1
  containers: [{name: c, image: nginx}]
"#;

/// Without --config only default-scheduler's pods are simulated; the pods of
/// schedulerName berth are named on stderr (and in the JSON) with the
/// reason and what would include them, as is a pod being deleted. With a
/// configuration that has a berth profile, they are placed.
#[test]
fn simulate_names_the_pods_it_skips_and_why() {
    let cluster = temp("schedulers.yaml", SCHEDULERS);
    let (ok, out, err) = berth(&["simulate", "--cluster", &cluster, "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let placed: Vec<&str> = v["placements"].as_array().into_iter().flatten().filter_map(|p| p["pod"].as_str()).collect();
    assert_eq!(placed, ["shop/plain"], "{out}");
    assert!(err.contains(r#"note: 2 unbound pods skipped: schedulerName "berth" names no profile (no --config: the default configuration's one profile is default-scheduler); give --config with a profile named "berth" to include them: shop/mine-1, shop/mine-2"#), "{err}");
    assert!(err.contains("note: 1 unbound pod skipped: it is being deleted: shop/going"), "{err}");
    let skipped = v["skipped"].to_string();
    assert!(skipped.contains("shop/mine-1") && skipped.contains("otherScheduler") && skipped.contains("shop/going"), "{skipped}");
    let (ok, out, err) = berth(&["simulate", "--cluster", &cluster]);
    assert!(ok && out.contains("1/1 pods placed") && out.contains("3 unbound pods skipped"), "{out}{err}");

    let cfg = temp("two-profiles.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n- schedulerName: berth\n");
    let (ok, out, err) = berth(&["simulate", "--cluster", &cluster, "--config", &cfg]);
    assert!(ok && out.contains("3/3 pods placed"), "{out}{err}");
    assert!(!err.contains("names no profile"), "{err}");
}

/// A pod that does not exist is "not found", listing every pod explain
/// could be asked about (the pending pods of every scheduler); a pod being
/// deleted is "not pending", with the reason.
#[test]
fn explain_tells_not_found_from_not_pending() {
    let cluster = temp("schedulers2.yaml", SCHEDULERS);
    let (ok, _, err) = berth(&["explain", "--cluster", &cluster, "shop/nope"]);
    assert!(!ok);
    assert!(err.contains("pod shop/nope not found in the cluster (pending pods: shop/mine-1, shop/mine-2, shop/plain)"), "{err}");
    let (ok, _, err) = berth(&["explain", "--cluster", &cluster, "--pod", "shop/going"]);
    assert!(!ok && err.contains("pod shop/going is not pending: it is being deleted"), "{err}");
    // Another scheduler's pod is explained, with a note.
    let (ok, out, err) = berth(&["explain", "--cluster", &cluster, "shop/mine-1"]);
    assert!(ok && out.contains("Selected: n1") && err.contains("note: pod shop/mine-1 is pending for scheduler \"berth\""), "{out}{err}");
}

/// kubectl's habits: -o is the output format everywhere; -f/--cluster
/// names the dump and `-` reads it from stdin; the pod may be positional;
/// --seed reads hex as the docs write it.
#[test]
fn flags_follow_kubectl() {
    let cluster = temp("flags.yaml", CLUSTER);
    let (ok, json_out, err) = berth(&["simulate", "-f", &cluster, "-o", "json"]);
    assert!(ok, "{err}");
    assert!(serde_json::from_str::<serde_json::Value>(&json_out).is_ok(), "{json_out}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["simulate", "--cluster", "-", "-o", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("berth runs");
    child.stdin.take().expect("stdin").write_all(CLUSTER.as_bytes()).expect("write the dump");
    let out = child.wait_with_output().expect("berth ends");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), json_out, "the dump from stdin places as the file does");
    let (ok, a, _) = berth(&["explain", "-f", &cluster, "ok", "-o", "json"]);
    let (ok2, b, _) = berth(&["explain", "--cluster", &cluster, "--pod", "default/ok", "--output", "json", "--seed", "24301"]);
    assert!(ok && ok2 && a == b, "{a}\n{b}");
    let (_, help, _) = berth(&["simulate", "--help"]);
    assert!(help.contains("[default: 0x5eed]") && help.contains("-o, --output"), "{help}");
    // dump: -o is a format; the file is -f (or stdout).
    let (ok, _, err) = berth(&["dump", "-o", "cluster.yaml"]);
    assert!(!ok && err.contains("invalid value 'cluster.yaml' for '--output"), "{err}");
    let (ok, _, err) = berth(&["simulate", "--cluster", &cluster, "--kubeconfig", "kc"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}

/// A kubeconfig whose server is down: one line naming the server and the
/// kubeconfig ($KUBECONFIG when no --kubeconfig is given, as kubectl), the
/// cause once.
#[test]
fn connection_errors_name_the_server_and_the_kubeconfig_once() {
    let kc = temp("down.kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: down\n  context: {cluster: c, user: u}\ncurrent-context: down\n");
    for cmd in [vec!["simulate"], vec!["explain", "shop/p"], vec!["dump"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_berth")).args(&cmd).env("KUBECONFIG", &kc).env_remove("RUST_LOG").output().expect("berth runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}");
        assert!(err.contains("http://127.0.0.1:9/") && err.contains(&format!("$KUBECONFIG={kc}")) && err.contains("context down"), "{cmd:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{cmd:?}: one line: {err}");
        assert_eq!(err.matches("refused").count(), 1, "{cmd:?}: the cause once: {err}");
    }
    let (ok, _, err) = berth(&["simulate", "--kubeconfig", "/nonexistent/kc"]);
    assert!(!ok && err.contains("kubeconfig /nonexistent/kc") && err.matches("os error 2").count() == 1, "{err}");
    let (ok, _, err) = berth(&["simulate", "--cluster", "/nonexistent/dump.yaml"]);
    assert!(!ok && err.contains("/nonexistent/dump.yaml") && err.matches("os error 2").count() == 1, "{err}");
}

/// Config errors name the file (not `<input>`) and the field.
#[test]
fn config_errors_name_the_file_and_the_field() {
    let cluster = temp("cfg-cluster.yaml", CLUSTER);
    let cfg = temp("pct.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: lots\n");
    let (ok, _, err) = berth(&["simulate", "--cluster", &cluster, "--config", &cfg]);
    assert!(!ok && err.contains(&cfg) && err.contains("percentageOfNodesToScore") && !err.contains("<input>"), "{err}");
    let (ok, _, err) = berth(&["simulate", "--cluster", &cluster, "--config", "/nonexistent/sched.yaml"]);
    assert!(!ok && err.contains("/nonexistent/sched.yaml") && err.matches("os error 2").count() == 1, "{err}");
}

/// `berth run` against a server that is down, for 5 s: the server and the
/// kubeconfig named once; one line per watch when it starts failing (with
/// the next attempt's delay), not one per attempt, and none of kube's own
/// per-request ERROR lines; no colour codes in a log that is not a terminal.
#[test]
fn run_against_a_down_server_logs_each_change_once() {
    let kc = temp("run-down.kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: down\n  context: {cluster: c, user: u}\ncurrent-context: down\n");
    let cfg = temp("run-down.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["run", "--config", &cfg, "--bind-address", "127.0.0.1:0"])
        .env("KUBECONFIG", &kc)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("BERTH_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("berth runs");
    std::thread::sleep(std::time::Duration::from_secs(5));
    let _ = child.kill();
    let out = child.wait_with_output().expect("berth ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}'), "colour codes in a log that is not a terminal: {err}");
    assert!(!err.contains("kube_client::client::builder"), "{err}");
    assert_eq!(err.matches("http://127.0.0.1:9/").count(), 1, "the server named once: {err}");
    assert!(err.contains(&format!("$KUBECONFIG={kc}")), "{err}");
    let failing: Vec<&str> = err.lines().filter(|l| l.contains("watch failing")).collect();
    assert!(!failing.is_empty() && failing.iter().all(|l| l.contains("retry_in=")), "{err}");
    let mut kinds: Vec<&str> = failing.iter().filter_map(|l| l.split("kind=").nth(1)).filter_map(|k| k.split_whitespace().next()).collect();
    let n = kinds.len();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), n, "one line per watch, not one per attempt: {err}");
    assert!(err.lines().count() < 60, "{} lines in 5 s: {err}", err.lines().count());
}
