#!/usr/bin/env bash
# The delivery log's query cost at scale: fills a fresh database's hookstream.attempts with
# ATTEMPTS rows (10 million by default) spread over the last DAYS days (1) for ENDPOINTS
# endpoints (1,000), builds their per minute and per hour statistics (what the attempt sink
# keeps as it writes), then times `hookstream endpoint stats` over 1 hour and over 24 hours
# and `hookstream attempts list --endpoint` (the CLI's own queries).
# Usage: bash loadtest/sql/attempts_10m.sh   (the local stack must run: make infra)
set -euo pipefail
cd "$(dirname "$0")/../.."
ATTEMPTS="${ATTEMPTS:-10000000}" ENDPOINTS="${ENDPOINTS:-1000}" DAYS="${DAYS:-1}"
BASE="${HOOKSTREAM_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
DB="hs_bench_attempts"
URL="${BASE%/*}/$DB"
HOOKSTREAM="${HOOKSTREAM_BIN:-target/release/hookstream}"
[[ -x "$HOOKSTREAM" ]] || cargo build --release -p hookstream-cli
psql -q "$BASE" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
"$HOOKSTREAM" --database-url "$URL" migrate >/dev/null
echo "== filling hookstream.attempts: $ATTEMPTS rows, $ENDPOINTS endpoints, $DAYS day(s)"
start=$(date +%s)
psql -q -v ON_ERROR_STOP=1 "$URL" <<SQL
SELECT hookstream.ensure_attempt_partition((now() AT TIME ZONE 'UTC')::date - d)
  FROM generate_series(0, $DAYS) AS d;
INSERT INTO hookstream.tenants (id, name) VALUES ('00000000-0000-7000-8000-000000000001', 'bench');
INSERT INTO hookstream.endpoints (id, tenant_id, url)
  SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(e), 12, '0'))::uuid,
         '00000000-0000-7000-8000-000000000001', 'https://example.com/' || e
  FROM generate_series(1, $ENDPOINTS) AS e;
-- Each row: an endpoint, a start time within the window, a duration (most 5-60 ms, a tail
-- to 2 s), 3 % failed (5xx or timeouts).
INSERT INTO hookstream.attempts (started_at, event_id, endpoint_id, attempt, tenant_id, trigger,
                                 duration_ms, status, outcome, error_class, next)
SELECT now() - (random() * interval '$DAYS days'),
       gen_random_uuid(),
       ('00000000-0000-7000-8000-' || lpad(to_hex(1 + (i % $ENDPOINTS)), 12, '0'))::uuid,
       1,
       '00000000-0000-7000-8000-000000000001',
       'first',
       CASE WHEN random() < 0.01 THEN (200 + random() * 1800)::int ELSE (5 + random() * 55)::int END,
       CASE WHEN r < 0.02 THEN 503 WHEN r < 0.03 THEN NULL ELSE 200 END,
       CASE WHEN r < 0.03 THEN 'retryable' ELSE 'delivered' END,
       CASE WHEN r < 0.02 THEN 'http_5xx' WHEN r < 0.03 THEN 'timeout' ELSE 'none' END,
       CASE WHEN r < 0.03 THEN 'retry' ELSE 'delivered' END
FROM (SELECT i, random() AS r FROM generate_series(1, $ATTEMPTS) AS i) AS g;
SELECT hookstream.rebuild_attempt_stats() AS statistics_rows;
VACUUM ANALYZE hookstream.attempts;
VACUUM ANALYZE hookstream.attempt_stats;
SQL
echo "filled in $(( $(date +%s) - start )) s; $(psql -qAt "$URL" -c "SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits WHERE inhparent = 'hookstream.attempts'::regclass") on disk"
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  "$HOOKSTREAM" --database-url "$URL" "$@" >/dev/null
  t1=$(date +%s.%N)
  printf '  %-50s %6.2f s\n' "hookstream $*" "$(echo "$t1 - $t0" | bc)"
}
echo "== query times (each twice: cold, then warm)"
for since in 1h 24h; do
  timed endpoint stats --since "$since" --json
  timed endpoint stats --since "$since" --json
done
ep="00000000-0000-7000-8000-$(printf '%012x' 7)"
timed attempts list --endpoint "$ep" --since 24h --json
timed attempts list --endpoint "$ep" --since 24h --json
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
