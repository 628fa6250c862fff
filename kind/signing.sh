#!/usr/bin/env bash
# Builds the lab's signing tools, which the end-to-end tests sign charts with, into a cache outside
# the repo, once; prints the bin directory.
#
#   kind/signing.sh          build what is missing, print the bin directory on stdout
#
# Components: cosign (`go install github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION`, the
# pin in kind/versions.env) and tenancy-hub-notation-sign (the Go module kind/tools/notation-sign, on
# notation-go: the notation CLI's module is not served by the Go module proxy here). PGP keys for
# Helm provenance come from gpg, which the tests run themselves. The cache is keyed by the cosign pin,
# the signing tool's module and this script, so neither the lab's binaries nor these rebuild when
# the other changes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC="$LAB_ROOT/tools/notation-sign"
go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build the lab's signing tools (https://go.dev/doc/install)"
sum=$(recipe_digest <(grep '^COSIGN_VERSION=' "$LAB_ROOT/versions.env") \
    "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go "${BASH_SOURCE[0]}")
BIN_DIR="$(cache_root)/signing-cosign-$COSIGN_VERSION-$go_version-$sum/bin"

# shellcheck disable=SC2154 # $out is set by build_with_progress
cosign_build() {
    local gobin
    gobin=$(dirname "$out")
    GOBIN="$gobin" go install -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN_VERSION" \
        "github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION"
}
# shellcheck disable=SC2154
notation_sign_build() { (cd "$SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" .); }

build_with_progress "$BIN_DIR/cosign" "(1/2) cosign v$COSIGN_VERSION" cosign_build
build_with_progress "$BIN_DIR/tenancy-hub-notation-sign" "(2/2) tenancy-hub-notation-sign (notation-go)" notation_sign_build
echo "$BIN_DIR"
