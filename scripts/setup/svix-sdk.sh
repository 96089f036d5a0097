#!/usr/bin/env bash
# Installs the official Svix Python SDK (PyPI `svix`, pinned) into a virtual environment in
# ~/.cache/hookstream, for the API's SDK compatibility test (services/api/tests/sdk.rs).
# Idempotent and quick once installed; prints the environment's python on its last line.
set -euo pipefail

version="${SVIX_SDK_VERSION:-2.9.1}"
cache="${HOOKSTREAM_CACHE_DIR:-$HOME/.cache/hookstream}"
venv="$cache/svix-sdk-$version"
python="$venv/bin/python"

done_marker="$venv/.installed"
if [[ -f "$done_marker" && -x "$python" ]]; then
  echo "$python"
  exit 0
fi

command -v python3 >/dev/null || { echo "[svix-sdk] python3 is missing (scripts/setup/build-deps.sh installs it)" >&2; exit 1; }
if ! python3 -c "import venv, ensurepip" 2>/dev/null; then
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "[svix-sdk] installing python3-venv" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    echo "[svix-sdk] python3 cannot make virtual environments: install python3-venv" >&2
    exit 1
  fi
fi
mkdir -p "$cache"
# An install cut short (no marker) is started again from scratch.
rm -rf "$venv"
echo "[svix-sdk] installing svix==$version into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "svix==$version" >&2
"$python" -c "import svix, sys; sys.exit(0 if svix.__version__ == '$version' else 1)"
touch "$done_marker"
echo "$python"
