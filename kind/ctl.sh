#!/usr/bin/env bash
# Stops or starts one process of a running lab, for fault tests and experiments.
#
#   kind/ctl.sh stop NAME [--dir DIR]     e.g. kind/ctl.sh stop member-2-kube-apiserver
#   kind/ctl.sh start NAME [--dir DIR]    starts it again with the same command line
#   kind/ctl.sh pause NAME [--dir DIR]    freezes it (SIGSTOP): connections hang, as to a silent host
#   kind/ctl.sh resume NAME [--dir DIR]   lets it run again (SIGCONT)
#   kind/ctl.sh list [--dir DIR]          the names of the lab's processes
#
# `start` waits until an API server (a pull member's too: pull-1-kube-apiserver) answers /readyz
# again (up to 60 s).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ACTION=${1:-}; NAME=${2:-}
[[ $ACTION == list ]] && NAME=none
[[ -n $ACTION && -n $NAME ]] || { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 1; }
shift $(( $# >= 2 ? 2 : $# ))
LAB_DIR=$(default_lab_dir)
while (($#)); do
    case $1 in
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        *) die "unknown argument: $1" ;;
    esac
done
PIDS="$LAB_DIR/pids"
[[ -s $PIDS ]] || die "no lab in $LAB_DIR"

if [[ $ACTION == list ]]; then
    awk '{print $2}' "$PIDS"
    exit 0
fi
entry=$(awk -v n="$NAME" '$2 == n' "$PIDS")
[[ -n $entry ]] || die "no process named $NAME in $LAB_DIR; see: kind/ctl.sh list --dir $LAB_DIR"
read -r pid _ bin <<<"$entry"
running() { [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$bin" ]]; }

case $ACTION in
    stop)
        if running; then
            kill -TERM "$pid"
            deadline=$((SECONDS + 15))
            while running && ((SECONDS < deadline)); do sleep 0.1; done
            running && kill -KILL "$pid"
            log "stopped $NAME (pid $pid)"
        else
            log "$NAME is not running"
        fi
        ;;
    start)
        running && { log "$NAME is already running (pid $pid)"; exit 0; }
        eval "setsid $(cat "$LAB_DIR/cmds/$NAME") >>\"$LAB_DIR/logs/$NAME.log\" 2>&1 </dev/null &"
        newpid=$!
        awk -v n="$NAME" -v p="$newpid" '$2 == n { $1 = p } { print }' "$PIDS" >"$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"
        if [[ $NAME == *-kube-apiserver ]]; then
            c=${NAME%-kube-apiserver}
            server=$(sed -n 's/.*server: "\([^"]*\)".*/\1/p' "$LAB_DIR/clusters/$c/admin.kubeconfig")
            wait_for "the $c API server to be ready again" 60 curl -sf --cacert "$(cluster_ca "$LAB_DIR" "$c")" \
                --cert "$LAB_DIR/pki/$c-admin.crt" --key "$LAB_DIR/pki/$c-admin.key" "$server/readyz"
        fi
        log "started $NAME (pid $newpid)"
        ;;
    pause | resume)
        running || die "$NAME is not running"
        if [[ $ACTION == pause ]]; then kill -STOP "$pid"; else kill -CONT "$pid"; fi
        log "${ACTION}d $NAME (pid $pid)"
        ;;
    *) die "unknown action $ACTION: use stop, start, pause, resume or list" ;;
esac
