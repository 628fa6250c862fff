#!/usr/bin/env bash
# For machines with Docker: the lab's outputs, made with kind (https://kind.sigs.k8s.io) instead of
# kind/up.sh's processes on loopback.
#
#   kind/docker/up.sh [--members N] [--pull-members N] [--dir DIR]
#
# Creates kind clusters tenancy-hub-hub and tenancy-hub-member-1 ... -N, then writes what kind/up.sh
# writes for them: DIR/kubeconfig with contexts hub, member-1 ... member-N, DIR/clusters.yaml
# registering the members, and namespace tenancy-hub on the hub for the operator's Lease.
# With --pull-members N (default 0) it also creates tenancy-hub-pull-1 ... -N, whose credentials
# stay out of those files (every kind cluster has a CA of its own), and writes, as kind/up.sh does:
#   DIR/pull/pull-K.kubeconfig  context pull-K, that member's admin
#   DIR/pull/hub-server         the hub API server's URL, as this machine reaches it (an agent
#                               run as a pod in a kind cluster reaches the hub at the address of
#                               `kind get kubeconfig --internal --name tenancy-hub-hub` instead)
#   DIR/pull/hub.ca.crt         the hub API server's CA
# kind/docker/down.sh deletes the clusters. Requires docker, kind and kubectl.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MEMBERS=2
PULL_MEMBERS=0
LAB_DIR="${TENANCY_HUB_LAB_DIR:-$HERE/../../.lab}"
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "kind/docker/up.sh: $*" >&2; exit 1; }
while (($#)); do
    case $1 in
        --members) MEMBERS=${2:?--members needs a number}; shift 2 ;;
        --pull-members) PULL_MEMBERS=${2:?--pull-members needs a number}; shift 2 ;;
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $MEMBERS =~ ^[0-9]+$ ]] || die "--members must be a whole number, got '$MEMBERS'"
[[ $PULL_MEMBERS =~ ^[0-9]+$ ]] || die "--pull-members must be a whole number, got '$PULL_MEMBERS'"
for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null || die "$tool is required (see https://kind.sigs.k8s.io/docs/user/quick-start/)"
done
mkdir -p "$LAB_DIR"
LAB_DIR=$(cd "$LAB_DIR" && pwd)
CLUSTERS=(hub)
for ((i = 1; i <= MEMBERS; i++)); do CLUSTERS+=("member-$i"); done

# kind_cluster NAME KUBECONFIG: creates tenancy-hub-NAME unless it exists, and writes its admin
# into KUBECONFIG as context NAME (kind names contexts kind-<cluster>).
kind_cluster() {
    local name=$1 file=$2
    if ! kind get clusters | grep -qx "tenancy-hub-$name"; then
        kind create cluster --name "tenancy-hub-$name" --config "$HERE/cluster.yaml" --kubeconfig "$file" --wait 120s
    fi
    kind export kubeconfig --name "tenancy-hub-$name" --kubeconfig "$file"
    kubectl --kubeconfig "$file" config delete-context "$name" >/dev/null 2>&1 || true
    kubectl --kubeconfig "$file" config rename-context "kind-tenancy-hub-$name" "$name"
}

export KUBECONFIG="$LAB_DIR/kubeconfig"
for c in "${CLUSTERS[@]}"; do
    kind_cluster "$c" "$KUBECONFIG"
done
kubectl config use-context hub
kubectl --context hub create namespace tenancy-hub --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null

{
    echo "clusters:"
    for ((i = 1; i <= MEMBERS; i++)); do
        printf '  - name: member-%s\n    context: member-%s\n    kubeconfig: %s\n    labels: {lab: kind, index: "%s"}\n' \
            "$i" "$i" "$KUBECONFIG" "$i"
    done
} >"$LAB_DIR/clusters.yaml"

PULLS=()
if ((PULL_MEMBERS > 0)); then
    mkdir -p "$LAB_DIR/pull"
    for ((i = 1; i <= PULL_MEMBERS; i++)); do
        PULLS+=("pull-$i")
        kind_cluster "pull-$i" "$LAB_DIR/pull/pull-$i.kubeconfig"
        kubectl --kubeconfig "$LAB_DIR/pull/pull-$i.kubeconfig" config use-context "pull-$i" >/dev/null
    done
    kubectl config view --raw --minify --context hub -o jsonpath='{.clusters[0].cluster.server}' >"$LAB_DIR/pull/hub-server"
    echo >>"$LAB_DIR/pull/hub-server"
    kubectl config view --raw --minify --context hub \
        -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$LAB_DIR/pull/hub.ca.crt"
fi
echo "kind lab ready: $KUBECONFIG (contexts: ${CLUSTERS[*]}), $LAB_DIR/clusters.yaml"
if ((${#PULLS[@]})); then
    echo "pull members: ${PULLS[*]} (kubeconfigs in $LAB_DIR/pull; hub-server and hub.ca.crt beside them)"
fi
