# shellcheck shell=bash
# Shared helpers for scripts/stack/*.sh. Source it; set LOG_TAG first to label output.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE_DIR="${HOOKSTREAM_STATE_DIR:-$REPO_ROOT/.hookstream}"
# shellcheck disable=SC2034 # used by the sourcing scripts
CACHE_DIR="${HOOKSTREAM_CACHE_DIR:-$HOME/.cache/hookstream}"
LOG_DIR="$STATE_DIR/logs"
RUN_DIR="$STATE_DIR/run"
DATA_DIR="$STATE_DIR/data"
mkdir -p "$LOG_DIR" "$RUN_DIR" "$DATA_DIR"
# Absolute paths: they end up in config files and pid checks.
STATE_DIR="$(cd "$STATE_DIR" && pwd)"
LOG_DIR="$STATE_DIR/logs" RUN_DIR="$STATE_DIR/run" DATA_DIR="$STATE_DIR/data"

log() { echo "[stack${LOG_TAG:+/$LOG_TAG}] $*"; }
die() { echo "[stack${LOG_TAG:+/$LOG_TAG}] ERROR: $*" >&2; exit 1; }

# running PID: some thread of it is not yet dead. kill -0 alone is not enough: PID 1 here may
# never reap, leaving zombies; and a killed JVM's main thread turns Z while other threads (and
# its listening sockets) still linger.
running() {
  local t st
  kill -0 "$1" 2>/dev/null || return 1
  for t in /proc/"$1"/task/*/stat; do
    st="$(cat "$t" 2>/dev/null)" || continue
    st="${st##*) }"
    [[ "${st%% *}" == [ZX] ]] || return 0
  done
  return 1
}

# pid_alive PIDFILE: true if the file names a live process.
pid_alive() {
  local pid
  [[ -s "$1" ]] || return 1
  pid="$(<"$1")"
  [[ "$pid" =~ ^[0-9]+$ ]] && running "$pid"
}

# tcp_open HOST PORT: one connection attempt.
tcp_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# wait_for_tcp HOST PORT TIMEOUT_S NAME
wait_for_tcp() {
  local host="$1" port="$2" timeout_s="$3" name="$4" i
  for ((i = 0; i < timeout_s * 2; i++)); do
    tcp_open "$host" "$port" && return 0
    sleep 0.5
  done
  die "$name did not accept connections on $host:$port within ${timeout_s}s"
}

# stop_pidfile PIDFILE NAME [GRACE_S]: SIGTERM, wait, then SIGKILL. Only touches the recorded PID.
stop_pidfile() {
  local pidfile="$1" name="$2" grace="${3:-20}" pid i
  if ! pid_alive "$pidfile"; then
    log "$name not running"
    rm -f "$pidfile"
    return 0
  fi
  pid="$(<"$pidfile")"
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 2; i++)); do
    running "$pid" || break
    sleep 0.5
  done
  if running "$pid"; then
    log "$name still alive after ${grace}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do running "$pid" || break; sleep 0.2; done
  fi
  rm -f "$pidfile"
  log "$name stopped"
}

# apt_install PKG...: only as root (fresh CI machines); otherwise tell the user what is missing.
apt_install() {
  [[ $EUID -eq 0 ]] || die "missing $*; install it (apt-get install $*)"
  log "installing $* from apt"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}
