#!/usr/bin/env bash
# Starts a local lab: a hub and N member Kubernetes clusters as plain processes on loopback.
#
#   kind/up.sh [--members N] [--pull-members N] [--nodes N] [--light] [--dir DIR]
#
# Each cluster has its own kube-apiserver (TLS, client-certificate auth, RBAC), controller-manager,
# scheduler and kwok (fake nodes, so pods reach Running); they share one etcd under separate
# prefixes. The script returns once every cluster is ready and leaves:
#   DIR/kubeconfig     contexts hub, member-1 ... member-N
#   DIR/clusters.yaml  the members, as a tenancy-hub registration file
#   DIR/env            `source` it for KUBECONFIG and a PATH with kubectl and helm
# With --pull-members N (default 0) it also starts pull-1 ... pull-N, members the hub side holds no
# credentials for: they have a CA of their own (serving and client certificates), and are in
# neither file above. What a member-side join needs is in DIR/pull instead:
#   DIR/pull/pull-K.kubeconfig  context pull-K, that member's admin
#   DIR/pull/hub-server         the hub API server's URL
#   DIR/pull/hub.ca.crt         the CA that signed the hub API server's certificate
# It also starts the lab's Git server (kind/tools/git-server, built by kind/git.sh) on loopback, for
# Git chart sources: smart HTTP (basic auth or bearer token) and SSH (a client key, strict host key).
# What a client needs is in DIR/git: http-url, ssh-url, auth.json (username, password, token; also
# as the files username, password, token), client_ed25519 (the client key), known_hosts, repos/
# (the bare repositories it serves: repos/team/charts.git is served as /team/charts.git).
# With --light, every cluster but the hub runs the least a member needs (for many members on one
# machine, as kind/bench.sh's scale scenarios do): the controller-manager runs only the controllers
# that make and remove what charts deliver (workloads, jobs, namespaces, garbage collection,
# service accounts, node readiness), the API server skips priority and fairness, and each
# process collects its garbage sooner (GOGC=50). The hub is never lightened: it is what the
# benchmarks measure.
# kind/down.sh --dir DIR stops exactly these processes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMBERS=2
PULL_MEMBERS=
NODES=1
LIGHT=false
LAB_DIR=$(default_lab_dir)
usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --members) MEMBERS=${2:?--members needs a number}; shift 2 ;;
        --pull-members) PULL_MEMBERS=${2:?--pull-members needs a number}; shift 2 ;;
        --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
        --light) LIGHT=true; shift ;;
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $MEMBERS =~ ^[0-9]+$ ]] || die "--members must be a whole number, got '$MEMBERS'"
[[ ${PULL_MEMBERS:-0} =~ ^[0-9]+$ ]] || die "--pull-members must be a whole number, got '$PULL_MEMBERS'"
[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "--nodes must be at least 1, got '$NODES'"
PULLS_WANTED=$((10#${PULL_MEMBERS:-0}))
mkdir -p "$LAB_DIR"
LAB_DIR=$(cd "$LAB_DIR" && pwd)

for tool in openssl curl python3; do
    command -v "$tool" >/dev/null || die "$tool is required (install it with your package manager)"
done

if [[ -s "$LAB_DIR/pids" ]]; then
    if "$LAB_ROOT/status.sh" --dir "$LAB_DIR" >/dev/null 2>&1; then
        running=$(pull_members "$LAB_DIR" | wc -l)
        if [[ -n $PULL_MEMBERS ]] && ((running != PULLS_WANTED)); then
            die "the lab running in $LAB_DIR has $running pull members, not $PULLS_WANTED; stop it first with: kind/down.sh --dir $LAB_DIR"
        fi
        log "a lab is already running in $LAB_DIR; reusing it (kind/down.sh --dir $LAB_DIR stops it)"
        cat "$LAB_DIR/summary"
        exit 0
    fi
    die "a lab in $LAB_DIR is partly running; stop it first with: kind/down.sh --dir $LAB_DIR"
fi

START=$SECONDS
BIN=$("$LAB_ROOT/build.sh")
export PATH="$BIN:$PATH"
EXECUTOR=$("$LAB_ROOT/executor.sh")
# The operator's checker of chart signatures, and the tools the tests sign charts with.
VERIFIER=$("$LAB_ROOT/verifier.sh")
SIGNING=$("$LAB_ROOT/signing.sh")
# The operator's Git fetcher and the lab's Git server.
GIT_BIN=$("$LAB_ROOT/git.sh")
# A real-world chart (ExternalDNS's, pinned) for tests/fleets_realworld.rs, fetched once.
REAL_CHARTS=$("$LAB_ROOT/real-chart.sh")
PKI="$LAB_DIR/pki"
LOGS="$LAB_DIR/logs"
PULL_DIR="$LAB_DIR/pull"
rm -rf "$PKI" "$LOGS" "$LAB_DIR/etcd" "$LAB_DIR/clusters" "$LAB_DIR/cmds" "$PULL_DIR" "$LAB_DIR/git"
mkdir -p "$PKI" "$LOGS" "$LAB_DIR/clusters"
: >"$LAB_DIR/pids"

# If anything below fails, stop what was started so nothing is left running.
trap 'rc=$?; if ((rc != 0)); then log "start-up failed; logs are in $LOGS"; "$LAB_ROOT/down.sh" --dir "$LAB_DIR" --keep-logs >&2 || true; fi' EXIT

# CLUSTERS are the hub and the members it holds credentials for; PULLS the pull members, whose
# credentials only DIR/pull holds. ALL runs the same recipe for both.
CLUSTERS=(hub)
for ((i = 1; i <= MEMBERS; i++)); do CLUSTERS+=("member-$i"); done
PULLS=()
for ((i = 1; i <= PULLS_WANTED; i++)); do PULLS+=("pull-$i"); done
ALL=("${CLUSTERS[@]}" "${PULLS[@]}")

# --- certificates -------------------------------------------------------------------------------
# The hub and its members share the lab CA. Each pull member has a CA of its own, which signs its
# API server's certificate and every client certificate it accepts, so no credential of the hub
# side (nor of another pull member) opens it. Each cluster's keys are made at the same time as the
# others', which keeps this step short as clusters are added.
log "creating certificates in $PKI"
newkey() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
openssl_quiet() { openssl "$@" 2>/dev/null; }
# new_ca NAME: a self-signed CA, PKI/NAME.key and PKI/NAME.crt.
new_ca() {
    newkey "$PKI/$1.key"
    openssl_quiet req -x509 -new -key "$PKI/$1.key" -subj "/CN=tenancy-hub-lab-$1" -days 3650 -out "$PKI/$1.crt"
}
# sign NAME SUBJECT EXTENSIONS [CA]: a key and a certificate signed by CA (default: the lab CA),
# with a random serial, so that certificates can be signed side by side.
sign() {
    local name=$1 subject=$2 ext=$3 ca=${4:-ca}
    newkey "$PKI/$name.key"
    openssl_quiet req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr"
    printf '%s\n' "$ext" >"$PKI/$name.ext"
    openssl_quiet x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
        -set_serial "$(printf '0x%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM)" \
        -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt"
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
CLIENT_EXT=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
SERVER_EXT=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1'
declare -A CA KCM_CERT SCHED_CERT
for c in "${CLUSTERS[@]}"; do CA[$c]=ca KCM_CERT[$c]=controller-manager SCHED_CERT[$c]=scheduler; done
for c in "${PULLS[@]}"; do CA[$c]="$c-ca" KCM_CERT[$c]="$c-controller-manager" SCHED_CERT[$c]="$c-scheduler"; done
# cluster_pki CLUSTER: its CA when it has its own, its API server's and admin's certificates, its
# service account key, and its own controller-manager and scheduler certificates when its CA is.
cluster_pki() {
    local c=$1 ca=${CA[$1]}
    if [[ $ca != ca ]]; then
        new_ca "$ca"
        sign "${KCM_CERT[$c]}" "/CN=system:kube-controller-manager" "$CLIENT_EXT" "$ca"
        sign "${SCHED_CERT[$c]}" "/CN=system:kube-scheduler" "$CLIENT_EXT" "$ca"
    fi
    sign "$c-apiserver" "/CN=kube-apiserver-$c" "$SERVER_EXT" "$ca"
    sign "$c-admin" "/O=system:masters/CN=admin@$c" "$CLIENT_EXT" "$ca"
    openssl_quiet genrsa -out "$PKI/$c-sa.key" 2048
    openssl_quiet rsa -in "$PKI/$c-sa.key" -pubout -out "$PKI/$c-sa.pub"
}
new_ca ca
making=()
sign controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT" &
making+=($!)
sign scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT" &
making+=($!)
for c in "${ALL[@]}"; do
    cluster_pki "$c" &
    making+=($!)
done
for pid in "${making[@]}"; do
    wait "$pid" || die "creating the certificates failed (is openssl working? try: openssl version)"
done
chmod 600 "$PKI"/*.key

# --- processes ----------------------------------------------------------------------------------
# start NAME BINARY ARGS...: runs BINARY in its own session, logging to LOGS/NAME.log, and keeps
# its command line in LAB_DIR/cmds/NAME so kind/ctl.sh can start it again.
start() {
    local name=$1 bin=$2; shift 2
    local gogc=${GOGC:-100}
    if $LIGHT && [[ $name != hub-* && $name != etcd ]]; then gogc=50; fi
    mkdir -p "$LAB_DIR/cmds"
    printf 'env GOGC=%q %q ' "$gogc" "$BIN/$bin" >"$LAB_DIR/cmds/$name"
    printf '%q ' "$@" >>"$LAB_DIR/cmds/$name"
    GOGC=$gogc setsid "$BIN/$bin" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    printf '%s %s %s\n' "$!" "$name" "$BIN/$bin" >>"$LAB_DIR/pids"
}

b64() { base64 -w0 <"$1"; }

# kubeconfig FILE SERVER CERT CA [NAME]: a single-context kubeconfig for one client certificate,
# its cluster and context named NAME (default: lab), its user admin@NAME.
kubeconfig() {
    local name=${5:-lab}
    cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: $name, cluster: {server: "$2", certificate-authority-data: $(b64 "$PKI/$4.crt")}}]
users: [{name: admin@$name, user: {client-certificate-data: $(b64 "$PKI/$3.crt"), client-key-data: $(b64 "$PKI/$3.key")}}]
contexts: [{name: $name, context: {cluster: $name, user: admin@$name}}]
current-context: $name
KC
    chmod 600 "$1"
}

# light_for CLUSTER ARGS...: ARGS when the lab is light and CLUSTER is not the hub.
light_for() {
    local c=$1; shift
    if $LIGHT && [[ $c != hub ]]; then printf '%s ' "$@"; fi
}

# controllers_for CLUSTER: the controller-manager's --controllers for CLUSTER.
controllers_for() {
    if $LIGHT && [[ $1 != hub ]]; then
        echo 'deployment,replicaset,statefulset,daemonset,job,namespace,garbagecollector,serviceaccount,serviceaccount-token,root-ca-cert-publisher,nodelifecycle'
    else
        echo '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller,-node-route-controller'
    fi
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

# --- the Git server ----------------------------------------------------------------------------
# Its secrets go to files of DIR/git (mode 0600), never to argv.
GIT_LAB="$LAB_DIR/git"
mkdir -p "$GIT_LAB/repos"
ssh-keygen -q -t ed25519 -N '' -C tenancy-hub-lab-git-host -f "$GIT_LAB/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -C tenancy-hub-lab-git-client -f "$GIT_LAB/client_ed25519"
cp "$GIT_LAB/client_ed25519.pub" "$GIT_LAB/authorized_keys"
GIT_HTTP_PORT=$(free_port)
GIT_SSH_PORT=$(free_port)
printf '[127.0.0.1]:%s %s\n' "$GIT_SSH_PORT" "$(cut -d' ' -f1,2 "$GIT_LAB/host_ed25519.pub")" >"$GIT_LAB/known_hosts"
(
    umask 077
    printf 'lab\n' >"$GIT_LAB/username"
    openssl rand -hex 16 >"$GIT_LAB/password"
    openssl rand -hex 24 >"$GIT_LAB/token"
    printf '{"username": "lab", "password": "%s", "token": "%s"}\n' "$(cat "$GIT_LAB/password")" "$(cat "$GIT_LAB/token")" >"$GIT_LAB/auth.json"
)
echo "http://127.0.0.1:$GIT_HTTP_PORT" >"$GIT_LAB/http-url"
echo "ssh://git@127.0.0.1:$GIT_SSH_PORT" >"$GIT_LAB/ssh-url"
log "starting the Git server on http://127.0.0.1:$GIT_HTTP_PORT and ssh://127.0.0.1:$GIT_SSH_PORT"
mkdir -p "$LAB_DIR/cmds"
printf '%q ' "$GIT_BIN/tenancy-hub-git-server" --repos "$GIT_LAB/repos" --http "127.0.0.1:$GIT_HTTP_PORT" \
    --ssh "127.0.0.1:$GIT_SSH_PORT" --auth "$GIT_LAB/auth.json" --host-key "$GIT_LAB/host_ed25519" \
    --authorized-keys "$GIT_LAB/authorized_keys" >"$LAB_DIR/cmds/git-server"
eval "setsid $(cat "$LAB_DIR/cmds/git-server") >\"$LOGS/git-server.log\" 2>&1 </dev/null &"
printf '%s %s %s\n' "$!" git-server "$GIT_BIN/tenancy-hub-git-server" >>"$LAB_DIR/pids"
wait_for "the Git server (see $LOGS/git-server.log)" 30 curl -s -o /dev/null "http://127.0.0.1:$GIT_HTTP_PORT/"
wait_for "the Git server's SSH (see $LOGS/git-server.log)" 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$GIT_SSH_PORT"

declare -A API_PORT
for c in "${ALL[@]}"; do
    port=$(free_port)
    API_PORT[$c]=$port
    log "starting kube-apiserver for $c on https://127.0.0.1:$port"
    start "$c-kube-apiserver" kube-apiserver \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" --etcd-prefix "/registry-$c" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
        --cert-dir "$LAB_DIR/clusters/$c" \
        --tls-cert-file "$PKI/$c-apiserver.crt" --tls-private-key-file "$PKI/$c-apiserver.key" \
        --client-ca-file "$PKI/${CA[$c]}.crt" --authorization-mode RBAC \
        --service-account-issuer "https://kubernetes.default.svc" \
        --service-account-key-file "$PKI/$c-sa.pub" --service-account-signing-key-file "$PKI/$c-sa.key" \
        --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --profiling=false \
        --endpoint-reconciler-type none $(light_for "$c" --enable-priority-and-fairness=false)
done

for c in "${ALL[@]}"; do
    dir="$LAB_DIR/clusters/$c"
    mkdir -p "$dir"
    server="https://127.0.0.1:${API_PORT[$c]}"
    kubeconfig "$dir/admin.kubeconfig" "$server" "$c-admin" "${CA[$c]}"
    kubeconfig "$dir/controller-manager.kubeconfig" "$server" "${KCM_CERT[$c]}" "${CA[$c]}"
    kubeconfig "$dir/scheduler.kubeconfig" "$server" "${SCHED_CERT[$c]}" "${CA[$c]}"
done

for c in "${ALL[@]}"; do
    wait_for "the $c API server to be ready (see $LOGS/$c-kube-apiserver.log)" 180 \
        curl -sf --cacert "$PKI/${CA[$c]}.crt" --cert "$PKI/$c-admin.crt" --key "$PKI/$c-admin.key" \
        "https://127.0.0.1:${API_PORT[$c]}/readyz"
    log "$c API server is ready"
done

# A pull member must refuse the hub's admin: its answer to the hub's certificate is 401.
for c in "${PULLS[@]}"; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$PKI/${CA[$c]}.crt" \
        --cert "$PKI/hub-admin.crt" --key "$PKI/hub-admin.key" "https://127.0.0.1:${API_PORT[$c]}/api")
    [[ $code == 401 ]] || die "$c answered $code, not 401, to the hub's admin certificate; its credentials must be its own"
done

declare -A KCM_PORT SCHED_PORT
for c in "${ALL[@]}"; do
    dir="$LAB_DIR/clusters/$c"
    KCM_PORT[$c]=$(free_port)
    SCHED_PORT[$c]=$(free_port)
    start "$c-kube-controller-manager" kube-controller-manager \
        --kubeconfig "$dir/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "${KCM_PORT[$c]}" --cert-dir "$dir/kcm" \
        --leader-elect=false --use-service-account-credentials --kube-api-qps 200 --kube-api-burst 400 \
        --service-account-private-key-file "$PKI/$c-sa.key" --root-ca-file "$PKI/${CA[$c]}.crt" \
        --cluster-signing-cert-file "$PKI/${CA[$c]}.crt" --cluster-signing-key-file "$PKI/${CA[$c]}.key" \
        --controllers "$(controllers_for "$c")"
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

# --- what the member side of a pull member holds, and nothing of the hub's but where it is ---------
if ((${#PULLS[@]})); then
    mkdir -p "$PULL_DIR"
    for c in "${PULLS[@]}"; do
        kubeconfig "$PULL_DIR/$c.kubeconfig" "https://127.0.0.1:${API_PORT[$c]}" "$c-admin" "${CA[$c]}" "$c"
    done
    cp "$PKI/ca.crt" "$PULL_DIR/hub.ca.crt"
    echo "https://127.0.0.1:${API_PORT[hub]}" >"$PULL_DIR/hub-server"
fi

cat >"$LAB_DIR/env" <<ENV
export KUBECONFIG="$KUBECONFIG_FILE"
export PATH="$BIN:$SIGNING:\$PATH"
export TENANCY_HUB_LAB_DIR="$LAB_DIR"
export TENANCY_HUB_HELM_EXECUTOR="$EXECUTOR"
export TENANCY_HUB_VERIFIER="$VERIFIER"
export TENANCY_HUB_SIGNING_TOOLS="$SIGNING"
export TENANCY_HUB_REAL_CHARTS="$REAL_CHARTS"
export TENANCY_HUB_GIT_FETCHER="$GIT_BIN/tenancy-hub-git"
export TENANCY_HUB_GIT_HTTP="http://127.0.0.1:$GIT_HTTP_PORT"
export TENANCY_HUB_GIT_SSH="ssh://git@127.0.0.1:$GIT_SSH_PORT"
export TENANCY_HUB_GIT_DIR="$GIT_LAB"
export TENANCY_HUB_GIT_REPOS="$GIT_LAB/repos"
export TENANCY_HUB_GIT_AUTH="$GIT_LAB/auth.json"
export TENANCY_HUB_GIT_SSH_KEY="$GIT_LAB/client_ed25519"
export TENANCY_HUB_GIT_KNOWN_HOSTS="$GIT_LAB/known_hosts"
ENV

# kctl CLUSTER ARGS...: kubectl as the admin of CLUSTER, from the file that holds its credentials.
kctl() {
    local c=$1; shift
    if [[ ${CA[$c]} != ca ]]; then
        kubectl --kubeconfig "$PULL_DIR/$c.kubeconfig" --context "$c" "$@"
    else
        kubectl --kubeconfig "$KUBECONFIG_FILE" --context "$c" "$@"
    fi
}

# --- fake nodes, and waiting for every cluster to schedule and run pods ---------------------------
for c in "${ALL[@]}"; do
    for ((n = 0; n < NODES; n++)); do
        kctl "$c" apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-$c-$n
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-$c-$n, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
NODE
    done
done

for c in "${ALL[@]}"; do
    wait_for "the $c controller-manager (see $LOGS/$c-kube-controller-manager.log)" 120 \
        curl -sfk "https://127.0.0.1:${KCM_PORT[$c]}/healthz"
    wait_for "the $c scheduler (see $LOGS/$c-kube-scheduler.log)" 120 \
        curl -sfk "https://127.0.0.1:${SCHED_PORT[$c]}/healthz"
    wait_for "the $c fake nodes to be Ready (see $LOGS/$c-kwok.log)" 120 \
        kctl "$c" wait --for=condition=Ready node --all --timeout=5s
    wait_for "the $c default service account" 120 kctl "$c" get serviceaccount default -n default
    log "$c is ready"
done

# The operator's leader election Lease lives in namespace tenancy-hub by default, as in deploy/.
kctl hub apply -f - >/dev/null <<'NAMESPACE'
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
    for c in "${PULLS[@]}"; do
        printf '  %-10s https://127.0.0.1:%s  (kubeconfig %s)\n' "$c" "${API_PORT[$c]}" "$PULL_DIR/$c.kubeconfig"
    done
    echo "  kubeconfig:    $KUBECONFIG_FILE (contexts: ${CLUSTERS[*]})"
    echo "  registration:  $LAB_DIR/clusters.yaml"
    if ((${#PULLS[@]})); then
        echo "  pull members:  ${PULLS[*]} (a CA of their own each; in neither file above)"
        echo "  hub for joins: $PULL_DIR/hub-server, $PULL_DIR/hub.ca.crt"
    fi
    echo "  git server:    http://127.0.0.1:$GIT_HTTP_PORT, ssh://git@127.0.0.1:$GIT_SSH_PORT (credentials in $GIT_LAB)"
    echo "  tools:         source $LAB_DIR/env   # KUBECONFIG, kubectl, helm"
    echo "  stop:          kind/down.sh --dir $LAB_DIR"
} >"$LAB_DIR/summary"
cat "$LAB_DIR/summary"
trap - EXIT
