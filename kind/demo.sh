#!/usr/bin/env bash
# The tenancy-hub demo: brings up the lab (a hub and two member clusters), installs the Controller
# CRD on the hub, and shows every registered cluster reachable.
#
#   kind/demo.sh [--members N] [--dir DIR]
#
# The lab stays up afterwards so you can explore it; kind/down.sh --dir DIR stops it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMBERS=2
LAB_DIR=$(default_lab_dir)
while (($#)); do
    case $1 in
        --members) MEMBERS=${2:?--members needs a number}; shift 2 ;;
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        -h | --help) sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done

if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }

step "1/4 bringing up the lab: hub + $MEMBERS members (the first run builds Kubernetes from source, ~10 min)"
"$LAB_ROOT/up.sh" --members "$MEMBERS" --dir "$LAB_DIR"
source "$LAB_DIR/env"

step "2/4 building tenancy-hub"
(cd "$REPO_ROOT" && cargo build --locked --quiet)
TH="$REPO_ROOT/target/debug/tenancy-hub"

step "3/4 installing the Controller CRD on the hub"
"$TH" crd | kubectl --context hub apply --server-side --force-conflicts --field-manager tenancy-hub -f -
kubectl --context hub wait --for condition=Established --timeout 60s crd/controllers.multitenancy.dev
kubectl --context hub explain controllers.spec.tenancies.charts | sed -n '1,12p'

step "4/4 every registered cluster, as tenancy-hub sees it"
"$TH" clusters --clusters "$LAB_DIR/clusters.yaml" --kubeconfig "$KUBECONFIG" --context hub

cat <<MSG

The lab is still running. Try:
  source $LAB_DIR/env
  kubectl --context member-1 get nodes
  kubectl --context hub apply -f config/example-controller.yaml && kubectl --context hub get controllers
Stop it with: kind/down.sh --dir $LAB_DIR
MSG
