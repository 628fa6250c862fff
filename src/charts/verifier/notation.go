package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	// The two envelope formats a Notation signature may come in.
	_ "github.com/notaryproject/notation-core-go/signature/cose"
	_ "github.com/notaryproject/notation-core-go/signature/jws"
)

// notationStore is the name of the one trust store a request brings (type "ca").
const notationStore = "tenancy-hub"

// notationCheck asks whether an OCI chart's manifest digest carries a Notation signature whose
// certificate chains to the trust store and names a trusted identity.
type notationCheck struct {
	// The chart's repository, host[:port]/path, without scheme, tag or digest.
	Reference string `json:"reference"`
	// The manifest digest that must be signed, sha256:<hex>.
	Digest   string         `json:"digest"`
	Registry registryAccess `json:"registry"`
	// PEM CA certificates the signing certificates chain to (Notation's trust store of type "ca").
	TrustStore string `json:"trustStore"`
	// Trusted identities as a trust policy writes them: "x509.subject: CN=…,O=…", or "*" for any
	// certificate the trust store issued.
	TrustedIdentities []string `json:"trustedIdentities"`
}

// memoryTrustStore is a trust store of one named store, held in memory.
type memoryTrustStore []*x509.Certificate

func (s memoryTrustStore) GetCertificates(_ context.Context, storeType truststore.Type, namedStore string) ([]*x509.Certificate, error) {
	if storeType != truststore.TypeCA || namedStore != notationStore {
		return nil, fmt.Errorf("no trust store %s:%s", storeType, namedStore)
	}
	return s, nil
}

// parseTrustStore reads the PEM CA certificates of a trust store.
func parseTrustStore(text string) (memoryTrustStore, error) {
	var certs memoryTrustStore
	rest := []byte(text)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the trust store does not parse: %v", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("the trust store holds no PEM certificate; give the CA certificates the signing certificates chain to")
	}
	if err := truststore.ValidateCertificates(certs); err != nil {
		return nil, fmt.Errorf("the trust store is not a set of CA certificates: %v", err)
	}
	return certs, nil
}

// notationPolicy is the trust policy of one request: every registry, strict verification, the
// request's trust store and identities.
func notationPolicy(identities []string) (*trustpolicy.Document, error) {
	if len(identities) == 0 {
		return nil, errors.New("no trusted identity is given; name the signers (\"x509.subject: CN=…\") or \"*\" for any certificate the trust store issued")
	}
	doc := &trustpolicy.Document{
		Version: "1.0",
		TrustPolicies: []trustpolicy.TrustPolicy{{
			Name:                  notationStore,
			RegistryScopes:        []string{"*"},
			SignatureVerification: trustpolicy.SignatureVerification{VerificationLevel: trustpolicy.LevelStrict.Name},
			TrustStores:           []string{string(truststore.TypeCA) + ":" + notationStore},
			TrustedIdentities:     identities,
		}},
	}
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("the trusted identities are not valid: %v", err)
	}
	return doc, nil
}

// recording keeps the outcome of every signature the verifier judged, so a refusal can say why.
type recording struct {
	inner    notation.Verifier
	mu       sync.Mutex
	outcomes []*notation.VerificationOutcome
}

func (r *recording) Verify(ctx context.Context, desc ocispec.Descriptor, sig []byte, opts notation.VerifierVerifyOptions) (*notation.VerificationOutcome, error) {
	outcome, err := r.inner.Verify(ctx, desc, sig, opts)
	if outcome != nil {
		r.mu.Lock()
		r.outcomes = append(r.outcomes, outcome)
		r.mu.Unlock()
	}
	return outcome, err
}

// verifyNotation checks the Notation signatures of one digest, found through the referrers API
// or, where the registry lacks it, the referrers tag schema.
func verifyNotation(ctx context.Context, check notationCheck) answer {
	ref, h, err := artifactDigest(check.Reference, check.Digest)
	if err != nil {
		return failed(errorRequest, "%v", err)
	}
	store, err := parseTrustStore(check.TrustStore)
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	policy, err := notationPolicy(check.TrustedIdentities)
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	creds, transport, err := check.Registry.open()
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	inner, err := verifier.New(policy, store, nil)
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	repo, err := remote.NewRepository(ref.Context().String())
	if err != nil {
		return failed(errorRequest, "reference %q is not an OCI repository: %v", check.Reference, err)
	}
	repo.Client = &auth.Client{
		Client:     &http.Client{Transport: transport},
		Cache:      auth.NewCache(),
		Credential: creds.credential,
	}
	judge := &recording{inner: inner}
	target, _, err := notation.Verify(ctx, judge, registry.NewRepository(repo), notation.VerifyOptions{
		ArtifactReference:    ref.String(),
		MaxSignatureAttempts: maxSignatures,
	})
	if err == nil {
		return verified(signerOf(judge.outcomes), target.Digest.String())
	}
	var retrieval notation.ErrorSignatureRetrievalFailed
	if errors.As(err, &retrieval) && strings.Contains(retrieval.Msg, "no signature is associated") {
		return refused(refusedUnsigned, fmt.Sprintf("no Notation signature of %s was found", h))
	}
	if len(judge.outcomes) == 0 {
		return registryError(ref.String(), err)
	}
	return judgeNotation(h.String(), judge.outcomes)
}

// signerOf is the subject of the certificate that made the verified signature.
func signerOf(outcomes []*notation.VerificationOutcome) string {
	for _, o := range outcomes {
		if o.Error == nil && o.EnvelopeContent != nil && len(o.EnvelopeContent.SignerInfo.CertificateChain) > 0 {
			return o.EnvelopeContent.SignerInfo.CertificateChain[0].Subject.String()
		}
	}
	return "a certificate of the trust store"
}

// judgeNotation says why no signature verified: one trusted but of other content, one whose
// envelope is broken, or none by a trusted signer.
func judgeNotation(digest string, outcomes []*notation.VerificationOutcome) answer {
	var invalid, untrusted string
	for _, o := range outcomes {
		if o.Error == nil {
			continue
		}
		// notation.Verify wraps the error, naming the signature.
		if strings.HasSuffix(o.Error.Error(), "content descriptor mismatch") {
			return refused(refusedMismatch, fmt.Sprintf("a trusted Notation signature (by %s) is of other content, not of %s: it was copied from another chart or the chart was changed after signing", signerOf([]*notation.VerificationOutcome{{EnvelopeContent: o.EnvelopeContent}}), digest))
		}
		for _, result := range o.VerificationResults {
			if result.Error == nil || result.Action != trustpolicy.ActionEnforce {
				continue
			}
			switch result.Type {
			case trustpolicy.TypeIntegrity:
				invalid = result.Error.Error()
			default:
				untrusted = result.Error.Error()
			}
		}
		if untrusted == "" && invalid == "" {
			untrusted = o.Error.Error()
		}
	}
	if untrusted != "" {
		return refused(refusedUntrusted, fmt.Sprintf("%s has %d Notation signature(s), none by a trusted signer (%s); sign it with a certificate the trust store issued to a trusted identity", digest, len(outcomes), untrusted))
	}
	return refused(refusedInvalid, fmt.Sprintf("the Notation signature of %s is invalid: %s", digest, invalid))
}
