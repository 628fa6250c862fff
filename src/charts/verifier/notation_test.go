package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	"github.com/notaryproject/notation-core-go/signature/cose"
	"github.com/notaryproject/notation-core-go/signature/jws"
	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/signer"
)

// notationCA is a CA that issues code-signing certificates, as a platform team's PKI would.
type notationCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newNotationCA(t *testing.T, name string) notationCA {
	t.Helper()
	key := newKey(t)
	cert := issue(t, &x509.Certificate{
		Subject:               pkix.Name{Country: []string{"US"}, Province: []string{"WA"}, Organization: []string{"Lab"}, CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, key, nil)
	return notationCA{cert: cert, key: key}
}

// pem is the CA's certificate, as a trust store holds it.
func (ca notationCA) pem() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
}

// issue makes a code-signing certificate for common name cn and returns a Notation signer with it.
func (ca notationCA) issue(t *testing.T, cn string) notation.Signer {
	t.Helper()
	key := newKey(t)
	cert := issue(t, &x509.Certificate{
		Subject:               pkix.Name{Country: []string{"US"}, Province: []string{"WA"}, Organization: []string{"Lab"}, CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}, key, &testCA{cert: ca.cert, key: ca.key})
	s, err := signer.NewGenericSigner(key, []*x509.Certificate{cert, ca.cert})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// notationSign signs digest of repo in the envelope format mediaType, as `notation sign` does.
func notationSign(t *testing.T, reg *testRegistry, repo, digest string, s notation.Signer, mediaType string) {
	t.Helper()
	_, err := notation.Sign(context.Background(), s, registry.NewRepository(reg.repository(t, repo)), notation.SignOptions{
		SignerSignOptions: notation.SignerSignOptions{SignatureMediaType: mediaType},
		ArtifactReference: reg.host + "/" + repo + "@" + digest,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// notationRequest checks digest of charts/app against the trust store of ca and identities.
func notationRequest(reg *testRegistry, digest string, ca notationCA, identities ...string) notationCheck {
	return notationCheck{
		Reference:         reg.host + "/charts/app",
		Digest:            digest,
		Registry:          reg.access(),
		TrustStore:        ca.pem(),
		TrustedIdentities: identities,
	}
}

const labSigner = "x509.subject: C=US, ST=WA, O=Lab, CN=charts.lab"

func TestNotationVerifiesAChartSignedInEitherEnvelope(t *testing.T) {
	for _, mediaType := range []string{jws.MediaTypeEnvelope, cose.MediaTypeEnvelope} {
		t.Run(mediaType, func(t *testing.T) {
			reg := startRegistry(t)
			ca := newNotationCA(t, "Lab CA")
			digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
			notationSign(t, reg, "charts/app", digest, ca.issue(t, "charts.lab"), mediaType)

			got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, labSigner))

			wantVerified(t, got, digest, "CN=charts.lab")
		})
	}
}

func TestNotationRefusesAnUnsignedChart(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))

	got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, "*"))

	wantRefused(t, got, refusedUnsigned, "no Notation signature", digest)
}

func TestNotationRefusesAChartSignedUnderAnotherCA(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	stranger := newNotationCA(t, "Other CA")
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	notationSign(t, reg, "charts/app", digest, stranger.issue(t, "charts.lab"), jws.MediaTypeEnvelope)

	got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, "*"))

	wantRefused(t, got, refusedUntrusted, "none by a trusted signer")
}

func TestNotationRefusesASignerWhoIsNotATrustedIdentity(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	notationSign(t, reg, "charts/app", digest, ca.issue(t, "someone.else"), jws.MediaTypeEnvelope)

	got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, labSigner))

	wantRefused(t, got, refusedUntrusted, "none by a trusted signer")
}

func TestNotationRefusesAChartSwappedAfterSigning(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	signed := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	notationSign(t, reg, "charts/app", signed, ca.issue(t, "charts.lab"), jws.MediaTypeEnvelope)
	swapped := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one, changed"))

	got := verifyNotation(context.Background(), notationRequest(reg, swapped, ca, labSigner))

	wantRefused(t, got, refusedUnsigned, swapped)
}

func TestNotationNeedsTrustedIdentitiesAndCACertificates(t *testing.T) {
	ca := newNotationCA(t, "Lab CA")
	check := notationCheck{Reference: "registry.example/charts/app", Digest: "sha256:" + zeros, TrustStore: ca.pem()}

	wantError(t, verifyNotation(context.Background(), check), errorTrust, "no trusted identity")

	check.TrustedIdentities = []string{"*"}
	check.TrustStore = "no certificate here"
	wantError(t, verifyNotation(context.Background(), check), errorTrust, "holds no PEM certificate")
}

func TestNotationRefusesASignatureCopiedFromAnotherChart(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	signed := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	swapped := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart one, changed"))
	ctx := context.Background()
	repo := registry.NewRepository(reg.repository(t, "charts/app"))
	signedDesc, err := repo.Resolve(ctx, signed)
	if err != nil {
		t.Fatal(err)
	}
	swappedDesc, err := repo.Resolve(ctx, swapped)
	if err != nil {
		t.Fatal(err)
	}
	// The good chart's signature envelope, attached to the swapped chart.
	envelope, _, err := ca.issue(t, "charts.lab").Sign(ctx, signedDesc, notation.SignerSignOptions{SignatureMediaType: jws.MediaTypeEnvelope})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.PushSignature(ctx, jws.MediaTypeEnvelope, envelope, swappedDesc, nil); err != nil {
		t.Fatal(err)
	}

	got := verifyNotation(ctx, notationRequest(reg, swapped, ca, labSigner))

	wantRefused(t, got, refusedMismatch, "of other content", swapped)
}
