#!/usr/bin/env bash
# Apache Kafka (KRaft, every node broker+controller) from Maven Central jars, no Docker.
# One node by default; HOOKSTREAM_KAFKA_BROKERS=3 starts three, a quorum of three controllers,
# with replication factor 3 and min.insync.replicas=2 for every topic the cluster creates
# (Hookstream's producers already use acks=all and idempotence), small heaps for a 2-core
# machine. A cluster is started with one size and keeps it: `stop` and `status` act on the
# size that runs, and `start` with another size refuses until it is stopped.
# Node 1's listeners on 127.0.0.1: PLAINTEXT ($HOOKSTREAM_KAFKA_PORT, 9092), the controller
# ($HOOKSTREAM_KAFKA_CONTROLLER_PORT, 9093), SASL_SSL with SCRAM-SHA-256/512 and PLAIN (port + 2,
# user `hookstream`, password in $DATA_DIR/kafka/tls/sasl-password), and SSL with client
# certificates required (port + 3). Node i > 1 takes the same four at port + 100(i-1) + 0..3
# (9192..9195, 9292..9295). Certificates come from a CA generated for this stack (in
# $DATA_DIR/kafka/tls, shared by every node): what tests and `make up` use to prove the
# secured connections.
# With HOOKSTREAM_KAFKA_AUTHORIZER=1 the broker checks ACLs (KRaft's StandardAuthorizer; a
# resource without ACLs stays open to all, and the plaintext listener's ANONYMOUS is a super
# user), for tests that refuse a client a topic; `kafka.sh acl ARGS` runs kafka-acls against it.
# The setting is written on every start: a broker started again without it keeps its ACLs but
# no longer checks them.
# Usage: kafka.sh start [NODE] | stop [NODE] | kill9 [NODE] | status | bootstrap | acl ARGS
#   NODE (1..N) acts on one node of a cluster (the fault tests); bootstrap prints the
#   clients' broker list.
set -euo pipefail
LOG_TAG=kafka
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE_PORT="${HOOKSTREAM_KAFKA_PORT:-9092}"
BASE_CONTROLLER_PORT="${HOOKSTREAM_KAFKA_CONTROLLER_PORT:-9093}"
POM="$REPO_ROOT/scripts/kafka/pom.xml"
LOG4J_CONF="$REPO_ROOT/scripts/kafka/log4j2.properties"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"
TLS_DIR="$DATA_DIR/kafka/tls"
SASL_USER=hookstream
# The size that runs (written by start, removed when the last node stops), else the asked one.
SIZE_FILE="$RUN_DIR/kafka.brokers"
ASKED="${HOOKSTREAM_KAFKA_BROKERS:-}"
[[ -z "$ASKED" || "$ASKED" =~ ^[1-9]$ ]] || die "HOOKSTREAM_KAFKA_BROKERS must be 1 to 9, not '$ASKED'"
RUNNING_SIZE="$(cat "$SIZE_FILE" 2>/dev/null || true)"
BROKERS="${ASKED:-${RUNNING_SIZE:-1}}"
# Replication: 3 copies, 2 of them in sync for a write to be acknowledged (one node may be
# lost); fewer nodes, all of them.
if ((BROKERS >= 3)); then RF=3 MIN_ISR=2; else RF=$BROKERS MIN_ISR=1; fi
# One node keeps the layout it always had ($DATA_DIR/kafka, logs/kafka*.log); a cluster of N
# lives in $DATA_DIR/kafka-N (node-I/ each) with logs in $LOG_DIR/kafka-node-I/.
if ((BROKERS == 1)); then CLUSTER_DATA="$DATA_DIR/kafka"; else CLUSTER_DATA="$DATA_DIR/kafka-$BROKERS"; fi

# node_vars I: the ports, files and directories of node I.
node_vars() {
  NODE="$1"
  local offset=$((100 * (NODE - 1)))
  KAFKA_PORT=$((BASE_PORT + offset))
  if ((NODE == 1)); then
    CONTROLLER_PORT="$BASE_CONTROLLER_PORT"
    SASL_PORT="${HOOKSTREAM_KAFKA_SASL_PORT:-$((BASE_PORT + 2))}"
    MTLS_PORT="${HOOKSTREAM_KAFKA_MTLS_PORT:-$((BASE_PORT + 3))}"
  else
    CONTROLLER_PORT=$((BASE_PORT + offset + 1))
    SASL_PORT=$((BASE_PORT + offset + 2))
    MTLS_PORT=$((BASE_PORT + offset + 3))
  fi
  if ((BROKERS == 1)); then
    KAFKA_DATA="$CLUSTER_DATA"
    PIDFILE="$RUN_DIR/kafka.pid"
    NODE_LOG_DIR="$LOG_DIR"
    STDOUT_LOG="$LOG_DIR/kafka.log"
  else
    KAFKA_DATA="$CLUSTER_DATA/node-$NODE"
    PIDFILE="$RUN_DIR/kafka-node-$NODE.pid"
    NODE_LOG_DIR="$LOG_DIR/kafka-node-$NODE"
    STDOUT_LOG="$NODE_LOG_DIR/kafka.log"
  fi
  mkdir -p "$NODE_LOG_DIR"
  SERVER_PROPS="$KAFKA_DATA/server.properties"
  SERVER_LOG="$NODE_LOG_DIR/kafka-server.log" # written by log4j, see scripts/kafka/log4j2.properties
  JAVA_OPTS=(-Djava.awt.headless=true "-Dkafka.logs.dir=$NODE_LOG_DIR" "-Dlog4j2.configurationFile=$LOG4J_CONF")
}

# The clients' broker list: every node's plaintext listener.
bootstrap() {
  local i list=()
  for ((i = 1; i <= BROKERS; i++)); do list+=("127.0.0.1:$((BASE_PORT + 100 * (i - 1)))"); done
  (IFS=,; echo "${list[*]}")
}

# The controller quorum: every node.
voters() {
  local i list=()
  for ((i = 1; i <= BROKERS; i++)); do
    if ((i == 1)); then list+=("1@127.0.0.1:$BASE_CONTROLLER_PORT"); else list+=("$i@127.0.0.1:$((BASE_PORT + 100 * (i - 1) + 1))"); fi
  done
  (IFS=,; echo "${list[*]}")
}
READY_LINE="Kafka Server started"
# A broker with thousands of partitions (a long-lived dev stack) on a busy machine can take
# minutes to load them; a fresh one starts in seconds.
READY_TIMEOUT="${HOOKSTREAM_KAFKA_READY_TIMEOUT:-240}"

node_vars 1

# The marker stores the pom's hash, so editing the pom refetches; otherwise no network at all.
fetch_jars() {
  local want
  want="$(sha256sum "$POM" | cut -d' ' -f1)"
  [[ "$(cat "$KAFKA_HOME/.complete" 2>/dev/null)" == "$want" ]] && return 0
  command -v mvn >/dev/null || apt_install maven
  log "fetching Kafka $KAFKA_VERSION jars via Maven into $LIBS"
  rm -rf "$LIBS"
  mkdir -p "$LIBS"
  mvn -B -q -f "$POM" dependency:copy-dependencies "-DoutputDirectory=$LIBS" -DincludeScope=runtime \
    >"$LOG_DIR/kafka-fetch.log" 2>&1 || { tail -n 30 "$LOG_DIR/kafka-fetch.log" >&2; die "maven fetch failed, see $LOG_DIR/kafka-fetch.log"; }
  echo "$want" >"$KAFKA_HOME/.complete"
}

# A CA, the broker's certificate (for 127.0.0.1 and localhost) and a client certificate, made
# once per stack. Kafka reads PEM files; keys are unencrypted PKCS#8 (a loopback test stack).
make_tls() {
  [[ -s "$TLS_DIR/broker.pem" && -s "$TLS_DIR/client.key" && -s "$TLS_DIR/sasl-password" ]] && return 0
  command -v openssl >/dev/null || apt_install openssl
  log "generating a CA and certificates in $TLS_DIR"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hookstream local CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    for who in broker client; do
      openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$who.key" 2>/dev/null
      openssl req -new -key "$who.key" -subj "/CN=$who" -out "$who.csr" 2>/dev/null
    done
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.crt 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -out client.crt 2>/dev/null
    cat broker.key broker.crt ca.pem >broker.pem
    openssl rand -hex 16 >sasl-password
    rm -f ./*.csr ./*.ext ./*.srl
  ) || die "could not generate certificates in $TLS_DIR"
  chmod 600 "$TLS_DIR"/*.key "$TLS_DIR/broker.pem" "$TLS_DIR/sasl-password"
}

write_server_props() {
  mkdir -p "$KAFKA_DATA/logs"
  local password
  password="$(<"$TLS_DIR/sasl-password")"
  cat >"$SERVER_PROPS" <<PROPS
# Generated by scripts/stack/kafka.sh on every start; edits are overwritten.
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$(voters)
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_SSL://127.0.0.1:$SASL_PORT,SSL://127.0.0.1:$MTLS_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$SASL_PORT,SSL://127.0.0.1:$MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$password";
log.dirs=$KAFKA_DATA/logs
num.partitions=6
default.replication.factor=$RF
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$RF
transaction.state.log.replication.factor=$RF
transaction.state.log.min.isr=$MIN_ISR
share.coordinator.state.topic.replication.factor=$RF
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=24
PROPS
  if ((BROKERS > 1)); then
    # A restarted node takes back the partitions it led within seconds, not the default 5
    # minutes, so a kill-and-restart ends with the leaders where they were.
    cat >>"$SERVER_PROPS" <<PROPS
leader.imbalance.check.interval.seconds=10
unclean.leader.election.enable=false
PROPS
  fi
  if [[ "${HOOKSTREAM_KAFKA_AUTHORIZER:-}" == 1 ]]; then
    cat >>"$SERVER_PROPS" <<PROPS
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=true
PROPS
  fi
}

# PID from the current node's pid file, only if that process really is a Kafka using its
# server.properties (guards against a recycled PID).
our_pid() {
  local pid
  pid_alive "$PIDFILE" || return 1
  pid="$(<"$PIDFILE")"
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $SERVER_PROPS" || return 1
  echo "$pid"
}

# Waits for the current node's ready line in the part of its server log after byte offset $2.
wait_ready() {
  local pid="$1" offset="$2" i
  for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
    if ! running "$pid"; then
      tail -n 30 "$STDOUT_LOG" "$SERVER_LOG" >&2 || true
      die "kafka node $NODE exited during startup, see $STDOUT_LOG and $SERVER_LOG"
    fi
    # Not `tail | grep -q`: grep leaves at the first match and, under pipefail, tail's SIGPIPE
    # would fail the test once the log after the offset outgrows the pipe (a broker with many
    # partitions logs megabytes at start).
    if grep -qF "$READY_LINE" <(tail -c "+$((offset + 1))" "$SERVER_LOG" 2>/dev/null) && tcp_open 127.0.0.1 "$KAFKA_PORT"; then
      return 0
    fi
    sleep 0.5
  done
  tail -n 30 "$SERVER_LOG" >&2 || true
  die "kafka node $NODE did not log '$READY_LINE' within ${READY_TIMEOUT}s (pid $pid still running), see $SERVER_LOG"
}

# The heap of one node: 512 MB to 1 GB alone; 256 to 768 MB each in a cluster (three fit
# beside the services on a 2-core, 24 GB machine).
heap_opts() {
  if ((BROKERS == 1)); then echo "-Xms512m -Xmx1g"; else echo "-Xms256m -Xmx768m"; fi
}

# Formats the current node's storage once, with the cluster's id (one id for every node).
format_node() {
  [[ -f "$KAFKA_DATA/logs/meta.properties" ]] && return 0
  local id_file="$CLUSTER_DATA/cluster.id" cluster_id
  mkdir -p "$CLUSTER_DATA"
  if [[ ! -s "$id_file" ]]; then
    java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool random-uuid >"$id_file"
  fi
  cluster_id="$(<"$id_file")"
  log "formatting node $NODE's storage (cluster id $cluster_id)"
  # Static quorum (controller.quorum.voters): 4.x rejects --standalone in that case.
  java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
    -t "$cluster_id" -c "$SERVER_PROPS" >>"$STDOUT_LOG" 2>&1 ||
    die "kafka storage format of node $NODE failed, see $STDOUT_LOG"
}

# Launches the current node unless it runs; sets LAUNCHED to "PID OFFSET" of a launched one
# (the server log's size before), to "" for one that already ran.
launch_node() {
  local pid i
  LAUNCHED=""
  if pid="$(our_pid)"; then
    log "node $NODE already running (pid $pid) at 127.0.0.1:$KAFKA_PORT"
    return 0
  fi
  rm -f "$PIDFILE"
  local port
  for port in "$KAFKA_PORT" "$CONTROLLER_PORT" "$SASL_PORT" "$MTLS_PORT"; do
    tcp_open 127.0.0.1 "$port" &&
      die "port $port on 127.0.0.1 (node $NODE) is in use by something that is not our Kafka; stop it or set HOOKSTREAM_KAFKA_PORT (and HOOKSTREAM_KAFKA_CONTROLLER_PORT, _SASL_PORT, _MTLS_PORT)"
  done
  write_server_props
  format_node
  log "starting node $NODE on 127.0.0.1:$KAFKA_PORT (controller 127.0.0.1:$CONTROLLER_PORT, log: $SERVER_LOG)"
  local offset
  offset="$(stat -c %s "$SERVER_LOG" 2>/dev/null || echo 0)"
  # setsid: own session, so Ctrl-C / process-group kills aimed at the caller don't reach the
  # broker. The inner bash records its own PID and then execs java, so the PID is java's.
  # shellcheck disable=SC2016,SC2046
  setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
    java $(heap_opts) -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "${JAVA_OPTS[@]}" \
    -cp "$LIBS/*" kafka.Kafka "$SERVER_PROPS" >>"$STDOUT_LOG" 2>&1 </dev/null &
  for ((i = 0; i < 50; i++)); do [[ -s "$PIDFILE" ]] && break; sleep 0.1; done
  pid_alive "$PIDFILE" || die "kafka node $NODE did not start, see $STDOUT_LOG"
  LAUNCHED="$(<"$PIDFILE") $offset"
}

# start [NODE]: every node (launched together: a controller quorum needs a majority before
# any node is ready), or the one named.
start() {
  if [[ -n "$RUNNING_SIZE" && "$RUNNING_SIZE" != "$BROKERS" ]] && any_running; then
    die "a $RUNNING_SIZE-broker Kafka runs here; stop it first (bash scripts/stack/kafka.sh stop) to start $BROKERS"
  fi
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  fetch_jars
  make_tls
  echo "$BROKERS" >"$SIZE_FILE"
  local nodes i launched=() pid offset
  read -ra nodes <<<"$(node_list "${1:-}")"
  for i in "${nodes[@]}"; do
    node_vars "$i"
    launch_node
    launched+=("$i $LAUNCHED")
  done
  for entry in "${launched[@]}"; do
    read -r i pid offset <<<"$entry"
    node_vars "$i"
    if [[ "$pid" =~ ^[0-9]+$ ]]; then
      wait_ready "$pid" "$offset"
      log "node $i running (pid $pid) at 127.0.0.1:$KAFKA_PORT (SASL_SSL 127.0.0.1:$SASL_PORT, mTLS 127.0.0.1:$MTLS_PORT)"
    else
      tcp_open 127.0.0.1 "$KAFKA_PORT" || wait_for_tcp 127.0.0.1 "$KAFKA_PORT" "$READY_TIMEOUT" "kafka node $i"
      tcp_open 127.0.0.1 "$SASL_PORT" ||
        log "WARNING: no SASL_SSL listener on $SASL_PORT (a broker started by an older kafka.sh): restart it with 'bash scripts/stack/kafka.sh stop' then start"
    fi
  done
  node_vars 1
  add_scram_user
  ((BROKERS == 1)) || log "cluster of $BROKERS at $(bootstrap) (replication factor $RF, min.insync.replicas $MIN_ISR)"
}

# node_list [NODE]: the nodes a command acts on.
node_list() {
  if [[ -z "$1" ]]; then
    seq -s ' ' 1 "$BROKERS"
  elif [[ "$1" =~ ^[1-9]$ ]] && (($1 <= BROKERS)); then
    echo "$1"
  else
    die "no node '$1' in a $BROKERS-broker Kafka"
  fi
}

any_running() {
  local i
  for ((i = 1; i <= BROKERS; i++)); do
    node_vars "$i"
    our_pid >/dev/null && return 0
  done
  return 1
}

# SCRAM credentials live in the cluster's metadata: set once per cluster.
add_scram_user() {
  local marker="$CLUSTER_DATA/.scram-user" password
  password="$(<"$TLS_DIR/sasl-password")"
  [[ "$(cat "$marker" 2>/dev/null)" == "$password" ]] && return 0
  local mechanism
  # One mechanism per request: the broker refuses two changes of one user in a request.
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
    java "${JAVA_OPTS[@]}" -cp "$LIBS/*" org.apache.kafka.tools.ConfigCommand --bootstrap-server "$(bootstrap)" \
      --alter --entity-type users --entity-name "$SASL_USER" \
      --add-config "$mechanism=[password=$password]" >>"$STDOUT_LOG" 2>&1 ||
      die "could not create the $mechanism user $SASL_USER, see $STDOUT_LOG"
  done
  echo "$password" >"$marker"
}

# stop [NODE]: a clean shutdown (SIGTERM) of the node named, or of every node at once (one
# after another, the last ones would wait for a quorum that is gone).
stop() {
  local nodes i waits=()
  read -ra nodes <<<"$(node_list "${1:-}")"
  for i in "${nodes[@]}"; do
    node_vars "$i"
    if our_pid >/dev/null; then
      stop_pidfile "$PIDFILE" "kafka node $i" 30 &
      waits+=($!)
    else
      log "node $i not running"
      rm -f "$PIDFILE"
    fi
  done
  for i in "${waits[@]}"; do wait "$i"; done
  any_running || rm -f "$SIZE_FILE"
}

# kill9 [NODE]: a hard crash, for failure tests; the next start recovers the KRaft log.
kill9() {
  local nodes i pid j
  read -ra nodes <<<"$(node_list "${1:-}")"
  for i in "${nodes[@]}"; do
    node_vars "$i"
    if ! pid="$(our_pid)"; then
      log "node $i not running"
      continue
    fi
    log "SIGKILL node $i (pid $pid)"
    kill -KILL "$pid"
    for ((j = 0; j < 50; j++)); do running "$pid" || break; sleep 0.1; done
    rm -f "$PIDFILE"
  done
}

# status: every node; fails unless all run.
status() {
  local i pid rc=0
  for ((i = 1; i <= BROKERS; i++)); do
    node_vars "$i"
    if pid="$(our_pid)"; then
      log "node $i running (pid $pid) at 127.0.0.1:$KAFKA_PORT"
    else
      log "node $i stopped (127.0.0.1:$KAFKA_PORT)"
      rc=1
    fi
  done
  return "$rc"
}

# kafka-acls (AclCommand) on the plaintext listeners, e.g.
# `acl --add --deny-principal User:hookstream --operation All --topic T`.
acl() {
  any_running || die "not running"
  node_vars 1
  java "${JAVA_OPTS[@]}" -cp "$LIBS/*" org.apache.kafka.tools.AclCommand --bootstrap-server "$(bootstrap)" "$@" ||
    die "kafka-acls $* failed"
}

case "${1:-}" in
  start | stop | kill9) "$1" "${2:-}" ;;
  status) status ;;
  bootstrap) bootstrap ;;
  acl) shift && acl "$@" ;;
  *) die "usage: $0 start [NODE] | stop [NODE] | kill9 [NODE] | status | bootstrap | acl ARGS" ;;
esac
