// Tests of how the executor reads a request's per-release Helm settings into Helm's actions,
// on the shared fixtures in testdata/protocol.
package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
)

// fixtureRequest is the request of the named fixture, decoded as the executor decodes it.
func fixtureRequest(t *testing.T, name string) request {
	t.Helper()
	req, err := decodeRequest(fixtures(t, name)[name])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req
}

func TestWithoutSettingsTheActionsAreWhatTheyWereBeforeThem(t *testing.T) {
	cfg := action.NewConfiguration()
	req := fixtureRequest(t, "request-upgrade")
	install := installAction(cfg, req, false)
	if install.Timeout != 300*time.Second || install.WaitStrategy != kube.HookOnlyStrategy || install.WaitForJobs || install.DisableHooks || !install.SkipCRDs {
		t.Errorf("install %+v, want 300s, hooks only, hooks run, CRDs left to applyCRDs", install)
	}
	upgrade := upgradeAction(cfg, req)
	if upgrade.Timeout != 300*time.Second || upgrade.WaitStrategy != kube.HookOnlyStrategy || upgrade.DisableHooks || upgrade.ForceReplace || upgrade.CleanupOnFail || upgrade.ServerSideApply != "auto" || upgrade.MaxHistory != 5 {
		t.Errorf("upgrade %+v, want 300s, hooks only, hooks run, server-side auto, 5 kept", upgrade)
	}
	uninstall := uninstallAction(cfg, fixtureRequest(t, "request-uninstall"))
	if !uninstall.DisableHooks || uninstall.KeepHistory || uninstall.WaitStrategy != kube.HookOnlyStrategy || uninstall.Timeout != 300*time.Second {
		t.Errorf("uninstall %+v, want its hooks skipped, no history kept, no wait", uninstall)
	}
}

func TestAChartEntrysSettingsReachEachAction(t *testing.T) {
	cfg := action.NewConfiguration()
	req := fixtureRequest(t, "request-upgrade-settings")
	install := installAction(cfg, req, false)
	if install.Timeout != 20*time.Second || install.WaitStrategy != kube.StatusWatcherStrategy || !install.WaitForJobs || !install.SkipCRDs || install.DisableHooks {
		t.Errorf("install %+v, want 20s, watcher, jobs waited for, CRDs skipped", install)
	}
	upgrade := upgradeAction(cfg, req)
	if upgrade.Timeout != time.Hour || upgrade.WaitStrategy != kube.HookOnlyStrategy || !upgrade.DisableHooks || !upgrade.CleanupOnFail || upgrade.MaxHistory != 12 {
		t.Errorf("upgrade %+v, want 1h, hooks skipped, cleanup on fail, 12 kept", upgrade)
	}
	if !upgrade.ForceReplace || upgrade.ServerSideApply != "false" || upgrade.ForceConflicts {
		t.Errorf("a forced upgrade replaces client-side: %+v", upgrade)
	}
	uninstall := uninstallAction(cfg, fixtureRequest(t, "request-uninstall-settings"))
	if uninstall.DisableHooks || !uninstall.KeepHistory || uninstall.WaitStrategy != kube.StatusWatcherStrategy || uninstall.Timeout != 90*time.Second {
		t.Errorf("uninstall %+v, want hooks run, history kept, watcher, 90s", uninstall)
	}
}

func TestADriftRepairIsServerSideAndForcesConflictsWhateverTheUpgradeSays(t *testing.T) {
	req := fixtureRequest(t, "request-upgrade-settings")
	req.ForceConflicts = true
	upgrade := upgradeAction(action.NewConfiguration(), req)
	if upgrade.ServerSideApply != "true" || !upgrade.ForceConflicts || upgrade.ForceReplace {
		t.Errorf("a repair %+v, want server-side, conflicts forced, nothing replaced", upgrade)
	}
}

func TestACRDPolicyThisExecutorDoesNotKnowIsRefusedBeforeAnyClusterIsReached(t *testing.T) {
	raw := fixtures(t, "request-upgrade-settings")["request-upgrade-settings"]
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	fields["upgrade"].(map[string]any)["crds"] = "Replace"
	line, _ := json.Marshal(fields)
	req, err := decodeRequest(line)
	if err != nil {
		t.Fatal(err)
	}
	if why := refusal(req); !strings.Contains(why, `"Replace"`) {
		t.Fatalf("refusal %q, want the CRD policy named", why)
	}
	req.Upgrade.Crds = crdCreateReplace
	if why := refusal(req); why != "" {
		t.Fatalf("CreateReplace refused: %s", why)
	}
}
