#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target (crates/hookstream-fuzz, through the cargo-fuzz project
# in fuzz/) for FUZZ_SECONDS each, one after the other, then prints executions and crashes
# per target. Non-zero when any target crashed (the input is in fuzz/artifacts/<target>/).
#
#   FUZZ_SECONDS=300        time per target
#   FUZZ_TARGETS="a b"      a subset (default: every target in fuzz/fuzz_targets/)
#   FUZZ_RUNS=N             stop a target after N executions instead (-runs=N), time still caps it
#   FUZZ_ARGS="-max_len=256"  extra libFuzzer options for every target
#   FUZZ_SANITIZER=none     none | address (ASan halves the speed; our code forbids unsafe)
#   FUZZ_WORK=DIR           where new corpus entries and logs go (default
#                           ~/.cache/hookstream/fuzz); fuzz/corpus/<target>/ is only read
#
# Overflow checks and debug assertions are on (-a): an overflow is a crash, as in tests.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
FUZZ_SANITIZER="${FUZZ_SANITIZER:-none}"
FUZZ_WORK="${FUZZ_WORK:-$HOME/.cache/hookstream/fuzz}"
TOOL_ROOT="$HOME/.cache/hookstream/cargo-fuzz"
CARGO_FUZZ_VERSION="0.13.2"

log() { printf 'fuzz: %s\n' "$*" >&2; }

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  log "the nightly toolchain is missing: rustup toolchain install nightly"
  exit 2
fi
export PATH="$TOOL_ROOT/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOL_ROOT"
  cargo install --locked --root "$TOOL_ROOT" --version "$CARGO_FUZZ_VERSION" cargo-fuzz
fi

cd "$REPO_ROOT/fuzz"
if [[ -n "${FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

flags=(--debug-assertions --sanitizer "$FUZZ_SANITIZER")
log "building the fuzz targets (nightly, sanitizer $FUZZ_SANITIZER, debug assertions)"
cargo +nightly fuzz build "${flags[@]}"

mkdir -p "$FUZZ_WORK"
declare -A execs secs crashes
failed=0
for t in "${targets[@]}"; do
  work="$FUZZ_WORK/corpus/$t"
  artifacts="$REPO_ROOT/fuzz/artifacts/$t"
  mkdir -p "$work" "$artifacts"
  seeds=("$REPO_ROOT/fuzz/corpus/$t")
  [[ -d "$REPO_ROOT/fuzz/regressions/$t" ]] && seeds+=("$REPO_ROOT/fuzz/regressions/$t")
  args=(-max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ -n "${FUZZ_RUNS:-}" ]] && args+=(-runs="$FUZZ_RUNS")
  # shellcheck disable=SC2206 # FUZZ_ARGS is a list of options
  [[ -n "${FUZZ_ARGS:-}" ]] && args+=($FUZZ_ARGS)
  [[ -f "$REPO_ROOT/fuzz/dict/$t.dict" ]] && args+=(-dict="$REPO_ROOT/fuzz/dict/$t.dict")
  logfile="$FUZZ_WORK/$t.log"
  log "$t: ${FUZZ_SECONDS}s, log $logfile"
  started=$SECONDS
  status=0
  cargo +nightly fuzz run "${flags[@]}" "$t" "$work" "${seeds[@]}" -- "${args[@]}" >"$logfile" 2>&1 || status=$?
  secs[$t]=$((SECONDS - started))
  execs[$t]=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logfile" | tail -n 1 | grep -o '[0-9]*$' || true)
  if [[ -z "${execs[$t]}" ]]; then # no final stats after a crash: the last progress line
    execs[$t]=$(grep -oE '^#[0-9]+' "$logfile" | tail -n 1 | tr -d '#' || true)
  fi
  # libFuzzer stops at the first crash, leak, timeout or OOM, and writes the input.
  crashes[$t]=$(grep -c 'Test unit written to' "$logfile" || true)
  if [[ $status -ne 0 && ${crashes[$t]} -eq 0 ]]; then crashes[$t]=1; fi
  if [[ ${crashes[$t]} -ne 0 ]]; then
    failed=1
    log "$t crashed; input saved under fuzz/artifacts/$t/; last lines of the log:"
    tail -n 30 "$logfile" >&2
  fi
done

printf '\n%-14s %14s %8s %8s\n' target executions seconds crashes
for t in "${targets[@]}"; do
  printf '%-14s %14s %8s %8s\n' "$t" "${execs[$t]:-?}" "${secs[$t]}" "${crashes[$t]}"
done
exit "$failed"
