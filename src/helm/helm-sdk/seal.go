package main

// Sealed release records: Helm's Secrets storage, bounded and checked.
//
// A release record is a Secret in the release's namespace, so whoever may write Secrets there can
// forge one: another Controller's owner labels, a newer revision, hooks of any event, a manifest
// naming any object. Helm acts on what it reads back: an uninstall runs the newest record's
// pre-delete hooks and deletes its manifest, an upgrade deletes what the last record has and the
// chart no longer does, a rollback applies an old record. So every record this executor writes is
// sealed (labels multitenancy.dev/content, a digest of the manifest and hooks, and
// multitenancy.dev/seal, an HMAC under the operator's key of where the record is, whose it is and
// that digest), and every record it reads back must verify, or Helm never sees it. Reads are also
// bounded: a record's data may hold at most maxRecordBytes, and decompress to at most
// maxReleaseBytes.
//
// The exact bytes hashed are those of the operator's src/helm/seal.rs; testdata/seal-vectors.json
// holds vectors both test suites check.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"compress/gzip"

	ri "helm.sh/helm/v4/pkg/release"
	rspb "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kblabels "k8s.io/apimachinery/pkg/labels"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	v1 "k8s.io/api/core/v1"
)

const (
	sealVersion        = "tenancy-hub-seal/v1"
	sealLabel          = "multitenancy.dev/seal"
	contentLabel       = "multitenancy.dev/content"
	ownerNamespaceLbl  = "multitenancy.dev/controller-namespace"
	ownerNameLbl       = "multitenancy.dev/controller-name"
	specHashLbl        = "multitenancy.dev/spec-hash"
	maxRecordBytes     = 4 << 20  // a Secret holds at most 1 MiB; anything larger is refused unread
	maxReleaseBytes    = 32 << 20 // a release's JSON, decompressed
	systemLabelsRecord = "name,owner,status,version,createdAt,modifiedAt"
)

// sealFields are what a seal binds.
type sealFields struct {
	Cluster, Namespace, Release string
	Revision                    int
	OwnerNamespace, OwnerName   string
	SpecHash, Content           string
}

func sealMessage(f sealFields) string {
	return strings.Join([]string{sealVersion, f.Cluster, f.Namespace, f.Release, strconv.Itoa(f.Revision),
		f.OwnerNamespace, f.OwnerName, f.SpecHash, f.Content}, "\n")
}

func seal(key []byte, f sealFields) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(sealMessage(f)))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// contentDigest is the digest of what a record asks Helm to act on: the manifest and, per hook in
// order, its kind, name, path, events, delete policies and manifest.
func contentDigest(rls *rspb.Release) string {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	field(sealVersion)
	field(rls.Manifest)
	for _, hook := range rls.Hooks {
		if hook == nil {
			continue
		}
		field(hook.Kind)
		field(hook.Name)
		field(hook.Path)
		for _, e := range hook.Events {
			field(string(e))
		}
		field("")
		for _, p := range hook.DeletePolicies {
			field(string(p))
		}
		field("")
		field(hook.Manifest)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// sealedSecrets is Helm's Secrets storage for one cluster and namespace, sealing what it writes and
// reading back only records sealed by the same key, within bounds.
type sealedSecrets struct {
	inner     *driver.Secrets
	impl      corev1.SecretInterface
	key       []byte
	cluster   string
	namespace string
	// The one record not sealed by this operator an adopting upgrade lets Helm read (adopt.go).
	adopted *adoptedRecord
}

var _ driver.Driver = (*sealedSecrets)(nil)

func newSealedSecrets(impl corev1.SecretInterface, key []byte, cluster, namespace string) *sealedSecrets {
	return &sealedSecrets{inner: driver.NewSecrets(impl), impl: impl, key: key, cluster: cluster, namespace: namespace}
}

func (s *sealedSecrets) Name() string { return s.inner.Name() }

func (s *sealedSecrets) fields(rls *rspb.Release, labels map[string]string, content string) sealFields {
	return sealFields{
		Cluster: s.cluster, Namespace: s.namespace, Release: rls.Name, Revision: rls.Version,
		OwnerNamespace: labels[ownerNamespaceLbl], OwnerName: labels[ownerNameLbl],
		SpecHash: labels[specHashLbl], Content: content,
	}
}

// sealed returns the release with its seal labels set, on a copy of its labels.
func (s *sealedSecrets) sealed(rel ri.Releaser) (*rspb.Release, error) {
	rls, err := toV1(rel)
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(rls.Labels)+2)
	for k, v := range rls.Labels {
		labels[k] = v
	}
	content := contentDigest(rls)
	labels[contentLabel] = content
	labels[sealLabel] = seal(s.key, s.fields(rls, labels, content))
	rls.Labels = labels
	return rls, nil
}

func (s *sealedSecrets) Create(key string, rel ri.Releaser) error {
	rls, err := s.sealed(rel)
	if err != nil {
		return err
	}
	return s.inner.Create(key, rls)
}

func (s *sealedSecrets) Update(key string, rel ri.Releaser) error {
	rls, err := s.sealed(rel)
	if err != nil {
		return err
	}
	return s.inner.Update(key, rls)
}

// open decodes a record within bounds and checks its seal and content; an error says why it is
// not taken.
func (s *sealedSecrets) open(obj *v1.Secret) (*rspb.Release, error) {
	data := obj.Data["release"]
	if len(data) > maxRecordBytes {
		return nil, fmt.Errorf("release record %s holds %d bytes, more than %d", obj.Name, len(data), maxRecordBytes)
	}
	rls, err := decodeBounded(data)
	if err != nil {
		return nil, fmt.Errorf("release record %s: %w", obj.Name, err)
	}
	labels := obj.Labels
	content := contentDigest(rls)
	if s.takesAdopted(obj, rls, content) {
		// Checked as the identity; its former owner's labels are not carried into the upgrade.
		rls.Labels = nil
		return rls, nil
	}
	if labels[contentLabel] != content {
		return nil, fmt.Errorf("release record %s is not sealed by this operator: its content does not match its seal", obj.Name)
	}
	// The record's own name and revision labels are what the operator reads; they must be the
	// content's too.
	if labels["name"] != rls.Name || labels["version"] != strconv.Itoa(rls.Version) {
		return nil, fmt.Errorf("release record %s is not sealed by this operator: its labels name another release or revision", obj.Name)
	}
	expected := seal(s.key, s.fields(rls, labels, content))
	if !hmac.Equal([]byte(expected), []byte(labels[sealLabel])) {
		return nil, fmt.Errorf("release record %s is not sealed by this operator", obj.Name)
	}
	custom := make(map[string]string, len(labels))
	for k, v := range labels {
		if !strings.Contains(","+systemLabelsRecord+",", ","+k+",") {
			custom[k] = v
		}
	}
	rls.Labels = custom
	return rls, nil
}

// decodeBounded is Helm's record decoding (base64, then gzip when present, then JSON) with the
// decompressed size bounded.
func decodeBounded(data []byte) (*rspb.Release, error) {
	b, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if len(b) > 3 && bytes.Equal(b[:3], []byte{0x1f, 0x8b, 0x08}) {
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("not gzip: %w", err)
		}
		defer r.Close()
		b, err = io.ReadAll(io.LimitReader(r, maxReleaseBytes+1))
		if err != nil {
			return nil, fmt.Errorf("not gzip: %w", err)
		}
		if len(b) > maxReleaseBytes {
			return nil, fmt.Errorf("decompresses to more than %d bytes", maxReleaseBytes)
		}
	}
	var rls rspb.Release
	if err := json.Unmarshal(b, &rls); err != nil {
		return nil, fmt.Errorf("not a Helm release: %w", err)
	}
	return &rls, nil
}

func (s *sealedSecrets) Get(key string) (ri.Releaser, error) {
	obj, err := s.impl.Get(context.Background(), key, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, driver.ErrReleaseNotFound
		}
		return nil, fmt.Errorf("get: failed to get %q: %w", key, err)
	}
	rls, err := s.open(obj)
	if err != nil {
		// A record not sealed by this operator is not one Helm may act on: as if absent.
		return nil, driver.ErrReleaseNotFound
	}
	return rls, nil
}

func (s *sealedSecrets) list(selector map[string]string) ([]*rspb.Release, error) {
	opts := metav1.ListOptions{LabelSelector: kblabels.Set(selector).AsSelector().String()}
	list, err := s.impl.List(context.Background(), opts)
	if err != nil {
		return nil, fmt.Errorf("list: failed to list: %w", err)
	}
	var out []*rspb.Release
	for i := range list.Items {
		if rls, err := s.open(&list.Items[i]); err == nil {
			out = append(out, rls)
		}
	}
	return out, nil
}

func (s *sealedSecrets) List(filter func(ri.Releaser) bool) ([]ri.Releaser, error) {
	found, err := s.list(map[string]string{"owner": "helm"})
	if err != nil {
		return nil, err
	}
	var out []ri.Releaser
	for _, rls := range found {
		if filter(rls) {
			out = append(out, rls)
		}
	}
	return out, nil
}

func (s *sealedSecrets) Query(labels map[string]string) ([]ri.Releaser, error) {
	found, err := s.list(labels)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if len(found) == 0 {
		return nil, driver.ErrReleaseNotFound
	}
	out := make([]ri.Releaser, 0, len(found))
	for _, rls := range found {
		out = append(out, rls)
	}
	return out, nil
}

// Delete removes a record this operator sealed; a record it did not seal is never touched.
func (s *sealedSecrets) Delete(key string) (ri.Releaser, error) {
	rls, err := s.Get(key)
	if err != nil {
		if errors.Is(err, driver.ErrReleaseNotFound) {
			return nil, driver.ErrReleaseNotFound
		}
		return nil, err
	}
	if err := s.impl.Delete(context.Background(), key, metav1.DeleteOptions{}); err != nil {
		return rls, err
	}
	return rls, nil
}
