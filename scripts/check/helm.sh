#!/usr/bin/env bash
# Validates the Helm chart (helm/hookstream) offline: `helm lint --strict` and `helm template`
# with the defaults and every helm/hookstream/ci/*.yaml; every rendered object against the
# Kubernetes 1.31 and CRD schemas in ../shared/schemas (kubeconform -strict, no downloads);
# values the chart must refuse; and the cross-checks of scripts/check/helm_checks.py (the KEDA
# trigger reads the dispatcher's own topic and group, replicas within the partitions, grace
# periods, mounts, and — when the service binaries are built — the real config loaders).
#
# Tools are installed on first use into ~/.cache/hookstream/bin (helm takes ~5-10 minutes to
# build). Runnable from any directory; exits non-zero and says what failed.
#   HOOKSTREAM_BIN_DIR   built dispatcher/outbox-relay/hookstream (default: target/debug if built)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHART="$REPO_ROOT/helm/hookstream"
# shellcheck source=scripts/check/shared.sh
source "$REPO_ROOT/scripts/check/shared.sh"
SCHEMAS="$(shared_dir "$REPO_ROOT")/schemas" || exit 1
CACHE="${HOME}/.cache/hookstream"
BIN="$CACHE/bin"
KUBE_VERSION=1.31.0

failures=()
note() { printf '==> %s\n' "$*"; }
failed() { printf '  FAIL: %s\n' "$*"; failures+=("$*"); }

[[ -d "$SCHEMAS/kubernetes-v${KUBE_VERSION}-standalone-strict" ]] ||
  { echo "helm.sh: offline schemas not found at $SCHEMAS" >&2; exit 1; }

# ---- tools -------------------------------------------------------------------------------
bash "$REPO_ROOT/scripts/check/tools.sh" >/dev/null # installs helm and kubeconform once
HELM="$BIN/helm"
KUBECONFORM="$BIN/kubeconform"

PY=python3
if ! "$PY" -c 'import yaml, tomllib' 2>/dev/null; then
  VENV="$CACHE/venv-helm-check"
  if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import yaml' 2>/dev/null; then
    note "installing PyYAML into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q pyyaml
  fi
  PY="$VENV/bin/python"
fi

BIN_DIR="${HOOKSTREAM_BIN_DIR:-}"
if [[ -z "$BIN_DIR" && -x "$REPO_ROOT/target/debug/dispatcher" && -x "$REPO_ROOT/target/debug/outbox-relay" \
      && -x "$REPO_ROOT/target/debug/hookstream" ]]; then
  BIN_DIR="$REPO_ROOT/target/debug"
fi

if [[ -n "$BIN_DIR" ]]; then
  for b in dispatcher outbox-relay hookstream; do
    [[ -x "$BIN_DIR/$b" ]] || { echo "helm.sh: HOOKSTREAM_BIN_DIR=$BIN_DIR has no $b" >&2; exit 1; }
  done
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# ---- lint and render -----------------------------------------------------------------------
cases=(defaults)
for f in "$CHART"/ci/*.yaml; do cases+=("$f"); done

total=0
for c in "${cases[@]}"; do
  name="$(basename "$c" .yaml)"
  args=()
  [[ "$c" != defaults ]] && args=(-f "$c")
  note "$name"
  if ! "$HELM" lint --strict --kube-version "$KUBE_VERSION" "$CHART" "${args[@]}" >"$WORK/lint.log" 2>&1; then
    cat "$WORK/lint.log"; failed "helm lint --strict ($name)"
  fi
  out="$WORK/$name.yaml"
  if ! "$HELM" template hs "$CHART" --namespace hookstream --kube-version "$KUBE_VERSION" "${args[@]}" \
      >"$out" 2>"$WORK/template.log"; then
    cat "$WORK/template.log"; failed "helm template ($name)"; continue
  fi
  # TriggerAuthentication has no offline schema (../shared/schemas has none): it is skipped
  # here and its shape checked by helm_checks.py. Every other kind must have a schema.
  if ! "$KUBECONFORM" -strict -summary -output text -kubernetes-version "$KUBE_VERSION" -skip TriggerAuthentication \
      -schema-location "$SCHEMAS/kubernetes-{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
      -schema-location "$SCHEMAS/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json" \
      "$out" >"$WORK/kc.log" 2>&1; then
    cat "$WORK/kc.log"; failed "kubeconform ($name)"
  else
    sed 's/^/  /' "$WORK/kc.log" | tail -1
    n="$(grep -oE 'Valid: [0-9]+' "$WORK/kc.log" | grep -oE '[0-9]+')"
    total=$((total + n))
  fi
  if ! "$PY" "$REPO_ROOT/scripts/check/helm_checks.py" "$out" ${BIN_DIR:+"$BIN_DIR"}; then
    failed "rendered-chart checks ($name)"
  fi
done
note "kubeconform: $total objects valid over ${#cases[@]} renders"
[[ -n "$BIN_DIR" ]] || note "service binaries not built: rendered configs not loaded by the real loaders (set HOOKSTREAM_BIN_DIR)"

# ---- values the chart must refuse ---------------------------------------------------------
KEY="k1:$(printf 'ab%.0s' {1..32})"
refuse() { # refuse "what" "expected message (regex)" helm-args...
  local what="$1" expect="$2"; shift 2
  if "$HELM" template hs "$CHART" --kube-version "$KUBE_VERSION" "$@" >/dev/null 2>"$WORK/refuse.log"; then
    failed "accepted: $what"
  elif ! grep -qE "$expect" "$WORK/refuse.log"; then
    cat "$WORK/refuse.log"; failed "refused for another reason than expected ($expect): $what"
  else
    printf '  refused: %s\n' "$what"
  fi
}
note "invalid values are refused"
refuse "a negative replica count" "replicaCount" --set outboxRelay.replicaCount=-1
refuse "an unknown top-level key" "additional properties|bogus" --set bogus=1
refuse "an unknown key in a config section" "additional properties|max_inflight" --set config.dispatcher.max_inflight=5
refuse "a chart-managed key in config (database.url)" "additional properties|url" \
  --set config.database.url=postgres://x@y/z
refuse "maxReplicas above the events partitions" "exceeds config.kafka.topic_settings.partitions" \
  --set dispatcher.autoscaling.maxReplicas=7
refuse "maxReplicas above the partitions, HPA mode" "exceeds config.kafka.topic_settings.partitions" \
  --set dispatcher.autoscaling.keda.enabled=false --set config.kafka.topic_settings.partitions=2
refuse "a malformed sealing key" "sealingKeys" --set "sealingKeys.keys[0]=k1:nothex"
refuse "an unknown Kafka security protocol" "protocol" --set config.kafka.security.protocol=SASL_SSL
refuse "SASL without a password" "saslPassword or kafkaAuth.existingSecret" \
  --set config.kafka.security.protocol=sasl_ssl --set config.kafka.security.sasl_mechanism=PLAIN \
  --set kafkaAuth.saslUsername=u
refuse "the retry role run nowhere" "runs in 0 Deployments" --set dispatcherRetry.enabled=false
refuse "a KEDA trigger override of the topic" "extraMetadata|topic" \
  --set dispatcher.autoscaling.keda.extraMetadata.topic=other
refuse "a negative lagThreshold" "lagThreshold" --set dispatcher.autoscaling.keda.lagThreshold=-5
refuse "a plain-http portal URL off loopback" "portal_url" --set config.api.portal_url=http://portal.example.com/portal
cat >"$WORK/protected.yaml" <<EOF
sealingKeys: {keys: ["$KEY"]}
config: {kafka: {client: {"enable.idempotence": "false"}}}
EOF
refuse "a Kafka safety setting in kafka.client" "enable.idempotence|propertyNames|client" -f "$WORK/protected.yaml"

if ((${#failures[@]})); then
  printf '\nhelm.sh: %d check(s) failed:\n' "${#failures[@]}"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
note "helm chart: all checks passed"
