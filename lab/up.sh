#!/usr/bin/env bash
# Starts a local lab: a hub and N member Kubernetes clusters as plain processes on loopback.
#
#   lab/up.sh [--members N] [--nodes N] [--dir DIR]
#
# Each cluster has its own kube-apiserver (TLS, client-certificate auth, RBAC), controller-manager,
# scheduler and kwok (fake nodes, so pods reach Running); they share one etcd under separate
# prefixes. The script returns once every cluster is ready and leaves:
#   DIR/kubeconfig     contexts hub, member-1 ... member-N
#   DIR/clusters.yaml  the members, as a tenancy-hub registration file
#   DIR/env            `source` it for KUBECONFIG and a PATH with kubectl and helm
# lab/down.sh --dir DIR stops exactly these processes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMBERS=2
NODES=1
LAB_DIR=$(default_lab_dir)
usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --members) MEMBERS=${2:?--members needs a number}; shift 2 ;;
        --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $MEMBERS =~ ^[0-9]+$ ]] || die "--members must be a whole number, got '$MEMBERS'"
[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "--nodes must be at least 1, got '$NODES'"
mkdir -p "$LAB_DIR"
LAB_DIR=$(cd "$LAB_DIR" && pwd)

for tool in openssl curl python3; do
    command -v "$tool" >/dev/null || die "$tool is required (install it with your package manager)"
done

if [[ -s "$LAB_DIR/pids" ]]; then
    if "$LAB_ROOT/status.sh" --dir "$LAB_DIR" >/dev/null 2>&1; then
        log "a lab is already running in $LAB_DIR; reusing it (lab/down.sh --dir $LAB_DIR stops it)"
        cat "$LAB_DIR/summary"
        exit 0
    fi
    die "a lab in $LAB_DIR is partly running; stop it first with: lab/down.sh --dir $LAB_DIR"
fi

START=$SECONDS
BIN=$("$LAB_ROOT/build.sh")
export PATH="$BIN:$PATH"
EXECUTOR=$("$LAB_ROOT/executor.sh")
# A real-world chart (ExternalDNS's, pinned) for tests/fleets_realworld.rs, fetched once.
REAL_CHARTS=$("$LAB_ROOT/real-chart.sh")
PKI="$LAB_DIR/pki"
LOGS="$LAB_DIR/logs"
rm -rf "$PKI" "$LOGS" "$LAB_DIR/etcd" "$LAB_DIR/clusters" "$LAB_DIR/cmds"
mkdir -p "$PKI" "$LOGS" "$LAB_DIR/clusters"
: >"$LAB_DIR/pids"

# If anything below fails, stop what was started so nothing is left running.
trap 'rc=$?; if ((rc != 0)); then log "start-up failed; logs are in $LOGS"; "$LAB_ROOT/down.sh" --dir "$LAB_DIR" --keep-logs >&2 || true; fi' EXIT

CLUSTERS=(hub)
for ((i = 1; i <= MEMBERS; i++)); do CLUSTERS+=("member-$i"); done

# --- certificates -------------------------------------------------------------------------------
log "creating certificates in $PKI"
newkey() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
openssl_quiet() { openssl "$@" 2>/dev/null; }
newkey "$PKI/ca.key"
openssl_quiet req -x509 -new -key "$PKI/ca.key" -subj "/CN=tenancy-hub-lab-ca" -days 3650 -out "$PKI/ca.crt"

# sign NAME SUBJECT EXTENSIONS: a key and a certificate signed by the lab CA.
sign() {
    local name=$1 subject=$2 ext=$3
    newkey "$PKI/$name.key"
    openssl_quiet req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr"
    printf '%s\n' "$ext" >"$PKI/$name.ext"
    openssl_quiet x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt"
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
CLIENT_EXT=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
SERVER_EXT=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1'
sign controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
sign scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
for c in "${CLUSTERS[@]}"; do
    sign "$c-apiserver" "/CN=kube-apiserver-$c" "$SERVER_EXT"
    sign "$c-admin" "/O=system:masters/CN=admin@$c" "$CLIENT_EXT"
    openssl_quiet genrsa -out "$PKI/$c-sa.key" 2048
    openssl_quiet rsa -in "$PKI/$c-sa.key" -pubout -out "$PKI/$c-sa.pub"
done
chmod 600 "$PKI"/*.key

# --- processes ----------------------------------------------------------------------------------
# start NAME BINARY ARGS...: runs BINARY in its own session, logging to LOGS/NAME.log, and keeps
# its command line in LAB_DIR/cmds/NAME so lab/ctl.sh can start it again.
start() {
    local name=$1 bin=$2; shift 2
    mkdir -p "$LAB_DIR/cmds"
    printf '%q ' "$BIN/$bin" "$@" >"$LAB_DIR/cmds/$name"
    setsid "$BIN/$bin" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    printf '%s %s %s\n' "$!" "$name" "$BIN/$bin" >>"$LAB_DIR/pids"
}

b64() { base64 -w0 <"$1"; }

# kubeconfig FILE SERVER CERT: a single-context kubeconfig for one client certificate.
kubeconfig() {
    cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "$2", certificate-authority-data: $(b64 "$PKI/ca.crt")}}]
users: [{name: user, user: {client-certificate-data: $(b64 "$PKI/$3.crt"), client-key-data: $(b64 "$PKI/$3.key")}}]
contexts: [{name: lab, context: {cluster: lab, user: user}}]
current-context: lab
KC
    chmod 600 "$1"
}

ETCD_PORT=$(free_port)
ETCD_PEER_PORT=$(free_port)
log "starting etcd on 127.0.0.1:$ETCD_PORT"
start etcd etcd --name lab --data-dir "$LAB_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes 4294967296 \
    --log-level warn
wait_for "etcd" 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

declare -A API_PORT
for c in "${CLUSTERS[@]}"; do
    port=$(free_port)
    API_PORT[$c]=$port
    log "starting kube-apiserver for $c on https://127.0.0.1:$port"
    start "$c-kube-apiserver" kube-apiserver \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" --etcd-prefix "/registry-$c" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
        --cert-dir "$LAB_DIR/clusters/$c" \
        --tls-cert-file "$PKI/$c-apiserver.crt" --tls-private-key-file "$PKI/$c-apiserver.key" \
        --client-ca-file "$PKI/ca.crt" --authorization-mode RBAC \
        --service-account-issuer "https://kubernetes.default.svc" \
        --service-account-key-file "$PKI/$c-sa.pub" --service-account-signing-key-file "$PKI/$c-sa.key" \
        --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --profiling=false \
        --endpoint-reconciler-type none
done

for c in "${CLUSTERS[@]}"; do
    dir="$LAB_DIR/clusters/$c"
    mkdir -p "$dir"
    server="https://127.0.0.1:${API_PORT[$c]}"
    kubeconfig "$dir/admin.kubeconfig" "$server" "$c-admin"
    kubeconfig "$dir/controller-manager.kubeconfig" "$server" controller-manager
    kubeconfig "$dir/scheduler.kubeconfig" "$server" scheduler
done

for c in "${CLUSTERS[@]}"; do
    wait_for "the $c API server to be ready (see $LOGS/$c-kube-apiserver.log)" 180 \
        curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/$c-admin.crt" --key "$PKI/$c-admin.key" \
        "https://127.0.0.1:${API_PORT[$c]}/readyz"
    log "$c API server is ready"
done

declare -A KCM_PORT SCHED_PORT
for c in "${CLUSTERS[@]}"; do
    dir="$LAB_DIR/clusters/$c"
    KCM_PORT[$c]=$(free_port)
    SCHED_PORT[$c]=$(free_port)
    start "$c-kube-controller-manager" kube-controller-manager \
        --kubeconfig "$dir/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "${KCM_PORT[$c]}" --cert-dir "$dir/kcm" \
        --leader-elect=false --use-service-account-credentials --kube-api-qps 200 --kube-api-burst 400 \
        --service-account-private-key-file "$PKI/$c-sa.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller,-node-route-controller'
    start "$c-kube-scheduler" kube-scheduler \
        --kubeconfig "$dir/scheduler.kubeconfig" \
        --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "${SCHED_PORT[$c]}" --cert-dir "$dir/scheduler" \
        --leader-elect=false --kube-api-qps 200 --kube-api-burst 400
    start "$c-kwok" kwok \
        --kubeconfig "$dir/admin.kubeconfig" --config "$BIN/kwok-stages.yaml" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --cidr 10.0.0.0/16 --node-ip 127.0.0.1
done

# --- the shared kubeconfig and registration file --------------------------------------------------
KUBECONFIG_FILE="$LAB_DIR/kubeconfig"
{
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    for c in "${CLUSTERS[@]}"; do
        echo "- name: $c"
        echo "  cluster: {server: \"https://127.0.0.1:${API_PORT[$c]}\", certificate-authority-data: $(b64 "$PKI/ca.crt")}"
    done
    echo "users:"
    for c in "${CLUSTERS[@]}"; do
        echo "- name: admin@$c"
        echo "  user: {client-certificate-data: $(b64 "$PKI/$c-admin.crt"), client-key-data: $(b64 "$PKI/$c-admin.key")}"
    done
    echo "contexts:"
    for c in "${CLUSTERS[@]}"; do
        echo "- name: $c"
        echo "  context: {cluster: $c, user: admin@$c}"
    done
    echo "current-context: hub"
} >"$KUBECONFIG_FILE.tmp"
chmod 600 "$KUBECONFIG_FILE.tmp"
mv "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"

{
    echo "# Member clusters of the lab in $LAB_DIR, registered for tenancy-hub."
    echo "clusters:"
    for ((i = 1; i <= MEMBERS; i++)); do
        echo "  - name: member-$i"
        echo "    context: member-$i"
        echo "    kubeconfig: $KUBECONFIG_FILE"
        echo "    labels: {lab: local, index: \"$i\"}"
    done
} >"$LAB_DIR/clusters.yaml"

cat >"$LAB_DIR/env" <<ENV
export KUBECONFIG="$KUBECONFIG_FILE"
export PATH="$BIN:\$PATH"
export TENANCY_HUB_LAB_DIR="$LAB_DIR"
export TENANCY_HUB_HELM_EXECUTOR="$EXECUTOR"
export TENANCY_HUB_REAL_CHARTS="$REAL_CHARTS"
ENV

# --- fake nodes, and waiting for every cluster to schedule and run pods ---------------------------
for c in "${CLUSTERS[@]}"; do
    for ((n = 0; n < NODES; n++)); do
        kubectl --kubeconfig "$KUBECONFIG_FILE" --context "$c" apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-$c-$n
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-$c-$n, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
NODE
    done
done

for c in "${CLUSTERS[@]}"; do
    k=(kubectl --kubeconfig "$KUBECONFIG_FILE" --context "$c")
    wait_for "the $c controller-manager (see $LOGS/$c-kube-controller-manager.log)" 120 \
        curl -sfk "https://127.0.0.1:${KCM_PORT[$c]}/healthz"
    wait_for "the $c scheduler (see $LOGS/$c-kube-scheduler.log)" 120 \
        curl -sfk "https://127.0.0.1:${SCHED_PORT[$c]}/healthz"
    wait_for "the $c fake nodes to be Ready (see $LOGS/$c-kwok.log)" 120 \
        "${k[@]}" wait --for=condition=Ready node --all --timeout=5s
    wait_for "the $c default service account" 120 "${k[@]}" get serviceaccount default -n default
    log "$c is ready"
done

# The operator's leader election Lease lives in namespace tenancy-hub by default, as in deploy/.
kubectl --kubeconfig "$KUBECONFIG_FILE" --context hub apply -f - >/dev/null <<'NAMESPACE'
apiVersion: v1
kind: Namespace
metadata:
  name: tenancy-hub
NAMESPACE

{
    echo "lab is up in $LAB_DIR ($((SECONDS - START))s)"
    for c in "${CLUSTERS[@]}"; do
        printf '  %-10s https://127.0.0.1:%s\n' "$c" "${API_PORT[$c]}"
    done
    echo "  kubeconfig:    $KUBECONFIG_FILE (contexts: ${CLUSTERS[*]})"
    echo "  registration:  $LAB_DIR/clusters.yaml"
    echo "  tools:         source $LAB_DIR/env   # KUBECONFIG, kubectl, helm"
    echo "  stop:          lab/down.sh --dir $LAB_DIR"
} >"$LAB_DIR/summary"
cat "$LAB_DIR/summary"
trap - EXIT
