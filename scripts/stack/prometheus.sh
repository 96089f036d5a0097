#!/usr/bin/env bash
# Prometheus for the local stack (Debian's `prometheus` package, installed by
# scripts/setup/build-deps.sh): scrapes the relay and the dispatcher `make up` starts and
# evaluates the alert rules of helm/hookstream/alerts/. Its config is rendered from
# deploy/prometheus/prometheus.yml, the one docker-compose uses (prometheus_config.py).
#
#   prometheus.sh start|stop|status
#
# HOOKSTREAM_PROMETHEUS_PORT (9090) picks the port; data in $STATE_DIR/data/prometheus.
set -euo pipefail
LOG_TAG=prometheus
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT="${HOOKSTREAM_PROMETHEUS_PORT:-9090}"
PIDFILE="$RUN_DIR/prometheus.pid"
CONF_DIR="$STATE_DIR/prometheus"
CONFIG="$CONF_DIR/prometheus.yml"

render() {
  mkdir -p "$CONF_DIR"
  python3 "$REPO_ROOT/scripts/stack/prometheus_config.py" "$REPO_ROOT/deploy/prometheus/prometheus.yml" \
    "$REPO_ROOT/helm/hookstream/alerts/*.yml" \
    "outbox-relay=127.0.0.1:9101" "dispatcher=127.0.0.1:9102" "api=127.0.0.1:9103" "prometheus=127.0.0.1:$PORT" >"$CONFIG.tmp"
  promtool check config "$CONFIG.tmp" >/dev/null || die "the rendered config $CONFIG.tmp does not pass promtool check config"
  mv "$CONFIG.tmp" "$CONFIG"
}

start() {
  command -v prometheus >/dev/null || die "prometheus is not installed (scripts/setup/build-deps.sh installs Debian's package)"
  render
  if pid_alive "$PIDFILE"; then
    # Pick up a changed config or rules without a restart.
    kill -HUP "$(<"$PIDFILE")"
    log "running on 127.0.0.1:$PORT (config reloaded)"
    return 0
  fi
  if tcp_open 127.0.0.1 "$PORT"; then die "port $PORT is taken by something else; set HOOKSTREAM_PROMETHEUS_PORT"; fi
  mkdir -p "$DATA_DIR/prometheus"
  nohup prometheus --config.file="$CONFIG" --storage.tsdb.path="$DATA_DIR/prometheus" \
    --storage.tsdb.retention.time=7d --web.listen-address="127.0.0.1:$PORT" \
    >>"$LOG_DIR/prometheus.log" 2>&1 &
  echo $! >"$PIDFILE"
  local i
  for ((i = 0; i < 60; i++)); do
    curl -fsS -o /dev/null "http://127.0.0.1:$PORT/-/ready" 2>/dev/null && { log "running on 127.0.0.1:$PORT"; return 0; }
    pid_alive "$PIDFILE" || break
    sleep 0.5
  done
  tail -n 20 "$LOG_DIR/prometheus.log" >&2
  die "prometheus did not become ready on 127.0.0.1:$PORT (log: $LOG_DIR/prometheus.log)"
}

case "${1:-}" in
  start) start ;;
  stop) stop_pidfile "$PIDFILE" prometheus ;;
  status)
    if pid_alive "$PIDFILE"; then echo "prometheus: running (pid $(<"$PIDFILE")) http://127.0.0.1:$PORT"; else echo "prometheus: stopped"; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
