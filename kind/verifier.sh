#!/usr/bin/env bash
# Builds tenancy-hub-verify, the operator's checker of chart signatures (Go module src/charts/verifier,
# on cosign's, notation-go's and Helm's provenance packages), into a cache outside the repo, once per
# content of its source; prints its path.
#
#   kind/verifier.sh         build it when missing, print the binary's path on stdout
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC="$REPO_ROOT/src/charts/verifier"
# Provenance is checked as the lab's Helm checks it: one version in kind/versions.env.
grep -q "^	helm.sh/helm/v4 v$HELM_VERSION\$" "$SRC/go.mod" ||
    die "src/charts/verifier/go.mod must require helm.sh/helm/v4 v$HELM_VERSION (kind/versions.env)"
go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build tenancy-hub-verify (https://go.dev/doc/install)"
sum=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go | sha256sum | cut -c1-12)
DIR="$(cache_root)/verifier-$go_version-$sum"
# shellcheck disable=SC2154 # $out is set by build_with_progress
verifier_build() { (cd "$SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" .); }
build_with_progress "$DIR/tenancy-hub-verify" "tenancy-hub-verify (cosign, Notation, Helm provenance)" verifier_build
echo "$DIR/tenancy-hub-verify"
