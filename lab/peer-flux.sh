#!/usr/bin/env bash
# Builds Flux's helm-controller and source-controller, the peer of `lab/bench.sh --peer flux`, from
# their Go modules into a cache outside the repo, once, with their CRDs; prints the directory.
#
#   lab/peer-flux.sh        build what is missing, print the directory (bin/ and crds/) on stdout
#
# Versions are the FLUX_* pins in lab/versions.env. Both controllers' go.mod carry replace
# directives, so each is built through a wrapper module in lab/peer/flux/ that repeats them.
# The CRDs come from the modules' config/crd/bases.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WRAPPERS="$LAB_ROOT/peer/flux"

# The cache directory for these versions, wrapper modules and this script.
flux_cache_dir() {
    local root="${TENANCY_HUB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tenancy-hub}"
    local go_version sum
    go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build Flux (https://go.dev/doc/install)"
    sum=$(cat "$LAB_ROOT/versions.env" "$WRAPPERS"/*/go.mod "$WRAPPERS"/*/go.sum "${BASH_SOURCE[0]}" |
        sha256sum | cut -c1-12)
    printf '%s/flux-helm-controller-%s-source-controller-%s-%s-%s' "$root" \
        "$FLUX_HELM_CONTROLLER_VERSION" "$FLUX_SOURCE_CONTROLLER_VERSION" "$go_version" "$sum"
}

DIR=$(flux_cache_dir)
mkdir -p "$DIR/bin" "$DIR/crds"

# build_controller NAME VERSION STEP: builds github.com/fluxcd/NAME at VERSION through its wrapper
# module into $DIR/bin, with progress, unless it is there.
build_controller() {
    local name=$1 version=$2 step=$3 module="github.com/fluxcd/$1"
    grep -q "^require $module v$version\$" "$WRAPPERS/$name/go.mod" ||
        die "lab/peer/flux/$name/go.mod does not require $module v$version (lab/versions.env); update the wrapper"
    if [[ -x "$DIR/bin/$name" ]]; then
        log "($step/2) $name $version: cached"
        return
    fi
    log "($step/2) building $name $version (a few minutes the first time)"
    local start=$SECONDS tmp
    tmp=$(mktemp -d "$DIR/bin/.build-XXXXXX")
    (cd "$WRAPPERS/$name" && go build -o "$tmp/$name" -ldflags "-s -w" "$module") >"$tmp/build.log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if (((SECONDS - start) % 30 == 0)); then
            log "    $name: still building ($((SECONDS - start))s)"
        fi
    done
    if ! wait "$pid"; then
        tail -n 40 "$tmp/build.log" >&2
        rm -rf "$tmp"
        die "building $name failed (log above); check Go ($(go version)) and access to the Go module proxy"
    fi
    mv "$tmp/$name" "$DIR/bin/$name"
    rm -rf "$tmp"
    log "    $name built in $((SECONDS - start))s"
}

# copy_crds NAME VERSION: copies the CRDs of github.com/fluxcd/NAME at VERSION into $DIR/crds.
copy_crds() {
    local src
    src=$(cd "$WRAPPERS/$1" && go mod download -json "github.com/fluxcd/$1@v$2" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    cp "$src"/config/crd/bases/*.yaml "$DIR/crds/"
    chmod u+w "$DIR"/crds/*.yaml
}

build_controller helm-controller "$FLUX_HELM_CONTROLLER_VERSION" 1
build_controller source-controller "$FLUX_SOURCE_CONTROLLER_VERSION" 2
if [[ ! -s "$DIR/crds/.done" ]]; then
    copy_crds helm-controller "$FLUX_HELM_CONTROLLER_VERSION"
    copy_crds source-controller "$FLUX_SOURCE_CONTROLLER_VERSION"
    ls "$DIR/crds" >"$DIR/crds/.done"
fi
echo "$DIR"
