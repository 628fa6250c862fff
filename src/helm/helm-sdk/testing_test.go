package main

import (
	"reflect"
	"testing"

	rspb "helm.sh/helm/v4/pkg/release/v1"
)

func hook(name string, phase rspb.HookPhase, events ...rspb.HookEvent) *rspb.Hook {
	return &rspb.Hook{Name: name, Events: events, LastRun: rspb.HookExecution{Phase: phase}}
}

func TestOnlyTheTestHooksTheFiltersPickAreReportedSortedByName(t *testing.T) {
	rel := &rspb.Release{Hooks: []*rspb.Hook{
		hook("test-z", rspb.HookPhaseFailed, rspb.HookTest),
		hook("migrate", rspb.HookPhaseSucceeded, rspb.HookPreUpgrade),
		hook("test-a", rspb.HookPhaseSucceeded, rspb.HookTest),
		hook("test-slow", rspb.HookPhaseRunning, rspb.HookTest),
		hook("test-never", "", rspb.HookTest),
	}}
	got := testHooks(rel, testRun{Exclude: []string{"test-never"}})
	want := []testResult{
		{Name: "test-a", Phase: "Succeeded"},
		// A test still running when the run ended did not end: Unknown, a failure.
		{Name: "test-slow", Phase: "Unknown"},
		{Name: "test-z", Phase: "Failed"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := failedTests(got); got != "test-slow (Unknown), test-z (Failed)" {
		t.Fatalf("failed tests %q", got)
	}
	only := testHooks(rel, testRun{Include: []string{"test-a", "migrate"}})
	if want := []testResult{{Name: "test-a", Phase: "Succeeded"}}; !reflect.DeepEqual(only, want) {
		t.Fatalf("included: got %+v, want %+v", only, want)
	}
}

func TestTheResultsOfOneAnswerAreBounded(t *testing.T) {
	rel := &rspb.Release{}
	for i := 0; i < 3*maxTests; i++ {
		rel.Hooks = append(rel.Hooks, hook("t"+string(rune('a'+i%26))+string(rune('a'+i/26)), rspb.HookPhaseSucceeded, rspb.HookTest))
	}
	if got := len(testHooks(rel, testRun{})); got != maxTests {
		t.Fatalf("%d results, want at most %d", got, maxTests)
	}
	if got := failedTests(nil); got != "" {
		t.Fatalf("no results, failed %q", got)
	}
}
