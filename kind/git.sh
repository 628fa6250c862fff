#!/usr/bin/env bash
# Builds the Git programs into a cache outside the repo, once per content of their source; prints
# the bin directory holding both:
#   tenancy-hub-git         the operator's Git fetcher (Go module src/charts/git, on go-git)
#   tenancy-hub-git-server  the lab's Git server (Go module kind/tools/git-server): smart HTTP
#                           through git http-backend, and SSH, for the end-to-end tests
#
#   kind/git.sh         build what is missing, print the bin directory on stdout
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FETCHER_SRC="$REPO_ROOT/src/charts/git"
SERVER_SRC="$LAB_ROOT/tools/git-server"
go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build tenancy-hub-git (https://go.dev/doc/install)"
sum=$(cat "$FETCHER_SRC/go.mod" "$FETCHER_SRC/go.sum" "$FETCHER_SRC"/*.go \
    "$SERVER_SRC/go.mod" "$SERVER_SRC/go.sum" "$SERVER_SRC"/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
BIN_DIR="$(cache_root)/git-$go_version-$sum/bin"

# shellcheck disable=SC2154 # $out is set by build_with_progress
fetcher_build() { (cd "$FETCHER_SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" .); }
# shellcheck disable=SC2154
server_build() { (cd "$SERVER_SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" .); }

build_with_progress "$BIN_DIR/tenancy-hub-git" "(1/2) tenancy-hub-git (go-git)" fetcher_build
build_with_progress "$BIN_DIR/tenancy-hub-git-server" "(2/2) tenancy-hub-git-server (the lab's Git server)" server_build
echo "$BIN_DIR"
