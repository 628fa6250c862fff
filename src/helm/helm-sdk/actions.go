// The Helm actions of a request: its chart and values loaded as the CLI loads them, and the
// install, upgrade and uninstall it asks for.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	ci "helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/loader"
	ri "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	rspb "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"helm.sh/helm/v4/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// values merges the request's values and then its `--set` expressions, as helm's CLI does with a
// values file and `--set` flags.
func values(req request) (map[string]any, error) {
	base := map[string]any{}
	if len(req.Values) > 0 && string(req.Values) != "null" {
		if err := yaml.Unmarshal(req.Values, &base); err != nil {
			return nil, fmt.Errorf("failed parsing --values: %w", err)
		}
		if base == nil {
			base = map[string]any{}
		}
	}
	if err := checkListIndexes(req.Set); err != nil {
		return nil, fmt.Errorf("failed parsing --set data: %w", err)
	}
	for _, set := range req.Set {
		if err := strvals.ParseInto(set, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	return base, nil
}

// bringsCRDs tells whether the chart or one of its subcharts has a crds/ directory.
func bringsCRDs(ch ci.Charter) bool {
	ac, err := ci.NewAccessor(ch)
	if err != nil {
		return true
	}
	for _, f := range ac.Files() {
		if strings.HasPrefix(f.Name, "crds/") {
			return true
		}
	}
	for _, dep := range ac.Dependencies() {
		if bringsCRDs(dep) {
			return true
		}
	}
	return false
}

// loadChart loads and checks a chart as `helm install` and `helm upgrade` do.
func loadChart(path string) (ci.Charter, error) {
	ch, err := loader.Load(path)
	if err != nil {
		return nil, err
	}
	ac, err := ci.NewAccessor(ch)
	if err != nil {
		return nil, err
	}
	switch t := ac.MetadataAsMap()["Type"]; t {
	case nil, "", "application":
	default:
		return nil, fmt.Errorf("%s charts are not installable", t)
	}
	if req := ac.MetaDependencies(); len(req) > 0 {
		if err := action.CheckDependencies(ch, req); err != nil {
			return nil, fmt.Errorf("an error occurred while checking for chart dependencies. You may need to run 'helm dependency build' to fetch missing dependencies: %w", err)
		}
	}
	return ch, nil
}

// crdFiles are the contents of the files under crds/ of the chart and its subcharts, in the
// order Helm installs them.
func crdFiles(ch ci.Charter) [][]byte {
	ac, err := ci.NewAccessor(ch)
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, f := range ac.Files() {
		if strings.HasPrefix(f.Name, "crds/") && (strings.HasSuffix(f.Name, ".yaml") || strings.HasSuffix(f.Name, ".yml") || strings.HasSuffix(f.Name, ".json")) {
			out = append(out, f.Data)
		}
	}
	for _, dep := range ac.Dependencies() {
		out = append(out, crdFiles(dep)...)
	}
	return out
}

func toV1(rel ri.Releaser) (*rspb.Release, error) {
	switch r := rel.(type) {
	case *rspb.Release:
		return r, nil
	case rspb.Release:
		return &r, nil
	default:
		return nil, fmt.Errorf("unsupported release type: %T", rel)
	}
}

// installAction is the install of an upgrade request whose release is not there (or, with
// replace, only its uninstalled records are), as the request's install settings ask.
func installAction(cfg *action.Configuration, req request, replace bool) *action.Install {
	asked := phaseOr(req.Install, req, crdCreate)
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Labels = req.Release, req.Namespace, req.Labels
	install.Timeout, install.WaitOptions = time.Duration(asked.TimeoutSeconds)*time.Second, waitOptions()
	install.WaitStrategy, install.WaitForJobs = strategy(asked.Wait), asked.WaitForJobs
	// The chart's CRDs are done before, as the policy asks (see applyCRDs).
	install.DisableHooks, install.SkipCRDs = asked.DisableHooks, true
	install.RollbackOnFailure, install.DisableOpenAPIValidation = asked.Remediate == remediateUninstall, true
	install.ServerSideApply, install.ForceConflicts = true, req.ForceConflicts
	install.Description, install.Replace = req.Description, replace
	if req.PostRender != nil {
		install.PostRenderer = kustomizer{spec: *req.PostRender}
	}
	return install
}

// upgradeAction is the upgrade of an upgrade request whose release is there, as the request's
// upgrade settings ask (its CRDs are done before, see applyCRDs).
func upgradeAction(cfg *action.Configuration, req request) *action.Upgrade {
	asked := phaseOr(req.Upgrade, req, crdSkip)
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.Labels, upgrade.ResetValues = req.Namespace, req.Labels, true
	upgrade.MaxHistory, upgrade.Timeout = req.HistoryMax, time.Duration(asked.TimeoutSeconds)*time.Second
	upgrade.WaitStrategy, upgrade.WaitOptions = strategy(asked.Wait), waitOptions()
	upgrade.WaitForJobs, upgrade.DisableHooks = asked.WaitForJobs, asked.DisableHooks
	upgrade.CleanupOnFail = asked.CleanupOnFail
	upgrade.RollbackOnFailure, upgrade.DisableOpenAPIValidation = asked.Remediate == remediateRollback, true
	upgrade.ServerSideApply, upgrade.ForceConflicts = "auto", req.ForceConflicts
	switch {
	case req.ForceConflicts:
		// A drift repair: server-side, forcing conflicts, never replacing.
		upgrade.ServerSideApply = "true"
	case asked.Force:
		// Helm replaces objects only with a client-side apply.
		upgrade.ServerSideApply, upgrade.ForceReplace = "false", true
	}
	upgrade.Description = req.Description
	if req.PostRender != nil {
		upgrade.PostRenderer = kustomizer{spec: *req.PostRender}
	}
	return upgrade
}

// uninstallAction is the uninstall a request asks for: the operator skips the delete hooks
// unless the chart entry asks for them.
func uninstallAction(cfg *action.Configuration, req request) *action.Uninstall {
	uninstall := action.NewUninstall(cfg)
	uninstall.Timeout = time.Duration(req.TimeoutSeconds) * time.Second
	uninstall.DeletionPropagation = "background"
	uninstall.WaitStrategy, uninstall.WaitOptions = strategy(req.Wait), waitOptions()
	uninstall.DisableHooks, uninstall.KeepHistory = req.DisableHooks, req.KeepHistory
	return uninstall
}

// upgrade is `helm upgrade --install --reset-values --disable-openapi-validation`, with the chart's
// CRDs done first as the action's policy asks (applyCRDs), and what became of them; installed
// says it was an install. A failed action is remediated as its phase asks (remediateUpgrade).
func (e *executor) upgrade(ctx context.Context, cfg *action.Configuration, req request) (*rspb.Release, *crdReport, bool, error) {
	ch, err := loadChart(req.Chart)
	if err != nil {
		return nil, nil, false, err
	}
	vals, err := values(req)
	if err != nil {
		return nil, nil, false, err
	}
	crds := bringsCRDs(ch)
	if !crds {
		cfg.Capabilities = e.cachedCapabilities(req.Cluster)
	}
	fresh := cfg.Capabilities == nil
	defer func() {
		if crds {
			e.keepCapabilities(req.Cluster, nil, false)
		} else {
			e.keepCapabilities(req.Cluster, cfg.Capabilities, fresh)
		}
	}()

	history := action.NewHistory(cfg)
	history.Max = 1
	versions, err := history.Run(req.Release)
	uninstalled, before := false, 0
	if err == nil && len(versions) > 0 {
		last, convErr := toV1(versions[len(versions)-1])
		uninstalled = convErr == nil && last.Info.Status == rcommon.StatusUninstalled
		if convErr == nil {
			before = last.Version
		}
	}
	if errors.Is(err, driver.ErrReleaseNotFound) || uninstalled {
		report, err := applyCRDs(cfg, ch, phaseOr(req.Install, req, crdCreate).Crds)
		if err != nil {
			return nil, nil, true, err
		}
		rel, err := installAction(cfg, req, uninstalled).RunWithContext(ctx, ch, vals)
		if err != nil {
			return nil, report, true, err
		}
		v1, err := toV1(rel)
		return v1, report, true, err
	} else if err != nil {
		return nil, nil, false, err
	}
	report, err := applyCRDs(cfg, ch, phaseOr(req.Upgrade, req, crdSkip).Crds)
	if err != nil {
		return nil, nil, false, fmt.Errorf("UPGRADE FAILED: %w", err)
	}
	rel, err := upgradeAction(cfg, req).RunWithContext(ctx, req.Release, ch, vals)
	if err != nil {
		return nil, report, false, remediateUpgrade(cfg, req, before, fmt.Errorf("UPGRADE FAILED: %w", err))
	}
	v1, err := toV1(rel)
	return v1, report, false, err
}

// remediateUpgrade uninstalls a release whose upgrade failed (why) after writing a revision past
// before, when its upgrade phase asks for that strategy (Helm itself rolls back, through the
// action's RollbackOnFailure). What was done, for the answer's error.
func remediateUpgrade(cfg *action.Configuration, req request, before int, why error) error {
	if phaseOr(req.Upgrade, req, crdSkip).Remediate != remediateUninstall {
		return why
	}
	newest, err := cfg.Releases.Last(req.Release)
	if err != nil {
		return why
	}
	if last, convErr := toV1(newest); convErr != nil || last.Version <= before {
		return why // nothing was written: the release as it was keeps serving
	}
	uninstall := uninstallAction(cfg, request{TimeoutSeconds: req.TimeoutSeconds, DisableHooks: true})
	if _, err := uninstall.Run(req.Release); err != nil {
		return fmt.Errorf("%w; uninstalling the release failed too: %v", why, err)
	}
	return fmt.Errorf("%w; the release was uninstalled (upgrade.remediation.strategy: uninstall)", why)
}
