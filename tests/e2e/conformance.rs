//! Runs the conformance cases against the built binary: every case pins one
//! decision to upstream kube-scheduler's. The public cases ship in
//! `tests/conformance/` (their format is `tests/conformance/FORMAT.md`); new
//! cases may also arrive in `../shared/conformance/` beside the checkout, and
//! are run too when that folder is there. A case of the same area and name
//! in both is run once, from the repository: a case the repository corrects
//! (against kube-scheduler 1.37.2 itself, its source named in the case)
//! overrides the shared copy until that copy is corrected too.

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
        // The shared cases the repository does not hold (or corrects), in a
        // folder of their own beside the shared runner.
        let only = std::env::temp_dir().join(format!("berth-conformance-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&only);
        std::fs::create_dir_all(only.join("cases")).expect("temp dir");
        std::fs::copy(shared.join("run.py"), only.join("run.py")).expect("copy run.py");
        let (mut copied, mut overridden) = (0, Vec::new());
        for area in std::fs::read_dir(shared.join("cases")).expect("shared cases").flatten() {
            for case in std::fs::read_dir(area.path()).into_iter().flatten().flatten() {
                let rel = Path::new(&area.file_name()).join(case.file_name());
                if public.join("cases").join(&rel).exists() {
                    overridden.push(rel.display().to_string());
                    continue;
                }
                copy_dir(&case.path(), &only.join("cases").join(&rel));
                copied += 1;
            }
        }
        overridden.sort();
        println!("../shared/conformance: {copied} cases run from there; held in the repository too (run from it): {}", overridden.join(", "));
        if copied > 0 {
            run_cases(&only);
        }
        let _ = std::fs::remove_dir_all(&only);
    } else {
        println!("note: ../shared/conformance is not beside the checkout; ran the public cases only");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("case dir");
    for e in std::fs::read_dir(from).expect("case").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy case file");
        }
    }
}
