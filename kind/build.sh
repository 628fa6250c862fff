#!/usr/bin/env bash
# Builds the lab's binaries from Go modules into a cache outside the repo, once; prints the bin dir.
#
#   kind/build.sh            build what is missing, print the bin directory on stdout
#
# Components: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (through the
# wrapper module in kind/tools, which pins k8s.io/kubernetes and its staging modules), kwok and helm
# (through `go install module@version`), and an OCI registry (distribution) for chart tests.
# Versions are in kind/versions.env.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN_DIR="$(lab_cache_dir)/bin"
mkdir -p "$BIN_DIR"

# The build commands: each writes one binary to $out (build_with_progress in lib.sh sets it).
# shellcheck disable=SC2154 # $out is set by build_with_progress
k8s_build() {
    local v=k8s.io/component-base/version minor=${KUBERNETES_VERSION#*.}
    minor=${minor%%.*}
    (cd "$LAB_ROOT/tools" && go build -o "$out" \
        -ldflags "-s -w -X $v.gitVersion=v$KUBERNETES_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
        "$1")
}
etcd_build() { (cd "$LAB_ROOT/tools" && go build -o "$out" -ldflags "-s -w" go.etcd.io/etcd/server/v3); }
go_install() {
    local gobin
    gobin=$(dirname "$out")
    GOBIN="$gobin" go install -ldflags "-s -w $2" "$1"
    [[ -x "$out" ]] || mv "$gobin/$(basename "${1%@*}")" "$out"
}

build_with_progress "$BIN_DIR/etcd" "(1/8) etcd" etcd_build
build_with_progress "$BIN_DIR/kube-apiserver" "(2/8) kube-apiserver" k8s_build k8s.io/kubernetes/cmd/kube-apiserver
build_with_progress "$BIN_DIR/kube-controller-manager" "(3/8) kube-controller-manager" \
    k8s_build k8s.io/kubernetes/cmd/kube-controller-manager
build_with_progress "$BIN_DIR/kube-scheduler" "(4/8) kube-scheduler" k8s_build k8s.io/kubernetes/cmd/kube-scheduler
build_with_progress "$BIN_DIR/kubectl" "(5/8) kubectl" k8s_build k8s.io/kubernetes/cmd/kubectl
build_with_progress "$BIN_DIR/kwok" "(6/8) kwok" go_install "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
build_with_progress "$BIN_DIR/helm" "(7/8) helm" go_install "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION" \
    "-X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION"
build_with_progress "$BIN_DIR/registry" "(8/8) registry" \
    go_install "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION" ""

# kwok's stage definitions (fake node and pod lifecycles) ship in its module.
STAGES="$BIN_DIR/kwok-stages.yaml"
if [[ ! -s "$STAGES" ]]; then
    src=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    {
        for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
            pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
            echo "---"
            cat "$src/kustomize/stage/$f"
        done
    } >"$STAGES.tmp"
    mv "$STAGES.tmp" "$STAGES"
fi
echo "$BIN_DIR"
