#!/usr/bin/env bash
# Deletes the kind clusters made by kind/docker/up.sh (pull members included) and the files it wrote.
#
#   kind/docker/down.sh [--dir DIR]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_DIR="${TENANCY_HUB_LAB_DIR:-$HERE/../../.lab}"
[[ ${1:-} == --dir ]] && LAB_DIR=${2:?}
for c in $(kind get clusters | grep '^tenancy-hub-'); do
    kind delete cluster --name "$c"
done
rm -f "$LAB_DIR/kubeconfig" "$LAB_DIR/clusters.yaml"
rm -rf "$LAB_DIR/pull"
