package main

// Adoption: an upgrade request with adopt takes over a release none of whose records this
// operator sealed (installed by hand, by Flux, by Argo CD), as an ordinary upgrade.
//
// Its newest record is tenant-writable evidence: whoever may write Secrets in the namespace can
// forge it, with a manifest naming any object. Helm would act on that manifest: the upgrade
// deletes what it has and the chart no longer renders, and a rollback (remediation, a
// halted rollout) applies it again. So, before Helm reads it, every object of its manifest and
// hooks is checked with a SelfSubjectAccessReview made as the request's identity (the policy's
// impersonated user, or the operator for a trusted policy): that identity must be allowed to
// create, patch and delete each one, so a forged record never makes Helm act beyond what the
// identity may do anyway. The check is bounded (maxAdoptedObjects). Then only that one record,
// with exactly the content checked, is let through the sealed storage; a record swapped after
// the check stays hidden. A release with any record sealed for another Controller is refused.

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	rspb "helm.sh/helm/v4/pkg/release/v1"
	authv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kblabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

const (
	// maxAdoptedObjects bounds the objects of a release taken over, and so the access reviews.
	maxAdoptedObjects = 256
	// maxReportedLabels bounds the previous record's labels reported back.
	maxReportedLabels = 32
)

// adoptVerbs are what the identity must be allowed on each object of a release it takes over:
// what an upgrade, its cleanup and a rollback to the adopted revision may do with it.
var adoptVerbs = []string{"create", "patch", "delete"}

// adoptedRecord is the one record not sealed by this operator that the storage lets Helm read.
type adoptedRecord struct {
	name    string
	content string
}

// takesAdopted tells whether obj is the record let through for adoption, with the content checked.
func (s *sealedSecrets) takesAdopted(obj *v1.Secret, rls *rspb.Release, content string) bool {
	return s.adopted != nil && obj.Name == s.adopted.name && content == s.adopted.content &&
		obj.Labels["name"] == rls.Name && obj.Labels["version"] == strconv.Itoa(rls.Version)
}

// prepareAdoption readies an adopting upgrade: nil labels when the release has a record sealed
// for this request's owner (it is already ours: nothing to take over); else the newest record is
// checked as the identity and let through, and its labels (Helm's revision bookkeeping left out)
// are returned, to be reported. An error says why the release is not taken over.
func prepareAdoption(ctx context.Context, cfg *action.Configuration, clientset kubernetes.Interface, secrets *sealedSecrets, req request) (map[string]string, error) {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("adopting release %s/%s refused: %s", req.Namespace, req.Release, fmt.Sprintf(format, a...))
	}
	selector := kblabels.Set{"owner": "helm", "name": req.Release}.AsSelector().String()
	list, err := secrets.impl.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, refuse("listing its release records: %v", err)
	}
	var newest *v1.Secret
	ours := false
	for i := range list.Items {
		item := &list.Items[i]
		if _, err := secrets.open(item); err == nil {
			if item.Labels[ownerNamespaceLbl] != req.Labels[ownerNamespaceLbl] || item.Labels[ownerNameLbl] != req.Labels[ownerNameLbl] {
				return nil, refuse("its record %s is sealed for Controller %s/%s, and another Controller's release is never taken over",
					item.Name, item.Labels[ownerNamespaceLbl], item.Labels[ownerNameLbl])
			}
			ours = true
			continue
		}
		if newest == nil || version(item) > version(newest) {
			newest = item
		}
	}
	if ours || newest == nil {
		return nil, nil
	}
	rls, err := decodeBounded(newest.Data["release"])
	if err != nil || len(newest.Data["release"]) > maxRecordBytes {
		return nil, refuse("its newest record %s cannot be read within bounds", newest.Name)
	}
	if newest.Labels["status"] != string(rcommon.StatusDeployed) || rls.Info == nil || rls.Info.Status != rcommon.StatusDeployed ||
		rls.Name != req.Release || strconv.Itoa(rls.Version) != newest.Labels["version"] {
		return nil, refuse("its newest record %s is not a deployed revision of it: only a deployed release is taken over", newest.Name)
	}
	if err := withinIdentity(ctx, cfg, clientset, rls); err != nil {
		return nil, refuse("%v", err)
	}
	secrets.adopted = &adoptedRecord{name: newest.Name, content: contentDigest(rls)}
	return reportedLabels(newest.Labels), nil
}

// adoptingUpgrade is the upgrade that takes a release over: server-side, forcing conflicts, so
// the fields the previous owner's field manager held (helm's, Flux's helm-controller's) pass to
// this executor's; values the chart renders as they run change nothing, so no pod is replaced.
func adoptingUpgrade(req request) request {
	req.ForceConflicts = true
	if req.Description == "" {
		req.Description = "adopted by tenancy-hub"
	}
	return req
}

// version is a record's revision label as a number; 0 when it has none.
func version(s *v1.Secret) int {
	n, _ := strconv.Atoi(s.Labels["version"])
	return n
}

// withinIdentity checks that the identity of clientset may create, patch and delete every object
// of the release's manifest and hooks; an error names the first it may not, or why it cannot tell.
func withinIdentity(ctx context.Context, cfg *action.Configuration, clientset kubernetes.Interface, rls *rspb.Release) error {
	var all bytes.Buffer
	all.WriteString(rls.Manifest)
	for _, h := range rls.Hooks {
		if h != nil {
			all.WriteString("\n---\n" + h.Manifest)
		}
	}
	objects, err := cfg.KubeClient.Build(&all, false)
	if err != nil {
		return fmt.Errorf("its existing manifest cannot be mapped to the cluster's resources (%v)", err)
	}
	if len(objects) > maxAdoptedObjects {
		return fmt.Errorf("it holds %d objects, more than %d", len(objects), maxAdoptedObjects)
	}
	reviews := clientset.AuthorizationV1().SelfSubjectAccessReviews()
	for _, o := range objects {
		gvr := o.Mapping.Resource
		namespace := ""
		if o.Namespaced() {
			namespace = o.Namespace
		}
		for _, verb := range adoptVerbs {
			review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authv1.ResourceAttributes{
					Namespace: namespace, Verb: verb, Group: gvr.Group, Resource: gvr.Resource, Name: o.Name,
				},
			}}
			got, err := reviews.Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("asking whether its identity may %s %s %s: %v", verb, gvr.Resource, objectName(namespace, o.Name), err)
			}
			if !got.Status.Allowed {
				return fmt.Errorf("its existing manifest holds %s %s, which the policy's identity may not %s: a release is taken over only within what that identity may manage",
					gvr.Resource, objectName(namespace, o.Name), verb)
			}
		}
	}
	return nil
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// reportedLabels are a record's labels but Helm's revision bookkeeping (name, status, version,
// times), at most maxReportedLabels of them by key order.
func reportedLabels(labels map[string]string) map[string]string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		if k == "owner" || !strings.Contains(","+systemLabelsRecord+",", ","+k+",") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make(map[string]string, maxReportedLabels)
	for _, k := range keys {
		if len(out) == maxReportedLabels {
			break
		}
		out[k] = labels[k]
	}
	return out
}
