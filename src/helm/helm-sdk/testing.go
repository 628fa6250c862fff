// The chart's tests after an install or upgrade (`helm test`), and what a failure of them does.
package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	rspb "helm.sh/helm/v4/pkg/release/v1"
)

// testRun is how a request's tests run, when it asks for them.
type testRun struct {
	TimeoutSeconds int `json:"timeoutSeconds"`
	// Report the results, never fail the release on them.
	IgnoreFailures bool `json:"ignoreFailures,omitempty"`
	// Only these tests, by name (none: every test but the excluded).
	Include []string `json:"include,omitempty"`
	// Never these.
	Exclude []string `json:"exclude,omitempty"`
}

// testResult is one test of the release and how its last run ended.
type testResult struct {
	Name string `json:"name"`
	// "Succeeded", "Failed", or "Unknown" when it did not end.
	Phase string `json:"phase"`
}

// maxTests bounds the results one answer carries.
const maxTests = 64

// testHooks are rel's test hooks that the run picked, with how their last run ended.
func testHooks(rel *rspb.Release, run testRun) []testResult {
	var out []testResult
	for _, h := range rel.Hooks {
		if !slices.Contains(h.Events, rspb.HookTest) || !picked(h.Name, run) {
			continue
		}
		phase := string(h.LastRun.Phase)
		if phase == "" || phase == string(rspb.HookPhaseRunning) {
			phase = string(rspb.HookPhaseUnknown)
		}
		out = append(out, testResult{Name: h.Name, Phase: phase})
		if len(out) == maxTests {
			break
		}
	}
	slices.SortFunc(out, func(a, b testResult) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// picked is whether the test named name runs under run's filters, as `helm test --filter` does.
func picked(name string, run testRun) bool {
	if slices.Contains(run.Exclude, name) {
		return false
	}
	return len(run.Include) == 0 || slices.Contains(run.Include, name)
}

// failedTests names the tests of results that did not succeed.
func failedTests(results []testResult) string {
	var failed []string
	for _, r := range results {
		if r.Phase != string(rspb.HookPhaseSucceeded) {
			failed = append(failed, fmt.Sprintf("%s (%s)", r.Name, r.Phase))
		}
	}
	return strings.Join(failed, ", ")
}

// runTests runs the tests of the release rel just deployed; their results, and an error when
// they failed (or could not run).
func runTests(cfg *action.Configuration, req request, rel *rspb.Release) ([]testResult, error) {
	run := *req.Test
	tester := action.NewReleaseTesting(cfg)
	tester.Namespace, tester.WaitOptions = req.Namespace, waitOptions()
	tester.Timeout = time.Duration(run.TimeoutSeconds) * time.Second
	if len(run.Include) > 0 {
		tester.Filters[action.IncludeNameFilter] = run.Include
	}
	if len(run.Exclude) > 0 {
		tester.Filters[action.ExcludeNameFilter] = run.Exclude
	}
	tested, shutdown, err := tester.Run(req.Release)
	// Deletes the test objects whose delete policy asks for it once they have run.
	if shutdown != nil {
		err = errors.Join(err, shutdown())
	}
	results := testHooks(rel, run)
	if v1, convErr := toV1(tested); convErr == nil && v1 != nil {
		results = testHooks(v1, run)
	}
	if err == nil {
		return results, nil
	}
	failed := failedTests(results)
	if failed == "" {
		return results, fmt.Errorf("the tests of revision %d could not run: %w", rel.Version, err)
	}
	return results, fmt.Errorf("the tests of revision %d failed: %s", rel.Version, failed)
}

// afterFailedTests handles tests of rel that failed: when the action that wrote rel (an install
// when installed) asks for remediation, the release is uninstalled or goes back to the revision
// before, as a failed install or upgrade would; otherwise rel is marked failed, so the release
// counts as failed wherever it is read (and is tried again) until a revision passes. What was
// done, for the answer's error.
func afterFailedTests(cfg *action.Configuration, req request, rel *rspb.Release, installed bool, why error) error {
	remediate := phaseOr(req.Upgrade, req, crdSkip).Remediate
	if installed {
		remediate = phaseOr(req.Install, req, crdCreate).Remediate
	}
	if remediate == remediateUninstall || (remediate == remediateRollback && rel.Version <= 1) {
		uninstall := uninstallAction(cfg, request{TimeoutSeconds: req.TimeoutSeconds, DisableHooks: true})
		if _, err := uninstall.Run(req.Release); err != nil {
			return fmt.Errorf("%w; uninstalling the release failed too: %v", why, err)
		}
		return fmt.Errorf("%w; the release was uninstalled (remediation)", why)
	}
	if remediate == remediateRollback {
		rollback := action.NewRollback(cfg)
		rollback.Version, rollback.MaxHistory = rel.Version-1, req.HistoryMax
		rollback.Timeout = time.Duration(req.TimeoutSeconds) * time.Second
		rollback.ServerSideApply, rollback.WaitOptions = "true", waitOptions()
		rollback.WaitStrategy = kube.HookOnlyStrategy
		rollback.Description = "Rolled back: the tests of the revision after failed"
		if err := rollback.Run(req.Release); err != nil {
			return fmt.Errorf("%w; rolling back to revision %d failed too: %v", why, rel.Version-1, err)
		}
		return fmt.Errorf("%w; rolled back to revision %d (remediation)", why, rel.Version-1)
	}
	latest, err := cfg.Releases.Get(req.Release, rel.Version)
	if err != nil {
		return fmt.Errorf("%w; marking revision %d failed did not work: %v", why, rel.Version, err)
	}
	marked, err := toV1(latest)
	if err != nil {
		return fmt.Errorf("%w; marking revision %d failed did not work: %v", why, rel.Version, err)
	}
	marked.SetStatus(rcommon.StatusFailed, fmt.Sprintf("Test failed: %v", why))
	if err := cfg.Releases.Update(marked); err != nil {
		return fmt.Errorf("%w; marking revision %d failed did not work: %v", why, rel.Version, err)
	}
	return why
}
