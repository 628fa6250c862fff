#!/usr/bin/env bash
# For machines with Docker: the lab's outputs, made with kind (https://kind.sigs.k8s.io) instead of
# lab/up.sh's processes on loopback.
#
#   kind/up.sh [--members N] [--dir DIR]
#
# Creates kind clusters tenancy-hub-hub and tenancy-hub-member-1 ... -N, then writes what lab/up.sh
# writes for them: DIR/kubeconfig with contexts hub, member-1 ... member-N, DIR/clusters.yaml
# registering the members, and namespace tenancy-hub on the hub for the operator's Lease.
# kind/down.sh deletes the clusters. Requires docker, kind and kubectl.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MEMBERS=2
LAB_DIR="${TENANCY_HUB_LAB_DIR:-$HERE/../.lab}"
while (($#)); do
    case $1 in
        --members) MEMBERS=${2:?}; shift 2 ;;
        --dir) LAB_DIR=${2:?}; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 1 ;;
    esac
done
for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done
mkdir -p "$LAB_DIR"
LAB_DIR=$(cd "$LAB_DIR" && pwd)
CLUSTERS=(hub)
for ((i = 1; i <= MEMBERS; i++)); do CLUSTERS+=("member-$i"); done

export KUBECONFIG="$LAB_DIR/kubeconfig"
for c in "${CLUSTERS[@]}"; do
    if ! kind get clusters | grep -qx "tenancy-hub-$c"; then
        kind create cluster --name "tenancy-hub-$c" --config "$HERE/cluster.yaml" --wait 120s
    fi
    kind export kubeconfig --name "tenancy-hub-$c"
    # kind names contexts kind-<cluster>; the lab's interface names them after the cluster.
    kubectl config delete-context "$c" >/dev/null 2>&1 || true
    kubectl config rename-context "kind-tenancy-hub-$c" "$c"
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
echo "kind lab ready: $KUBECONFIG (contexts: ${CLUSTERS[*]}), $LAB_DIR/clusters.yaml"
