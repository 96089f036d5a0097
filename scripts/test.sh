#!/usr/bin/env bash
# `make test`: starts PostgreSQL and Kafka if needed (same scripts as `make up`), then runs
# every test of the workspace against them. Non-zero on any failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stack/lib.sh"
source "$REPO_ROOT/scripts/lib/stages.sh"
trap stage_summary EXIT

stage "build dependencies" bash "$REPO_ROOT/scripts/setup/build-deps.sh"
stage "postgres and kafka" bash "$REPO_ROOT/scripts/stack/infra.sh" start
export HOOKSTREAM_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:${HOOKSTREAM_PG_PORT:-5432}/postgres"
export HOOKSTREAM_TEST_KAFKA_BROKERS="127.0.0.1:${HOOKSTREAM_KAFKA_PORT:-9092}"

# Databases left by earlier test runs (each test makes its own).
psql -qAt "$HOOKSTREAM_TEST_DATABASE_URL" -c \
  "SELECT 'DROP DATABASE ' || quote_ident(datname) || ';' FROM pg_database WHERE datname LIKE 'hs\_test\_%'" \
  | psql -q "$HOOKSTREAM_TEST_DATABASE_URL" >/dev/null || true
# Login roles tests made for themselves (after their databases, which may hold their objects).
psql -qAt "$HOOKSTREAM_TEST_DATABASE_URL" -c \
  "SELECT 'DROP ROLE ' || quote_ident(rolname) || ';' FROM pg_roles WHERE rolname LIKE 'hs\_test\_%'" \
  | psql -q "$HOOKSTREAM_TEST_DATABASE_URL" >/dev/null || true

export HOOKSTREAM_TEST_KAFKA_TLS_DIR="$DATA_DIR/kafka/tls"
export HOOKSTREAM_TEST_PG_TLS_DIR="$DATA_DIR/postgres-tls"

cd "$REPO_ROOT"
# The deployment checks' tools (helm takes minutes to build the first time) build meanwhile.
CHECK_LOG_DIR="$LOG_DIR/checks"
mkdir -p "$CHECK_LOG_DIR"
bash scripts/check/tools.sh >"$CHECK_LOG_DIR/tools.log" 2>&1 &
tools_pid=$!

status=0
# Built first, then run, so that the stage times tell compiling from testing.
stage "build the tests" cargo test --workspace --all-targets --no-run "$@" || status=$?
TEST_LOG="$LOG_DIR/cargo-test.log"
run_tests() {
  cargo test --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee "$TEST_LOG"
  return "${PIPESTATUS[0]}"
}
if [[ $status -eq 0 ]]; then
  stage "run the tests" run_tests "$@" || status=$?
  # Where the time goes: the slowest test binaries (cargo runs them one after another).
  echo "== slowest test binaries"
  awk '/^     Running /{ bin = $NF; gsub(/[()]/, "", bin); sub(/.*\/deps\//, "", bin) } /^test result:/{ for (i = 1; i <= NF; i++) if ($i == "in") { t = $(i + 1); sub(/s$/, "", t); printf "%8.1f s  %s\n", t, bin } }' \
    "$TEST_LOG" | sort -rn | head -n 12 || true
fi

# Monitoring (alert rules and their promtool tests, runbooks, dashboard) and deployment files,
# validated offline against the real loaders (the binaries just built).
stage "check tools (built meanwhile)" wait "$tools_pid" || { tail -n 30 "$CHECK_LOG_DIR/tools.log" >&2; die "could not install the check tools, see $CHECK_LOG_DIR/tools.log"; }
for check in scripts/check/monitoring.sh scripts/check/helm.sh scripts/check/compose.sh scripts/check/image.sh; do
  if ! HOOKSTREAM_BIN_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug" stage "check: $(basename "$check" .sh)" bash "$check" >"$CHECK_LOG_DIR/$(basename "$check" .sh).log" 2>&1; then
    tail -n 40 "$CHECK_LOG_DIR/$(basename "$check" .sh).log" >&2
    log "FAILED: $check (log: $CHECK_LOG_DIR/$(basename "$check" .sh).log)"
    status=1
  fi
done
exit "$status"
