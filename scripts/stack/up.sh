#!/usr/bin/env bash
# `make up`: PostgreSQL and Kafka, the services, and a demo delivery with verified signatures.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug"
HS="$BIN/hookstream"
DEMO_PORT="${HOOKSTREAM_DEMO_PORT:-9000}"
started_at=$(date +%s)

wait_for_http() { # url timeout name
  local deadline=$(( $(date +%s) + $2 ))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    if (( $(date +%s) > deadline )); then die "$3 did not become ready at $1 (logs: $STATE_DIR/logs/$3.log)"; fi
    sleep 0.3
  done
}

bash "$REPO_ROOT/scripts/setup/build-deps.sh"

log "1/7 starting PostgreSQL and Kafka"
bash "$REPO_ROOT/scripts/stack/infra.sh" start
# The stack's ports (HOOKSTREAM_PG_PORT, HOOKSTREAM_KAFKA_PORT) for every service and command
# below: the environment overrides config/local/*.toml, which name the default ports.
export HOOKSTREAM_DATABASE__URL="postgres://postgres@127.0.0.1:${HOOKSTREAM_PG_PORT:-5432}/hookstream"
export HOOKSTREAM_KAFKA__BROKERS="$(bash "$REPO_ROOT/scripts/stack/kafka.sh" bootstrap)"
# HOOKSTREAM_KAFKA_BROKERS=3: three brokers, and every topic with three copies, two in sync
# for an acknowledged write (the cluster's own defaults too; said here as a deployment would).
if (( ${HOOKSTREAM_KAFKA_BROKERS:-1} >= 3 )); then
  export HOOKSTREAM_KAFKA__TOPIC_SETTINGS__REPLICATION_FACTOR=3 HOOKSTREAM_KAFKA__TOPIC_SETTINGS__MIN_INSYNC_REPLICAS=2
fi

log "2/7 building the services (cargo build --bins: a first build compiles librdkafka and hundreds of crates, 15-20 minutes on 2 cores; later ones take seconds)"
(cd "$REPO_ROOT" && cargo build --bins)

# The key that seals endpoint secrets at rest. This one is for the local stack only; a
# deployment sets HOOKSTREAM_SECRETS__KEY (or __KEY_FILE) from its secret store.
key_file="$STATE_DIR/secrets.key"
if [[ ! -s "$key_file" ]]; then (umask 077; "$HS" secrets generate-key --id local >"$key_file"); fi
export HOOKSTREAM_SECRETS__KEY_FILE="$key_file"

log "3/7 migrating the database and creating topics"
"$HS" migrate
"$HS" topics create --partitions 6

log "4/7 starting outbox-relay, dispatcher and the admin API"
start_service() {
  local name=$1
  local pidfile="$STATE_DIR/run/$name.pid"
  if pid_alive "$pidfile"; then stop_pidfile "$pidfile" "$name"; fi
  nohup "$BIN/$name" --config "$REPO_ROOT/config/local/$name.toml" >>"$STATE_DIR/logs/$name.log" 2>&1 &
  echo $! >"$pidfile"
}
start_service outbox-relay
start_service dispatcher
wait_for_http "http://127.0.0.1:9101/readyz" 30 outbox-relay
wait_for_http "http://127.0.0.1:9102/readyz" 30 dispatcher

# The admin API (Svix-compatible) on 127.0.0.1:8080, with an operator token of the local stack
# (only its SHA-256 is in the API's configuration).
api_token_file="$STATE_DIR/api-operator.token"
if [[ ! -s "$api_token_file" ]]; then (umask 077; head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$api_token_file"); fi
HOOKSTREAM_API__OPERATOR_TOKEN_HASHES="[\"$("$HS" api-key hash-token <"$api_token_file")\"]" start_service hookstream-api
wait_for_http "http://127.0.0.1:8080/api/v1/health" 30 hookstream-api

log "5/7 starting Prometheus (scrapes the three services, evaluates the alert rules)"
bash "$REPO_ROOT/scripts/stack/prometheus.sh" start

log "6/7 demo tenant, endpoint and receiver on 127.0.0.1:$DEMO_PORT"
"$HS" tenant create demo >/dev/null 2>&1 || true
demo_env="$STATE_DIR/demo.env"
endpoint_id=""; secret=""
if [[ -f "$demo_env" ]]; then source "$demo_env"; fi
if [[ -z "$endpoint_id" ]] || ! "$HS" endpoint list --tenant demo | grep -q "^$endpoint_id .*enabled"; then
  # The dispatcher's config: its SSRF allow-list lets the demo endpoint be on loopback (endpoint
  # creation refuses IP literals in refused ranges, as the dispatcher would at connect time).
  created=$("$HS" --config "$REPO_ROOT/config/local/dispatcher.toml" endpoint create --tenant demo --url "http://127.0.0.1:$DEMO_PORT/webhooks" --event-types 'order.*,user.created' --json)
  endpoint_id=$(sed -E 's/.*"id":"([^"]+)".*/\1/' <<<"$created")
  secret=$(sed -E 's/.*"secret":"([^"]+)".*/\1/' <<<"$created")
  printf 'endpoint_id=%s\nsecret=%s\n' "$endpoint_id" "$secret" >"$demo_env"
  chmod 600 "$demo_env"
fi
receiver_pid="$STATE_DIR/run/demo-receiver.pid"
if pid_alive "$receiver_pid"; then stop_pidfile "$receiver_pid" demo-receiver; fi
: >"$STATE_DIR/logs/demo-receiver.log"
HOOKSTREAM_LISTEN_SECRET="$secret" nohup "$HS" listen --addr "127.0.0.1:$DEMO_PORT" \
  >>"$STATE_DIR/logs/demo-receiver.log" 2>&1 &
echo $! >"$receiver_pid"
wait_for_tcp 127.0.0.1 "$DEMO_PORT" 15 demo-receiver

log "7/7 publishing demo events through the outbox"
ids=$("$HS" event publish --tenant demo --type order.created --aggregate order-1001 --data '{"order_id":1001,"total":"42.00"}'
      "$HS" event publish --tenant demo --type order.paid --aggregate order-1001 --data '{"order_id":1001,"method":"card"}'
      "$HS" event publish --tenant demo --type user.created --aggregate user-7 --data '{"user_id":7,"email":"ada@example.com"}')
"$HS" event publish --tenant demo --type invoice.sent --data '{"note":"no endpoint subscribes to this type"}' >/dev/null
deadline=$(( $(date +%s) + 60 ))
for id in $ids; do
  until grep -q "$id" "$STATE_DIR/logs/demo-receiver.log"; do
    if (( $(date +%s) > deadline )); then
      tail -n 20 "$STATE_DIR/logs/dispatcher.log" >&2
      die "event $id was not delivered within 60 s (logs: $STATE_DIR/logs)"
    fi
    sleep 0.2
  done
done

echo
echo "Delivered to the demo receiver (each signature verified with the endpoint's secret):"
for id in $ids; do grep "$id" "$STATE_DIR/logs/demo-receiver.log" | sed 's/^/  /'; done
if grep -q REJECTED "$STATE_DIR/logs/demo-receiver.log"; then die "a delivery failed signature verification"; fi

# A tenant-portal login link for the demo tenant (single-use, valid 10 minutes; the summary
# shows the curl that makes another).
demo_tenant=$("$HS" tenant list --json | python3 -c 'import json,sys; print(next(t["id"] for t in json.load(sys.stdin) if t["name"] == "demo"))')
portal_link=$(curl -fsS -X POST -H "Authorization: Bearer $(cat "$api_token_file")" -H 'content-type: application/json' \
  -d '{}' "http://127.0.0.1:8080/api/v1/auth/app-portal-access/$demo_tenant" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["url"])') \
  || die "could not get a portal link for the demo tenant"
cat <<SUMMARY

Hookstream is running ($(( $(date +%s) - started_at )) s):
  PostgreSQL      postgres://postgres@127.0.0.1:${HOOKSTREAM_PG_PORT:-5432}/hookstream
  Kafka           127.0.0.1:${HOOKSTREAM_KAFKA_PORT:-9092}
  outbox-relay    metrics http://127.0.0.1:9101/metrics
  dispatcher      metrics http://127.0.0.1:9102/metrics
  API             http://127.0.0.1:8080/api/v1  (OpenAPI: /api/v1/openapi.json; operator token in $STATE_DIR/api-operator.token; metrics http://127.0.0.1:9103/metrics)
  Prometheus      http://127.0.0.1:${HOOKSTREAM_PROMETHEUS_PORT:-9090}  (alerts: /alerts; dashboard JSON for Grafana: helm/hookstream/dashboards/hookstream.json)
  demo receiver   http://127.0.0.1:$DEMO_PORT/webhooks  (endpoint $endpoint_id)
  tenant portal   $portal_link
                  (the demo tenant's; single-use, opens within 10 minutes; another: the curl below)
  logs            $STATE_DIR/logs

Try:   target/debug/hookstream event publish --tenant demo --type order.shipped --data '{"order_id":1001}'
       tail -f $STATE_DIR/logs/demo-receiver.log
       curl -H "Authorization: Bearer \$(cat $STATE_DIR/api-operator.token)" http://127.0.0.1:8080/api/v1/app
       (the Svix SDKs work too: Svix(token, SvixOptions(server_url="http://127.0.0.1:8080")), see docs/api.md)
       curl -X POST -d '{}' -H 'content-type: application/json' -H "Authorization: Bearer \$(cat $STATE_DIR/api-operator.token)" \
         http://127.0.0.1:8080/api/v1/auth/app-portal-access/$demo_tenant   (a new portal link: "url")
Stop:  make down
SUMMARY
