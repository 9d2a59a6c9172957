//! Tells the end-to-end tests which of the tools users install berth with
//! are here: a test that drives the real Helm or kubectl is ignored where
//! that tool is missing, with the reason in the test's output, never
//! passed without running (see tests/e2e/chart.rs for where each is looked
//! for). The binary itself is not affected.

use std::path::PathBuf;

/// `named` (an environment variable) if it names a file, else the first of
/// `fixed`, else `bin` on PATH.
fn find(named: &str, fixed: &[&str], bin: &str) -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed={named}");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidates = std::env::var_os(named).map(PathBuf::from).into_iter().chain(fixed.iter().map(PathBuf::from)).chain(std::env::split_paths(&path).map(|d| d.join(bin)));
    candidates.into_iter().find(|p| p.is_file())
}

fn main() {
    println!("cargo::rerun-if-env-changed=PATH");
    for (cfg, found) in [("berth_no_helm", find("BERTH_HELM", &["/opt/berth-tools/helm/helm"], "helm")), ("berth_no_kubectl", find("BERTH_KUBECTL", &[], "kubectl"))] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        match found {
            Some(p) => println!("cargo::rerun-if-changed={}", p.display()),
            None => println!("cargo::rustc-cfg={cfg}"),
        }
    }
}
