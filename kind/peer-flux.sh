#!/usr/bin/env bash
# Builds Flux's helm-controller and source-controller, the peer of `kind/bench.sh --peer flux`, from
# their Go modules into a cache outside the repo, once, with their CRDs; prints the directory.
#
#   kind/peer-flux.sh        build what is missing, print the directory (bin/ and crds/) on stdout
#
# Versions are the FLUX_* pins in kind/versions.env. Both controllers' go.mod carry replace
# directives, so each is built through a wrapper module in kind/peer/flux/ that repeats them.
# The CRDs come from the modules' config/crd/bases.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WRAPPERS="$LAB_ROOT/peer/flux"

# The cache directory for these versions, wrapper modules and build command.
flux_cache_dir() {
    local go_version sum
    go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build Flux (https://go.dev/doc/install)"
    sum=$(recipe_digest "$LAB_ROOT/versions.env" "$WRAPPERS"/*/go.mod "$WRAPPERS"/*/go.sum "${BASH_SOURCE[0]}")
    printf '%s/flux-helm-controller-%s-source-controller-%s-%s-%s' "$(cache_root)" \
        "$FLUX_HELM_CONTROLLER_VERSION" "$FLUX_SOURCE_CONTROLLER_VERSION" "$go_version" "$sum"
}

DIR=$(flux_cache_dir)
mkdir -p "$DIR/bin" "$DIR/crds"

# flux_build NAME: builds github.com/fluxcd/NAME through its wrapper module into $out.
# shellcheck disable=SC2154 # $out is set by build_with_progress
flux_build() { (cd "$WRAPPERS/$1" && go build -o "$out" -ldflags "-s -w" "github.com/fluxcd/$1"); }

# build_controller NAME VERSION STEP: builds github.com/fluxcd/NAME at VERSION into $DIR/bin, with
# progress, unless it is there.
build_controller() {
    local name=$1 version=$2 step=$3 module="github.com/fluxcd/$1"
    grep -q "^require $module v$version\$" "$WRAPPERS/$name/go.mod" ||
        die "kind/peer/flux/$name/go.mod does not require $module v$version (kind/versions.env); update the wrapper"
    build_with_progress "$DIR/bin/$name" "($step/2) $name $version" flux_build "$name"
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
