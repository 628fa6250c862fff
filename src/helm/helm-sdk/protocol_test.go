// Tests of the messages on the pipe against the shared fixtures in testdata/protocol, which the
// operator's tests check too (src/helm/sdk.rs): requests as the operator writes them, the
// hello and the responses as this executor writes them.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// fixtures are the files of testdata/protocol whose names start with prefix, by name without
// ".json".
func fixtures(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "protocol", prefix+"*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures %s*.json in testdata/protocol: %v", prefix, err)
	}
	out := map[string][]byte{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(path), ".json")] = raw
	}
	return out
}

// sameJSON fails unless got and want hold the same JSON value, whatever their layout.
func sameJSON(t *testing.T, name string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", name, err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: the fixture: %v", name, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: the executor has\n%s\nthe fixture\n%s", name, got, want)
	}
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for name := range m {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func TestEveryRequestFixtureDecodesStrictlyAndEncodesBackUnchanged(t *testing.T) {
	for name, raw := range fixtures(t, "request-") {
		req, err := decodeRequest(raw)
		if err != nil {
			t.Errorf("%s: %v (a field the operator sends that the executor does not know?)", name, err)
			continue
		}
		if why := refusal(req); why != "" {
			t.Errorf("%s: refused: %s", name, why)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, name, again, raw)
	}
}

func TestARequestWithAFieldTheExecutorDoesNotKnowIsRefused(t *testing.T) {
	raw := fixtures(t, "request-uninstall")["request-uninstall"]
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	fields["dryRun"] = true
	line, _ := json.Marshal(fields)
	if _, err := decodeRequest(line); err == nil || !strings.Contains(err.Error(), "dryRun") {
		t.Fatalf("a request with dryRun: %v, want an unknown field named", err)
	}
	if _, err := decodeRequest(append(append([]byte{}, raw...), raw...)); err == nil {
		t.Fatal("two requests on one line were taken as one")
	}
}

func TestARemediationTheExecutorDoesNotKnowIsRefusedNamingIt(t *testing.T) {
	for _, c := range []struct{ install, upgrade, want string }{
		{"rollback", "", `unknown remediation "rollback" of an install`},
		{"", "purge", `unknown remediation "purge" of an upgrade`},
	} {
		req, err := decodeRequest(fixtures(t, "request-upgrade")["request-upgrade"])
		if err != nil {
			t.Fatal(err)
		}
		req.Install.Remediate, req.Upgrade.Remediate = c.install, c.upgrade
		if why := refusal(req); !strings.Contains(why, c.want) {
			t.Errorf("install %q, upgrade %q: refusal %q, want %q", c.install, c.upgrade, why, c.want)
		}
	}
}

func TestTheUpgradeFixturesValuesAndSettingsMergeAsHelmsCLIMergesThem(t *testing.T) {
	req, err := decodeRequest(fixtures(t, "request-upgrade")["request-upgrade"])
	if err != nil {
		t.Fatal(err)
	}
	got, err := values(req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"image":          map[string]any{"tag": "v2"},
		"podAnnotations": map[string]any{"replicas": "3"},
		"replicaCount":   int64(2),
		// The operator escapes a setting as for the CLI's --set; strvals reads it back as written.
		"note": `a,b{c}\d`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("values %#v, want %#v", got, want)
	}
}

func TestEveryResponseFixtureIsWhatTheExecutorWrites(t *testing.T) {
	e := &executor{logger: slog.New(slog.DiscardHandler), byKey: map[string]*clients{}, caps: map[string]capabilities{}}
	valid, err := decodeRequest(fixtures(t, "request-uninstall")["request-uninstall"])
	if err != nil {
		t.Fatal(err)
	}
	unsealed, unknown := valid, valid
	unsealed.ID, unsealed.Seal = 11, ""
	unknown.ID, unknown.Op = 12, "status"
	written := map[string]any{
		"hello":            hello{Protocol: protocolVersion, Helm: "v4.3.1"},
		"response-applied": response{ID: 7, Revision: 3, ChartVersion: "0.1.0"},
		"response-tests-passed": response{ID: 7, Revision: 3, ChartVersion: "0.1.0", Tests: []testResult{
			{Name: "test-connection", Phase: "Succeeded"}, {Name: "test-schema", Phase: "Succeeded"}}},
		"response-tests-failed": response{ID: 7, Revision: 3, ChartVersion: "0.1.0",
			Error: "the tests of revision 3 failed: test-connection (Failed); rolled back to revision 2 (remediation)",
			Tests: []testResult{{Name: "test-connection", Phase: "Failed"}, {Name: "test-schema", Phase: "Succeeded"}}},
		"response-applied-crds": response{ID: 12, Revision: 2, ChartVersion: "2.15.4", Crds: &crdReport{
			Created:   []string{"widgets.example.com"},
			Replaced:  []string{"sealedsecrets.bitnami.com"},
			Unchanged: []string{"gadgets.example.com"},
		}},
		"response-adopted": response{ID: 13, Revision: 2, ChartVersion: "0.1.0", Adopted: map[string]string{
			"app.kubernetes.io/managed-by": "flux", "helm.toolkit.fluxcd.io/name": "web"}},
		// An uninstall or a rollback done.
		"response-done": response{ID: 9},
		"response-failed-render": response{ID: 7, Error: "UPGRADE FAILED: execution error at " +
			"(deployment-example/templates/deployment.yaml:21:20): image.tag is required"},
		"response-failed-unreachable": response{ID: 8, Error: `UPGRADE FAILED: Get "https://127.0.0.1:36443/api/v1/` +
			`namespaces/team/secrets?labelSelector=name%3Dweb%2Cowner%3Dhelm": dial tcp 127.0.0.1:36443: connect: connection refused`},
		"response-failed-unauthorized": response{ID: 9,
			Error: "uninstall: Release not loaded: web: query: failed to query with labels: Unauthorized"},
		// Refused before any cluster is reached.
		"response-refused-unsealed":   e.run(context.Background(), unsealed),
		"response-refused-unknown-op": e.run(context.Background(), unknown),
	}
	files := fixtures(t, "response-")
	files["hello"] = fixtures(t, "hello")["hello"]
	if got, want := names(written), names(files); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages checked %v, fixtures %v: give every fixture its message", got, want)
	}
	for name, value := range written {
		encoded, err := json.Marshal(value)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, name, encoded, files[name])
	}
}

func TestTheExecutorSaysHelloWithItsProtocolAndTheHelmItIsBuiltWith(t *testing.T) {
	var out bytes.Buffer
	if err := sayHello(&out); err != nil {
		t.Fatal(err)
	}
	line, rest, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	if len(rest) != 0 {
		t.Fatalf("the hello is more than one line: %q", out.String())
	}
	var got hello
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	required := regexp.MustCompile(`(?m)^\s*helm\.sh/helm/v4 (v\S+)$`).FindSubmatch(mod)
	if required == nil {
		t.Fatal("go.mod requires no helm.sh/helm/v4")
	}
	if want := (hello{Protocol: protocolVersion, Helm: string(required[1])}); got != want {
		t.Fatalf("hello %+v, want %+v", got, want)
	}
}
