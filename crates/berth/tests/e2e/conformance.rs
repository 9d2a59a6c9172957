//! Runs the shared conformance cases against the release binary: every case
//! pins one decision to upstream kube-scheduler's.

use std::path::Path;
use std::process::Command;

#[test]
fn conformance_cases_pass() {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance");
    if !cases.join("run.py").exists() {
        eprintln!("SKIP: ../shared/conformance is not beside the checkout");
        return;
    }
    let out = Command::new("python3")
        .arg(cases.join("run.py"))
        .arg(env!("CARGO_BIN_EXE_berth"))
        .arg(cases.join("cases"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "conformance failures:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}
