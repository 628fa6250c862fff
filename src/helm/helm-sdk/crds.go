// What is done with a chart's crds/ directory on an install or an upgrade (Flux's `crds` policy):
// Skip, Create (the missing ones) or CreateReplace (the missing ones created, the others applied
// server-side over the cluster's, refused when a version still stored would go), reported per CRD.
package main

import (
	"bytes"
	"fmt"
	"time"

	"helm.sh/helm/v4/pkg/action"
	ci "helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/resource"
)

// The CRD policies a request may name for an action.
const (
	crdSkip          = "Skip"
	crdCreate        = "Create"
	crdCreateReplace = "CreateReplace"
)

// crdEstablished bounds the wait for the CRDs created or replaced to be served.
const crdEstablished = time.Minute

// crdReport is what became of the chart's CRDs in one install or upgrade, by name: created,
// replaced (their spec changed), left unchanged (present and kept, or the same spec applied).
type crdReport struct {
	Created   []string `json:"created,omitempty"`
	Replaced  []string `json:"replaced,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
}

// empty tells whether the report names no CRD (a chart without crds/).
func (r *crdReport) empty() bool {
	return r == nil || len(r.Created)+len(r.Replaced)+len(r.Unchanged) == 0
}

// crdPlan is what a policy does with the chart's CRDs, given those the cluster has.
type crdPlan struct {
	create  []int // indexes into the chart's CRDs
	replace []int
	keep    []int
}

// droppedStoredVersion is a version the cluster's CRD still stores objects in (its
// status.storedVersions) that the chart's CRD no longer lists in spec.versions; "" when none.
func droppedStoredVersion(current, next *unstructured.Unstructured) string {
	stored, _, _ := unstructured.NestedStringSlice(current.Object, "status", "storedVersions")
	versions, _, _ := unstructured.NestedSlice(next.Object, "spec", "versions")
	listed := map[string]bool{}
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok {
			if name, ok := m["name"].(string); ok {
				listed[name] = true
			}
		}
	}
	for _, v := range stored {
		if !listed[v] {
			return v
		}
	}
	return ""
}

// planCRDs decides, CRD by CRD in the chart's order, what `policy` does with `chart` (the
// chart's CRDs) over `current` (the cluster's, by name; absent: missing). A replacement that
// drops a version still stored refuses the whole plan, so nothing is applied.
func planCRDs(policy string, chart []*unstructured.Unstructured, current map[string]*unstructured.Unstructured) (crdPlan, error) {
	var plan crdPlan
	for i, crd := range chart {
		existing, ok := current[crd.GetName()]
		switch {
		case policy == crdSkip:
			plan.keep = append(plan.keep, i)
		case !ok:
			plan.create = append(plan.create, i)
		case policy == crdCreate:
			plan.keep = append(plan.keep, i)
		default:
			if v := droppedStoredVersion(existing, crd); v != "" {
				return crdPlan{}, fmt.Errorf("CRD %s: the chart's new definition drops version %s, in which the cluster still stores objects (status.storedVersions); nothing was applied. Migrate the stored objects to a version the chart keeps, remove %s from the CRD's status.storedVersions, then upgrade again", crd.GetName(), v, v)
			}
			plan.replace = append(plan.replace, i)
		}
	}
	return plan, nil
}

// chartCRDs are the CustomResourceDefinitions of the chart's crds/ files and its subcharts', in
// the order Helm installs them, built by the request's clients; other kinds there are left out,
// as Helm's crds/ directory is for CRDs only.
func chartCRDs(kc kube.Interface, ch ci.Charter) (kube.ResourceList, error) {
	var out kube.ResourceList
	for _, data := range crdFiles(ch) {
		res, err := kc.Build(bytes.NewBuffer(data), false)
		if err != nil {
			return nil, fmt.Errorf("failed to read the chart's CRDs: %w", err)
		}
		for _, info := range res {
			gvk := info.Mapping.GroupVersionKind
			if gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition" {
				out = append(out, info)
			}
		}
	}
	return out, nil
}

// clusterCRD is the cluster's copy of a chart's CRD, read as the request's identity; nil when
// missing.
func clusterCRD(info *resource.Info) (*unstructured.Unstructured, error) {
	obj, err := resource.NewHelper(info.Client, info.Mapping).Get("", info.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read CRD %s: %w", info.Name, err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("failed to read CRD %s: unexpected %T", info.Name, obj)
	}
	return u, nil
}

// applyCRDs does what `policy` asks with the chart's CRDs, before Helm installs or upgrades the
// release, as the request's identity: Create creates those missing; CreateReplace also applies
// the chart's definition over the cluster's, server-side forcing conflicts (as Flux's
// helm-controller does), unless a version still stored would go. Those created or replaced are
// waited for until established, and the discovery cache is dropped, so the release's objects find
// their kinds. The report names every CRD of the chart.
func applyCRDs(cfg *action.Configuration, ch ci.Charter, policy string) (*crdReport, error) {
	infos, err := chartCRDs(cfg.KubeClient, ch)
	if err != nil || len(infos) == 0 {
		return nil, err
	}
	chart := make([]*unstructured.Unstructured, len(infos))
	current := map[string]*unstructured.Unstructured{}
	for i, info := range infos {
		chart[i], _ = info.Object.(*unstructured.Unstructured)
		if chart[i] == nil {
			return nil, fmt.Errorf("failed to read CRD %s: unexpected %T", info.Name, info.Object)
		}
		if policy == crdSkip {
			continue
		}
		if got, err := clusterCRD(info); err != nil {
			return nil, err
		} else if got != nil {
			current[info.Name] = got
		}
	}
	plan, err := planCRDs(policy, chart, current)
	if err != nil {
		return nil, err
	}
	report := &crdReport{}
	for _, i := range plan.keep {
		report.Unchanged = append(report.Unchanged, infos[i].Name)
	}
	var applied kube.ResourceList
	for _, i := range plan.create {
		// A plain create (not Helm's default server-side apply, which would change a CRD made
		// meanwhile): one that appeared since it was read is left as it is.
		if _, err := cfg.KubeClient.Create(infos[i:i+1], kube.ClientCreateOptionServerSideApply(false, false)); apierrors.IsAlreadyExists(err) {
			report.Unchanged = append(report.Unchanged, infos[i].Name)
			continue
		} else if err != nil {
			return nil, fmt.Errorf("failed to create CRD %s: %w", infos[i].Name, err)
		}
		report.Created = append(report.Created, infos[i].Name)
		applied = append(applied, infos[i])
	}
	replaced, err := replaceCRDs(cfg, infos, plan.replace, current, report)
	if err != nil {
		return nil, err
	}
	applied = append(applied, replaced...)
	if err := established(cfg, applied); err != nil {
		return nil, err
	}
	return report, nil
}

// replaceCRDs applies the chart's CRDs at `which` over the cluster's copies, and sorts them in
// the report by whether their spec changed (the CRD's generation moved).
func replaceCRDs(cfg *action.Configuration, infos kube.ResourceList, which []int, current map[string]*unstructured.Unstructured, report *crdReport) (kube.ResourceList, error) {
	var originals, targets kube.ResourceList
	for _, i := range which {
		target := infos[i]
		original := *target
		original.Object = current[target.Name]
		originals, targets = append(originals, &original), append(targets, target)
	}
	if len(targets) == 0 {
		return nil, nil
	}
	if _, err := cfg.KubeClient.Update(originals, targets, kube.ClientUpdateOptionServerSideApply(true, true)); err != nil {
		return nil, fmt.Errorf("failed to replace CRDs: %w", err)
	}
	var changed kube.ResourceList
	for _, target := range targets {
		after, err := clusterCRD(target)
		if err != nil {
			return nil, err
		}
		if after != nil && after.GetGeneration() != current[target.Name].GetGeneration() {
			report.Replaced = append(report.Replaced, target.Name)
			changed = append(changed, target)
		} else {
			report.Unchanged = append(report.Unchanged, target.Name)
		}
	}
	return changed, nil
}

// established waits until the CRDs applied are served, then drops the discovery cache and the
// REST mappings, as Helm's install does after its CRDs.
func established(cfg *action.Configuration, applied kube.ResourceList) error {
	if len(applied) == 0 {
		return nil
	}
	waiter, err := cfg.KubeClient.GetWaiter(kube.StatusWatcherStrategy)
	if err != nil {
		return err
	}
	if err := waiter.Wait(applied, crdEstablished); err != nil {
		return fmt.Errorf("the CRDs applied are not established: %w", err)
	}
	if discovery, err := cfg.RESTClientGetter.ToDiscoveryClient(); err == nil {
		discovery.Invalidate()
	}
	if mapper, err := cfg.RESTClientGetter.ToRESTMapper(); err == nil {
		if resettable, ok := mapper.(meta.ResettableRESTMapper); ok {
			resettable.Reset()
		}
	}
	return nil
}
