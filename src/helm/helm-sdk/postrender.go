// Post-render patches of a release (Flux HelmRelease's postRenderers and commonMetadata): Helm's
// rendered manifest patched with kustomize's own patch and image transformers, in process, then
// judged as patched: no object may change its identity, and the sensitive kinds only where the
// operator's policy allows it.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/builtins"
	"sigs.k8s.io/kustomize/api/pkg/loader"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// postRender is what a release's manifest goes through after Helm renders it: each renderer in
// order (its patches in order, then its images), then the common metadata.
type postRender struct {
	Renderers      []renderer      `json:"renderers,omitempty"`
	CommonMetadata *commonMetadata `json:"commonMetadata,omitempty"`
	// The policy allowing the release lets its post-render change RBAC objects, admission
	// webhooks and policies, and CRDs; without it, a change to one of them fails the release.
	AllowSensitiveKinds bool `json:"allowSensitiveKinds,omitempty"`
}

// renderer is one kustomize post-renderer: Flux's postRenderers[].kustomize.
type renderer struct {
	Patches []patch `json:"patches,omitempty"`
	Images  []image `json:"images,omitempty"`
}

// patch is a strategic merge patch (a JSON merge patch for kinds kustomize does not know) or a
// JSON6902 patch, applied to the objects target selects.
type patch struct {
	Patch  string  `json:"patch"`
	Target *target `json:"target,omitempty"`
}

// target selects objects as kustomize's selector does; an empty field matches any.
type target struct {
	Group              string `json:"group,omitempty"`
	Version            string `json:"version,omitempty"`
	Kind               string `json:"kind,omitempty"`
	Name               string `json:"name,omitempty"`
	Namespace          string `json:"namespace,omitempty"`
	LabelSelector      string `json:"labelSelector,omitempty"`
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// image rewrites the container images named name, as kustomize's images do.
type image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// commonMetadata is set on every object the chart renders, over the chart's own.
type commonMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// sensitiveKinds are the kinds a post-render may change only where the policy allows it: RBAC,
// admission webhooks and policies, and CRDs, by group and kind.
var sensitiveKinds = map[string]bool{
	"rbac.authorization.k8s.io/Role":                                true,
	"rbac.authorization.k8s.io/ClusterRole":                         true,
	"rbac.authorization.k8s.io/RoleBinding":                         true,
	"rbac.authorization.k8s.io/ClusterRoleBinding":                  true,
	"admissionregistration.k8s.io/ValidatingWebhookConfiguration":   true,
	"admissionregistration.k8s.io/MutatingWebhookConfiguration":     true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicy":        true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicyBinding": true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicy":          true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicyBinding":   true,
	"apiextensions.k8s.io/CustomResourceDefinition":                 true,
}

// sensitive says whether an object of id is of a sensitive kind.
func sensitive(id resid.ResId) bool {
	return sensitiveKinds[id.Group+"/"+id.Kind]
}

// kustomizer is Helm's post-renderer for one release: its Run is called with the manifest Helm
// rendered, and returns the manifest Helm applies and records.
type kustomizer struct {
	spec postRender
}

// Run patches the manifest; any failure names the step (postRenderers[i].kustomize.patches[j]).
func (k kustomizer) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	out, err := apply(rendered.Bytes(), k.spec)
	if err != nil {
		return nil, fmt.Errorf("post-render: %w", err)
	}
	return bytes.NewBuffer(out), nil
}

// factory makes kustomize's resource maps, with no field validator and no plugin of its own.
func factory() *resmap.Factory {
	return resmap.NewFactory(provider.NewDefaultDepProvider().GetResourceFactory())
}

// apply runs spec over manifest and judges the result against the manifest as rendered.
func apply(manifest []byte, spec postRender) ([]byte, error) {
	rf := factory()
	before, err := rf.NewResMapFromBytes(manifest)
	if err != nil {
		return nil, fmt.Errorf("reading the rendered manifest: %w", err)
	}
	after := before.DeepCopy()
	// No loader reaches a file: a patch is its text, never a path.
	helpers := resmap.NewPluginHelpers(loader.NewFileLoaderAtRoot(filesys.MakeFsInMemory()), nil, rf, types.DisabledPluginConfig())
	for i, r := range spec.Renderers {
		at := fmt.Sprintf("postRenderers[%d].kustomize", i)
		for j, p := range r.Patches {
			if err := applyPatch(helpers, after, p); err != nil {
				return nil, fmt.Errorf("%s.patches[%d]: %w", at, j, err)
			}
		}
		for j, img := range r.Images {
			if err := applyImage(helpers, after, img); err != nil {
				return nil, fmt.Errorf("%s.images[%d] (%s): %w", at, j, img.Name, err)
			}
		}
	}
	if m := spec.CommonMetadata; m != nil {
		if err := setMetadata(after, *m); err != nil {
			return nil, fmt.Errorf("commonMetadata: %w", err)
		}
	}
	if err := judge(before, after, spec.AllowSensitiveKinds); err != nil {
		return nil, err
	}
	return after.AsYaml()
}

// applyPatch applies one patch to m. A target that selects nothing is an error, unlike
// kustomize's silence: a patch that patches nothing is a mistake the tenant should hear of.
func applyPatch(h *resmap.PluginHelpers, m resmap.ResMap, p patch) error {
	var selector *types.Selector
	if t := p.Target; t != nil {
		selector = &types.Selector{
			ResId: resid.ResId{
				Gvk:       resid.Gvk{Group: t.Group, Version: t.Version, Kind: t.Kind},
				Name:      t.Name,
				Namespace: t.Namespace,
			},
			LabelSelector:      t.LabelSelector,
			AnnotationSelector: t.AnnotationSelector,
		}
		selected, err := m.Select(*selector)
		if err != nil {
			return fmt.Errorf("selecting its target: %w", err)
		}
		if len(selected) == 0 {
			return fmt.Errorf("its target (%s) matches no object of the chart", describeTarget(*t))
		}
	}
	config, err := yaml.Marshal(struct {
		Patch  string          `json:"patch"`
		Target *types.Selector `json:"target,omitempty"`
	}{p.Patch, selector})
	if err != nil {
		return err
	}
	plugin := builtins.NewPatchTransformerPlugin()
	if err := plugin.Config(h, config); err != nil {
		return err
	}
	return plugin.Transform(m)
}

// describeTarget is a target as the tenant wrote it.
func describeTarget(t target) string {
	var parts []string
	for _, f := range []struct{ name, value string }{
		{"group", t.Group}, {"version", t.Version}, {"kind", t.Kind}, {"name", t.Name},
		{"namespace", t.Namespace}, {"labelSelector", t.LabelSelector}, {"annotationSelector", t.AnnotationSelector},
	} {
		if f.value != "" {
			parts = append(parts, fmt.Sprintf("%s=%s", f.name, f.value))
		}
	}
	if len(parts) == 0 {
		return "any object"
	}
	return strings.Join(parts, ", ")
}

// applyImage rewrites the images of m as kustomize's images entry img does.
func applyImage(h *resmap.PluginHelpers, m resmap.ResMap, img image) error {
	config, err := yaml.Marshal(struct {
		ImageTag types.Image `json:"imageTag"`
	}{types.Image{Name: img.Name, NewName: img.NewName, NewTag: img.NewTag, Digest: img.Digest}})
	if err != nil {
		return err
	}
	plugin := builtins.NewImageTagTransformerPlugin()
	if err := plugin.Config(h, config); err != nil {
		return err
	}
	return plugin.Transform(m)
}

// setMetadata sets the labels and annotations of m on every object of it, over their own.
func setMetadata(m resmap.ResMap, meta commonMetadata) error {
	for _, r := range m.Resources() {
		if len(meta.Labels) > 0 {
			labels := r.GetLabels()
			for k, v := range meta.Labels {
				labels[k] = v
			}
			if err := r.SetLabels(labels); err != nil {
				return fmt.Errorf("%s: %w", r.CurId(), err)
			}
		}
		if len(meta.Annotations) > 0 {
			annotations := r.GetAnnotations()
			for k, v := range meta.Annotations {
				annotations[k] = v
			}
			if err := r.SetAnnotations(annotations); err != nil {
				return fmt.Errorf("%s: %w", r.CurId(), err)
			}
		}
	}
	return nil
}

// identity is an object's group, kind, namespace and name, as it would be applied.
func identity(r *resource.Resource) string {
	id := r.CurId()
	return fmt.Sprintf("%s/%s %s/%s", id.Group, id.Kind, id.Namespace, id.Name)
}

// judge refuses a post-render that added, removed or renamed an object, changed its kind or
// namespace (a patch may retarget the object it was aimed at, so the result is judged, not the
// target), or changed an object of a sensitive kind while allowSensitive is false.
func judge(before, after resmap.ResMap, allowSensitive bool) error {
	was := map[string]*resource.Resource{}
	for _, r := range before.Resources() {
		was[identity(r)] = r
	}
	var changed []string
	seen := map[string]bool{}
	for _, r := range after.Resources() {
		id := identity(r)
		old, ok := was[id]
		if !ok {
			changed = append(changed, id)
			continue
		}
		seen[id] = true
		if sensitive(r.CurId()) && !allowSensitive && !reflect.DeepEqual(old.MustYaml(), r.MustYaml()) {
			return fmt.Errorf("post-render changes %s, of a kind (RBAC, admission webhooks and policies, CRDs) the TenancyPolicy allowing this release does not let post-render patches or commonMetadata change (helm.allowPostRenderSensitiveKinds)", id)
		}
	}
	for id := range was {
		if !seen[id] {
			changed = append(changed, id)
		}
	}
	if len(changed) > 0 {
		sort.Strings(changed)
		return fmt.Errorf("post-render may not add, remove or rename objects, nor change their kind or namespace: %s", strings.Join(changed, "; "))
	}
	return nil
}

// previewRequest is what `tenancy-hub-helm post-render` reads on its stdin: a manifest as
// `helm template` rendered it, and the release's post-render, so a preview (`tenancy-hub diff`)
// patches with the code an install runs.
type previewRequest struct {
	Manifest   string     `json:"manifest"`
	PostRender postRender `json:"postRender"`
}

// maxPreview bounds what a preview reads: a release's manifest is far smaller.
const maxPreview = 64 << 20

// preview answers `tenancy-hub-helm post-render`: the patched manifest on out, or the error.
func preview(in io.Reader, out io.Writer) error {
	body, err := io.ReadAll(io.LimitReader(in, maxPreview+1))
	if err != nil {
		return err
	}
	if len(body) > maxPreview {
		return fmt.Errorf("the request is larger than %d bytes", maxPreview)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req previewRequest
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	patched, err := kustomizer{spec: req.PostRender}.Run(bytes.NewBufferString(req.Manifest))
	if err != nil {
		return err
	}
	_, err = out.Write(patched.Bytes())
	return err
}
