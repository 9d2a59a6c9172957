#!/usr/bin/env bash
# The workspace's dependency guards: every arrow between crates points down
# the stack (berth -> lab -> daemon -> engine -> model; cluster -> model).
#   - model, dra and engine: no kube, tokio, axum, hyper or schemars in their dependency tree
#     (k8s-openapi's `schemars` feature is the local cluster's alone);
#   - tls: no kube, axum, hyper, schemars or berth crate (it sits below the daemon and the cluster);
#   - cluster: no scheduler (engine, daemon) and no lab;
#   - daemon: no local cluster and no lab;
#   - no file outside the plugins names a plugin's module;
#   - the production binary (`-p berth --no-default-features`): no local cluster, no lab, no schemars.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
# deps PACKAGE [CARGO-TREE-ARGS...]: the package's normal (non-dev) dependency names.
deps() {
  local pkg=$1
  shift
  cargo tree --locked -q -p "$pkg" -e normal --prefix none --format '{p}' "$@" | awk '{print $1}' | sort -u
}
# forbid PACKAGE "CRATES" [CARGO-TREE-ARGS...]
forbid() {
  local pkg=$1 banned=$2
  shift 2
  local all found=()
  all=$(deps "$pkg" "$@")
  for c in $banned; do
    grep -qx "$c" <<<"$all" && found+=("$c")
  done
  if ((${#found[@]})); then
    echo "FAIL: $pkg $* depends on ${found[*]}"
    fail=1
  else
    echo "ok: $pkg $* has none of: $banned"
  fi
}

forbid berth-model "kube kube-client kube-runtime tokio axum hyper schemars berth-engine berth-daemon berth-cluster berth-lab"
forbid berth-dra "kube kube-client kube-runtime tokio axum hyper schemars berth-engine berth-daemon berth-cluster berth-lab"
forbid berth-engine "kube kube-client kube-runtime tokio axum hyper schemars berth-daemon berth-cluster berth-lab"
forbid berth-tls "kube kube-client kube-runtime axum hyper schemars berth-model berth-dra berth-engine berth-daemon berth-cluster berth-lab"
forbid berth-cluster "berth-engine berth-daemon berth-lab kube kube-client kube-runtime"
forbid berth-daemon "berth-cluster berth-lab"
forbid berth "berth-cluster berth-lab schemars" --no-default-features --features jemalloc

# Only the registry names plugins: no file outside crates/engine/src/plugins
# reaches into a plugin's module (the framework, the offline engine, the
# daemon, the lab and the CLI ask plugins through the Plugin trait's hooks).
if named=$(grep -rnE 'plugins::(\{|[a-z_]+::)' src crates/*/src --include='*.rs' | grep -v '^crates/engine/src/plugins/'); then
  echo "FAIL: a plugin's module is named outside the plugins:"
  echo "$named"
  fail=1
else
  echo "ok: no plugin's module is named outside crates/engine/src/plugins"
fi
exit $fail
