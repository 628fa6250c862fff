#!/usr/bin/env bash
# The tenancy-hub demo: brings up the lab (a hub and two member clusters), installs the Controller
# CRD on the hub, shows every registered cluster reachable, runs the operator, and delivers the seed's
# example Controller to the hub and a second tenancy to both members, and ends by printing the
# fleet view's URL and a token to sign in with.
#
#   kind/demo.sh [--members N] [--dir DIR]
#
# The lab and the operator (for the fleet view) stay up afterwards so you can explore them;
# kind/down.sh --dir DIR stops both.
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

OPERATOR_PID=
KEEP_OPERATOR=false
stop_operator() {
    if ! $KEEP_OPERATOR && [[ -n $OPERATOR_PID ]] && kill -0 "$OPERATOR_PID" 2>/dev/null; then
        kill -TERM "$OPERATOR_PID"
        wait "$OPERATOR_PID" || true
    fi
}
trap stop_operator EXIT

step "1/6 bringing up the lab: hub + $MEMBERS members (the first run builds Kubernetes from source, ~10 min)"
"$LAB_ROOT/up.sh" --members "$MEMBERS" --dir "$LAB_DIR"
source "$LAB_DIR/env"

step "2/6 building tenancy-hub"
(cd "$REPO_ROOT" && cargo build --locked --quiet)
# Wherever cargo puts it (CARGO_TARGET_DIR or its configuration may move the target directory).
TH="$(cd "$REPO_ROOT" && cargo metadata --locked --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/tenancy-hub"

step "3/6 installing the CRDs on the hub, the admin's TenancyPolicy for the examples (and namespace tenancy-hub for the operator's Lease)"
kubectl --context hub create namespace tenancy-hub --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null
"$TH" crd | kubectl --context hub apply --server-side --force-conflicts --field-manager tenancy-hub -f -
"$TH" admission-policy | kubectl --context hub apply --server-side --force-conflicts --field-manager tenancy-hub -f -
kubectl --context hub wait --for condition=Established --timeout 60s \
    crd/controllers.multitenancy.dev crd/tenancypolicies.multitenancy.dev
kubectl --context hub apply -f "$REPO_ROOT/config/admin-policy.yaml"

step "4/6 every registered cluster, as tenancy-hub sees it"
"$TH" clusters --clusters "$LAB_DIR/clusters.yaml" --kubeconfig "$KUBECONFIG" --context hub

step "5/6 running the operator (log: $LAB_DIR/operator.log) and applying two Controllers"
HTTP_ADDR="127.0.0.1:$(free_port)"
"$TH" run --kubeconfig "$KUBECONFIG" --context hub --clusters "$LAB_DIR/clusters.yaml" \
    --chart-home "$REPO_ROOT/config/charts" --helm "$(command -v helm)" --http-addr "$HTTP_ADDR" \
    >"$LAB_DIR/operator.log" 2>&1 &
OPERATOR_PID=$!
kubectl --context hub apply -f "$REPO_ROOT/config/example-controller.yaml" -f "$REPO_ROOT/config/members-controller.yaml"
kubectl --context hub wait --for condition=Ready --timeout 180s \
    controller/example-controller controller/members-controller
kubectl --context hub get controllers

step "6/6 what runs where, per cluster (tenancy-hub status, and the operator's HTTP API)"
wait_for "both Controllers to report Ready" 120 "$TH" status --kubeconfig "$KUBECONFIG" --context hub
"$TH" status --kubeconfig "$KUBECONFIG" --context hub
echo
# The status API wants a bearer token the hub accepts: one of a ServiceAccount that may get
# Controllers in every hub namespace, so it sees every tenancy.
kubectl --context hub create serviceaccount status-reader -n tenancy-hub --dry-run=client -o yaml |
    kubectl --context hub apply -f - >/dev/null
kubectl --context hub create clusterrole tenancy-hub-status-reader --verb=get \
    --resource=controllers.multitenancy.dev --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null
kubectl --context hub create clusterrolebinding tenancy-hub-status-reader --clusterrole=tenancy-hub-status-reader \
    --serviceaccount=tenancy-hub:status-reader --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null
TOKEN=$(kubectl --context hub create token status-reader -n tenancy-hub)
echo "GET http://$HTTP_ADDR/api/v1/clusters (Authorization: Bearer \$(kubectl --context hub create token status-reader -n tenancy-hub))"
curl -s -H "Authorization: Bearer $TOKEN" "http://$HTTP_ADDR/api/v1/clusters" |
    python3 -m json.tool --compact 2>/dev/null || true

# The fleet view: the same operator serves it beside the status API. A viewer token of the demo
# tenants' hub namespace (default), which may get the Controllers there and nothing else.
kubectl --context hub create serviceaccount fleet-viewer -n default --dry-run=client -o yaml |
    kubectl --context hub apply -f - >/dev/null
kubectl --context hub create role fleet-viewer -n default --verb=get \
    --resource=controllers.multitenancy.dev --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null
kubectl --context hub create rolebinding fleet-viewer -n default --role=fleet-viewer \
    --serviceaccount=default:fleet-viewer --dry-run=client -o yaml | kubectl --context hub apply -f - >/dev/null
VIEW_TOKEN=$(kubectl --context hub create token fleet-viewer -n default --duration 8h)
# The operator keeps running for the view; kind/down.sh stops it with the lab.
KEEP_OPERATOR=true
printf '%s tenancy-hub-operator %s\n' "$OPERATOR_PID" "$(readlink -f "$TH")" >>"$LAB_DIR/pids"

cat <<MSG

The fleet view (the operator keeps running for it; log: $LAB_DIR/operator.log):
  http://$HTTP_ADDR/ui/
Sign in with this token of the demo tenants' hub namespace (default), valid 8 hours:
  $VIEW_TOKEN
(another: kubectl --context hub create token fleet-viewer -n default; see docs/fleet-view.md)

The lab, the releases and the operator stay. Try:
  source $LAB_DIR/env
  kubectl --context hub get controllers -o yaml
  $TH status --kubeconfig \$KUBECONFIG --context hub
Stop the lab and the operator with: kind/down.sh --dir $LAB_DIR
MSG
