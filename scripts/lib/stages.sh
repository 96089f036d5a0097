# shellcheck shell=bash
# Stage timing for CI and `make test`: `stage NAME CMD...` runs CMD, records how long it took
# and how it ended in $HOOKSTREAM_STAGE_FILE (shared by nested scripts: .ci/run's file also
# gets the stages of the `make test` it runs), and `stage_summary` prints them as a table.
# Source it; the first script to source it owns the file and prints the summary.

if [[ -z "${HOOKSTREAM_STAGE_FILE:-}" ]]; then
  HOOKSTREAM_STAGE_FILE="$(mktemp "${TMPDIR:-/tmp}/hookstream-stages.XXXXXX")"
  HOOKSTREAM_STAGE_T0=$(date +%s)
  export HOOKSTREAM_STAGE_FILE HOOKSTREAM_STAGE_T0
  HOOKSTREAM_STAGE_OWNER=1
fi
HOOKSTREAM_STAGE_DEPTH="${HOOKSTREAM_STAGE_DEPTH:-0}"

# stage NAME CMD...: CMD's exit status is returned (the caller decides whether it is fatal).
stage() {
  local name="$1" started rc=0
  shift
  started=$(date +%s)
  echo "== $(date -u +%H:%M:%S) stage: $name"
  HOOKSTREAM_STAGE_DEPTH=$((HOOKSTREAM_STAGE_DEPTH + 1)) "$@" || rc=$?
  printf '%s\t%s\t%s\t%s\n' "$HOOKSTREAM_STAGE_DEPTH" "$name" "$(($(date +%s) - started))" "$rc" >>"$HOOKSTREAM_STAGE_FILE"
  return "$rc"
}

# stage_summary: the table, in the order stages finished (nested ones indented), then the total
# since the file was made. Only the owner prints (a nested `make test` leaves it to CI).
stage_summary() {
  [[ -n "${HOOKSTREAM_STAGE_OWNER:-}" && -s "$HOOKSTREAM_STAGE_FILE" ]] || return 0
  echo "== stage times (seconds; nested stages indented, listed before the stage holding them)"
  awk -F'\t' '{ printf "  %s%-40s %6d s  %s\n", substr("        ", 1, 2 * $1), $2, $3, ($4 == 0 ? "ok" : "FAILED (" $4 ")") }' \
    "$HOOKSTREAM_STAGE_FILE"
  echo "  total since the start: $(($(date +%s) - HOOKSTREAM_STAGE_T0)) s"
}
