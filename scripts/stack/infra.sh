#!/usr/bin/env bash
# Local infrastructure for Hookstream: PostgreSQL + Kafka.
# Usage: infra.sh start|stop|status   (env: HOOKSTREAM_STATE_DIR, HOOKSTREAM_CACHE_DIR,
#        HOOKSTREAM_PG_PORT, HOOKSTREAM_KAFKA_PORT, HOOKSTREAM_KAFKA_CONTROLLER_PORT)
set -euo pipefail
LOG_TAG=""
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$REPO_ROOT/scripts/stack"

# Runs "$1" on both services in parallel; fails if either fails (after both finished).
both() {
  local pg kafka rc=0
  "$HERE/postgres.sh" "$1" & pg=$!
  "$HERE/kafka.sh" "$1" & kafka=$!
  wait "$pg" || rc=1
  wait "$kafka" || rc=1
  return "$rc"
}

summary() {
  local rc=0
  "$HERE/postgres.sh" status || rc=1
  "$HERE/kafka.sh" status || rc=1
  return "$rc"
}

case "${1:-}" in
  start)
    both start || die "infra start failed (logs in $LOG_DIR)"
    summary
    ;;
  stop) both stop ;;
  # Informational (make status keeps going); postgres.sh/kafka.sh status exit 1 when stopped.
  status) summary || true ;;
  *) die "usage: $0 start|stop|status" ;;
esac
