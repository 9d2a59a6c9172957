//! Clusters of other Kubernetes releases: berth against the process
//! `berth cluster --kubernetes-version 1.34`, which serves only what
//! Kubernetes 1.34 serves by default (no scheduling.k8s.io/v1beta1
//! PodGroups, no resource.k8s.io/v1 DeviceTaintRules, ...). Every kind
//! beyond the core ones is optional: berth starts, is ready within
//! seconds, schedules, turns off what depends on a kind that is not
//! served, says so once per kind, and says which features are on in
//! `/readyz?verbose`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use berth_daemon::{self as daemon, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;

use crate::cluster_cli::spawn_cluster;
use crate::e2e_recovery::{Logs, run_logged};
use crate::e2e_support::*;

/// The kinds of `/readyz?verbose` (`[+]watch <kind> <state>...`) whose
/// line contains `what`.
fn kinds_with(verbose: &str, what: &str) -> Vec<String> {
    verbose
        .lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split_once("watch ").and_then(|(_, rest)| rest.split_whitespace().next()).map(str::to_string))
        .collect()
}

/// Log lines that name `kind` as their `kind` field.
fn lines_of<'a>(lines: &'a [String], kind: &str) -> Vec<&'a String> {
    let (plain, quoted) = (format!("kind={kind} "), format!("kind=\"{kind}\""));
    lines.iter().filter(|l| l.contains(&plain) || l.contains(&quoted) || l.ends_with(&format!("kind={kind}"))).collect()
}

#[test]
fn berth_on_a_1_34_cluster_is_ready_schedules_and_names_what_is_off() {
    let logs = Logs::default();
    let l = logs.clone();
    run_logged(&logs, 120, async move {
        let dir = std::env::temp_dir().join(format!("berth-v134-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut cluster, client) = spawn_cluster(&["--nodes", "4", "--kubernetes-version", "1.34"], &dir.join("kubeconfig")).await;
        let version = client.apiserver_version().await.unwrap();
        assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "34"));
        let started = Instant::now();
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "v1-34".into(), ..Options::default() };
        let d = daemon::start(client.clone(), &config(""), opts).await.unwrap();
        // Health checks need no credentials (the admin port asks the
        // cluster about a token, and this cluster knows only its own).
        let get = |path: &'static str| admin_get(d.admin_addr, path, None);
        eventually(10, "/readyz 200 against a 1.34 cluster", || async { (get("/readyz").await.0 == 200).then_some(()) }).await;
        let ready_after = started.elapsed();
        until_leading(&d, 20).await;

        // It schedules.
        let api: Api<Pod> = Api::default_namespaced(client.clone());
        create_all(&api, (0..20).map(|i| pod(&format!("p-{i:02}"), "100m", json!({}))).collect(), 8).await;
        eventually(30, "20 pods bound", || async {
            let ps = pods(&api).await;
            (ps.len() == 20 && ps.iter().all(|p| node_of(p).is_some())).then_some(())
        })
        .await;

        // Past one recheck of the kinds not served (every 10 s): still
        // ready, and nothing more is logged about them.
        tokio::time::sleep(Duration::from_secs(12).saturating_sub(started.elapsed())).await;
        let (code, verbose) = get("/readyz?verbose").await;
        println!("ready {:.1}s after start; /readyz?verbose:\n{verbose}", ready_after.as_secs_f64());
        assert_eq!(code, 200, "{verbose}");
        for line in ["[+]watch pods synced", "[+]watch nodes synced", "[+]caches synced"] {
            assert!(verbose.contains(line), "{line:?} missing:\n{verbose}");
        }
        let off = kinds_with(&verbose, "not served");
        let on = kinds_with(&verbose, " on");
        // 1.34 serves no scheduling.k8s.io/v1beta1, and the
        // scheduler-plugins CRD is not installed.
        for kind in ["podgroups.scheduling.k8s.io", "podgroups.scheduling.x-k8s.io"] {
            assert!(off.iter().any(|k| k == kind), "{kind} not reported as not served:\n{verbose}");
        }
        assert!(verbose.contains("[+]watch podgroups.scheduling.k8s.io not served (rechecked every 10s); optional: gang scheduling of scheduling.k8s.io/v1beta1 PodGroups off"), "{verbose}");
        // Every optional kind's line says whether its feature is on or off.
        for line in verbose.lines().filter(|x| x.contains("; optional: ")) {
            assert!(line.ends_with(" on") || line.ends_with(" off"), "an optional kind's feature is neither on nor off: {line}");
        }

        let lines = l.lines_since(0);
        for line in lines.iter().filter(|x| x.contains("optional API")) {
            println!("  {line}");
        }
        // One line per kind not served, and no other line about it.
        for kind in &off {
            let about = lines_of(&lines, kind);
            assert_eq!(about.len(), 1, "lines about {kind}, not served:\n{about:#?}");
            assert!(about[0].contains("optional API not served; feature off"), "{}", about[0]);
        }
        let not_served_lines = lines.iter().filter(|x| x.contains("optional API not served")).count();
        assert_eq!(not_served_lines, off.len(), "one line per kind not served");
        // The startup log names each feature that is on, once (kinds that
        // share a feature, such as the DRA kinds, share its line).
        let features: std::collections::BTreeSet<String> = on
            .iter()
            .filter_map(|k| {
                let line = verbose.lines().find(|l| l.contains(&format!("[+]watch {k} synced; optional: ")))?;
                let feature = line.split_once("; optional: ")?.1.strip_suffix(" on")?;
                Some(feature.to_string())
            })
            .collect();
        for feature in &features {
            let said = lines.iter().filter(|x| x.contains("feature on") && x.contains(feature.as_str())).count();
            assert_eq!(said, 1, "{feature}: on, the log does not say so once");
        }
        let warnings: Vec<_> = lines.iter().filter(|x| x.contains(" WARN ") || x.contains(" ERROR ")).collect();
        assert!(warnings.is_empty(), "warnings against a 1.34 cluster:\n{warnings:#?}");
        assert_eq!(d.shutdown().await, 0, "panics");
        let _ = cluster.kill().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
