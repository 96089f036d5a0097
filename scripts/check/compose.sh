#!/usr/bin/env bash
# Checks docker-compose.yml without a Docker engine:
#
#  1. against the Compose specification's JSON schema (check-jsonschema, cached venv;
#     ../shared/schemas/compose/compose-spec.json);
#  2. `docker-compose config -q` (Debian's docker-compose 1.29, which needs no engine):
#     interpolation, anchors, depends_on conditions;
#  3. every HOOKSTREAM_<SECTION>__<KEY> variable a service sets names a key that
#     docs/configuration.md documents (a typo such as HOOKSTREAM_KAFKA__BROKER fails here,
#     not at `docker compose up`);
#  4. promtool (Debian's prometheus package, which scripts/setup/build-deps.sh installs; else
#     extracted from the package into the cache) checks deploy/prometheus/prometheus.yml; the
#     alert rules it loads are mounted from helm/hookstream/alerts; the metrics port is
#     the same in the Dockerfile (EXPOSE), the services' environment and Prometheus; the Grafana
#     provisioning files must parse as YAML;
#  5. when the binaries are built (target/release or target/debug, or BIN_DIR), each Hookstream
#     service's binary loads its configuration from exactly that environment: the services
#     are run with telemetry.log_format forced invalid, so they stop at validation (exit 2,
#     naming log_format) before connecting anywhere, and the CLI runs `secrets generate-key`.
#
# Prints PASS or FAIL; non-zero on failure.
# Usage: scripts/check/compose.sh [COMPOSE_FILE]   (default: docker-compose.yml)
#   env: HOOKSTREAM_SHARED_DIR (default ../shared), HOOKSTREAM_IMAGE_BIN_DIR
set -euo pipefail
CHECK=compose
# shellcheck source=scripts/check/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap 'verdict_on_exit $?' EXIT
started=$SECONDS

COMPOSE_FILE="$(realpath "${1:-$REPO_ROOT/docker-compose.yml}")"
# shellcheck source=scripts/check/shared.sh
source "$REPO_ROOT/scripts/check/shared.sh"
SHARED_DIR="$(shared_dir "$REPO_ROOT")" || fail "the offline schemas are missing"
SCHEMA="$SHARED_DIR/schemas/compose/compose-spec.json"
[[ -f "$COMPOSE_FILE" ]] || fail "no $COMPOSE_FILE"
[[ -f "$SCHEMA" ]] || fail "no compose schema at $SCHEMA (set HOOKSTREAM_SHARED_DIR)"

ensure_venv check-jsonschema==0.39.0
PY="$VENV/bin/python"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-compose-check.XXXXXX")"
trap 'rc=$?; rm -rf "$WORK"; verdict_on_exit $rc' EXIT

# A well-formed stand-in for the sealing key the file requires from the environment.
export HOOKSTREAM_SECRETS__KEY="${HOOKSTREAM_SECRETS__KEY:-check:$(printf '0%.0s' {1..64})}"

# --- 1. schema ---------------------------------------------------------------------------
"$VENV/bin/check-jsonschema" --schemafile "$SCHEMA" "$COMPOSE_FILE" ||
  fail "$(basename "$COMPOSE_FILE") does not match the Compose specification's schema"
log "compose-spec schema: valid"

# --- 2. docker-compose config ------------------------------------------------------------
resolved="$COMPOSE_FILE"
if ! command -v docker-compose >/dev/null && [[ $EUID -eq 0 ]]; then ensure_apt docker-compose docker-compose; fi
if command -v docker-compose >/dev/null; then
  docker-compose --project-directory "$REPO_ROOT" -f "$COMPOSE_FILE" config -q ||
    fail "docker-compose config refused $(basename "$COMPOSE_FILE")"
  docker-compose --project-directory "$REPO_ROOT" -f "$COMPOSE_FILE" --profile tools config >"$WORK/resolved.yml" 2>/dev/null
  resolved="$WORK/resolved.yml"
  log "$(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /') config: valid ($(docker-compose --project-directory "$REPO_ROOT" -f "$COMPOSE_FILE" --profile tools config --services | tr '\n' ' '))"
else
  log "docker-compose is not installed (not root): skipping docker-compose config"
fi

# --- 3. HOOKSTREAM_* names against docs/configuration.md ---------------------------------
"$PY" - "$REPO_ROOT/docs/configuration.md" "$resolved" "$WORK/env.json" <<'PYEOF' || fail "docker-compose.yml sets HOOKSTREAM_* variables that are no configuration key"
import json, re, sys
from ruamel.yaml import YAML

doc, compose_file, out = sys.argv[1:4]
keys, prefixes, section = set(), set(), None
for line in open(doc, encoding="utf-8"):
    if line.startswith("#"):
        found = re.findall(r"`\[([a-z_]+)\]`", line)
        section = found[0] if len(found) == 1 else None
        continue
    m = re.match(r"\|\s*`([a-z_.<>]+)`\s*\|", line)
    if not m:
        continue
    key = m.group(1)
    if "." not in key:
        if section is None:
            continue  # per-endpoint fields (set with the CLI), not configuration
        key = f"{section}.{key}"
    if key.endswith(".<property>"):
        prefixes.add(key[: -len("<property>")])
    else:
        keys.add(key)
if len(keys) < 40:
    sys.exit(f"only {len(keys)} keys found in {doc}: has its table format changed?")

services = YAML(typ="safe").load(open(compose_file, encoding="utf-8"))["services"]
bad, envs = [], {}
for name, svc in services.items():
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    ours = {k: ("" if v is None else str(v)) for k, v in env.items() if k.startswith("HOOKSTREAM_") and "__" in k}
    for var in ours:
        key = ".".join(part.lower() for part in var[len("HOOKSTREAM_"):].split("__"))
        if key not in keys and not any(key.startswith(p) for p in prefixes):
            bad.append(f"  {name}: {var} (would be {key})")
    if ours:
        envs[name] = {"env": ours, "entrypoint": svc.get("entrypoint"), "image": svc.get("image")}
if bad:
    print("not a key in docs/configuration.md:\n" + "\n".join(sorted(set(bad))), file=sys.stderr)
    sys.exit(1)
json.dump(envs, open(out, "w"))
n = len({v for e in envs.values() for v in e["env"]})
print(f"[check/compose] {n} HOOKSTREAM_* variables over {len(envs)} services: every one a documented key ({len(keys)} known)")
PYEOF

# --- 4. Prometheus and Grafana files ----------------------------------------------------
PROMTOOL="$(command -v promtool || echo "$CACHE_DIR/bin/promtool")"
if [[ ! -x "$PROMTOOL" ]]; then
  log "fetching promtool from Debian's prometheus package into $PROMTOOL"
  (cd "$WORK" && apt-get download -q prometheus >/dev/null 2>&1 && dpkg-deb -x prometheus_*.deb deb) ||
    fail "could not fetch Debian's prometheus package for promtool (apt-get update first?)"
  mkdir -p "$(dirname "$PROMTOOL")"
  cp "$WORK/deb/usr/bin/promtool" "$PROMTOOL"
fi
"$PROMTOOL" check config "$REPO_ROOT/deploy/prometheus/prometheus.yml" >"$WORK/promtool.out" 2>&1 ||
  fail "promtool check config: $(cat "$WORK/promtool.out")"
log "promtool $("$PROMTOOL" --version 2>&1 | awk 'NR == 1 { print $3 }') check config deploy/prometheus/prometheus.yml: valid"
# One metrics port: the Dockerfile's EXPOSE, the services' telemetry.listen, Prometheus's.
"$PY" - "$REPO_ROOT" "$WORK/env.json" <<'PYEOF' || fail "the metrics port differs between the Dockerfile, docker-compose.yml and prometheus.yml"
import json, subprocess, sys
from ruamel.yaml import YAML
root, envs = sys.argv[1], json.load(open(sys.argv[2]))
spec = json.loads(subprocess.run([sys.executable, f"{root}/scripts/check/dockerfile_spec.py", f"{root}/Dockerfile"],
                                 capture_output=True, text=True, check=True).stdout)
ports = {"Dockerfile EXPOSE": set(spec["expose"])}
for name, svc in envs.items():
    if "HOOKSTREAM_TELEMETRY__LISTEN" in svc["env"]:
        ports.setdefault("compose telemetry.listen", set()).add(svc["env"]["HOOKSTREAM_TELEMETRY__LISTEN"].rsplit(":", 1)[1])
prom = YAML(typ="safe").load(open(f"{root}/deploy/prometheus/prometheus.yml"))
for job in prom["scrape_configs"]:
    if job["job_name"] in ("outbox-relay", "dispatcher", "api"):
        ports.setdefault("prometheus.yml", set()).update(str(d["port"]) for d in job["dns_sd_configs"])
if len(set().union(*ports.values())) != 1 or len(ports) != 3:
    sys.exit(f"metrics ports: {ports}")
print(f"[check/compose] metrics port {ports['Dockerfile EXPOSE'].pop()}: the same in the Dockerfile, docker-compose.yml and prometheus.yml")
PYEOF
"$PY" - "$REPO_ROOT/deploy/grafana/provisioning" <<'PYEOF' || fail "a Grafana provisioning file does not parse"
import pathlib, sys
from ruamel.yaml import YAML
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.yml"))
for f in files:
    doc = YAML(typ="safe").load(f.read_text())
    assert doc.get("apiVersion") == 1 and ("datasources" in doc or "providers" in doc), f"{f}: not a provisioning file"
print(f"[check/compose] grafana provisioning: {', '.join(str(f.relative_to(sys.argv[1])) for f in files)} parse")
PYEOF

# --- 5. the binaries load that environment -----------------------------------------------
target_dir="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
BIN_DIR="${HOOKSTREAM_IMAGE_BIN_DIR:-}"
if [[ -z "$BIN_DIR" ]]; then
  BIN_DIR="$target_dir/debug"
  [[ -x "$target_dir/release/dispatcher" && -x "$target_dir/release/outbox-relay" && -x "$target_dir/release/hookstream" ]] &&
    BIN_DIR="$target_dir/release"
fi
if [[ "$resolved" == "$COMPOSE_FILE" ]]; then
  log "skipping the binaries' check: it needs docker-compose's resolved environment"
elif [[ ! -x "$BIN_DIR/dispatcher" || ! -x "$BIN_DIR/outbox-relay" || ! -x "$BIN_DIR/hookstream" ]]; then
  log "skipping the binaries' check: no dispatcher, outbox-relay and hookstream in $BIN_DIR"
else
  default_entrypoint="$("$PY" "$REPO_ROOT/scripts/check/dockerfile_spec.py" "$REPO_ROOT/Dockerfile" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["entrypoint"][0])')"
  "$PY" - "$WORK/env.json" "$BIN_DIR" "$default_entrypoint" <<'PYEOF' || fail "a service's binary refused the environment docker-compose.yml gives it"
import json, os, subprocess, sys

envs, bin_dir, default_entrypoint = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
failed = False
for name, svc in sorted(envs.items()):
    binary = os.path.basename((svc["entrypoint"] or [default_entrypoint])[0])
    env = {"PATH": "/usr/bin:/bin", **svc["env"]}
    if binary == "hookstream":
        # Loads [database], [kafka], [retry], [secrets], [delivery] and exits without connecting.
        cmd, expect = [os.path.join(bin_dir, binary), "secrets", "generate-key"], (0, None)
    else:
        # An invalid log format stops the service at validation, after every key was accepted.
        env["HOOKSTREAM_TELEMETRY__LOG_FORMAT"] = "check-invalid"
        cmd, expect = [os.path.join(bin_dir, binary)], (2, "telemetry.log_format")
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        print(f"  {name}: {binary} did not stop at configuration within 20 s", file=sys.stderr)
        failed = True
        continue
    ok = p.returncode == expect[0] and (expect[1] is None or expect[1] in p.stderr)
    print(f"[check/compose]   {name}: {binary} {'accepts' if ok else 'REFUSES'} its {len(svc['env'])} variables"
          + ("" if ok else f" (exit {p.returncode}): {p.stderr.strip()}"), file=sys.stdout if ok else sys.stderr)
    failed |= not ok
sys.exit(1 if failed else 0)
PYEOF
fi

pass "$(basename "$COMPOSE_FILE") validated ($((SECONDS - started)) s); not run: no Docker engine here"
