package main

// Keyless cosign: a signature made with a short-lived certificate (Fulcio's kind: an email or URI
// identity in its SAN, the OIDC issuer in Fulcio's extension) that chains to CA certificates the
// platform team configures, its identity matched against the policy's matchOIDCIdentity. There
// is no public Sigstore root here: the roots, the intermediates and the transparency log's key
// all come with the request, and nothing is fetched but the signatures.

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/tuf"
)

const (
	// maxIdentities bounds the identities of one request (the policy allows 16).
	maxIdentities = 32
	// maxPattern bounds one identity's regular expression, in bytes.
	maxPattern = 1024
	// tlogRequire and tlogSkip are the transparency-log rules a request may give.
	tlogRequire = "Require"
	tlogSkip    = "Skip"
	// noCertificate is why a signature made with a key is not a keyless one.
	noCertificate = "it carries no certificate (a key made it)"
)

// keylessCheck is the keyless part of a cosign request.
type keylessCheck struct {
	// PEM CA certificates: the roots (self-signed) and intermediates signing certificates chain to.
	Certificates []string `json:"certificates"`
	// The transparency log's PEM public key (ECDSA), which signs the entries (SET) that signatures
	// carry in their bundle; empty when the rule is Skip.
	RekorPublicKey string `json:"rekorPublicKey,omitempty"`
	// The identities trusted; a certificate matching any of them is.
	Identities []oidcIdentity `json:"identities"`
	// Require: a signature must carry a Rekor bundle whose SET verifies with RekorPublicKey, and
	// the certificate must be valid when the log took it. Skip: no log is looked at, and the
	// certificate must be valid now.
	TransparencyLog string `json:"transparencyLog"`
}

// oidcIdentity is one matchOIDCIdentity entry: RE2 regular expressions, each matching a whole value.
type oidcIdentity struct {
	// The OIDC issuer, as Fulcio writes it into the certificate.
	Issuer string `json:"issuer"`
	// The identity, one of the certificate's subject alternative names (an email or a URI).
	Subject string `json:"subject"`
}

// keylessTrust is a keylessCheck parsed: the pools, the log's key and the compiled identities.
type keylessTrust struct {
	roots         *x509.CertPool
	intermediates []*x509.Certificate
	rekor         *cosign.TrustedTransparencyLogPubKeys
	identities    []identityMatcher
	requireTlog   bool
}

type identityMatcher struct {
	issuer, subject *regexp.Regexp
}

// parse checks the trust material; an error says which part to fix.
func (k keylessCheck) parse() (*keylessTrust, error) {
	trust := &keylessTrust{roots: x509.NewCertPool()}
	switch k.TransparencyLog {
	case tlogRequire:
		trust.requireTlog = true
	case tlogSkip:
	default:
		return nil, fmt.Errorf("transparencyLog must be %s or %s, not %q", tlogRequire, tlogSkip, k.TransparencyLog)
	}
	roots := 0
	for i, text := range k.Certificates {
		certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(text))
		if err != nil || len(certs) == 0 {
			return nil, fmt.Errorf("CA certificate %d is not a PEM certificate; give the CERTIFICATE blocks of the signing CA's roots and intermediates", i+1)
		}
		for _, cert := range certs {
			if selfSigned(cert) {
				trust.roots.AddCert(cert)
				roots++
			} else {
				trust.intermediates = append(trust.intermediates, cert)
			}
		}
	}
	if roots == 0 {
		return nil, errors.New("no root CA certificate (a self-signed one) is given for keyless cosign; give the signing CA's root under a key ending in .crt or .pem")
	}
	if trust.requireTlog {
		if k.RekorPublicKey == "" {
			return nil, errors.New("the transparency log is required but its public key (rekor.pub) is not given; add it, or set transparencyLog: Skip")
		}
		keys := cosign.NewTrustedTransparencyLogPubKeys()
		if err := keys.AddTransparencyLogPubKey([]byte(k.RekorPublicKey), tuf.Active); err != nil {
			return nil, fmt.Errorf("rekor.pub is not a PEM public key (%v); give the transparency log's public key", err)
		}
		trust.rekor = &keys
	}
	if len(k.Identities) == 0 || len(k.Identities) > maxIdentities {
		return nil, fmt.Errorf("keyless cosign needs between 1 and %d identities (matchOIDCIdentity)", maxIdentities)
	}
	for i, id := range k.Identities {
		issuer, err := wholeMatch(id.Issuer)
		if err != nil {
			return nil, fmt.Errorf("matchOIDCIdentity %d: issuer: %v", i+1, err)
		}
		subject, err := wholeMatch(id.Subject)
		if err != nil {
			return nil, fmt.Errorf("matchOIDCIdentity %d: subject: %v", i+1, err)
		}
		trust.identities = append(trust.identities, identityMatcher{issuer: issuer, subject: subject})
	}
	return trust, nil
}

// wholeMatch compiles an RE2 pattern that must match a whole value, not a part of it: `.*@lab.test`
// does not match `ci@lab.test.attacker`.
func wholeMatch(pattern string) (*regexp.Regexp, error) {
	if pattern == "" || len(pattern) > maxPattern {
		return nil, fmt.Errorf("a regular expression of 1 to %d bytes is required", maxPattern)
	}
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%q is not a regular expression (RE2): %v", pattern, err)
	}
	return re, nil
}

// selfSigned tells a root from an intermediate.
func selfSigned(cert *x509.Certificate) bool {
	return cert.IsCA && cert.CheckSignatureFrom(cert) == nil
}

// keylessVerdict is what one signature is, judged keyless.
type keylessVerdict struct {
	// Verified: who signed it, `keyless <subject> from <issuer>`.
	by string
	// A trusted identity's signature of other content.
	mismatch bool
	// Not verified: why, in words.
	why string
}

// judge checks one signature: its certificate chains to the roots, names a trusted identity, the
// transparency log took it (unless skipped), the signature verifies and speaks of this digest.
func (k *keylessTrust) judge(ctx context.Context, sig oci.Signature, h v1.Hash) keylessVerdict {
	cert, err := sig.Cert()
	if err != nil {
		return keylessVerdict{why: fmt.Sprintf("its certificate does not parse (%v)", err)}
	}
	if cert == nil {
		return keylessVerdict{why: noCertificate}
	}
	intermediates := x509.NewCertPool()
	for _, c := range k.intermediates {
		intermediates.AddCert(c)
	}
	// The chain the signer attached offers intermediates; only the configured roots are trusted.
	if chain, err := sig.Chain(); err == nil {
		for _, c := range chain {
			intermediates.AddCert(c)
		}
	}
	if _, err := cosign.TrustedCert(cert, k.roots, intermediates); err != nil {
		return keylessVerdict{why: fmt.Sprintf("its certificate (issued by %q) does not chain to the trusted CA certificates", cert.Issuer.String())}
	}
	subject, issuer, matched := k.identity(cert)
	if !matched {
		return keylessVerdict{why: fmt.Sprintf("its certificate's identity %s from issuer %q matches no matchOIDCIdentity entry", subject, issuer)}
	}
	if k.requireTlog {
		if bundle, err := sig.Bundle(); err != nil || bundle == nil {
			return keylessVerdict{why: "it carries no transparency-log entry (Rekor bundle), which the policy requires (transparencyLog: Require); sign with the log reachable, or set transparencyLog: Skip"}
		}
	} else if now := time.Now(); now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return keylessVerdict{why: fmt.Sprintf("its certificate is valid from %s to %s, not now; with transparencyLog: Skip there is no signing time to check it against but the current one", cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))}
	}
	// cosign checks the chain again, the signature, the log's entry (offline, with its key) and
	// the certificate's validity at the time the log took it. Its own identity matching reads
	// only Fulcio's legacy issuer extension (1.1), so the identity is matched above instead.
	co := &cosign.CheckOpts{
		RootCerts:         k.roots,
		IntermediateCerts: intermediates,
		RekorPubKeys:      k.rekor,
		IgnoreTlog:        !k.requireTlog,
		IgnoreSCT:         true, // no certificate transparency log here
		Offline:           true,
	}
	if _, err := cosign.VerifyImageSignature(ctx, sig, h, co); err != nil {
		return keylessVerdict{why: fmt.Sprintf("it does not verify: %v", err)}
	}
	by := fmt.Sprintf("keyless %s from %s", subject, issuer)
	if err := cosign.SimpleClaimVerifier(sig, h, nil); err != nil {
		return keylessVerdict{by: by, mismatch: true}
	}
	return keylessVerdict{by: by}
}

// identity is the certificate's subject matching a trusted identity and its issuer; matched is
// false when none does (subject then lists every SAN).
func (k *keylessTrust) identity(cert *x509.Certificate) (subject, issuer string, matched bool) {
	sans := cryptoutils.GetSubjectAlternateNames(cert)
	// Fulcio's issuer: 1.3.6.1.4.1.57264.1.8 (a UTF8String), else the legacy 1.1 (raw bytes).
	if ext, err := certificate.ParseExtensions(cert.Extensions); err == nil {
		issuer = ext.Issuer
	}
	for _, id := range k.identities {
		if issuer == "" || !id.issuer.MatchString(issuer) {
			continue
		}
		for _, san := range sans {
			if id.subject.MatchString(san) {
				return san, issuer, true
			}
		}
	}
	return fmt.Sprintf("%q", sans), issuer, false
}
