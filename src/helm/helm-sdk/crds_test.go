// Tests of what a CRD policy does with a chart's CRDs over the cluster's (planCRDs), pure: the
// lab's tests (tests/crds.rs) prove the real apply.
package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// crd is a CustomResourceDefinition named name serving versions, with stored as its
// status.storedVersions (nil: a chart's CRD, which has no status).
func crd(name string, versions []string, stored []string) *unstructured.Unstructured {
	listed := make([]any, 0, len(versions))
	for _, v := range versions {
		listed = append(listed, map[string]any{"name": v, "served": true, "storage": v == versions[0]})
	}
	obj := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"group": "example.com", "versions": listed},
	}
	if stored != nil {
		s := make([]any, 0, len(stored))
		for _, v := range stored {
			s = append(s, v)
		}
		obj["status"] = map[string]any{"storedVersions": s}
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestCreateMakesTheMissingCRDsAndKeepsThoseThereAsTheyAre(t *testing.T) {
	chart := []*unstructured.Unstructured{crd("a.example.com", []string{"v1"}, nil), crd("b.example.com", []string{"v2"}, nil)}
	current := map[string]*unstructured.Unstructured{"a.example.com": crd("a.example.com", []string{"v0"}, []string{"v0"})}
	plan, err := planCRDs(crdCreate, chart, current)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.create) != 1 || plan.create[0] != 1 || len(plan.keep) != 1 || plan.keep[0] != 0 || len(plan.replace) != 0 {
		t.Errorf("create %v keep %v replace %v", plan.create, plan.keep, plan.replace)
	}
}

func TestCreateReplaceReplacesThoseThereAndCreatesTheOthersInTheChartsOrder(t *testing.T) {
	chart := []*unstructured.Unstructured{crd("b.example.com", []string{"v1"}, nil), crd("a.example.com", []string{"v1", "v1beta1"}, nil)}
	current := map[string]*unstructured.Unstructured{"a.example.com": crd("a.example.com", []string{"v1beta1"}, []string{"v1beta1"})}
	plan, err := planCRDs(crdCreateReplace, chart, current)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.create) != 1 || plan.create[0] != 0 || len(plan.replace) != 1 || plan.replace[0] != 1 || len(plan.keep) != 0 {
		t.Errorf("create %v replace %v keep %v", plan.create, plan.replace, plan.keep)
	}
}

func TestSkipLeavesEveryCRDAloneEvenAMissingOne(t *testing.T) {
	chart := []*unstructured.Unstructured{crd("a.example.com", []string{"v1"}, nil)}
	plan, err := planCRDs(crdSkip, chart, map[string]*unstructured.Unstructured{})
	if err != nil || len(plan.keep) != 1 || len(plan.create)+len(plan.replace) != 0 {
		t.Errorf("plan %+v, %v", plan, err)
	}
}

func TestAReplacementDroppingAVersionStillStoredIsRefusedWholeNamingTheCRDAndTheVersion(t *testing.T) {
	chart := []*unstructured.Unstructured{
		crd("new.example.com", []string{"v1"}, nil),
		crd("a.example.com", []string{"v1"}, nil),
	}
	current := map[string]*unstructured.Unstructured{"a.example.com": crd("a.example.com", []string{"v1", "v1alpha1"}, []string{"v1alpha1", "v1"})}
	plan, err := planCRDs(crdCreateReplace, chart, current)
	if err == nil {
		t.Fatalf("planned %+v", plan)
	}
	for _, want := range []string{"CRD a.example.com", "version v1alpha1", "status.storedVersions", "nothing was applied", "Migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %s", want, err)
		}
	}
	if len(plan.create) != 0 {
		t.Errorf("a refused plan still creates %v", plan.create)
	}
}

func TestAVersionDroppedButNoLongerStoredIsReplaced(t *testing.T) {
	chart := []*unstructured.Unstructured{crd("a.example.com", []string{"v1"}, nil)}
	current := map[string]*unstructured.Unstructured{"a.example.com": crd("a.example.com", []string{"v1", "v1alpha1"}, []string{"v1"})}
	if plan, err := planCRDs(crdCreateReplace, chart, current); err != nil || len(plan.replace) != 1 {
		t.Errorf("plan %+v, %v", plan, err)
	}
}

func TestCreateNeverRefusesForStoredVersionsSinceItChangesNothingThere(t *testing.T) {
	chart := []*unstructured.Unstructured{crd("a.example.com", []string{"v1"}, nil)}
	current := map[string]*unstructured.Unstructured{"a.example.com": crd("a.example.com", []string{"v1alpha1"}, []string{"v1alpha1"})}
	if _, err := planCRDs(crdCreate, chart, current); err != nil {
		t.Error(err)
	}
}

func TestAnEmptyReportIsOmittedFromTheAnswer(t *testing.T) {
	var none *crdReport
	if !none.empty() || !(&crdReport{}).empty() || (&crdReport{Unchanged: []string{"a"}}).empty() {
		t.Error("empty() misreads a report")
	}
}
