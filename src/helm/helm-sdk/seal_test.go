package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	rspb "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type vector struct {
	Key            string `json:"key"`
	Cluster        string `json:"cluster"`
	Namespace      string `json:"namespace"`
	Release        string `json:"release"`
	Revision       int    `json:"revision"`
	OwnerNamespace string `json:"ownerNamespace"`
	OwnerName      string `json:"ownerName"`
	SpecHash       string `json:"specHash"`
	Manifest       string `json:"manifest"`
	Hooks          []struct {
		Name           string   `json:"name"`
		Kind           string   `json:"kind"`
		Path           string   `json:"path"`
		Manifest       string   `json:"manifest"`
		Events         []string `json:"events"`
		DeletePolicies []string `json:"delete_policies"`
	} `json:"hooks"`
	Content string `json:"content"`
	Seal    string `json:"seal"`
}

func vectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/seal-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []vector
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (v vector) release() *rspb.Release {
	rls := &rspb.Release{Name: v.Release, Namespace: v.Namespace, Version: v.Revision, Manifest: v.Manifest,
		Info: &rspb.Info{Status: rcommon.StatusDeployed}}
	for _, h := range v.Hooks {
		hook := &rspb.Hook{Name: h.Name, Kind: h.Kind, Path: h.Path, Manifest: h.Manifest}
		for _, e := range h.Events {
			hook.Events = append(hook.Events, rspb.HookEvent(e))
		}
		for _, p := range h.DeletePolicies {
			hook.DeletePolicies = append(hook.DeletePolicies, rspb.HookDeletePolicy(p))
		}
		rls.Hooks = append(rls.Hooks, hook)
	}
	return rls
}

func TestTheSharedVectorsGiveTheOperatorsDigestsAndSeals(t *testing.T) {
	for _, v := range vectors(t) {
		rls := v.release()
		if got := contentDigest(rls); got != v.Content {
			t.Errorf("%s: content digest %s, want %s", v.Release, got, v.Content)
		}
		key, _ := hex.DecodeString(v.Key)
		got := seal(key, sealFields{v.Cluster, v.Namespace, v.Release, v.Revision, v.OwnerNamespace, v.OwnerName, v.SpecHash, v.Content})
		if got != v.Seal {
			t.Errorf("%s: seal %s, want %s", v.Release, got, v.Seal)
		}
	}
}

func sealedStorage(t *testing.T) (*sealedSecrets, *fake.Clientset, vector) {
	t.Helper()
	v := vectors(t)[1]
	key, _ := hex.DecodeString(v.Key)
	client := fake.NewClientset()
	return newSealedSecrets(client.CoreV1().Secrets(v.Namespace), key, v.Cluster, v.Namespace), client, v
}

func ownerLabels(v vector) map[string]string {
	return map[string]string{ownerNamespaceLbl: v.OwnerNamespace, ownerNameLbl: v.OwnerName, specHashLbl: v.SpecHash,
		"multitenancy.dev/managed-by": "tenancy-hub"}
}

func recordKey(name string, revision int) string {
	return "sh.helm.release.v1." + name + ".v" + strconv.Itoa(revision)
}

func TestWhatTheStorageWritesIsSealedAsTheOperatorSealsIt(t *testing.T) {
	s, client, v := sealedStorage(t)
	rls := v.release()
	rls.Labels = ownerLabels(v)
	if err := s.Create(recordKey(v.Release, v.Revision), rls); err != nil {
		t.Fatal(err)
	}
	obj, err := client.CoreV1().Secrets(v.Namespace).Get(context.Background(), recordKey(v.Release, v.Revision), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Labels[sealLabel] != v.Seal || obj.Labels[contentLabel] != v.Content {
		t.Fatalf("labels %v, want seal %s and content %s", obj.Labels, v.Seal, v.Content)
	}
	got, err := s.Get(recordKey(v.Release, v.Revision))
	if err != nil {
		t.Fatalf("a sealed record reads back: %v", err)
	}
	if back, _ := toV1(got); back.Manifest != rls.Manifest || len(back.Hooks) != 1 {
		t.Fatalf("read back %+v", back)
	}
}

// forge writes a record the way a tenant with write access to Secrets in the namespace can.
func forge(t *testing.T, client *fake.Clientset, namespace string, rls *rspb.Release, labels map[string]string, data []byte) {
	t.Helper()
	if data == nil {
		raw, _ := json.Marshal(rls)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
		data = []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
	}
	all := map[string]string{"name": rls.Name, "owner": "helm", "status": "deployed", "version": strconv.Itoa(rls.Version)}
	for k, val := range labels {
		all[k] = val
	}
	obj := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: recordKey(rls.Name, rls.Version), Labels: all},
		Type: "helm.sh/release.v1", Data: map[string][]byte{"release": data}}
	if _, err := client.CoreV1().Secrets(namespace).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestForgedRecordsAreNeverReadBack(t *testing.T) {
	s, client, v := sealedStorage(t)
	genuine := v.release()
	genuine.Labels = ownerLabels(v)
	if err := s.Create(recordKey(v.Release, v.Revision), genuine); err != nil {
		t.Fatal(err)
	}
	sealedLabels := ownerLabels(v)
	sealedLabels[sealLabel], sealedLabels[contentLabel] = v.Seal, v.Content

	// A newer revision with the genuine seal copied and a hook of its own.
	newer := v.release()
	newer.Version = v.Revision + 1
	newer.Hooks[0].Manifest = "kind: ClusterRoleBinding\nmetadata: {name: escalate}\n"
	forge(t, client, v.Namespace, newer, sealedLabels, nil)
	// Owner labels only, no seal at all.
	other := v.release()
	other.Name, other.Version = "other", 1
	forge(t, client, v.Namespace, other, ownerLabels(v), nil)
	// A decompression bomb: 40 MiB of zeros in a few KiB.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"name":"bomb","version":1,"manifest":"`))
	zw.Write(make([]byte, 40<<20))
	zw.Close()
	bomb := &rspb.Release{Name: "bomb", Version: 1}
	forge(t, client, v.Namespace, bomb, sealedLabels, []byte(base64.StdEncoding.EncodeToString(buf.Bytes())))

	for _, key := range []string{recordKey(v.Release, v.Revision+1), recordKey("other", 1), recordKey("bomb", 1)} {
		if _, err := s.Get(key); !errors.Is(err, driver.ErrReleaseNotFound) {
			t.Errorf("%s: got %v, want not found", key, err)
		}
	}
	history, err := s.Query(map[string]string{"name": v.Release, "owner": "helm"})
	if err != nil || len(history) != 1 {
		t.Fatalf("history %v, %v: want only the genuine record", history, err)
	}
	if only, _ := toV1(history[0]); only.Version != v.Revision {
		t.Fatalf("history holds revision %d", only.Version)
	}
	if _, err := s.Delete(recordKey("other", 1)); !errors.Is(err, driver.ErrReleaseNotFound) {
		t.Fatalf("deleting a forged record: %v", err)
	}
	if _, err := client.CoreV1().Secrets(v.Namespace).Get(context.Background(), recordKey("other", 1), metav1.GetOptions{}); err != nil {
		t.Fatalf("a record the operator did not seal is never deleted: %v", err)
	}
}

func TestARecordMovedToAnotherNamespaceOrClusterDoesNotVerify(t *testing.T) {
	s, client, v := sealedStorage(t)
	rls := v.release()
	rls.Labels = ownerLabels(v)
	if err := s.Create(recordKey(v.Release, v.Revision), rls); err != nil {
		t.Fatal(err)
	}
	elsewhere := newSealedSecrets(client.CoreV1().Secrets(v.Namespace), s.key, "member-9", v.Namespace)
	if _, err := elsewhere.Get(recordKey(v.Release, v.Revision)); !errors.Is(err, driver.ErrReleaseNotFound) {
		t.Fatalf("a record sealed for cluster %s read on member-9: %v", v.Cluster, err)
	}
}
