#!/usr/bin/env bash
# Regenerates the CRDs from the types: deploy/crd.yaml (both) and one file per CRD in crds/.
#
#   kind/crds.sh
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
cargo run -q --locked -- crd > deploy/crd.yaml
python3 - <<'PY'
text = open("deploy/crd.yaml").read()
controllers, policies = text.split("---\n", 1)
open("crds/controllers.multitenancy.dev.yaml", "w").write(controllers)
open("crds/tenancypolicies.multitenancy.dev.yaml", "w").write(policies)
PY
echo "wrote deploy/crd.yaml, crds/controllers.multitenancy.dev.yaml, crds/tenancypolicies.multitenancy.dev.yaml"
