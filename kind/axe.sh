#!/usr/bin/env bash
# Fetches axe-core, the accessibility checker the fleet view's browser tests run in each page, into
# a cache outside the repo, once; prints the path of its axe.min.js.
#
#   kind/axe.sh          fetch it if missing, print the path of axe.min.js on stdout
#
# The version is the AXE_CORE_VERSION pin in kind/versions.env; the package comes from the npm
# registry (`npm pack`), so npm is the only thing this needs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$(cache_root)/axe-core-$AXE_CORE_VERSION"
if [[ ! -s $DIR/axe.min.js ]]; then
    command -v npm >/dev/null || die "npm is required to fetch axe-core for the browser tests (install Node.js)"
    log "axe-core $AXE_CORE_VERSION: fetching (npm)"
    mkdir -p "$DIR"
    tmp=$(mktemp -d "$DIR/.fetch-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "axe-core@$AXE_CORE_VERSION" >/dev/null) ||
        die "npm pack axe-core@$AXE_CORE_VERSION failed: is the npm registry reachable?"
    tar -xzf "$tmp/axe-core-$AXE_CORE_VERSION.tgz" -C "$tmp" package/axe.min.js
    mv "$tmp/package/axe.min.js" "$DIR/axe.min.js"
fi
echo "$DIR/axe.min.js"
