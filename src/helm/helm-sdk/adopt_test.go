package main

import (
	"context"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	authv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// adoptionWorld is a namespace holding a release installed by hand (unsealed, labelled as Flux
// labels its releases) whose manifest maps to objects, and an identity allowed everything but
// what denied names ("verb resource namespace/name").
func adoptionWorld(t *testing.T, objects []*resource.Info, denied ...string) (*sealedSecrets, *fake.Clientset, *action.Configuration, request, vector) {
	t.Helper()
	s, client, v := sealedStorage(t)
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview)
		r := review.Spec.ResourceAttributes
		asked := r.Verb + " " + r.Resource + " " + objectName(r.Namespace, r.Name)
		review.Status.Allowed = true
		for _, d := range denied {
			if d == asked {
				review.Status.Allowed = false
			}
		}
		return true, review, nil
	})
	cfg := &action.Configuration{KubeClient: &kubefake.FailingKubeClient{DummyResources: objects}}
	req := request{Op: "upgrade", Namespace: v.Namespace, Release: v.Release, Adopt: true, Labels: ownerLabels(v)}
	rls := v.release()
	rls.Hooks = nil
	forge(t, client, v.Namespace, rls, map[string]string{"helm.toolkit.fluxcd.io/name": "web"}, nil)
	return s, client, cfg, req, v
}

func info(plural, namespace, name string) *resource.Info {
	return &resource.Info{Namespace: namespace, Name: name, Mapping: &meta.RESTMapping{
		Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: plural},
		Scope:    meta.RESTScopeNamespace,
	}}
}

// sealNext writes, through the sealed storage, the revision after the hand-installed one, sealed
// for Controller ownerName of the vector's owner namespace.
func sealNext(t *testing.T, s *sealedSecrets, v vector, ownerName string) {
	t.Helper()
	next := v.release()
	next.Version = v.Revision + 1
	next.Labels = ownerLabels(v)
	next.Labels[ownerNameLbl] = ownerName
	if err := s.Create(recordKey(v.Release, next.Version), next); err != nil {
		t.Fatal(err)
	}
}

func TestAForgedRecordNamingWhatTheIdentityMayNotDeleteIsNeverAdopted(t *testing.T) {
	objects := []*resource.Info{info("deployments", "team", "web"), info("deployments", "other", "db")}
	s, client, cfg, req, v := adoptionWorld(t, objects, "delete deployments other/db")
	_, err := prepareAdoption(context.Background(), cfg, client, s, req)
	if err == nil || !strings.Contains(err.Error(), "deployments other/db") || !strings.Contains(err.Error(), "may not delete") {
		t.Fatalf("want a refusal naming the object and verb, got %v", err)
	}
	if _, err := s.Get(recordKey(v.Release, v.Revision)); err == nil {
		t.Fatal("a refused record must stay hidden from Helm")
	}
}

func TestAReleaseWithARecordSealedForAnotherControllerIsNeverAdopted(t *testing.T) {
	s, client, cfg, req, v := adoptionWorld(t, nil)
	sealNext(t, s, v, "someone-else")
	_, err := prepareAdoption(context.Background(), cfg, client, s, req)
	if err == nil || !strings.Contains(err.Error(), "someone-else") {
		t.Fatalf("want a refusal naming the other Controller, got %v", err)
	}
}

func TestAHandInstalledReleaseWithinTheIdentityIsLetThroughOnceAndItsLabelsReported(t *testing.T) {
	s, client, cfg, req, v := adoptionWorld(t, []*resource.Info{info("deployments", "team", "web")})
	labels, err := prepareAdoption(context.Background(), cfg, client, s, req)
	if err != nil {
		t.Fatal(err)
	}
	if labels["helm.toolkit.fluxcd.io/name"] != "web" || labels["owner"] != "helm" || labels["version"] != "" {
		t.Fatalf("reported labels %v", labels)
	}
	got, err := s.Get(recordKey(v.Release, v.Revision))
	if err != nil {
		t.Fatalf("the checked record reads back for the upgrade: %v", err)
	}
	if rls, _ := toV1(got); len(rls.Labels) != 0 {
		t.Fatalf("the former owner's labels must not carry into the upgrade: %v", rls.Labels)
	}
	// Swapped by the tenant after the check: hidden again.
	swapped := v.release()
	swapped.Manifest += "\n---\nkind: ClusterRoleBinding"
	secrets := client.CoreV1().Secrets(v.Namespace)
	if err := secrets.Delete(context.Background(), recordKey(v.Release, v.Revision), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	forge(t, client, v.Namespace, swapped, nil, nil)
	if _, err := s.Get(recordKey(v.Release, v.Revision)); err == nil {
		t.Fatal("a record swapped after the check must stay hidden")
	}
}

func TestAReleaseAlreadySealedForThisControllerNeedsNoAdoption(t *testing.T) {
	s, client, cfg, req, v := adoptionWorld(t, nil)
	sealNext(t, s, v, v.OwnerName)
	labels, err := prepareAdoption(context.Background(), cfg, client, s, req)
	if err != nil || labels != nil || s.adopted != nil {
		t.Fatalf("want nothing taken over, got %v, %v", labels, err)
	}
}
