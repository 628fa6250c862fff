#!/usr/bin/env bash
# Shared helpers of the lab scripts: logging, paths, the binary cache, and waiting with deadlines.

LAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LAB_ROOT/.." && pwd)
# shellcheck source=versions.env
source "$LAB_ROOT/versions.env"

export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"

log() { printf '[lab %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Where built binaries are kept, outside the repo.
cache_root() { printf '%s' "${TENANCY_HUB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tenancy-hub}"; }

# recipe_digest FILE...: 12 hex digits of the files' content without their whole-line comments
# (`#` and `//`), so a cache key follows what is built and how, not the prose around it or where
# the lab's folder sits.
recipe_digest() { cat "$@" | sed -E '/^[[:space:]]*(#|\/\/)/d' | sha256sum | cut -c1-12; }

# The cache directory for this exact set of versions, wrapper module and build commands.
lab_cache_dir() {
    local root
    root=$(cache_root)
    local go_version sum
    go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build the lab (https://go.dev/doc/install)"
    # The Flux pins at the end of versions.env key the peer's cache (kind/peer-flux.sh), not this one.
    sum=$(recipe_digest <(sed '/^# Flux/,$d' "$LAB_ROOT/versions.env") \
        "$LAB_ROOT/tools/go.mod" "$LAB_ROOT/tools/go.sum" "$LAB_ROOT/build.sh")
    printf '%s/k8s-%s-etcd-%s-kwok-%s-helm-%s-%s-%s' "$root" "$KUBERNETES_VERSION" "$ETCD_VERSION" \
        "$KWOK_VERSION" "$HELM_VERSION" "$go_version" "$sum"
}

# build_with_progress OUT WHAT COMMAND...: builds the binary OUT unless it is there. COMMAND runs in
# the background with `out` set to a temporary path, which it must write; WHAT (e.g. "(2/8)
# kube-apiserver") names it in the log, with the time taken every 30 s. The binary is moved to OUT
# only when COMMAND succeeds; otherwise the end of its log is shown and the script stops.
build_with_progress() {
    local target=$1 what=$2; shift 2
    local name
    name=$(basename "$target")
    if [[ -x $target ]]; then
        log "$what: cached"
        return
    fi
    log "$what: building (minutes, the first time)"
    local start=$SECONDS tmp pid
    mkdir -p "$(dirname "$target")"
    tmp=$(mktemp -d "$(dirname "$target")/.build-XXXXXX")
    out="$tmp/$name" "$@" >"$tmp/build.log" 2>&1 &
    pid=$!
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
    mv "$tmp/$name" "$target"
    rm -rf "$tmp"
    log "    $name built in $((SECONDS - start))s"
}

# wait_for DESCRIPTION SECONDS COMMAND...: runs COMMAND until it succeeds or the deadline passes.
wait_for() {
    local what=$1 seconds=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "timed out after ${seconds}s waiting for $what"
            return 1
        fi
        sleep 0.5
    done
}

# A TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
    python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# pull_members DIR: the names of the lab's pull members (pull-1, pull-2, ...), one a line, in order.
pull_members() {
    local f
    for f in "$1"/pull/pull-*.kubeconfig; do
        if [[ -e $f ]]; then basename "$f" .kubeconfig; fi
    done | sort -t- -k2,2n
}

# cluster_ca DIR CLUSTER: the CA of one cluster of the lab in DIR (a pull member has its own).
cluster_ca() {
    if [[ -s "$1/pki/$2-ca.crt" ]]; then
        printf '%s' "$1/pki/$2-ca.crt"
    else
        printf '%s' "$1/pki/ca.crt"
    fi
}

# Parses --dir DIR into LAB_DIR (default: <repo>/.lab) and returns the remaining arguments in REST.
default_lab_dir() { printf '%s' "${TENANCY_HUB_LAB_DIR:-$REPO_ROOT/.lab}"; }
