//! Tells the integration tests whether kubectl is here: a test that drives
//! the real kubectl is ignored where there is none, with the reason in the
//! test's output (`ignored, kubectl is not on PATH`), never passed without
//! running. `BERTH_KUBECTL` names another binary.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(berth_no_kubectl)");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-env-changed=BERTH_KUBECTL");
    let named = std::env::var_os("BERTH_KUBECTL").map(PathBuf::from);
    let on_path = || std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("kubectl")).find(|k| k.is_file()));
    match named.filter(|k| k.is_file()).or_else(on_path) {
        Some(k) => println!("cargo::rerun-if-changed={}", k.display()),
        None => println!("cargo::rustc-cfg=berth_no_kubectl"),
    }
}
