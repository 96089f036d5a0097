#!/usr/bin/env bash
# Installs the tools the deployment checks use, once, outside the repository (~/.cache/hookstream):
# helm and kubeconform built from the Go module proxy (helm takes several minutes the first time).
# `make test` runs this in the background while the Rust tests run; the checks install what
# is still missing themselves.
set -euo pipefail
BIN="${HOME}/.cache/hookstream/bin"
mkdir -p "$BIN"
[[ -x "$BIN/helm" ]] || GOBIN="$BIN" go install helm.sh/helm/v3/cmd/helm@v3.22.0
[[ -x "$BIN/kubeconform" ]] || GOBIN="$BIN" go install github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
echo "tools ready in $BIN"
