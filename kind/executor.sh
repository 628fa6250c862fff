#!/usr/bin/env bash
# Builds tenancy-hub-helm, the operator's long-lived Helm executor (Go module src/helm/helm-sdk,
# on Helm's Go SDK), into a cache outside the repo, once per content of its source; prints its path.
#
#   kind/executor.sh         build it when missing, print the binary's path on stdout
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC="$REPO_ROOT/src/helm/helm-sdk"
# The executor must be the Helm the lab runs: one version in kind/versions.env.
grep -q "^	helm.sh/helm/v4 v$HELM_VERSION\$" "$SRC/go.mod" ||
    die "src/helm/helm-sdk/go.mod must require helm.sh/helm/v4 v$HELM_VERSION (kind/versions.env)"
go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build tenancy-hub-helm (https://go.dev/doc/install)"
sum=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go | sha256sum | cut -c1-12)
DIR="$(cache_root)/helm-sdk-$go_version-$sum"
# shellcheck disable=SC2154 # $out is set by build_with_progress
executor_build() { (cd "$SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" .); }
build_with_progress "$DIR/tenancy-hub-helm" "tenancy-hub-helm (Helm v$HELM_VERSION's Go SDK)" executor_build
echo "$DIR/tenancy-hub-helm"
