#!/usr/bin/env bash
# A real, single-machine Kubernetes control plane on 127.0.0.1, for checking the Helm chart
# against a real API server (scripts/k8s/test.sh): etcd, kube-apiserver and
# kube-controller-manager, built by scripts/k8s/build.sh. No kubelet and no scheduler: objects
# are stored, validated, admitted and reconciled by the real controllers (Deployments become
# ReplicaSets and Pods, Jobs become Pods, garbage collection, namespaces...), but no pod runs.
#
#   bash scripts/k8s/cluster.sh start    # a fresh cluster (etcd wiped), prints the kubeconfig
#   bash scripts/k8s/cluster.sh stop     # stops what `start` started (by its recorded pids)
#   bash scripts/k8s/cluster.sh status
#   bash scripts/k8s/cluster.sh env      # prints `export KUBECONFIG=...`
#
# State (certificates, etcd data, logs, kubeconfig) in $K8S_STATE_DIR, default
# .hookstream/k8s/ in the repository (git-ignored). Ports are fixed high ports below the
# ephemeral range, clear of PostgreSQL 5432, Kafka 9092-9095 and the API 8080:
#   K8S_ETCD_PORT (23790), K8S_ETCD_PEER_PORT (23800), K8S_APISERVER_PORT (26443),
#   K8S_KCM_PORT (26444, the controller manager's own health endpoint)
# Authorization is RBAC,Node (the real default): the test's client certificate is in
# system:masters, the controller manager authenticates with its own certificate
# (system:kube-controller-manager) and runs each controller with its service account's token.
# etcd speaks plain HTTP on 127.0.0.1 only; everything the API server serves is TLS.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${K8S_STATE_DIR:-$REPO_ROOT/.hookstream/k8s}"
ETCD_PORT="${K8S_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${K8S_ETCD_PEER_PORT:-23800}"
API_PORT="${K8S_APISERVER_PORT:-26443}"
KCM_PORT="${K8S_KCM_PORT:-26444}"
PKI="$STATE/pki"
LOGS="$STATE/logs"
KUBECONFIG_FILE="$STATE/admin.kubeconfig"
COMPONENTS=(etcd kube-apiserver kube-controller-manager)

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[cluster] %s\n' "$*" >&2; exit 1; }

pid_of() { # prints the pid of a running component started by this script, or fails
  local f="$STATE/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_until() { # wait_until SECONDS DESCRIPTION COMMAND...
  local limit="$1" what="$2" start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < limit)) || { log "$what: not ready after ${limit}s"; return 1; }
    sleep 0.5
  done
  log "$what: ready in $((SECONDS - start))s"
}

# ---- certificates -------------------------------------------------------------------------
sign() { # sign NAME SUBJECT EXTENSIONS: a key and a certificate signed by the cluster CA
  local name="$1" subj="$2" ext="$3"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
  # Reused while the CA is more than a day from expiry: a warm start makes none.
  if [[ -f "$PKI/ca.crt" && -f "$PKI/sa.pub" && -f "$PKI/front-proxy.crt" ]] &&
     openssl x509 -checkend 86400 -noout -in "$PKI/ca.crt" >/dev/null 2>&1; then
    return
  fi
  log "making certificates in $PKI (openssl)"
  rm -rf "$PKI"
  mkdir -p "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 30 \
    -subj "/CN=hookstream-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=hookstream-test-admin" "$client"
  sign kcm "/CN=system:kube-controller-manager" "$client"
  sign front-proxy "/CN=front-proxy-client" "$client" # the aggregation layer's client
  # The service-account token signing key pair (API server signs, both verify).
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI"/*.key
}

kubeconfig() { # kubeconfig FILE CERT-NAME USER
  local file="$1" cert="$2" user="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: hookstream-test
    cluster:
      server: https://127.0.0.1:$API_PORT
      certificate-authority: $PKI/ca.crt
users:
  - name: $user
    user:
      client-certificate: $PKI/$cert.crt
      client-key: $PKI/$cert.key
contexts:
  - name: hookstream-test
    context: {cluster: hookstream-test, user: $user}
current-context: hookstream-test
EOF
  chmod 600 "$file"
}

# ---- start / stop --------------------------------------------------------------------------
launch() { # launch NAME BINARY ARGS...: in the background, its pid recorded
  local name="$1"
  shift
  nohup "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/$name.pid"
  log "$name started (pid $!, log $LOGS/$name.log)"
}

api_ready() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz" | grep -qx ok
}

start() {
  local c
  for c in "${COMPONENTS[@]}"; do
    ! pid_of "$c" >/dev/null || die "$c is already running (pid $(pid_of "$c")): run '$0 stop' first"
  done
  for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT"; do
    port_free "$p" || die "port $p on 127.0.0.1 is in use: set K8S_ETCD_PORT / K8S_ETCD_PEER_PORT / K8S_APISERVER_PORT / K8S_KCM_PORT"
  done
  local bin
  bin="$(bash "$REPO_ROOT/scripts/k8s/build.sh")"
  for c in "${COMPONENTS[@]}"; do [[ -x "$bin/$c" ]] || die "no $bin/$c"; done
  mkdir -p "$STATE" "$LOGS"
  make_pki
  kubeconfig "$KUBECONFIG_FILE" admin hookstream-test-admin
  kubeconfig "$STATE/kcm.kubeconfig" kcm system:kube-controller-manager
  rm -rf "$STATE/etcd-data" "$STATE/kcm-certs"
  local t0=$SECONDS

  launch etcd "$bin/etcd" --name hookstream-test --data-dir "$STATE/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "hookstream-test=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --unsafe-no-fsync --log-level warn
  wait_until 60 etcd curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" || { tail -20 "$LOGS/etcd.log"; exit 1; }

  # --endpoint-reconciler-type=none: the `kubernetes` Service keeps no endpoints, since
  # Endpoints may not hold a loopback address and nothing in the cluster dials it.
  launch kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy.crt" --proxy-client-key-file "$PKI/front-proxy.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode RBAC,Node \
    --endpoint-reconciler-type none \
    --profiling=false --v 1
  wait_until 180 kube-apiserver api_ready || { tail -30 "$LOGS/kube-apiserver.log"; exit 1; }

  launch kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$STATE/kcm.kubeconfig" \
    --authentication-kubeconfig "$STATE/kcm.kubeconfig" --authorization-kubeconfig "$STATE/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$STATE/kcm-certs" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --leader-elect=false --profiling=false --v 1
  wait_until 120 kube-controller-manager curl -fsSk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" ||
    { tail -30 "$LOGS/kube-controller-manager.log"; exit 1; }
  log "control plane up in $((SECONDS - t0))s (binaries from $bin)"
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
}

stop() {
  local i c pid
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c="${COMPONENTS[i]}"
    if pid="$(pid_of "$c")"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
      log "$c stopped (pid $pid)"
    fi
    rm -f "$STATE/$c.pid"
  done
}

status() {
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if pid="$(pid_of "$c")"; then echo "$c: running (pid $pid)"; else echo "$c: stopped"; rc=1; fi
  done
  return "$rc"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_FILE" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
