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
# Every broker of the stack (HOOKSTREAM_KAFKA_BROKERS=3 starts three).
HOOKSTREAM_TEST_KAFKA_BROKERS="$(bash "$REPO_ROOT/scripts/stack/kafka.sh" bootstrap)"
export HOOKSTREAM_TEST_KAFKA_BROKERS

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
# The test runner (cargo-nextest, pinned, built once into ~/.cache/hookstream).
stage "test runner" bash scripts/setup/nextest.sh >"$LOG_DIR/nextest-path" || die "could not install cargo-nextest"
PATH="$(dirname "$(tail -n 1 "$LOG_DIR/nextest-path")"):$PATH"  # its last line (above it: the stage's)
# Built first, then run, so that the stage times tell compiling from testing. nextest builds
# with the same flags as `cargo test`, so the second command finds everything built.
stage "build the tests" cargo test --workspace --all-targets --no-run "$@" || status=$?
TEST_LOG="$LOG_DIR/cargo-test.log"
run_tests() {
  # Several test binaries at once, each test in its own process (.config/nextest.toml).
  cargo nextest run --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee "$TEST_LOG"
  return "${PIPESTATUS[0]}"
}
if [[ $status -eq 0 ]]; then
  stage "run the tests" run_tests "$@" || status=$?
  # Where the time goes: the slowest tests.
  echo "== slowest tests"
  grep -E '^ +(PASS|FAIL|SLOW|TIMEOUT|LEAK)' "$TEST_LOG" | sed -E 's/^ +[A-Z]+ +\[ *([0-9.]+)s\] +(\([ 0-9/]+\) +)?/\1 s  /' \
    | awk '!seen[$0]++' | sort -rn | head -n 12 || true
fi

# Monitoring (alert rules and their promtool tests, runbooks, dashboard) and deployment files,
# validated offline against the real loaders (the binaries just built).
stage "check tools (built meanwhile)" wait "$tools_pid" || { tail -n 30 "$CHECK_LOG_DIR/tools.log" >&2; die "could not install the check tools, see $CHECK_LOG_DIR/tools.log"; }
# Every path, file and module the docs name exists; every crate's modules form a stack; no
# file over 800 lines without saying why.
stage "check: doc names" python3 scripts/check/doc_names.py . README.md ARCHITECTURE.md CONTRIBUTING.md docs/*.md || status=1
stage "check: module order" python3 scripts/check/module_order.py . || status=1
stage "check: file size" python3 scripts/check/file_size.py . || status=1
for check in scripts/check/monitoring.sh scripts/check/helm.sh scripts/check/compose.sh scripts/check/image.sh; do
  if ! HOOKSTREAM_BIN_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug" stage "check: $(basename "$check" .sh)" bash "$check" >"$CHECK_LOG_DIR/$(basename "$check" .sh).log" 2>&1; then
    tail -n 40 "$CHECK_LOG_DIR/$(basename "$check" .sh).log" >&2
    log "FAILED: $check (log: $CHECK_LOG_DIR/$(basename "$check" .sh).log)"
    status=1
  fi
done
exit "$status"
