#!/usr/bin/env bash
# Builds a real Kubernetes control plane from the Go module proxy, once, outside the repository:
#   ~/.cache/hookstream/k8s/<version>/{kube-apiserver,kube-controller-manager,kubectl,etcd}
# A second run finds the four binaries there and builds nothing (like the Kafka jars in
# ~/.cache/hookstream/kafka-*). The first build takes ~20-30 minutes on two cores.
#
# k8s.io/kubernetes cannot be built as a dependency as it is: its go.mod answers every
# k8s.io/* staging module with `replace k8s.io/X => ./staging/src/k8s.io/X`, which a consumer
# module cannot use. So this writes a go.mod of its own (~/.cache/hookstream/k8s-build/<version>/)
# that requires k8s.io/kubernetes <version> and answers each of those replace lines with the
# published k8s.io/X v0.<minor>.<patch> of the same release; etcd is built from the
# go.etcd.io/etcd/server/v3 version that the same k8s.io/kubernetes go.mod requires (its root
# package is etcd's main). The Go builds run under `nice -n 19` so other work keeps its cores.
#
#   K8S_VERSION   k8s.io/kubernetes version (default v1.34.4)
# Prints the directory of the binaries on stdout (its only line there); progress goes to stderr.
set -euo pipefail
exec 3>&1 1>&2

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
CACHE="${HOME}/.cache/hookstream"
OUT="$CACHE/k8s/$K8S_VERSION"
BUILD="$CACHE/k8s-build/$K8S_VERSION"
BINARIES=(kube-apiserver kube-controller-manager kubectl etcd)

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || return 1; done
}
if have_all; then
  echo "k8s binaries cached in $OUT"
  echo "$OUT" >&3
  exit 0
fi

[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] ||
  { echo "build.sh: K8S_VERSION must be a release like v1.34.4, not $K8S_VERSION" >&2; exit 1; }
MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${MINOR}.${BASH_REMATCH[2]}"
((MINOR >= 34)) || { echo "build.sh: needs Kubernetes v1.34 or later" >&2; exit 1; }

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$BUILD" "$OUT"
cd "$BUILD"
echo "==> fetching k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
# `go mod download` needs a module to run in; the one written below replaces this stub.
[[ -f go.mod ]] || printf 'module hookstream.local/k8s-build\n\ngo 1.24.0\n' >go.mod
upstream_mod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$upstream_mod" ]] || { echo "build.sh: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }

go_line="$(grep -m1 -E '^go [0-9.]+$' "$upstream_mod")"
godebug_line="$(grep -m1 -E '^godebug ' "$upstream_mod" || true)"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$upstream_mod")"
[[ -n "$etcd_version" ]] || { echo "build.sh: k8s.io/kubernetes@$K8S_VERSION names no etcd server version" >&2; exit 1; }
# Every `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X => k8s.io/X v0.<minor>.<patch>`.
staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$upstream_mod")"
[[ -n "$staging" ]] || { echo "build.sh: no staging replace lines found in $upstream_mod" >&2; exit 1; }

{
  echo "// Written by hookstream scripts/k8s/build.sh: k8s.io/kubernetes $K8S_VERSION as a dependency."
  echo "module hookstream.local/k8s-build"
  echo
  echo "$go_line"
  [[ -z "$godebug_line" ]] || { echo; echo "$godebug_line"; }
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $K8S_VERSION"
  echo "	go.etcd.io/etcd/server/v3 $etcd_version"
  echo ")"
  echo
  echo "replace ("
  while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done <<<"$staging"
  echo ")"
} >go.mod
# The commands, imported so that `go mod tidy` keeps what they need.
cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
echo "==> go.mod: k8s.io/kubernetes $K8S_VERSION, $(wc -l <<<"$staging") staging modules at $STAGING_VERSION, etcd $etcd_version"
start=$SECONDS
nice -n 19 go mod tidy
echo "==> go mod tidy: $((SECONDS - start))s"

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

start=$SECONDS
mkdir -p "$OUT/.tmp"
nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$OUT/.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
nice -n 19 go build -trimpath -ldflags "-s -w" -o "$OUT/.tmp/etcd" go.etcd.io/etcd/server/v3
for b in "${BINARIES[@]}"; do mv "$OUT/.tmp/$b" "$OUT/$b"; done
rmdir "$OUT/.tmp"
echo "==> go build: $((SECONDS - start))s"
"$OUT/kube-apiserver" --version
"$OUT/etcd" --version | head -1
echo "$OUT" >&3
