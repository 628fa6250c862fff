#!/usr/bin/env bash
# Fetches real-world Helm charts no one here wrote, for the end-to-end tests with them, into a
# chart home outside the repo, once; prints the chart home.
#
#   kind/real-chart.sh       fetch them when missing, print the chart home
#
# Each chart is taken from its project's Go module, from the module zip the Go module proxy serves,
# checked by the Go checksum database as every module is. The zip is read directly rather than
# through `go mod download`'s extracted tree, which a Go older than the module's `go` line refuses
# to extract.
#
# - external-dns/: ExternalDNS's own chart, `charts/external-dns` of sigs.k8s.io/external-dns
#   v0.22.0 (chart 1.21.1, app 0.21.0), for fleets that differ (tests/fleets_realworld.rs).
# - sealed-secrets-2.12.0/ and sealed-secrets-2.15.4/: Sealed Secrets' own chart,
#   `helm/sealed-secrets` of github.com/bitnami-labs/sealed-secrets v0.24.0 and v0.27.0, whose
#   `crds/` holds the SealedSecret CRD; the newer one's schema has `spec.template.immutable`
#   the older lacks (tests/crds.rs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Pinned: changing them fetches into a new cache directory. Each line: module, version, the chart's
# directory in the module, its directory in the chart home.
CHARTS="sigs.k8s.io/external-dns 0.22.0 charts/external-dns external-dns
github.com/bitnami-labs/sealed-secrets 0.24.0 helm/sealed-secrets sealed-secrets-2.12.0
github.com/bitnami-labs/sealed-secrets 0.27.0 helm/sealed-secrets sealed-secrets-2.15.4"

DIR="$(cache_root)/real-charts-$(recipe_digest "${BASH_SOURCE[0]}")"
if [[ -s "$DIR/external-dns/Chart.yaml" && -s "$DIR/sealed-secrets-2.15.4/Chart.yaml" ]]; then
    echo "$DIR"
    exit 0
fi
command -v go >/dev/null || die "Go is required to fetch the real-world charts (https://go.dev/doc/install)"
mkdir -p "$(dirname "$DIR")"
tmp=$(mktemp -d "$(dirname "$DIR")/.real-chart-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
while read -r module version path chart; do
    log "real-world chart: fetching $module@v$version from the Go module proxy"
    # `go mod download` may report an error after the zip is fetched and verified (a module
    # needing a newer Go than this one); only the zip and its checksum matter here.
    zip=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$module@v$version" </dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Zip","") if d.get("Sum") else "")') || true
    [[ -n $zip && -s $zip ]] ||
        die "could not fetch $module@v$version; check access to the Go module proxy"
    python3 - "$zip" "$module@v$version/$path/" "$tmp/$chart" <<'PY'
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
    [[ -s "$tmp/$chart/Chart.yaml" ]] || die "$module@v$version has no $path/Chart.yaml"
    log "real-world chart: $chart is chart $(sed -n 's/^version: //p' "$tmp/$chart/Chart.yaml")"
done <<<"$CHARTS"
rm -rf "$DIR"
chmod 755 "$tmp"
mv "$tmp" "$DIR"
trap - EXIT
log "real-world charts in $DIR"
echo "$DIR"
