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

# The cache directory for this exact set of versions and wrapper module.
lab_cache_dir() {
    local root
    root=$(cache_root)
    local go_version sum
    go_version=$(go env GOVERSION 2>/dev/null) || die "Go is required to build the lab (https://go.dev/doc/install)"
    # The Flux pins at the end of versions.env key the peer's cache (lab/peer-flux.sh), not this one.
    sum=$(sed '/^# Flux/,$d' "$LAB_ROOT/versions.env" |
        cat - "$LAB_ROOT/tools/go.mod" "$LAB_ROOT/tools/go.sum" "$LAB_ROOT/build.sh" | sha256sum | cut -c1-12)
    printf '%s/k8s-%s-etcd-%s-kwok-%s-helm-%s-%s-%s' "$root" "$KUBERNETES_VERSION" "$ETCD_VERSION" \
        "$KWOK_VERSION" "$HELM_VERSION" "$go_version" "$sum"
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

# Parses --dir DIR into LAB_DIR (default: <repo>/.lab) and returns the remaining arguments in REST.
default_lab_dir() { printf '%s' "${TENANCY_HUB_LAB_DIR:-$REPO_ROOT/.lab}"; }
