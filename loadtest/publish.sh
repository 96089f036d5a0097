#!/usr/bin/env bash
# Runs every published scenario three times (each report holds the medians; chaos and
# autoscale once) and copies the charts docs/benchmarks.md shows into docs/benchmarks/. Uses
# the local stack (started if needed; HOOKSTREAM_PG_PORT / HOOKSTREAM_KAFKA_PORT pick another
# one), except chaos and broker-kill, which restart Kafka (and chaos PostgreSQL): each gets a
# stack of its own (CHAOS_STATE_DIR, CHAOS_PG_PORT, CHAOS_KAFKA_PORT, CHAOS_KAFKA_CONTROLLER_PORT;
# three brokers for broker-kill), started for it and stopped after. Needs the machine to itself: anything else running shows in the figures.
#
#   loadtest/publish.sh                 # every scenario (about 100 minutes on 2 cores)
#   loadtest/publish.sh steady crash    # some of them
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-loadtest/out}"
DOCS=docs/benchmarks
RUNS="${RUNS:-3}"

# name | arguments [| runs]: the one command that reproduces each (docs/benchmarks.md quotes
# them); runs defaults to RUNS.
SCENARIOS=(
  "relay|relay --events 200000 --rate 2000 --seconds 30 --relays 2"
  "relay-text|relay --events 200000 --rate 2000 --seconds 10 --relays 1 --payload-form text"
  "relay-1k-sealed|relay --events 100000 --rate 2000 --seconds 10 --relays 1 --payload-form text --payload-bytes 1024"
  "relay-1k-clear|relay --events 100000 --rate 2000 --seconds 10 --relays 1 --payload-form text --payload-bytes 1024 --seal-payloads false"
  "steady|steady --events 20000 --rate 1000 --endpoints 1 --baseline"
  "max|max --events 50000 --seconds 10 --endpoints 1 --baseline"
  "fanout|fanout --events 5000 --baseline --baseline-variants polling-tuned"
  "fanout10|fanout --endpoints 10 --events 20000"
  "fanout10-filtered|fanout --endpoints 10 --events 20000 --payload-filter"
  "fanout10-1k-sealed|fanout --endpoints 10 --events 20000 --payload-bytes 1024"
  "fanout10-1k-clear|fanout --endpoints 10 --events 20000 --payload-bytes 1024 --seal-payloads false"
  "noisy-neighbour|noisy-neighbour --events 10000 --rate 500 --baseline --baseline-variants polling-tuned"
  "outage-recovery|outage-recovery --events 7000 --rate 100 --endpoints 1 --outage-s 60 --outage-rate-limit 200 --baseline --baseline-variants polling-tuned"
  "crash|crash --events 20000 --rate 500 --endpoints 1 --seed 7 --baseline --baseline-variants polling-tuned"
  "fleet|fleet --events 5000 --rate 250"
  "chaos|chaos --rate 200 --seed 1|1"
  "broker-kill|broker-kill --rate 100|1"
  "autoscale|autoscale --max-in-flight-events 50 --receiver-delay-ms 500 --idle-s 30 --step-s 120 --time-scale 5|1"
)

CHAOS_STATE_DIR="${CHAOS_STATE_DIR:-$PWD/.hookstream-chaos}"
CHAOS_PG_PORT="${CHAOS_PG_PORT:-55432}"
CHAOS_KAFKA_PORT="${CHAOS_KAFKA_PORT:-59092}"
CHAOS_KAFKA_CONTROLLER_PORT="${CHAOS_KAFKA_CONTROLLER_PORT:-59093}"
CHAOS_ENV=(
  "HOOKSTREAM_STATE_DIR=$CHAOS_STATE_DIR"
  "HOOKSTREAM_PG_PORT=$CHAOS_PG_PORT"
  "HOOKSTREAM_KAFKA_PORT=$CHAOS_KAFKA_PORT"
  "HOOKSTREAM_KAFKA_CONTROLLER_PORT=$CHAOS_KAFKA_CONTROLLER_PORT"
  "HOOKSTREAM_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:$CHAOS_PG_PORT/postgres"
  "HOOKSTREAM_TEST_KAFKA_BROKERS=127.0.0.1:$CHAOS_KAFKA_PORT"
)
# broker-kill: the same stack of its own with three brokers (59092, 59192, 59292).
CLUSTER_ENV=(
  "${CHAOS_ENV[@]}"
  "HOOKSTREAM_KAFKA_BROKERS=3"
  "HOOKSTREAM_TEST_KAFKA_BROKERS=127.0.0.1:$CHAOS_KAFKA_PORT,127.0.0.1:$((CHAOS_KAFKA_PORT + 100)),127.0.0.1:$((CHAOS_KAFKA_PORT + 200))"
)
own_env=()
chaos_stack() { env "${own_env[@]}" bash scripts/stack/infra.sh "$1" >&2; }

cargo build --release -q -p loadtest
mkdir -p "$OUT" "$DOCS"
# What sealing one 1 KiB payload costs (a figure, so an ignored test of `make test`, run here).
if [[ $# -eq 0 || " $* " == *" sealing-cost "* ]]; then
  echo "== $(date -u +%H:%M:%S) sealing-cost: cargo test --release -p hookstream-store sealing_cost -- --ignored"
  cargo test --release -q -p hookstream-store --lib sealing_cost -- --ignored --nocapture >"$OUT/sealing-cost.log" 2>&1 || {
    tail -n 30 "$OUT/sealing-cost.log" >&2
    exit 1
  }
  grep 'µs each' "$OUT/sealing-cost.log"
fi
for entry in "${SCENARIOS[@]}"; do
  IFS='|' read -r name args runs <<<"$entry"
  runs="${runs:-$RUNS}"
  if [[ $# -gt 0 && " $* " != *" $name "* ]]; then
    continue
  fi
  envs=()
  case "$name" in
    chaos) own_env=("${CHAOS_ENV[@]}") ;;
    broker-kill) own_env=("${CLUSTER_ENV[@]}") ;;
    *) own_env=() ;;
  esac
  if [[ ${#own_env[@]} -gt 0 ]]; then
    envs=("${own_env[@]}")
    chaos_stack start
    trap 'chaos_stack stop' EXIT
  fi
  echo "== $(date -u +%H:%M:%S) $name: loadtest run $args --runs $runs"
  # shellcheck disable=SC2086 # the arguments are words
  env "${envs[@]}" target/release/loadtest run $args --runs "$runs" --out "$OUT/$name" >"$OUT/$name.json" 2>"$OUT/$name.log" || {
    tail -n 30 "$OUT/$name.log" >&2
    exit 1
  }
  if [[ ${#own_env[@]} -gt 0 ]]; then
    chaos_stack stop
    trap - EXIT
  fi
  # Charts of the last run: the overlays of every phase (all-*) and Hookstream's backlog and
  # lag; a single-phase scenario's own charts.
  rm -f "$DOCS/$name"-*.svg
  overlays=$(compgen -G "$OUT/$name/charts/all-*.svg" || true)
  for svg in "$OUT/$name"/charts/*.svg; do
    [[ -e "$svg" ]] || continue
    base="$(basename "$svg")"
    case "$base" in
      all-*) ;;
      *baseline*) continue ;;
      *-backlog.svg) ;;
      *) [[ -z "$overlays" ]] || continue ;;
    esac
    cp "$svg" "$DOCS/$name-$base"
  done
done
echo "== $(date -u +%H:%M:%S) done: reports in $OUT/*/report.json, charts in $DOCS/"
