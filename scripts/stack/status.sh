#!/usr/bin/env bash
# `make status`: what runs, by PID file.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bash "$REPO_ROOT/scripts/stack/infra.sh" status
for name in outbox-relay dispatcher hookstream-api demo-receiver; do
  if pid_alive "$STATE_DIR/run/$name.pid"; then
    echo "$name: running (pid $(cat "$STATE_DIR/run/$name.pid"))"
  else
    echo "$name: stopped"
  fi
done
bash "$REPO_ROOT/scripts/stack/prometheus.sh" status
