package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
`

const clusterRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
`

const chart = deployment + "---\n" + clusterRole

// run post-renders the manifest as Helm's post-renderer would.
func run(t *testing.T, manifest string, spec postRender) (string, error) {
	t.Helper()
	out, err := kustomizer{spec: spec}.Run(bytes.NewBufferString(manifest))
	if err != nil {
		return "", err
	}
	return out.String(), nil
}

func one(patches ...patch) postRender {
	return postRender{Renderers: []renderer{{Patches: patches}}}
}

func TestAStrategicMergePatchAddsAContainerEnvAndALabelToTheDeployment(t *testing.T) {
	out, err := run(t, chart, one(patch{Patch: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    team: blue
spec:
  template:
    spec:
      containers:
      - name: web
        env:
        - name: MODE
          value: patched
`}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team: blue", "name: MODE", "image: nginx:1.25", "containerPort: 80"} {
		if !strings.Contains(out, want) {
			t.Errorf("the patched manifest lacks %q:\n%s", want, out)
		}
	}
}

func TestAJSON6902PatchWithATargetReplacesTheReplicas(t *testing.T) {
	out, err := run(t, chart, one(patch{
		Patch:  `[{"op": "add", "path": "/spec/replicas", "value": 3}]`,
		Target: &target{Kind: "Deployment", Name: "web"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "replicas: 3") {
		t.Errorf("the replicas are not set:\n%s", out)
	}
}

func TestImagesRewriteTheContainerImageAsKustomizeDoes(t *testing.T) {
	out, err := run(t, chart, postRender{Renderers: []renderer{{Images: []image{{Name: "nginx", NewName: "registry.example/nginx", NewTag: "1.27"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "image: registry.example/nginx:1.27") {
		t.Errorf("the image is not rewritten:\n%s", out)
	}
}

func TestCommonMetadataLabelsAndAnnotatesEveryObjectWhereThePolicyAllowsRBAC(t *testing.T) {
	out, err := run(t, chart, postRender{
		CommonMetadata:      &commonMetadata{Labels: map[string]string{"cost-center": "42"}, Annotations: map[string]string{"owner": "blue"}},
		AllowSensitiveKinds: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "cost-center: \"42\""); n != 2 {
		t.Errorf("the label is on %d objects, not 2:\n%s", n, out)
	}
	if n := strings.Count(out, "owner: blue"); n != 2 {
		t.Errorf("the annotation is on %d objects, not 2:\n%s", n, out)
	}
}

func TestCommonMetadataOnAClusterRoleIsRefusedByDefault(t *testing.T) {
	// A label can aggregate a ClusterRole into admin: rbac.authorization.k8s.io/aggregate-to-admin.
	_, err := run(t, chart, postRender{CommonMetadata: &commonMetadata{Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}})
	if err == nil || !strings.Contains(err.Error(), "rbac.authorization.k8s.io/ClusterRole /reader") {
		t.Fatalf("want a refusal naming the ClusterRole, got %v", err)
	}
}

func TestAPatchToAClusterRoleIsRefusedByDefault(t *testing.T) {
	_, err := run(t, chart, one(patch{
		Patch:  `[{"op": "add", "path": "/rules/0/verbs/-", "value": "*"}]`,
		Target: &target{Kind: "ClusterRole"},
	}))
	if err == nil || !strings.Contains(err.Error(), "allowPostRenderSensitiveKinds") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestAPatchTurningADeploymentIntoAClusterRoleIsRefused(t *testing.T) {
	// The target is harmless; the result is not.
	_, err := run(t, deployment, one(patch{
		Patch: `[{"op": "replace", "path": "/kind", "value": "ClusterRole"},
		         {"op": "replace", "path": "/apiVersion", "value": "rbac.authorization.k8s.io/v1"}]`,
		Target: &target{Kind: "Deployment", Name: "web"},
	}))
	if err == nil || !strings.Contains(err.Error(), "may not add, remove or rename") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestAPatchMovingAnObjectToAnotherNamespaceIsRefused(t *testing.T) {
	_, err := run(t, deployment, one(patch{
		Patch:  `[{"op": "add", "path": "/metadata/namespace", "value": "kube-system"}]`,
		Target: &target{Kind: "Deployment"},
	}))
	if err == nil || !strings.Contains(err.Error(), "may not add, remove or rename") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestAPatchDeletingAnObjectIsRefused(t *testing.T) {
	_, err := run(t, chart, one(patch{Patch: `$patch: delete
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
`}))
	if err == nil || !strings.Contains(err.Error(), "may not add, remove or rename") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestAPatchWhoseTargetMatchesNothingFailsNamingItsIndex(t *testing.T) {
	_, err := run(t, chart, postRender{Renderers: []renderer{{}, {Patches: []patch{
		{Patch: `[{"op": "add", "path": "/spec/replicas", "value": 3}]`, Target: &target{Kind: "Deployment"}},
		{Patch: `[{"op": "add", "path": "/spec/replicas", "value": 3}]`, Target: &target{Kind: "StatefulSet", Name: "db"}},
	}}}})
	if err == nil || !strings.Contains(err.Error(), "postRenderers[1].kustomize.patches[1]") || !strings.Contains(err.Error(), "kind=StatefulSet, name=db") {
		t.Fatalf("want an error naming the patch and its target, got %v", err)
	}
}

func TestAStrategicMergePatchNamingAMissingObjectFails(t *testing.T) {
	_, err := run(t, chart, one(patch{Patch: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: other
spec:
  replicas: 2
`}))
	if err == nil || !strings.Contains(err.Error(), "patches[0]") {
		t.Fatalf("want an error naming the patch, got %v", err)
	}
}

func TestAPatchThatIsNeitherYAMLNorJSONPatchFails(t *testing.T) {
	_, err := run(t, chart, one(patch{Patch: "[{not json", Target: &target{Kind: "Deployment"}}))
	if err == nil || !strings.Contains(err.Error(), "patches[0]") {
		t.Fatalf("want an error naming the patch, got %v", err)
	}
}

func TestAPatchToAClusterRoleIsAppliedWhereThePolicyAllowsIt(t *testing.T) {
	out, err := run(t, chart, postRender{AllowSensitiveKinds: true, Renderers: []renderer{{Patches: []patch{{
		Patch:  `[{"op": "add", "path": "/rules/0/verbs/-", "value": "list"}]`,
		Target: &target{Kind: "ClusterRole"},
	}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "- list") {
		t.Errorf("the verb is not added:\n%s", out)
	}
}

func TestAPreviewPatchesTheManifestOfItsRequest(t *testing.T) {
	var out bytes.Buffer
	in := `{"manifest": ` + strconv.Quote(deployment) + `, "postRender": {"commonMetadata": {"labels": {"team": "blue"}}}}`
	if err := preview(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "team: blue") {
		t.Errorf("the preview is not patched:\n%s", out.String())
	}
}

func TestAPreviewRefusesAFieldItDoesNotKnow(t *testing.T) {
	if err := preview(strings.NewReader(`{"manifest": "", "postRender": {}, "extra": 1}`), &bytes.Buffer{}); err == nil {
		t.Fatal("an unknown field was taken")
	}
}

func TestATargetWrittenAsAPatternReachingAClusterRoleIsJudgedByItsResult(t *testing.T) {
	// The hub reads target kinds as written; kustomize reads them as patterns.
	_, err := run(t, chart, one(patch{
		Patch:  `[{"op": "add", "path": "/rules/0/verbs/-", "value": "*"}]`,
		Target: &target{Kind: "Cluster.*"},
	}))
	if err == nil || !strings.Contains(err.Error(), "ClusterRole /reader") {
		t.Fatalf("want a refusal naming the ClusterRole, got %v", err)
	}
}
