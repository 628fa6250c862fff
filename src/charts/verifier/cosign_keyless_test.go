package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/cosign/bundle"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

const (
	labIssuer  = "https://issuer.lab.test"
	labSubject = "ci@lab.test"
)

// testCA is a CA certificate and its key.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// pemOf is a certificate as PEM.
func pemOf(cert *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// issue signs template for key's public half by parent (itself when nil).
func issue(t *testing.T, template *x509.Certificate, key *ecdsa.PrivateKey, parent *testCA) *x509.Certificate {
	t.Helper()
	template.SerialNumber = big.NewInt(time.Now().UnixNano())
	signer, issuerCert := key, template
	if parent != nil {
		signer, issuerCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, template, issuerCert, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// newTestCA is a CA named cn: a root when parent is nil, else an intermediate under parent.
func newTestCA(t *testing.T, cn string, parent *testCA) *testCA {
	t.Helper()
	key := newKey(t)
	cert := issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"tenancy-hub lab"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, key, parent)
	return &testCA{cert: cert, key: key}
}

// leaf is a signing certificate as Fulcio issues one.
type leaf struct {
	subject string // an email, or a URI with a scheme
	issuer  string
	legacy  bool // the issuer in 1.3.6.1.4.1.57264.1.1 (raw) rather than 1.8 (UTF8String)
	expired bool
}

// newLeaf issues a code-signing certificate with the leaf's identity under ca.
func newLeaf(t *testing.T, ca *testCA, l leaf) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		NotBefore:   time.Now().Add(-10 * time.Minute),
		NotAfter:    time.Now().Add(10 * time.Minute),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	if l.expired {
		template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(-50*time.Minute)
	}
	if u, err := url.Parse(l.subject); err == nil && u.Scheme != "" {
		template.URIs = []*url.URL{u}
	} else {
		template.EmailAddresses = []string{l.subject}
	}
	value := []byte(l.issuer)
	oid := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}
	if !l.legacy {
		var err error
		if value, err = asn1.MarshalWithParams(l.issuer, "utf8"); err != nil {
			t.Fatal(err)
		}
		oid = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}
	}
	template.ExtraExtensions = []pkix.Extension{{Id: oid, Value: value}}
	return issue(t, template, key, ca), key
}

// testLog is a transparency log's key, which signs the entries (SET) of bundles.
type testLog struct {
	key *ecdsa.PrivateKey
}

func (l testLog) publicPEM(t *testing.T) string {
	t.Helper()
	pub, err := cryptoutils.MarshalPublicKeyToPEM(&l.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pub)
}

// bundle is the log's entry of a hashedrekord (body signed as sig by cert), as Rekor returns it.
func (l testLog) bundle(t *testing.T, body []byte, sig string, cert *x509.Certificate) *bundle.RekorBundle {
	t.Helper()
	sum := sha256.Sum256(body)
	entry, _ := json.Marshal(map[string]any{
		"apiVersion": "0.0.1",
		"kind":       "hashedrekord",
		"spec": map[string]any{
			"data": map[string]any{"hash": map[string]any{"algorithm": "sha256", "value": hex.EncodeToString(sum[:])}},
			"signature": map[string]any{
				"content":   sig,
				"publicKey": map[string]any{"content": base64.StdEncoding.EncodeToString([]byte(pemOf(cert)))},
			},
		},
	})
	logID, err := cosign.GetTransparencyLogID(&l.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	payload := bundle.RekorPayload{
		Body:           base64.StdEncoding.EncodeToString(entry),
		IntegratedTime: time.Now().Unix(),
		LogIndex:       7,
		LogID:          logID,
	}
	// The SET signs the payload's canonical JSON: keys sorted, no spaces (a map marshals so).
	canonical, _ := json.Marshal(map[string]any{
		"body": payload.Body, "integratedTime": payload.IntegratedTime, "logIndex": payload.LogIndex, "logID": payload.LogID,
	})
	digest := sha256.Sum256(canonical)
	set, err := ecdsa.SignASN1(rand.Reader, l.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return &bundle.RekorBundle{SignedEntryTimestamp: set, Payload: payload}
}

// signed says how keylessSign signs.
type signed struct {
	claimed string   // the digest the payload names; the signed one when empty
	chain   []string // PEM certificates the signer attaches (--certificate-chain)
	log     *testLog // the log whose entry the signature carries; none when nil
}

// keylessSign attaches to digest a signature by the certificate's key, the certificate and chain
// attached, as `cosign sign --certificate --certificate-chain` does.
func keylessSign(t *testing.T, reg *testRegistry, digest string, cert *x509.Certificate, key *ecdsa.PrivateKey, s signed) {
	t.Helper()
	claimed := s.claimed
	if claimed == "" {
		claimed = digest
	}
	body, sig := cosignPayload(t, reg, "charts/app", claimed, key)
	opts := []static.Option{static.WithCertChain([]byte(pemOf(cert)), []byte(strings.Join(s.chain, "")))}
	if s.log != nil {
		opts = append(opts, static.WithBundle(s.log.bundle(t, body, sig, cert)))
	}
	signature, err := static.NewSignature(body, sig, opts...)
	if err != nil {
		t.Fatal(err)
	}
	attachSignature(t, reg, "charts/app", digest, signature, false)
}

// keylessRequest checks digest of charts/app, keyless, trusting the CA certificates and the lab's identity.
func keylessRequest(reg *testRegistry, digest string, tlog string, rekor string, certs ...string) cosignCheck {
	check := cosignRequest(reg, digest)
	check.Keyless = &keylessCheck{
		Certificates:    certs,
		RekorPublicKey:  rekor,
		Identities:      []oidcIdentity{{Issuer: `https://issuer\.lab\.test`, Subject: `ci@lab\.test`}},
		TransparencyLog: tlog,
	}
	return check
}

func TestKeylessVerifiesACertificateOfATrustedIdentityChainingToTheRoot(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cert, key := newLeaf(t, root, leaf{subject: labSubject, issuer: labIssuer})
	keylessSign(t, reg, digest, cert, key, signed{})

	got := verifyCosign(context.Background(), keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert)))

	wantVerified(t, got, digest, "keyless ci@lab.test from https://issuer.lab.test")
}

func TestKeylessReadsTheLegacyIssuerExtensionAndURIIdentities(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	workflow := "https://git.lab.test/charts/app/.ci/release.yaml@refs/heads/main"
	cert, key := newLeaf(t, root, leaf{subject: workflow, issuer: labIssuer, legacy: true})
	keylessSign(t, reg, digest, cert, key, signed{})
	check := keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert))
	check.Keyless.Identities = []oidcIdentity{{Issuer: `https://issuer\.lab\.test`, Subject: `https://git\.lab\.test/charts/.*@refs/heads/main`}}

	got := verifyCosign(context.Background(), check)

	wantVerified(t, got, digest, "keyless "+workflow+" from "+labIssuer)
}

func TestKeylessFollowsIntermediatesFromTheSecretOrTheSignature(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	intermediate := newTestCA(t, "lab intermediate", root)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	other := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart two"))
	cert, key := newLeaf(t, intermediate, leaf{subject: labSubject, issuer: labIssuer})
	keylessSign(t, reg, digest, cert, key, signed{})
	keylessSign(t, reg, other, cert, key, signed{chain: []string{pemOf(intermediate.cert), pemOf(root.cert)}})

	fromSecret := verifyCosign(context.Background(), keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert)+pemOf(intermediate.cert)))
	fromSignature := verifyCosign(context.Background(), keylessRequest(reg, other, tlogSkip, "", pemOf(root.cert)))

	wantVerified(t, fromSecret, digest, "keyless ci@lab.test")
	wantVerified(t, fromSignature, other, "keyless ci@lab.test")
}

func TestKeylessRefusesAnotherIdentityOrIssuer(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	for _, l := range []leaf{
		{subject: "mallory@lab.test", issuer: labIssuer},
		{subject: "ci@lab.test.attacker.example", issuer: labIssuer},
		{subject: labSubject, issuer: "https://issuer.attacker.example"},
	} {
		t.Run(l.subject+" from "+l.issuer, func(t *testing.T) {
			digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart of "+l.subject+l.issuer))
			cert, key := newLeaf(t, root, l)
			keylessSign(t, reg, digest, cert, key, signed{})

			got := verifyCosign(context.Background(), keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert)))

			wantRefused(t, got, refusedUntrusted, "matches no matchOIDCIdentity entry", l.subject, l.issuer)
		})
	}
}

func TestKeylessRefusesACertificateOfAnotherCA(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	stranger := newTestCA(t, "stranger root", nil)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cert, key := newLeaf(t, stranger, leaf{subject: labSubject, issuer: labIssuer})
	// The signer attaching its own root as the chain makes no difference.
	keylessSign(t, reg, digest, cert, key, signed{chain: []string{pemOf(stranger.cert)}})

	got := verifyCosign(context.Background(), keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert)))

	wantRefused(t, got, refusedUntrusted, "does not chain to the trusted CA certificates", "stranger root")
}

func TestKeylessRequiresAnEntryOfTheTrustedLogUnlessTheRuleSkipsIt(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	log, stranger := testLog{key: newKey(t)}, testLog{key: newKey(t)}
	cert, key := newLeaf(t, root, leaf{subject: labSubject, issuer: labIssuer})
	logged := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	keylessSign(t, reg, logged, cert, key, signed{log: &log})
	unlogged := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart two"))
	keylessSign(t, reg, unlogged, cert, key, signed{})
	forged := reg.pushChart(t, "charts/app", "1.0.2", []byte("chart three"))
	keylessSign(t, reg, forged, cert, key, signed{log: &stranger})
	rekor := log.publicPEM(t)

	wantVerified(t, verifyCosign(context.Background(), keylessRequest(reg, logged, tlogRequire, rekor, pemOf(root.cert))), logged, "keyless ci@lab.test")
	wantRefused(t, verifyCosign(context.Background(), keylessRequest(reg, unlogged, tlogRequire, rekor, pemOf(root.cert))), refusedUntrusted, "no transparency-log entry", "transparencyLog: Skip")
	wantRefused(t, verifyCosign(context.Background(), keylessRequest(reg, forged, tlogRequire, rekor, pemOf(root.cert))), refusedUntrusted, "does not verify")
	wantVerified(t, verifyCosign(context.Background(), keylessRequest(reg, unlogged, tlogSkip, "", pemOf(root.cert))), unlogged, "keyless ci@lab.test")
}

func TestKeylessWithoutTheLogChecksTheCertificateAgainstTheCurrentTime(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cert, key := newLeaf(t, root, leaf{subject: labSubject, issuer: labIssuer, expired: true})
	keylessSign(t, reg, digest, cert, key, signed{})

	got := verifyCosign(context.Background(), keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert)))

	wantRefused(t, got, refusedUntrusted, "not now", "transparencyLog: Skip")
}

func TestKeylessRefusesATrustedSignatureOfAnotherDigest(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	good := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	swapped := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart one, changed"))
	cert, key := newLeaf(t, root, leaf{subject: labSubject, issuer: labIssuer})
	keylessSign(t, reg, swapped, cert, key, signed{claimed: good})

	got := verifyCosign(context.Background(), keylessRequest(reg, swapped, tlogSkip, "", pemOf(root.cert)))

	wantRefused(t, got, refusedMismatch, "trusted identity ci@lab.test from https://issuer.lab.test", "of other content")
}

func TestKeysAndKeylessMayBothBeTrusted(t *testing.T) {
	reg := startRegistry(t)
	root := newTestCA(t, "lab root", nil)
	signingKey, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, signingKey, false)
	unsigned := reg.pushChart(t, "charts/app", "1.0.1", []byte("chart two"))
	stranger, _ := newCosignKey(t)
	cosignSign(t, reg, "charts/app", unsigned, unsigned, stranger, false)

	byKey := keylessRequest(reg, digest, tlogSkip, "", pemOf(root.cert))
	byKey.PublicKeys = []string{pub}
	byStranger := keylessRequest(reg, unsigned, tlogSkip, "", pemOf(root.cert))
	byStranger.PublicKeys = []string{pub}

	wantVerified(t, verifyCosign(context.Background(), byKey), digest, "key sha256:")
	wantRefused(t, verifyCosign(context.Background(), byStranger), refusedUntrusted, "none made by a trusted key or identity", "carries no certificate")
}

func TestKeylessTrustMaterialErrorsSayWhatToFix(t *testing.T) {
	root := newTestCA(t, "lab root", nil)
	intermediate := newTestCA(t, "lab intermediate", root)
	for _, tc := range []struct {
		name  string
		check keylessCheck
		words []string
	}{
		{"no root", keylessCheck{Certificates: []string{pemOf(intermediate.cert)}, TransparencyLog: tlogSkip}, []string{"no root CA certificate"}},
		{"not a certificate", keylessCheck{Certificates: []string{"junk"}, TransparencyLog: tlogSkip}, []string{"CA certificate 1 is not a PEM certificate"}},
		{"no log key", keylessCheck{Certificates: []string{pemOf(root.cert)}, TransparencyLog: tlogRequire}, []string{"rekor.pub", "transparencyLog: Skip"}},
		{"bad log key", keylessCheck{Certificates: []string{pemOf(root.cert)}, RekorPublicKey: "junk", TransparencyLog: tlogRequire}, []string{"rekor.pub is not a PEM public key"}},
		{"unknown rule", keylessCheck{Certificates: []string{pemOf(root.cert)}, TransparencyLog: "Maybe"}, []string{"transparencyLog must be"}},
		{"no identity", keylessCheck{Certificates: []string{pemOf(root.cert)}, TransparencyLog: tlogSkip}, []string{"identities"}},
		{"bad pattern", keylessCheck{Certificates: []string{pemOf(root.cert)}, TransparencyLog: tlogSkip, Identities: []oidcIdentity{{Issuer: ".*", Subject: "(ci"}}}, []string{"matchOIDCIdentity 1: subject", "not a regular expression"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := cosignCheck{Reference: "registry.example/charts/app", Digest: "sha256:" + zeros, Keyless: &tc.check}
			if len(tc.check.Identities) == 0 && tc.name != "no identity" {
				check.Keyless.Identities = []oidcIdentity{{Issuer: ".*", Subject: ".*"}}
			}

			got := verifyCosign(context.Background(), check)

			wantError(t, got, errorTrust, tc.words...)
		})
	}
}
