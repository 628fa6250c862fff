package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v2/pkg/oci"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// newCosignKey is a key pair as `cosign generate-key-pair` makes (ECDSA P-256), and its PEM public key.
func newCosignKey(t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pub)
}

// cosignSign attaches to digest a cosign signature by key of a payload naming claimed (the digest
// itself, unless a test copies a signature), as `cosign sign --key --tlog-upload=false` does: under
// the sha256-<hex>.sig tag, or as an OCI 1.1 referrer (--registry-referrers-mode=oci-1-1).
func cosignSign(t *testing.T, reg *testRegistry, repo, digest, claimed string, key *ecdsa.PrivateKey, referrer bool) {
	t.Helper()
	body, sig := cosignPayload(t, reg, repo, claimed, key)
	signature, err := static.NewSignature(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	attachSignature(t, reg, repo, digest, signature, referrer)
}

// cosignPayload is cosign's payload naming claimed, and its base64 signature by key.
func cosignPayload(t *testing.T, reg *testRegistry, repo, claimed string, key *ecdsa.PrivateKey) ([]byte, string) {
	t.Helper()
	claim, err := name.NewDigest(reg.host + "/" + repo + "@" + claimed)
	if err != nil {
		t.Fatal(err)
	}
	body, err := (&payload.Cosign{Image: claim}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signature.LoadECDSASignerVerifier(key, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return body, base64.StdEncoding.EncodeToString(raw)
}

// attachSignature writes sig as a signature of digest, under the signature tag or as a referrer.
func attachSignature(t *testing.T, reg *testRegistry, repo, digest string, sig oci.Signature, referrer bool) {
	t.Helper()
	ref, err := name.NewDigest(reg.host + "/" + repo + "@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	opts := ociremote.WithRemoteOptions(
		remote.WithTransport(reg.transport()),
		remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword}),
	)
	entity, err := ociremote.SignedEntity(ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := mutate.AttachSignatureToEntity(entity, sig)
	if err != nil {
		t.Fatal(err)
	}
	if referrer {
		err = ociremote.WriteSignaturesExperimentalOCI(ref, signed, opts)
	} else {
		err = ociremote.WriteSignatures(ref.Repository, signed, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// cosignRequest checks digest of charts/app against keys.
func cosignRequest(reg *testRegistry, digest string, keys ...string) cosignCheck {
	return cosignCheck{Reference: reg.host + "/charts/app", Digest: digest, Registry: reg.access(), PublicKeys: keys}
}

func TestCosignVerifiesAChartSignedUnderTheSignatureTag(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, key, false)

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	parsed, _ := cryptoutils.UnmarshalPEMToPublicKey([]byte(pub))
	wantVerified(t, got, digest, keyFingerprint(parsed))
}

func TestCosignVerifiesAChartSignedAsAnOCIReferrer(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, key, true)

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantVerified(t, got, digest, "key sha256:")
}

func TestCosignVerifiesWithAnyOfSeveralKeys(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	_, other := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, key, false)

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, other, pub))

	parsed, _ := cryptoutils.UnmarshalPEMToPublicKey([]byte(pub))
	wantVerified(t, got, digest, keyFingerprint(parsed))
}

func TestCosignRefusesAnUnsignedChart(t *testing.T) {
	reg := startRegistry(t)
	_, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantRefused(t, got, refusedUnsigned, "no cosign signature", digest)
}

func TestCosignRefusesAChartSignedByAnotherKey(t *testing.T) {
	reg := startRegistry(t)
	stranger, _ := newCosignKey(t)
	_, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, stranger, false)

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantRefused(t, got, refusedUntrusted, "none made by a trusted key")
}

func TestCosignRefusesAChartSwappedAfterSigning(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	signed := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", signed, signed, key, false)
	// The same tag now holds other content: a new digest, which nobody signed.
	swapped := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one, changed"))

	got := verifyCosign(context.Background(), cosignRequest(reg, swapped, pub))

	wantRefused(t, got, refusedUnsigned, swapped)
}

func TestCosignRefusesASignatureCopiedFromAnotherChart(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	signed := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	swapped := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart one, changed"))
	// The good chart's signature, put where the swapped chart's would be.
	cosignSign(t, reg, "charts/app", swapped, signed, key, false)

	got := verifyCosign(context.Background(), cosignRequest(reg, swapped, pub))

	wantRefused(t, got, refusedMismatch, "of other content", swapped)
}

func TestCosignWithNeitherKeyNorIdentitySaysWhatToGive(t *testing.T) {
	check := cosignCheck{Reference: "registry.example/charts/app", Digest: "sha256:" + zeros}

	got := verifyCosign(context.Background(), check)

	wantError(t, got, errorTrust, "no public key", "keyless")
}

func TestCosignSaysWhichKeyDoesNotParse(t *testing.T) {
	_, pub := newCosignKey(t)
	check := cosignCheck{Reference: "registry.example/charts/app", Digest: "sha256:" + zeros, PublicKeys: []string{pub, "not a key"}}

	got := verifyCosign(context.Background(), check)

	wantError(t, got, errorTrust, "public key 2 is not a PEM public key")
}

func TestRegistryErrorsSayWhatToDo(t *testing.T) {
	reg := startRegistry(t)
	_, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	for _, tc := range []struct {
		name   string
		access registryAccess
		words  []string
	}{
		{"wrong password", registryAccess{DockerConfig: reg.dockerConfig("wrong"), CABundle: reg.ca}, []string{"refused the credentials (401)"}},
		{"no credentials", registryAccess{CABundle: reg.ca}, []string{"refused the credentials (401)"}},
		{"unknown CA", registryAccess{DockerConfig: reg.dockerConfig(registryPassword)}, []string{"not trusted", "CA bundle"}},
		{"credential helper", registryAccess{DockerConfig: `{"credsStore":"desktop"}`, CABundle: reg.ca}, []string{"credential helper", "auths"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := cosignRequest(reg, digest, pub)
			check.Registry = tc.access

			got := verifyCosign(context.Background(), check)

			wantError(t, got, errorRegistry, tc.words...)
			if bytes.Contains([]byte(got.Error.Message), []byte(registryPassword)) {
				t.Errorf("the error shows the password: %s", got.Error.Message)
			}
		})
	}
}

func TestAStatusIsReadFromTheClientNeverFromANumberInTheText(t *testing.T) {
	// A 503 whose URL holds 401 and 403 (in a digest, a port) is neither.
	url, _ := url.Parse("https://127.0.0.1:40301/v2/charts/app/blobs/sha256:4010403")
	for _, err := range []error{
		&transport.Error{StatusCode: http.StatusServiceUnavailable, Request: &http.Request{Method: http.MethodGet, URL: url}},
		&errcode.ErrorResponse{Method: http.MethodGet, URL: url, StatusCode: http.StatusServiceUnavailable},
	} {
		got := registryError("127.0.0.1:40301/charts/app", err)
		wantError(t, got, errorRegistry, "check that the registry is reachable")
	}
	got := registryError("r/app", &errcode.ErrorResponse{Method: http.MethodGet, URL: url, StatusCode: http.StatusForbidden})
	wantError(t, got, errorRegistry, "denied access (403)")
	got = registryError("r/app", fmt.Errorf("wrapped: %w", &transport.Error{StatusCode: http.StatusUnauthorized}))
	wantError(t, got, errorRegistry, "refused the credentials (401)")
}

func TestARegistryFailingMidwayIsAnErrorNotARefusal(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, key, false)
	// The signature's manifest is served; its payload (a blob) is not.
	registry := reg.server.Config.Handler
	reg.server.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			http.Error(w, "storage unavailable", http.StatusServiceUnavailable)
			return
		}
		registry.ServeHTTP(w, r)
	})

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantError(t, got, errorRegistry, "check that the registry is reachable")
}
