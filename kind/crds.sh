#!/usr/bin/env bash
# Regenerates the CRDs from the types: deploy/crd.yaml (all of them), one file per CRD in crds/,
# and the same files in deploy/chart/crds/ (where Helm installs them from); and the admission policy
# refusing too-deep values: deploy/admission-policy.yaml and the chart's template of it.
#
#   kind/crds.sh
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
# Generated into a temporary file first, so a build that fails leaves the committed files alone.
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cargo run -q --locked -- crd > "$generated"
python3 - "$generated" <<'PY'
import sys
text = open(sys.argv[1]).read()
alerts, controllers, members, policies = text.split("---\n", 3)
open("deploy/crd.yaml", "w").write(text)
for directory in ("crds", "deploy/chart/crds"):
    open(f"{directory}/alerts.multitenancy.dev.yaml", "w").write(alerts)
    # The later files keep their document marker, so `cat crds/*.yaml` (alerts, controllers,
    # memberclusters, tenancypolicies: the order of their names) is exactly `tenancy-hub crd`.
    open(f"{directory}/controllers.multitenancy.dev.yaml", "w").write("---\n" + controllers)
    open(f"{directory}/memberclusters.multitenancy.dev.yaml", "w").write("---\n" + members)
    open(f"{directory}/tenancypolicies.multitenancy.dev.yaml", "w").write("---\n" + policies)
PY
cargo run -q --locked -- admission-policy > "$generated"
cp "$generated" deploy/admission-policy.yaml
{
    echo '{{- if .Values.valuesDepthPolicy.enabled }}'
    cat "$generated"
    echo '{{- end }}'
} > deploy/chart/templates/admission-policy.yaml
echo "wrote deploy/admission-policy.yaml and deploy/chart/templates/admission-policy.yaml"
echo "wrote deploy/crd.yaml and {crds,deploy/chart/crds}/{alerts,controllers,memberclusters,tenancypolicies}.multitenancy.dev.yaml"
