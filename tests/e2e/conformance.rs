//! Runs the conformance cases against the built binary: every case pins one
//! decision to upstream kube-scheduler's. The public cases ship in
//! `tests/conformance/` (their format is `tests/conformance/FORMAT.md`); new
//! cases may also arrive in `../shared/conformance/` beside the checkout, and
//! are run too when that folder is there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `run.py` of `root` over `root/cases` and asserts every case passed.
fn run_cases(root: &Path) {
    let out = Command::new("python3")
        .arg(root.join("run.py"))
        .arg(env!("CARGO_BIN_EXE_berth"))
        .arg(root.join("cases"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{}:\n{stdout}", root.display());
    assert!(out.status.success(), "conformance failures in {}:\n{stdout}\n{}", root.display(), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn conformance_cases_pass() {
    let public = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let count = std::fs::read_dir(public.join("cases")).map(|areas| areas.count()).unwrap_or(0);
    assert!(count > 0 && public.join("run.py").exists(), "the public conformance cases are missing from {}", public.display());
    run_cases(&public);
    let shared: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance");
    if shared.join("run.py").exists() {
        run_cases(&shared);
    } else {
        println!("note: ../shared/conformance is not beside the checkout; ran the public cases only");
    }
}
