#!/usr/bin/env bash
# Runs every test: formatting and lints, unit tests (Rust, then the Go executor's, verifier's and Git fetcher's), then the end-to-end tests against a fresh lab.
#
#   tests/run.sh
#
# Does all set-up on a fresh machine (the lab's binaries are built once into ~/.cache/tenancy-hub),
# prints the time of each phase, and always stops the lab it started, even when a test fails.
# Environment: TENANCY_HUB_TEST_LAB_DIR (default: a new temporary directory), TEST_MEMBERS (default 3: the rollout tests need three members),
# TEST_PULL_MEMBERS (default 2: pull members, whose agents the pull tests run; tests/deploy.rs applies deploy/agent/ to the first).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

declare -a PHASES=()
phase_start=$SECONDS
phase() {
    local now=$SECONDS
    if [[ -n ${current:-} ]]; then PHASES+=("$(printf '%-28s %5ss' "$current" $((now - phase_start)))"); fi
    current=$1
    phase_start=$now
    [[ -n $current ]] && printf '\n=== %s\n' "$current"
    return 0
}
RESULTS=$(mktemp)
report() {
    phase ""
    printf '\n=== phase times\n'
    printf '  %s\n' "${PHASES[@]}"
    # One closing line over every cargo test run: "tests: N passed, N failed".
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
         END { printf "\ntests: %d passed, %d failed\n", p, f }' "$RESULTS"
    rm -f "$RESULTS"
}

LAB_DIR=${TENANCY_HUB_TEST_LAB_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tenancy-hub-test-lab.XXXXXX")}
lab_started=false
cleanup() {
    local rc=$?
    if $lab_started; then
        if ((rc != 0)); then
            echo "--- last lines of the lab's logs (tests failed) ---"
            for f in "$LAB_DIR"/logs/*.log; do
                echo "## $f"
                tail -n 5 "$f" || true
            done
        fi
        phase "lab down"
        "$REPO/kind/down.sh" --dir "$LAB_DIR" || true
    fi
    report
    exit $rc
}
trap cleanup EXIT

phase "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

phase "lab binaries"
"$REPO/kind/build.sh" >/dev/null
"$REPO/kind/verifier.sh" >/dev/null
"$REPO/kind/signing.sh" >/dev/null
"$REPO/kind/git.sh" >/dev/null

phase "unit tests"
cargo test --locked --lib --bins 2>&1 | tee -a "$RESULTS"

phase "executor and verifier tests"
# The Go programs of the operator (the Helm executor, the checker of chart signatures, the Git
# fetcher) and the lab's signing tool and Git server: each go.mod stays as `go mod tidy` leaves it
# (prints the difference and fails otherwise), go vet is clean and the tests pass.
for module in src/helm/helm-sdk src/charts/verifier src/charts/git kind/tools/notation-sign kind/tools/git-server; do
    (
        cd "$module"
        GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go mod tidy -diff
        GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go vet ./...
        GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go test -count=1 ./...
    )
done

phase "browser"
# The fleet view's tests drive Debian's headless Chromium through its WebDriver ...
if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    sudo=
    ((EUID == 0)) || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y chromium chromium-driver
fi
# ... and check each view's accessibility with axe-core, from the npm registry.
"$REPO/kind/axe.sh" >/dev/null

phase "lab up"
lab_started=true
"$REPO/kind/up.sh" --members "${TEST_MEMBERS:-3}" --pull-members "${TEST_PULL_MEMBERS:-2}" --dir "$LAB_DIR"

phase "end-to-end tests"
TENANCY_HUB_LAB_DIR=$LAB_DIR cargo test --locked --no-fail-fast --test '*' -- --include-ignored 2>&1 | tee -a "$RESULTS"
