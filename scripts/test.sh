#!/usr/bin/env bash
# `make test`: starts PostgreSQL and Kafka if needed (same scripts as `make up`), then runs
# every test of the workspace against them. Non-zero on any failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stack/lib.sh"

bash "$REPO_ROOT/scripts/setup/build-deps.sh"
bash "$REPO_ROOT/scripts/stack/infra.sh" start
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

log "running the test suite"
status=0
cargo test --workspace --all-targets --no-fail-fast "$@" || status=$?

# Monitoring (alert rules and their promtool tests, runbooks, dashboard) and deployment files,
# validated offline against the real loaders (the binaries just built).
wait "$tools_pid" || { tail -n 30 "$CHECK_LOG_DIR/tools.log" >&2; die "could not install the check tools, see $CHECK_LOG_DIR/tools.log"; }
for check in scripts/check/monitoring.sh scripts/check/helm.sh scripts/check/compose.sh scripts/check/image.sh; do
  log "check: $check"
  if ! HOOKSTREAM_BIN_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug" bash "$check" >"$CHECK_LOG_DIR/$(basename "$check" .sh).log" 2>&1; then
    tail -n 40 "$CHECK_LOG_DIR/$(basename "$check" .sh).log" >&2
    log "FAILED: $check (log: $CHECK_LOG_DIR/$(basename "$check" .sh).log)"
    status=1
  fi
done
exit "$status"
