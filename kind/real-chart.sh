#!/usr/bin/env bash
# Fetches a real-world Helm chart no one here wrote, for the end-to-end test of fleets that differ
# (tests/fleets_realworld.rs), into a chart home outside the repo, once; prints the chart home.
#
#   kind/real-chart.sh       fetch it when missing, print the chart home (holding external-dns/)
#
# The chart is ExternalDNS's own, `charts/external-dns` of the Go module sigs.k8s.io/external-dns
# at the version pinned below (its Chart.yaml says chart 1.21.1, app 0.21.0), taken from the module
# zip the Go module proxy serves, checked by the Go checksum database as every module is. The zip is
# read directly rather than through `go mod download`'s extracted tree, which a Go older than the
# module's `go` line refuses to extract.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Pinned: changing it fetches into a new cache directory.
EXTERNAL_DNS_MODULE=sigs.k8s.io/external-dns
EXTERNAL_DNS_MODULE_VERSION=0.22.0
CHART=external-dns

DIR="$(cache_root)/real-charts-$CHART-$EXTERNAL_DNS_MODULE_VERSION-$(recipe_digest "${BASH_SOURCE[0]}")"
if [[ -s "$DIR/$CHART/Chart.yaml" ]]; then
    echo "$DIR"
    exit 0
fi
command -v go >/dev/null || die "Go is required to fetch the real-world chart (https://go.dev/doc/install)"
log "real-world chart: fetching $EXTERNAL_DNS_MODULE@v$EXTERNAL_DNS_MODULE_VERSION from the Go module proxy"
# `go mod download` may report an error after the zip is fetched and verified (a module needing a
# newer Go than this one); only the zip and its checksum matter here.
zip=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$EXTERNAL_DNS_MODULE@v$EXTERNAL_DNS_MODULE_VERSION" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Zip","") if d.get("Sum") else "")') || true
[[ -n $zip && -s $zip ]] ||
    die "could not fetch $EXTERNAL_DNS_MODULE@v$EXTERNAL_DNS_MODULE_VERSION; check access to the Go module proxy"
mkdir -p "$(dirname "$DIR")"
tmp=$(mktemp -d "$(dirname "$DIR")/.real-chart-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 - "$zip" "$EXTERNAL_DNS_MODULE@v$EXTERNAL_DNS_MODULE_VERSION/charts/$CHART/" "$tmp/$CHART" <<'PY'
import os, sys, zipfile
archive, prefix, target = sys.argv[1:]
count = 0
with zipfile.ZipFile(archive) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        rel = info.filename[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"unexpected path in the module zip: {info.filename}")
        out = os.path.join(target, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as dst:
            dst.write(src.read())
        count += 1
if count == 0:
    sys.exit(f"the module zip has no {prefix}")
PY
[[ -s "$tmp/$CHART/Chart.yaml" ]] || die "the module has no charts/$CHART/Chart.yaml"
rm -rf "$DIR"
chmod 755 "$tmp"
mv "$tmp" "$DIR"
trap - EXIT
log "real-world chart: $CHART $(sed -n 's/^version: //p' "$DIR/$CHART/Chart.yaml") in $DIR"
echo "$DIR"
