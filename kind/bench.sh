#!/usr/bin/env bash
# Benchmarks: convergence, status propagation latency, write load, footprint, breadth, growth
# (namespaces, Controllers, clusters), shards, rollout, fairness and a peer (Flux), on the lab.
#
#   kind/bench.sh [--dir DIR] [--only convergence,latency,breadth,footprint,namespaces,controllers,clusters,pull,shards,rollout,waves,fairness,size,fleets,peer,envelope,view]
#                 [--pods P] [--namespaces 10,100,500] [--unrelated-pods N] [--controllers 10,100,1000]
#                 [--clusters 1,5,10,20] [--quiet-seconds S] [--runs 3] [--shard-controllers 10]
#                 [--wave N] [--samples K] [--sizes 100,1000,10000] [--readers 1,10,100] [--peer flux]
#                 [--peer-targets hub,member-1,member-2] [--peer-workers 4] [--peer-setups flux,flux_shared,flux_wait]
#                 [--envelope 100,500,1000] [--envelope-replicas 1,2,4] [--envelope-controllers 8]
#                 [--signed 1,10,30] [--view-clusters 1000] [--view-controllers 8] [--view-streams 50]
#                 [--view-burst-seconds 30] [--json FILE]
#
# Brings the lab up in DIR if it is not running (default: .lab), builds tenancy-hub in release mode,
# runs the scenarios (each with an operator of its own), prints a table and writes the figures as
# JSON (default: DIR/bench.json). Figures are reported, never asserted; see BENCHMARKS.md.
# The rollout scenario needs three members: start the lab with kind/up.sh --members 3 --dir DIR first;
# the clusters scenario as many members as its largest count (kind/up.sh --members 20 --dir DIR),
# the pull scenario as many pull members (kind/up.sh --members 1 --pull-members 20 --dir DIR): the hub's
# cost per pull member (operator, hub API server, connections) and a spec change's latency, pull
# against push.
# The waves scenario (a change in three health-gated waves across every member) needs many members
# too (kind/up.sh --light --members 20 --dir DIR).
# The rollout, namespaces, controllers, clusters, shards, fairness (a small change's latency while
# another owner's wave of N installs runs, 1,000 by default) and size (plan time and operator memory
# against one Controller of --sizes charts) scenarios run only when named in --only; so does fleets
# (plan time of 100 clusters × 10 charts with per-cluster values, in process, and the hub's Secret
# requests for --readers Controllers reading one Secret).
# So does peer: `--only peer --peer flux` builds Flux's helm-controller and source-controller once
# (kind/peer-flux.sh, cached) and runs them against the operator on the same releases, --runs times.
# So does envelope: the hub with --envelope 100,500,1000 simulated pull members (generated: each its own
# agent identity, Lease, reports and answers) against the real operator, hub API server and etcd;
# with --envelope-replicas 1,2,4, the same members again against that many replicas run as shards
# (--shards K), --envelope-controllers 8 Controllers dividing the members between them.
# So does signed: one cosign-signed OCI chart to --signed 1,10,30 namespaces of every cluster, --runs
# times under a policy asking the signature and as many without (the cost per release, the checks run).
# So does view: the fleet view against --view-clusters 1000 simulated pull members divided between
# --view-controllers 8 Controllers (any lab; needs Debian's chromium and chromium-driver): the matrix's
# first render in headless Chromium, one live update, and the operator's memory and CPU idle and over
# a burst of changes, without views and with --view-streams 50 live streams open.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LAB_DIR=$(default_lab_dir)
PASS=()
JSON=
PEER=
while (($#)); do
    case $1 in
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        --json) JSON=${2:?--json needs a file}; shift 2 ;;
        --peer)
            [[ ${2:-} == flux ]] || die "--peer takes flux (the only peer)"
            PEER=flux; PASS+=(--peer flux); shift 2 ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) PASS+=("$1"); shift ;;
    esac
done
if ! "$LAB_ROOT/status.sh" --dir "$LAB_DIR" >/dev/null 2>&1; then
    "$LAB_ROOT/up.sh" --dir "$LAB_DIR"
fi
LAB_DIR=$(cd "$LAB_DIR" && pwd)
JSON=${JSON:-$LAB_DIR/bench.json}
if [[ $PEER == flux ]]; then
    log "building Flux's controllers (cached after the first time)"
    TENANCY_HUB_FLUX_DIR=$("$LAB_ROOT/peer-flux.sh")
    export TENANCY_HUB_FLUX_DIR
fi
log "building tenancy-hub in release mode"
(cd "$REPO_ROOT" && cargo build --locked --release --quiet --benches)
cd "$REPO_ROOT"
TENANCY_HUB_LAB_DIR=$LAB_DIR cargo bench --locked --quiet --bench lab -- --json "$JSON" "${PASS[@]}"
