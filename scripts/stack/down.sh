#!/usr/bin/env bash
# `make down`: stops what `make up` started, by PID file only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for name in demo-receiver hookstream-api dispatcher outbox-relay; do
  if pid_alive "$STATE_DIR/run/$name.pid"; then stop_pidfile "$STATE_DIR/run/$name.pid" "$name"; fi
done
bash "$REPO_ROOT/scripts/stack/prometheus.sh" stop
bash "$REPO_ROOT/scripts/stack/infra.sh" stop
