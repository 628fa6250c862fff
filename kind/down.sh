#!/usr/bin/env bash
# Stops a lab started by kind/up.sh: exactly the processes it recorded (its pull members' too), then
# removes its files.
#
#   kind/down.sh [--dir DIR] [--keep-logs]
#
# Each recorded process is checked to still be the binary that was started (a reused pid is left
# alone), asked to stop with SIGTERM, and killed if it has not stopped within 15 seconds. Clients
# stop first, then the API servers, then etcd.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LAB_DIR=$(default_lab_dir)
KEEP_LOGS=false
while (($#)); do
    case $1 in
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        --keep-logs) KEEP_LOGS=true; shift ;;
        -h | --help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done

if [[ ! -d $LAB_DIR ]]; then
    log "no lab in $LAB_DIR"
    exit 0
fi

# ours PID BINARY: true while PID is still the process that was started from BINARY.
ours() {
    local exe
    exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
    [[ $exe == "$2" ]]
}

# stop_tier PATTERN: stops the recorded processes whose name matches PATTERN, all at once.
stopped=0
stop_tier() {
    local pattern=$1 pid name bin
    local stopping=()
    while read -r pid name bin; do
        [[ $name =~ $pattern ]] || continue
        if ours "$pid" "$bin" && kill -TERM "$pid" 2>/dev/null; then
            stopping+=("$pid $name $bin")
        fi
    done <"$LAB_DIR/pids"
    local deadline=$((SECONDS + 15))
    for entry in "${stopping[@]}"; do
        read -r pid name bin <<<"$entry"
        while ours "$pid" "$bin" && ((SECONDS < deadline)); do sleep 0.1; done
        if ours "$pid" "$bin"; then
            log "$name (pid $pid) did not stop within 15s of SIGTERM; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    stopped=$((stopped + ${#stopping[@]}))
}

if [[ -s "$LAB_DIR/pids" ]]; then
    # Clients of the API servers first (the demo's operator among them, and the Git server beside
    # them), then the API servers, then etcd under them.
    stop_tier '(operator|kwok|scheduler|controller-manager|git-server)$'
    stop_tier 'apiserver$'
    stop_tier '^etcd$'
    log "stopped $stopped processes of the lab in $LAB_DIR"
fi

if $KEEP_LOGS; then
    find "$LAB_DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
    log "logs kept in $LAB_DIR/logs"
else
    rm -rf "$LAB_DIR"
fi
