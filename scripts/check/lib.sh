# shellcheck shell=bash
# Shared helpers for scripts/check/*.sh. Source it after setting CHECK (the label of the output).

# shellcheck disable=SC2034 # used by the sourcing scripts
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE_DIR="${HOOKSTREAM_CACHE_DIR:-$HOME/.cache/hookstream}"
# One virtualenv for the Python tools of the checks; never the system's Python packages.
VENV="$CACHE_DIR/venv"

log() { echo "[check/$CHECK] $*"; }

# The verdict line. `fail` exits 1; a script that stops otherwise (set -e) is reported as a
# failure too: end the script's EXIT trap with `verdict_on_exit RC`.
_verdict=""
pass() { _verdict=pass; echo "[check/$CHECK] PASS: $*"; }
fail() { _verdict=fail; echo "[check/$CHECK] FAIL: $*" >&2; exit 1; }
verdict_on_exit() {
  local rc="${1:-0}"
  if [[ -z "$_verdict" ]]; then
    echo "[check/$CHECK] FAIL: stopped with exit code $rc (see the output above)" >&2
    ((rc != 0)) || rc=1
  fi
  exit "$rc"
}

# ensure_venv NAME==VERSION...: the cached venv with exactly these versions (installs what is
# missing or differs; no network when everything is there).
ensure_venv() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating the tool venv $VENV"
    python3 -m venv "$VENV" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  fi
  local req missing=()
  for req in "$@"; do
    [[ "$("$VENV/bin/python" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "${req%%==*}")" == "${req##*==}" ]] || missing+=("$req")
  done
  if ((${#missing[@]})); then
    log "pip install ${missing[*]} into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "${missing[@]}" || fail "pip install ${missing[*]} failed"
  fi
}

# ensure_apt COMMAND PACKAGE: installs the Debian package when the command is missing (as root).
ensure_apt() {
  command -v "$1" >/dev/null && return 0
  [[ $EUID -eq 0 ]] || fail "$1 is missing; install it with: sudo apt-get install $2"
  log "installing $2 from apt"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null || fail "apt-get install $2 failed"
}
