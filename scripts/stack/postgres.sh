#!/usr/bin/env bash
# Project-local PostgreSQL cluster (separate from any distro cluster).
# TLS is on (plaintext keeps working): the server's certificate names IP 127.0.0.1 (not
# `localhost`) and is signed by a CA generated once per stack, in $DATA_DIR/postgres-tls
# (ca.pem), with a client certificate for the role hookstream_mtls, which may log in only
# over TLS with it. Members of the role hookstream_password_login must give their password
# (SCRAM); everyone else is trusted, as before. Tests use these to prove database TLS.
# Usage: postgres.sh start|stop [fast|immediate]|status
#   stop fast (the default) rolls back open transactions and shuts down cleanly; stop immediate
#   exits without a checkpoint, as a crash would, and the next start runs crash recovery
#   (failure tests: the load test's chaos scenario).
set -euo pipefail
LOG_TAG=postgres
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_PORT="${HOOKSTREAM_PG_PORT:-5432}"
PGDATA="$DATA_DIR/postgres"
SOCK_DIR="$RUN_DIR/pg-socket"
PG_LOG="$LOG_DIR/postgres.log"
PIDFILE="$RUN_DIR/postgres.pid"
URL="postgres://postgres@127.0.0.1:$PG_PORT/hookstream"
TLS_DIR="$DATA_DIR/postgres-tls"
MTLS_USER=hookstream_mtls
PASSWORD_GROUP=hookstream_password_login

# The server refuses to run as root, so when we are root everything touching the cluster runs
# as the postgres OS user; `cd /` because our cwd may be unreadable to it (e.g. under /root).
as_pg() {
  if [[ $EUID -eq 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

find_pgbin() {
  PGBIN=""
  local d
  for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V); do
    [[ -x "$d/initdb" ]] && PGBIN="$d"
  done
  [[ -n "$PGBIN" ]]
}

ensure_pgbin() {
  find_pgbin && return 0
  log "no initdb under /usr/lib/postgresql/*/bin"
  # Keep the distro from creating and starting its own 'main' cluster on 5432, which would
  # collide with ours. postgresql-common ships the config file, so install it first.
  apt_install postgresql-common
  sed -i 's/^#\?\s*create_main_cluster.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
  find_pgbin || die "apt installed postgresql but no initdb found under /usr/lib/postgresql/*/bin"
}

# The postgres user must be able to reach the data, socket and log dirs. If the repo lives under
# a private home (/root is 0700), grant traverse-only (o+x, no listing) on the blocking parents.
ensure_traversable() {
  [[ $EUID -eq 0 ]] || return 0
  local target d
  for target in "$DATA_DIR" "$RUN_DIR" "$LOG_DIR"; do
    as_pg test -x "$target" && continue
    d="$target"
    while [[ "$d" != / ]]; do
      if [[ "$(stat -c %A "$d")" != *[xt] ]]; then
        log "chmod o+x $d (so the postgres user can reach $STATE_DIR)"
        chmod o+x "$d"
      fi
      d="$(dirname "$d")"
    done
    as_pg test -x "$target" || die "postgres user still cannot reach $target; set HOOKSTREAM_STATE_DIR to a path it can reach"
  done
}

# PID of our postmaster if it is running, from the data dir's own lock file.
our_pid() {
  local pid
  pid="$(head -n1 "$PGDATA/postmaster.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && running "$pid" && echo "$pid"
}

# A CA, the server's certificate (IP 127.0.0.1 only, so that verify-full against `localhost`
# is a real host-name mismatch) and a client certificate for $MTLS_USER (cert auth matches
# its CN to the role), made once per stack. The server's key is the postgres user's, 0600
# (the server refuses a key others can read); keys are unencrypted (a loopback test stack).
make_tls() {
  [[ -s "$TLS_DIR/server.crt" && -s "$TLS_DIR/server.key" && -s "$TLS_DIR/client.key" ]] && return 0
  command -v openssl >/dev/null || apt_install openssl
  log "generating a CA and certificates in $TLS_DIR"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hookstream local PostgreSQL CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key 2>/dev/null
    openssl req -new -key server.key -subj "/CN=127.0.0.1" -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.crt 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out client.key 2>/dev/null
    openssl req -new -key client.key -subj "/CN=$MTLS_USER" -out client.csr 2>/dev/null
    # An X.509 v3 certificate (extensions make it one): rustls refuses v1 client certificates.
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out client.crt 2>/dev/null
    rm -f ./*.csr ./*.ext ./*.srl
  ) || die "could not generate certificates in $TLS_DIR"
  chmod 755 "$TLS_DIR"
  chmod 644 "$TLS_DIR"/*.pem "$TLS_DIR"/*.crt
  chmod 600 "$TLS_DIR"/*.key
  [[ $EUID -ne 0 ]] || chown postgres:postgres "$TLS_DIR/server.key" "$TLS_DIR/server.crt"
}

# The stack's own rules go first in pg_hba.conf (the first matching line decides), between
# markers, rewritten on every start; initdb's `trust` lines stay below for everyone else.
write_hba() {
  local hba="$PGDATA/pg_hba.conf" tmp
  tmp="$(mktemp)"
  cat >"$tmp" <<EOF
# BEGIN hookstream: written by scripts/stack/postgres.sh on every start; edits are overwritten.
# $MTLS_USER: only over TLS, with a client certificate signed by the stack's CA (CN = role).
hostssl all $MTLS_USER 127.0.0.1/32 cert
host    all $MTLS_USER all reject
local   all $MTLS_USER reject
# Members of $PASSWORD_GROUP give their password (tests of database.password_file).
host    all +$PASSWORD_GROUP 127.0.0.1/32 scram-sha-256
# END hookstream
EOF
  sed '/^# BEGIN hookstream/,/^# END hookstream/d' "$hba" >>"$tmp"
  cat "$tmp" >"$hba" # keeps the file's owner and mode
  rm -f "$tmp"
}

ensure_db() {
  local psql=("$PGBIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA)
  if [[ "$("${psql[@]}" -c "select 1 from pg_database where datname = 'hookstream'")" != 1 ]]; then
    "${psql[@]}" -c "create database hookstream" >/dev/null
    log "created database hookstream"
  fi
  "${psql[@]}" >/dev/null <<EOF
SELECT 'CREATE ROLE $MTLS_USER LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$MTLS_USER') \\gexec
SELECT 'CREATE ROLE $PASSWORD_GROUP NOLOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PASSWORD_GROUP') \\gexec
EOF
}

write_conf() {
  local sock="$SOCK_DIR"
  # Unix socket paths are limited to 107 bytes; with a deep state dir fall back to TCP only.
  ((${#SOCK_DIR} + 20 < 107)) || { sock=""; log "state dir path too long for a unix socket, TCP only"; }
  cat >"$PGDATA/hookstream.conf" <<EOF
# Generated by scripts/stack/postgres.sh on every start; edits are overwritten.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
max_connections = 400
shared_buffers = 256MB
# pg_ctl -l captures stderr into $PG_LOG
logging_collector = off
log_destination = 'stderr'
# TLS beside plaintext; the CA also verifies client certificates (pg_hba.conf's cert lines).
ssl = on
ssl_cert_file = '$TLS_DIR/server.crt'
ssl_key_file = '$TLS_DIR/server.key'
ssl_ca_file = '$TLS_DIR/ca.pem'
EOF
  [[ $EUID -ne 0 ]] || chown postgres:postgres "$PGDATA/hookstream.conf"
}

start() {
  ensure_pgbin
  local pid port
  if pid="$(our_pid)"; then
    port="$(sed -n 4p "$PGDATA/postmaster.pid")"
    [[ "$port" == "$PG_PORT" ]] || die "our cluster is already running on port $port, not $PG_PORT; stop it first"
    echo "$pid" >"$PIDFILE"
    log "already running (pid $pid) at $URL"
    ensure_db
    [[ "$("$PGBIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -qtAc 'show ssl')" == on ]] ||
      log "WARNING: no TLS (a cluster started by an older postgres.sh): restart it with 'bash scripts/stack/postgres.sh stop' then start"
    return 0
  fi
  if tcp_open 127.0.0.1 "$PG_PORT"; then
    die "port $PG_PORT on 127.0.0.1 is in use by something that is not our cluster ($PGDATA); stop it or set HOOKSTREAM_PG_PORT to another port"
  fi

  ensure_traversable
  mkdir -p "$SOCK_DIR"
  touch "$PG_LOG"
  [[ $EUID -ne 0 ]] || chown postgres:postgres "$SOCK_DIR" "$PG_LOG"

  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    log "initdb $PGDATA ($("$PGBIN/initdb" --version))"
    rm -rf "$PGDATA" # a half-initialised dir from an interrupted run; initdb needs it empty
    mkdir -p "$PGDATA"
    [[ $EUID -ne 0 ]] || chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres -E UTF8 --locale=C --auth=trust >>"$LOG_DIR/initdb.log" 2>&1 ||
      die "initdb failed, see $LOG_DIR/initdb.log"
    echo "include = 'hookstream.conf'" >>"$PGDATA/postgresql.conf"
  fi
  make_tls
  write_conf
  write_hba

  log "starting on 127.0.0.1:$PG_PORT (log: $PG_LOG)"
  if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t 60 start >/dev/null; then
    tail -n 20 "$PG_LOG" >&2
    die "postgres failed to start, see $PG_LOG"
  fi
  pid="$(our_pid)" || die "pg_ctl reported success but no postmaster is running"
  echo "$pid" >"$PIDFILE"
  ensure_db
  log "running (pid $pid) at $URL"
}

stop() {
  local mode="${1:-fast}"
  [[ "$mode" == fast || "$mode" == immediate ]] || die "stop mode must be fast or immediate, not $mode"
  if ! our_pid >/dev/null; then
    log "not running"
    rm -f "$PIDFILE"
    return 0
  fi
  find_pgbin || die "postgres is running but no pg_ctl found"
  log "stopping (pg_ctl stop -m $mode)"
  if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA" stop -m "$mode" -w -t 30 >/dev/null; then
    stop_pidfile "$PIDFILE" postgres
  fi
  rm -f "$PIDFILE"
  log "stopped"
}

status() {
  local pid
  if pid="$(our_pid)"; then
    log "running (pid $pid) at $URL"
  else
    log "stopped ($URL)"
    return 1
  fi
}

case "${1:-}" in
  start | status) "$1" ;;
  stop) stop "${2:-fast}" ;;
  *) die "usage: $0 start|stop [fast|immediate]|status" ;;
esac
