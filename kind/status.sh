#!/usr/bin/env bash
# Reports whether every process of a lab is alive and every API server is ready; exits 1 if not.
#
#   kind/status.sh [--dir DIR]
#
# The API servers are the hub's and the members' (contexts of DIR/kubeconfig) and the pull
# members' (DIR/pull/pull-K.kubeconfig), each asked with its own admin certificate.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LAB_DIR=$(default_lab_dir)
while (($#)); do
    case $1 in
        --dir) LAB_DIR=${2:?--dir needs a directory}; shift 2 ;;
        -h | --help) sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
[[ -s "$LAB_DIR/pids" && -s "$LAB_DIR/kubeconfig" ]] || { echo "no lab in $LAB_DIR"; exit 1; }

ok=0
while read -r pid name bin; do
    if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$bin" ]]; then
        printf '%-36s running (pid %s)\n' "$name" "$pid"
    else
        printf '%-36s NOT RUNNING\n' "$name"
        ok=1
    fi
done <"$LAB_DIR/pids"
clusters=$(sed -n 's/^- name: \(.*\)$/\1/p' "$LAB_DIR/kubeconfig" | grep -v '^admin@' | sort -u)
for c in $clusters $(pull_members "$LAB_DIR"); do
    kc="$LAB_DIR/clusters/$c/admin.kubeconfig"
    server=$(sed -n 's/.*server: "\([^"]*\)".*/\1/p' "$kc")
    if curl -sf --max-time 3 --cacert "$(cluster_ca "$LAB_DIR" "$c")" --cert "$LAB_DIR/pki/$c-admin.crt" \
        --key "$LAB_DIR/pki/$c-admin.key" "$server/readyz" >/dev/null; then
        printf '%-36s ready at %s\n' "$c API server" "$server"
    else
        printf '%-36s NOT READY at %s\n' "$c API server" "$server"
        ok=1
    fi
done
exit $ok
