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

cd "$REPO_ROOT"
log "running the test suite"
cargo test --workspace --all-targets --no-fail-fast "$@"
