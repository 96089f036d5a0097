#!/usr/bin/env bash
# Installs cargo-nextest (the test runner `make test` uses, settings in .config/nextest.toml)
# once, outside the repository, at a pinned version: built from crates.io, ~5 minutes on 2
# cores the first time, then reused. Prints the binary's path.
set -euo pipefail
VERSION=0.9.151
ROOT="${HOME}/.cache/hookstream/nextest-${VERSION}"
BIN="$ROOT/bin/cargo-nextest"
if [[ ! -x "$BIN" ]]; then
  echo "[setup] building cargo-nextest ${VERSION} into $ROOT (once)" >&2
  # Its own target directory, so that it neither shares nor invalidates the workspace's.
  CARGO_TARGET_DIR="$ROOT/build" cargo install cargo-nextest --version "$VERSION" --locked --root "$ROOT" >&2
  rm -rf "$ROOT/build"
fi
echo "$BIN"
