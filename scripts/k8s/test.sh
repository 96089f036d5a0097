#!/usr/bin/env bash
# `make test-k8s`: the Helm chart (helm/hookstream) on a real Kubernetes API server, built from
# the Go module proxy and run on 127.0.0.1 by scripts/k8s/cluster.sh (etcd, kube-apiserver,
# kube-controller-manager; no kubelet, no scheduler, no KEDA or Prometheus operator).
#
#   0. the CRDs the chart's objects need (ScaledObject, TriggerAuthentication, ServiceMonitor,
#      PrometheusRule), written by scripts/k8s/crds.py from ../shared/schemas/crds
#   1. helm install (scripts/k8s/values-install.yaml: every object the chart can make), --wait=false,
#      into a namespace that enforces the `restricted` Pod Security Standard
#   2. server-side dry-run, field validation Strict, of every object of every render (defaults,
#      helm/hookstream/ci/*.yaml, the install values); and a broken object that must be refused
#   3. the controller manager: Deployments -> ReplicaSets -> Pods (Pending: no kubelet), the
#      hook Jobs -> Pods
#   4. helm upgrade (image tag, replicas, a config value) -> the Deployments and a new ReplicaSet
#   5. helm rollback to revision 1 -> the Deployments' spec as installed, the first ReplicaSet again
#   6. helm uninstall -> nothing of the release left but what Helm documents it keeps
#
# Hook Jobs: Helm waits for its hook Jobs to complete, and without a kubelet their pods never
# run. While helm install/upgrade runs, this script stands in for the kubelet for those pods
# only (label batch.kubernetes.io/job-name): it marks each one Succeeded through the pods/status
# subresource, and the real Job controller then completes the Job. It says so for each pod.
#
# Prints PASS / FAIL / SKIPPED lines, the time of each phase, and `N passed, N failed, N skipped`;
# exits non-zero if anything failed. The cluster is stopped on exit.
#   K8S_VERSION (build.sh), K8S_STATE_DIR and the ports (cluster.sh), K8S_KEEP=1 (leave the
#   cluster running at the end, for a look: stop it with scripts/k8s/cluster.sh stop)
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHART="$REPO_ROOT/helm/hookstream"
HERE="$REPO_ROOT/scripts/k8s"
# shellcheck source=scripts/check/shared.sh
source "$REPO_ROOT/scripts/check/shared.sh"
SHARED="$(shared_dir "$REPO_ROOT")" || exit 1
SCHEMAS="$SHARED/schemas"
NS=hookstream
RELEASE=hs
FULL="$RELEASE-hookstream"
VALUES="$HERE/values-install.yaml"
STATE="${K8S_STATE_DIR:-$REPO_ROOT/.hookstream/k8s}"

passed=0 failed=0 skipped=0
failures=()
pass() { printf 'PASS: %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf 'FAIL: %s\n' "$*"; failed=$((failed + 1)); failures+=("$*"); }
skip() { printf 'SKIPPED: %s\n' "$*"; skipped=$((skipped + 1)); }
note() { printf '    %s\n' "$*"; }
check() { # check "what" command...: PASS if the command succeeds
  local what="$1"
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
timings=()
phase_start=$SECONDS
phase() { # phase NAME: closes the previous phase's timer, starts this one
  local now=$SECONDS
  [[ -n "${phase_name:-}" ]] && timings+=("$(printf '%-64s %5ss' "$phase_name" $((now - phase_start)))")
  phase_name="$1"
  phase_start=$now
  [[ "$1" == end ]] || printf '\n==> %s\n' "$1"
}
t_all=$SECONDS

WORK="$(mktemp -d)"
completer_pid=""
cleanup() {
  local rc=$?
  [[ -n "$completer_pid" ]] && kill "$completer_pid" 2>/dev/null
  if [[ "${K8S_KEEP:-}" == 1 ]]; then
    echo "K8S_KEEP=1: the cluster is left running ($(bash "$HERE/cluster.sh" env))"
  else
    bash "$HERE/cluster.sh" stop
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build ----------------------------------------------------------------------------------
phase "build: kube-apiserver, kube-controller-manager, kubectl, etcd"
# build.sh's progress (stderr) shown here, less the module download lines; its stdout is the directory.
K8S_BIN="$(bash "$HERE/build.sh" 2> >(grep --line-buffered -v '^go: downloading ' >&2))" || { fail "building the Kubernetes binaries (scripts/k8s/build.sh)"; exit 1; }
phase "build: helm"
nice -n 19 bash "$REPO_ROOT/scripts/check/tools.sh" >/dev/null || { fail "installing helm (scripts/check/tools.sh)"; exit 1; }
HELM="$HOME/.cache/hookstream/bin/helm"
command -v jq >/dev/null || { fail "jq is needed (apt-get install jq)"; exit 1; }
command -v openssl >/dev/null || { fail "openssl is needed"; exit 1; }
"$K8S_BIN/kube-apiserver" --version
"$HELM" version --short

# ---- cluster --------------------------------------------------------------------------------
phase "cluster start"
bash "$HERE/cluster.sh" stop >/dev/null 2>&1 # a cluster left by an earlier run (by its pid files)
if ! bash "$HERE/cluster.sh" start; then
  fail "starting the cluster (logs in $STATE/logs)"
  exit 1
fi
export KUBECONFIG="$STATE/admin.kubeconfig"
K() { "$K8S_BIN/kubectl" "$@"; }
H() { "$HELM" "$@"; }
K version 2>/dev/null | sed 's/^/    /'
SERVER_VERSION="$(K version -o json | jq -r .serverVersion.gitVersion)"

# Deployments etc. of the release, as JSON, for assertions.
rs_of() { # rs_of DEPLOYMENT: the ReplicaSets it owns, "name revision replicas image" per line
  K get rs -n "$NS" -o json | jq -r --arg d "$1" '.items[]
    | select(any(.metadata.ownerReferences[]?; .kind == "Deployment" and .name == $d))
    | "\(.metadata.name) \(.metadata.annotations["deployment.kubernetes.io/revision"]) \(.spec.replicas) \(.spec.template.spec.containers[0].image)"' | sort -k2n
}
deployments() { K get deploy -n "$NS" -l "app.kubernetes.io/instance=$RELEASE" -o name | sed 's#.*/##' | sort; }

# Stands in for the kubelet for the hook Jobs' pods only (see the top of this file).
start_completer() { # start_completer ROUND
  local round="$1"
  (
    while true; do
      K get pods -n "$NS" -l batch.kubernetes.io/job-name -o json 2>/dev/null | jq -r '.items[]
        | select(.status.phase == "Pending" and .metadata.deletionTimestamp == null)
        | "\(.metadata.name) \(.metadata.labels["batch.kubernetes.io/job-name"]) \(.spec.containers[0].name)"' |
        while read -r pod job container; do
          now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
          patch="$(jq -nc --arg c "$container" --arg t "$now" '{status: {phase: "Succeeded",
            conditions: [{type: "Ready", status: "False", reason: "PodCompleted", lastTransitionTime: $t}],
            containerStatuses: [{name: $c, image: "simulated", imageID: "", ready: false, restartCount: 0,
              state: {terminated: {exitCode: 0, reason: "Completed", startedAt: $t, finishedAt: $t}}}]}}')"
          if K patch pod "$pod" -n "$NS" --subresource=status --type=merge -p "$patch" >/dev/null 2>>"$WORK/completer.err"; then
            echo "$round $job $pod" >>"$WORK/hook-pods.log"
            echo "    (standing in for the kubelet: hook pod $pod of Job $job marked Succeeded)"
          fi
        done
      sleep 0.5
    done
  ) &
  completer_pid=$!
}
stop_completer() { [[ -n "$completer_pid" ]] && kill "$completer_pid" 2>/dev/null; wait "$completer_pid" 2>/dev/null; completer_pid=""; }

hook_jobs_ran() { # hook_jobs_ran ROUND: both hook Jobs made a pod that was completed
  local round="$1" job ok=0
  for job in "$FULL-migrate" "$FULL-topics"; do
    if grep -q "^$round $job " "$WORK/hook-pods.log" 2>/dev/null; then
      note "Job $job -> pod $(grep "^$round $job " "$WORK/hook-pods.log" | awk '{print $3}' | head -1)"
    else
      note "Job $job made no pod in the $round"; ok=1
    fi
  done
  return "$ok"
}

# ---- 0. CRDs --------------------------------------------------------------------------------
phase "0. CRDs"
python3 "$HERE/crds.py" "$SCHEMAS" >"$WORK/crds.json"
if K create -f "$WORK/crds.json" >"$WORK/crds.log" 2>&1 &&
   K wait --for condition=Established --timeout 60s \
     crd/scaledobjects.keda.sh crd/triggerauthentications.keda.sh \
     crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com >>"$WORK/crds.log" 2>&1; then
  pass "CRDs accepted and established: ScaledObject, TriggerAuthentication (keda.sh/v1alpha1), ServiceMonitor, PrometheusRule (monitoring.coreos.com/v1)"
  nonstructural="$(K get crd -o json | jq -r '.items[] | select(any(.status.conditions[]?; .type == "NonStructuralSchema" and .status == "True")) | .metadata.name')"
  check "every CRD schema structural (so unknown fields are refused, not kept)" test -z "$nonstructural"
else
  cat "$WORK/crds.log"
  fail "CRDs"
fi

# The namespaces enforce the `restricted` Pod Security Standard: the chart's pods must pass it
# to be created at all (the built-in PodSecurity admission of the real API server).
make_ns() {
  K create namespace "$1" >/dev/null &&
    K label namespace "$1" pod-security.kubernetes.io/enforce=restricted \
      pod-security.kubernetes.io/warn=restricted pod-security.kubernetes.io/audit=restricted >/dev/null
}

# ---- 1. install -----------------------------------------------------------------------------
phase "1. helm install"
make_ns "$NS" || fail "namespace $NS"
start_completer install
if H install "$RELEASE" "$CHART" -n "$NS" -f "$VALUES" --wait=false --timeout 3m >"$WORK/install.log" 2>&1; then
  pass "helm install $RELEASE (--wait=false, values scripts/k8s/values-install.yaml) into a restricted namespace"
  installed=1
else
  sed 's/^/    /' "$WORK/install.log"
  fail "helm install"
  installed=0
fi
stop_completer
if ((installed)); then
  H get manifest "$RELEASE" -n "$NS" >"$WORK/manifest-1.yaml"
  want="$(grep -cE '^kind: ' "$WORK/manifest-1.yaml")"
  got="$(K get -n "$NS" -f "$WORK/manifest-1.yaml" -o name 2>"$WORK/get.err" | wc -l)"
  sed 's/^/    /' "$WORK/get.err"
  kinds="$(grep -E '^kind: ' "$WORK/manifest-1.yaml" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')"
  note "release objects: $kinds"
  check "every object of the release exists on the server ($got of $want)" test "$got" -eq "$want" -a "$want" -gt 0
  for k in ScaledObject TriggerAuthentication ServiceMonitor PrometheusRule NetworkPolicy PodDisruptionBudget; do
    grep -qx "kind: $k" "$WORK/manifest-1.yaml" || fail "the install values render no $k"
  done
  K get secret "$FULL-sealing-keys" -n "$NS" -o json >"$WORK/sealing-1.json" 2>/dev/null ||
    fail "the generated sealing-keys Secret"
fi

# ---- 2. server-side validation --------------------------------------------------------------
phase "2. server-side dry-run (Strict)"
VNS=hookstream-validate
make_ns "$VNS" || fail "namespace $VNS"
renders=(defaults "$VALUES")
for f in "$CHART"/ci/*.yaml; do renders+=("$f"); done
for r in "${renders[@]}"; do
  name="$(basename "$r" .yaml)"
  args=()
  [[ "$r" != defaults ]] && args=(-f "$r")
  out="$WORK/render-$name.yaml"
  if ! H template "$RELEASE" "$CHART" -n "$VNS" --kube-version "$SERVER_VERSION" "${args[@]}" >"$out" 2>"$WORK/template.err"; then
    cat "$WORK/template.err"; fail "helm template ($name)"; continue
  fi
  want="$(grep -cE '^kind: ' "$out")"
  # `create --dry-run=server --validate=strict`: every object goes through the real API server's
  # decoding with field validation Strict (unknown or duplicate fields are errors, CRD schemas
  # included), defaulting, validation and admission (PodSecurity among them); nothing is stored.
  K create --dry-run=server --validate=strict -n "$VNS" -f "$out" -o name >"$WORK/dry.out" 2>"$WORK/dry.err"
  rc=$?
  got="$(wc -l <"$WORK/dry.out")"
  if ((rc == 0)) && ((got == want)) && ! grep -q . "$WORK/dry.err"; then
    pass "server dry-run, Strict: all $got objects of the $name render accepted, no warnings"
  else
    sed 's/^/    /' "$WORK/dry.err"
    fail "server dry-run, Strict ($name): $got of $want accepted"
  fi
done
# It must have teeth: an unknown field in a Deployment's pod template, in a ScaledObject and in
# a PrometheusRule (the CRD schemas), and a pod that breaks the restricted profile, each refused.
cat >"$WORK/broken.yaml" <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: broken-field}
spec:
  selector: {matchLabels: {app: b}}
  template:
    metadata: {labels: {app: b}}
    spec:
      containers: [{name: c, image: x, imagePullPolcy: Always}]
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: broken-so}
spec:
  scaleTargetRef: {name: x}
  maxReplicas: 3
  triggers: [{type: kafka, metadata: {topic: t}}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: broken-rule}
spec:
  groups: [{name: g, rules: [{alert: A, expr: up == 0, severty: page}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: broken-root}
spec:
  containers: [{name: c, image: x}]
EOF
K create --dry-run=server --validate=strict -n "$VNS" -f "$WORK/broken.yaml" -o name >"$WORK/broken.out" 2>"$WORK/broken.err"
for want in 'unknown field "spec.template.spec.containers\[0\].imagePullPolcy"' 'unknown field "spec.maxReplicas"' \
            'unknown field "spec.groups\[0\].rules\[0\].severty"' 'violates PodSecurity "restricted'; do
  if grep -q "$want" "$WORK/broken.err"; then
    pass "refused by the server: $(echo "$want" | tr -d '\\')"
  else
    sed 's/^/    /' "$WORK/broken.err"; fail "not refused: $want"
  fi
done
check "none of the broken objects accepted" test ! -s "$WORK/broken.out"
K delete namespace "$VNS" --wait=false >/dev/null 2>&1

# ---- 3. the controller manager --------------------------------------------------------------
phase "3. controllers: Deployments, Jobs"
if ((installed)); then
  mapfile -t deps < <(deployments)
  note "Deployments: ${deps[*]}"
  check "4 Deployments (outbox-relay, dispatcher, dispatcher-retry, api)" test "${#deps[@]}" -eq 4
  # Each Deployment -> one ReplicaSet (revision 1) -> .spec.replicas Pods, all Pending, unbound.
  rollout_ok() {
    local d="$1" want rs pods
    want="$(K get deploy "$d" -n "$NS" -o jsonpath='{.spec.replicas}')"
    rs="$(rs_of "$d")"
    [[ "$(wc -l <<<"$rs")" -eq 1 && -n "$rs" ]] || return 1
    pods="$(K get pods -n "$NS" -o json | jq --arg rs "${rs%% *}" '[.items[]
      | select(any(.metadata.ownerReferences[]?; .kind == "ReplicaSet" and .name == $rs))
      | select(.status.phase == "Pending" and (.spec.nodeName // "") == "")] | length')"
    [[ "$pods" -eq "$want" && "$want" -gt 0 ]]
  }
  for d in "${deps[@]}"; do
    ok=1
    for _ in $(seq 1 60); do rollout_ok "$d" && { ok=0; break; }; sleep 1; done
    want="$(K get deploy "$d" -n "$NS" -o jsonpath='{.spec.replicas}')"
    if ((ok == 0)); then
      pass "Deployment $d -> ReplicaSet $(rs_of "$d" | awk '{print $1}') -> $want Pods, admitted as restricted (Pending, no node: no scheduler, no kubelet)"
    else
      note "ReplicaSets: $(rs_of "$d" | tr '\n' ';')"
      K get pods -n "$NS" -o wide 2>&1 | sed 's/^/    /'
      K get events -n "$NS" --field-selector type=Warning 2>&1 | tail -5 | sed 's/^/    /'
      fail "Deployment $d: no ReplicaSet with $want Pending Pods within 60s"
    fi
  done
  # The dispatcher's replicas are KEDA's: the chart leaves them out, so the API server defaults 1.
  check "dispatcher Deployment without replicas in the chart: defaulted to 1 by the server (KEDA would scale it)" \
    test "$(K get deploy "$FULL-dispatcher" -n "$NS" -o jsonpath='{.spec.replicas}')" = 1
  # The disruption controller counts the real pods for each PodDisruptionBudget.
  pdb_ok() {
    K get pdb -n "$NS" -l "app.kubernetes.io/instance=$RELEASE" -o json | jq -e '
      (.items | length) == 4 and all(.items[]; (.status.expectedPods // 0) > 0 and .status.currentHealthy == 0)' >/dev/null
  }
  ok=1
  for _ in $(seq 1 30); do pdb_ok && { ok=0; break; }; sleep 1; done
  check "4 PodDisruptionBudgets see their pods (expectedPods > 0, currentHealthy 0: none ready)" test "$ok" -eq 0
  if hook_jobs_ran install; then
    pass "hook Jobs migrate and topics each became a Pod (Job controller), completed and deleted (hook-succeeded)"
  else
    fail "hook Jobs: $(cat "$WORK/completer.err" 2>/dev/null | tail -3)"
  fi
  left="$(K get jobs -n "$NS" -o name | wc -l)"
  check "no hook Job left after success (helm.sh/hook-delete-policy: hook-succeeded)" test "$left" -eq 0
  skip "pods running, probes, the services themselves: no kubelet and no container runtime here"
  skip "KEDA turning the ScaledObject into an HPA, the Prometheus operator reading the ServiceMonitor/PrometheusRule: neither operator runs here (the CRDs only)"
else
  skip "controllers: helm install failed"
fi

# ---- 4. upgrade -----------------------------------------------------------------------------
phase "4. helm upgrade"
if ((installed)); then
  declare -A spec1
  for d in "${deps[@]}"; do spec1[$d]="$(K get deploy "$d" -n "$NS" -o json | jq -S '.spec')"; done
  disp_rs1="$(rs_of "$FULL-dispatcher" | awk '{print $1}')"
  start_completer upgrade
  if H upgrade "$RELEASE" "$CHART" -n "$NS" -f "$VALUES" --wait=false --timeout 3m \
      --set image.tag=0.1.1-k8s-test --set outboxRelay.replicaCount=3 \
      --set config.dispatcher.shutdown_grace_ms=30000 >"$WORK/upgrade.log" 2>&1; then
    pass "helm upgrade (image.tag=0.1.1-k8s-test, outboxRelay.replicaCount=3, config.dispatcher.shutdown_grace_ms=30000)"
    upgraded=1
  else
    sed 's/^/    /' "$WORK/upgrade.log"; fail "helm upgrade"; upgraded=0
  fi
  stop_completer
  if ((upgraded)); then
    check "revision 2 deployed" test "$(H status "$RELEASE" -n "$NS" -o json | jq -r '"\(.version) \(.info.status)"')" = "2 deployed"
    images="$(for d in "${deps[@]}"; do K get deploy "$d" -n "$NS" -o jsonpath='{.spec.template.spec.containers[0].image}{"\n"}'; done | sort -u)"
    check "every Deployment's image is now ...:0.1.1-k8s-test ($images)" test "$images" = "ghcr.io/hookstream/hookstream:0.1.1-k8s-test"
    check "outbox-relay Deployment at 3 replicas" test "$(K get deploy "$FULL-outbox-relay" -n "$NS" -o jsonpath='{.spec.replicas}')" = 3
    check "the ConfigMap's dispatcher.toml has shutdown_grace_ms = 30000" \
      bash -c "'$K8S_BIN/kubectl' get configmap '$FULL-config' -n '$NS' -o jsonpath='{.data.dispatcher\.toml}' | grep -qE '^shutdown_grace_ms = 30000$'"
    new_rs() { rs_of "$FULL-dispatcher" | awk -v old="$disp_rs1" '$1 != old && $2 == 2 && $3 >= 1 && $4 ~ /:0.1.1-k8s-test$/' | grep -q .; }
    ok=1
    for _ in $(seq 1 60); do new_rs && { ok=0; break; }; sleep 1; done
    if ((ok == 0)); then
      pass "dispatcher: a new ReplicaSet (revision 2, the new image) beside $disp_rs1 (its pods Pending, so the old one stays: maxUnavailable 0)"
    else
      note "$(rs_of "$FULL-dispatcher" | tr '\n' ';')"; fail "dispatcher: no new ReplicaSet within 60s"
    fi
    K get secret "$FULL-sealing-keys" -n "$NS" -o json >"$WORK/sealing-2.json"
    check "the generated sealing keys survived the upgrade (the chart's lookup found them on the real server)" \
      test "$(jq -r '.data["sealing-keys"]' "$WORK/sealing-1.json")" = "$(jq -r '.data["sealing-keys"]' "$WORK/sealing-2.json")"
    if hook_jobs_ran upgrade; then pass "pre-upgrade hooks: migrate and topics Jobs ran again (Pods made, completed)"; else fail "pre-upgrade hooks"; fi
  fi
else
  skip "upgrade: helm install failed"
  upgraded=0
fi

# ---- 5. rollback ----------------------------------------------------------------------------
phase "5. helm rollback"
if ((installed && upgraded)); then
  if H rollback "$RELEASE" 1 -n "$NS" --wait=false >"$WORK/rollback.log" 2>&1; then
    pass "helm rollback $RELEASE 1"
    check "revision 3 deployed" test "$(H status "$RELEASE" -n "$NS" -o json | jq -r '"\(.version) \(.info.status)"')" = "3 deployed"
    for d in "${deps[@]}"; do
      now="$(K get deploy "$d" -n "$NS" -o json | jq -S '.spec')"
      if [[ "$now" == "${spec1[$d]}" ]]; then
        pass "Deployment $d: spec back to revision 1's, byte for byte"
      else
        diff <(echo "${spec1[$d]}") <(echo "$now") | head -20 | sed 's/^/    /'
        fail "Deployment $d: spec differs from revision 1's"
      fi
    done
    back_rs() { rs_of "$FULL-dispatcher" | awk -v old="$disp_rs1" '$1 == old && $2 == 3 && $3 >= 1' | grep -q .; }
    ok=1
    for _ in $(seq 1 60); do back_rs && { ok=0; break; }; sleep 1; done
    if ((ok == 0)); then
      pass "dispatcher: the first ReplicaSet $disp_rs1 is current again (revision 3), no third one made"
    else
      note "$(rs_of "$FULL-dispatcher" | tr '\n' ';')"; fail "dispatcher: ReplicaSet $disp_rs1 not current after the rollback"
    fi
    check "dispatcher still has exactly 2 ReplicaSets" test "$(rs_of "$FULL-dispatcher" | wc -l)" -eq 2
    skip "hooks on rollback: the chart has none (its Jobs are pre-install,pre-upgrade only)"
  else
    sed 's/^/    /' "$WORK/rollback.log"; fail "helm rollback"
  fi
else
  skip "rollback: install or upgrade failed"
fi

# ---- 6. uninstall ---------------------------------------------------------------------------
phase "6. helm uninstall"
if ((installed)); then
  # Every listable namespaced type in the namespace; left alone: what the cluster itself makes in
  # every namespace (ServiceAccount default, ConfigMap kube-root-ca.crt) and Events (records of the
  # controllers, which expire by themselves).
  namespaced="$(K api-resources --verbs=list --namespaced=true -o name | grep -vE '^events(\.events\.k8s\.io)?$' | paste -sd, -)"
  leftovers() { # the objects in the namespace, "Kind/name keep-policy" per line; fails if listing failed
    K get "$namespaced" -n "$NS" -o json >"$WORK/ns.json" 2>"$WORK/ns.err" || { cat "$WORK/ns.err" >&2; return 1; }
    jq -r '.items[]
      | select(((.kind == "ServiceAccount" and .metadata.name == "default")
              or (.kind == "ConfigMap" and .metadata.name == "kube-root-ca.crt")) | not)
      | "\(.kind)/\(.metadata.name) \(.metadata.annotations["helm.sh/resource-policy"] // "-")"' "$WORK/ns.json" | sort
  }
  if before="$(leftovers)"; then
    note "before: $(wc -l <<<"$before") objects in $NS: $(cut -d/ -f1 <<<"$before" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')"
  else
    fail "listing namespace $NS"
  fi
  if H uninstall "$RELEASE" -n "$NS" --wait --timeout 2m >"$WORK/uninstall.log" 2>&1; then
    pass "helm uninstall $RELEASE --wait"
  else
    sed 's/^/    /' "$WORK/uninstall.log"; fail "helm uninstall"
  fi
  listed=1
  for _ in $(seq 1 60); do
    left="$(leftovers)" || { listed=0; break; }
    unexpected="$(grep -v ' keep$' <<<"$left" | grep . || true)"
    [[ -z "$unexpected" ]] && break
    sleep 1
  done
  note "types listed in namespace $NS: $(tr ',' '\n' <<<"$namespaced" | wc -l)"
  if ((!listed)); then
    fail "listing namespace $NS after uninstall"
  elif [[ -z "$unexpected" ]]; then
    pass "nothing of the release left in namespace $NS: of the $(wc -l <<<"$before") objects before, only the kept one below"
  else
    sed 's/^/    /' <<<"$unexpected"; fail "left in namespace $NS after uninstall"
  fi
  kept="$(grep ' keep$' <<<"$left" | awk '{print $1}' | paste -sd' ' -)"
  check "kept, as Helm documents for helm.sh/resource-policy: keep: only Secret/$FULL-sealing-keys ($kept)" \
    test "$kept" = "Secret/$FULL-sealing-keys"
  K delete secret "$FULL-sealing-keys" -n "$NS" >/dev/null 2>&1
  # Cluster-scoped: the chart renders none; anything labelled with the release would be its.
  # (componentstatuses: deprecated, and no object of anyone's)
  cluster="$(K api-resources --verbs=list --namespaced=false -o name | grep -vx componentstatuses | paste -sd, -)"
  cluster_kinds="$(K api-resources --namespaced=false --no-headers | awk '{print $NF}' | sort -u)"
  rendered_cluster="$(grep -E '^kind: ' "$WORK/manifest-1.yaml" | awk '{print $2}' | grep -Fxf <(echo "$cluster_kinds") | wc -l)"
  note "cluster-scoped objects the chart rendered: $rendered_cluster"
  cl="$(K get "$cluster" -l "app.kubernetes.io/instance=$RELEASE" -o name 2>"$WORK/cl.err")" || cl="$(cat "$WORK/cl.err")"
  if [[ -z "$cl" ]]; then
    pass "no cluster-scoped object labelled with the release ($(tr ',' '\n' <<<"$cluster" | wc -l) cluster-scoped types listed)"
  else
    sed 's/^/    /' <<<"$cl"; fail "cluster-scoped objects of the release left"
  fi
  check "helm lists no release" test -z "$(H list -n "$NS" -aq)"
else
  skip "uninstall: helm install failed"
fi

phase end
printf '\n==> times\n'
printf '  %s\n' "${timings[@]}"
printf '  %-64s %5ss\n' total $((SECONDS - t_all))
if ((failed)); then
  printf '\nfailed:\n'
  printf '  - %s\n' "${failures[@]}"
fi
printf '\nk8s: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
((failed == 0))
