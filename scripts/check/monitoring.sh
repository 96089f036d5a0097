#!/usr/bin/env bash
# Checks the monitoring files offline (the metric-existence side runs as a cargo test:
# services/dispatcher/tests/monitoring.rs scrapes the running services):
#
#  1. `promtool check rules` and `promtool test rules` on the alert rules
#     (helm/hookstream/alerts/*.yml, tests in deploy/prometheus/tests/);
#  2. every alert has a severity (critical, warning, info), a summary, a description and a
#     runbook_url `docs/runbooks.md#<alert in lower case>` whose section exists; every section
#     of docs/runbooks.md is an alert; every alert has a test where it fires and one where it
#     does not;
#  3. the dashboard validates against the Grafana dashboard schema
#     (../shared/schemas/grafana/dashboard.jsonschema.json) and passes
#     scripts/check/dashboard.py (datasource variable, units, layout, no job names);
#  4. deploy/prometheus/prometheus.yml, and the local stack's rendering of it, pass
#     `promtool check config`.
#
# Prints PASS or FAIL; non-zero on failure.
set -euo pipefail
CHECK=monitoring
# shellcheck source=scripts/check/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-monitoring-check.XXXXXX")"
trap 'rc=$?; rm -rf "$WORK"; verdict_on_exit $rc' EXIT
# shellcheck source=scripts/check/shared.sh
source "$REPO_ROOT/scripts/check/shared.sh"
SHARED_DIR="$(shared_dir "$REPO_ROOT")" || fail "the offline schemas are missing"

ensure_apt promtool prometheus
RULES=("$REPO_ROOT"/helm/hookstream/alerts/*.yml)
TESTS=("$REPO_ROOT"/deploy/prometheus/tests/*.yml)

# --- 1. promtool ---------------------------------------------------------------------------
promtool check rules "${RULES[@]}" >"$WORK/check.out" 2>&1 || fail "promtool check rules: $(cat "$WORK/check.out")"
log "$(grep -c SUCCESS "$WORK/check.out") rule file(s): $(grep -o '[0-9]* rules found' "$WORK/check.out" | paste -sd, -)"
promtool test rules "${TESTS[@]}" >"$WORK/test.out" 2>&1 || { cat "$WORK/test.out" >&2; fail "promtool test rules"; }
log "promtool test rules: $(cat "${TESTS[@]}" | grep -c '^- name:') test cases passed"

# --- 2. alerts, runbooks and tests belong together -----------------------------------------
python3 - "$REPO_ROOT/docs/runbooks.md" "${#RULES[@]}" "${RULES[@]}" "${TESTS[@]}" <<'PYEOF' || fail "alerts, runbooks and rule tests disagree (above)"
import re, sys

runbooks, n = sys.argv[1], int(sys.argv[2])
rule_files, test_files = sys.argv[3:3 + n], sys.argv[3 + n:]
problems = []

def blocks(text, marker):
    """Splits a YAML list of mappings at `- <marker>:` lines (stdlib only; files we own)."""
    out, cur = [], None
    for line in text.splitlines():
        if re.match(rf"\s*- {marker}:", line):
            cur = [line]
            out.append(cur)
        elif cur is not None:
            cur.append(line)
    return ["\n".join(b) for b in out]

alerts = {}
for f in rule_files:
    for b in blocks(open(f).read(), "alert"):
        name = re.match(r"\s*- alert:\s*(\S+)", b).group(1)
        sev = re.search(r"^\s*severity:\s*(\S+)", b, re.M)
        if not sev or sev.group(1) not in ("critical", "warning", "info"):
            problems.append(f"{name}: severity must be critical, warning or info")
        for key in ("summary", "description", "runbook_url"):
            if not re.search(rf"^\s*{key}:\s*\S", b, re.M):
                problems.append(f"{name}: no {key} annotation")
        url = re.search(r"runbook_url:\s*(\S+)", b)
        if url and url.group(1) != f"docs/runbooks.md#{name.lower()}":
            problems.append(f"{name}: runbook_url {url.group(1)} is not docs/runbooks.md#{name.lower()}")
        alerts[name] = True

sections = re.findall(r"^## (\S+)\s*$", open(runbooks).read(), re.M)
for name in alerts:
    if name not in sections:
        problems.append(f"{name}: no section '## {name}' in docs/runbooks.md")
for s in sections:
    if s not in alerts:
        problems.append(f"docs/runbooks.md section {s} names no alert")

fires, quiet = set(), set()
for f in test_files:
    for b in blocks(open(f).read(), "eval_time"):
        name = re.search(r"alertname:\s*(\S+)", b).group(1)
        (quiet if re.search(r"exp_alerts:\s*\[\]", b) else fires).add(name)
for name in alerts:
    if name not in fires:
        problems.append(f"{name}: no test where it fires")
    if name not in quiet:
        problems.append(f"{name}: no test where it does not fire")

for p in problems:
    print(f"  {p}")
if problems:
    sys.exit(1)
print(f"[check/monitoring] {len(alerts)} alerts: each with severity, summary, description, its runbook section, and tests that fire and do not")
PYEOF

# --- 3. dashboard --------------------------------------------------------------------------
ensure_venv check-jsonschema==0.39.0
SCHEMA="$SHARED_DIR/schemas/grafana/dashboard.jsonschema.json"
[[ -f "$SCHEMA" ]] || fail "no Grafana dashboard schema at $SCHEMA (set HOOKSTREAM_SHARED_DIR)"
for dash in "$REPO_ROOT"/helm/hookstream/dashboards/*.json; do
  "$VENV/bin/check-jsonschema" --schemafile "$SCHEMA" "$dash" >"$WORK/schema.out" 2>&1 ||
    { cat "$WORK/schema.out" >&2; fail "$(basename "$dash") does not validate against $SCHEMA"; }
  python3 "$REPO_ROOT/scripts/check/dashboard.py" "$dash" --metrics-out "$WORK/metrics.txt" >"$WORK/dash.out" 2>&1 ||
    { cat "$WORK/dash.out" >&2; fail "scripts/check/dashboard.py refused $(basename "$dash")"; }
  log "$(basename "$dash"): valid against the Grafana schema; $(wc -l <"$WORK/metrics.txt") metrics used"
done

# --- 4. scrape configs ---------------------------------------------------------------------
promtool check config --syntax-only "$REPO_ROOT/deploy/prometheus/prometheus.yml" >"$WORK/config.out" 2>&1 ||
  fail "promtool check config deploy/prometheus/prometheus.yml: $(cat "$WORK/config.out")"
python3 "$REPO_ROOT/scripts/stack/prometheus_config.py" "$REPO_ROOT/deploy/prometheus/prometheus.yml" \
  "$REPO_ROOT/helm/hookstream/alerts/*.yml" outbox-relay=127.0.0.1:9101 dispatcher=127.0.0.1:9102 api=127.0.0.1:9103 \
  prometheus=127.0.0.1:9090 >"$WORK/local.yml"
promtool check config "$WORK/local.yml" >"$WORK/config.out" 2>&1 ||
  fail "the local stack's Prometheus config: $(cat "$WORK/config.out")"
log "prometheus.yml and its local rendering: valid (promtool check config)"
pass "alert rules, their tests and runbooks, the dashboard and the scrape configs"
