#!/usr/bin/env bash
# Installs what the example inbox receivers in other languages need, outside the repository
# (~/.cache/hookstream, or $HOOKSTREAM_CACHE_DIR): `python` makes a venv with
# examples/inbox-python/requirements.txt (every package pinned), `node` runs `npm ci` of
# examples/inbox-node's package-lock.json. Idempotent: a stamp holds the hash of what was
# installed, so a second run returns at once; concurrent runs wait for each other (flock).
# The inbox crate's tests run it before starting a receiver (crates/hookstream-inbox/tests).
#   bash scripts/setup/inbox-receivers.sh [python|node|all]
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${HOOKSTREAM_CACHE_DIR:-$HOME/.cache/hookstream}"
mkdir -p "$CACHE"

hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

python_deps() {
  local dir="$CACHE/inbox-python" req="$REPO_ROOT/examples/inbox-python/requirements.txt"
  command -v python3 >/dev/null || { echo "[inbox-receivers] python3 is missing" >&2; exit 1; }
  local want
  want="$(hash_of "$req")-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  exec 8>"$CACHE/inbox-python.lock"
  flock 8
  if [[ -x "$dir/venv/bin/python" && "$(cat "$dir/stamp" 2>/dev/null)" == "$want" ]]; then
    echo "$dir/venv/bin/python"
    return
  fi
  echo "[inbox-receivers] installing the Python receiver's packages into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$req" >&2
  echo "$want" >"$dir/stamp"
  echo "$dir/venv/bin/python"
}

node_deps() {
  local dir="$CACHE/inbox-node" src="$REPO_ROOT/examples/inbox-node"
  command -v npm >/dev/null || { echo "[inbox-receivers] node and npm are missing" >&2; exit 1; }
  local want
  want="$(hash_of "$src/package.json" "$src/package-lock.json")-$(node --version)"
  exec 9>"$CACHE/inbox-node.lock"
  flock 9
  if [[ -d "$dir/node_modules" && "$(cat "$dir/stamp" 2>/dev/null)" == "$want" ]]; then
    echo "$dir/node_modules"
    return
  fi
  echo "[inbox-receivers] installing the Node receiver's packages into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" >"$dir/stamp"
  echo "$dir/node_modules"
}

case "${1:-all}" in
  python) python_deps ;;
  node) node_deps ;;
  all) python_deps; node_deps ;;
  *) echo "usage: $0 [python|node|all]" >&2; exit 2 ;;
esac
