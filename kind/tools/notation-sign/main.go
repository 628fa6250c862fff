// Command tenancy-hub-notation-sign signs OCI charts with Notation for the lab's tests, where the
// notation CLI is not at hand (its module is not served by the Go module proxy here). It uses
// notation-go, the library the notation CLI is built on, and does the two things the tests need:
//
//	tenancy-hub-notation-sign cert DIR NAME
//	    writes a test CA and a code-signing certificate it issued, as `notation cert generate-test`
//	    does: DIR/NAME-ca.crt (the trust store), DIR/NAME.crt (the chain, leaf first) and
//	    DIR/NAME.key; the leaf's subject is C=US, ST=WA, O=tenancy-hub lab, CN=NAME.
//	tenancy-hub-notation-sign sign --key KEY --cert CHAIN [--envelope jws|cose] [--ca-file CA] HOST/REPO@DIGEST
//	    signs the manifest at DIGEST and attaches the signature to it, through the registry's
//	    referrers API or, where it has none, the referrers tag schema, as `notation sign` does.
//	    The registry's TLS certificate is checked against CA (else the system's roots); its
//	    credentials, if it asks for any, come from NOTATION_USERNAME and NOTATION_PASSWORD.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/notaryproject/notation-core-go/signature/cose"
	"github.com/notaryproject/notation-core-go/signature/jws"
	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/signer"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

const usage = `usage:
  tenancy-hub-notation-sign cert DIR NAME
  tenancy-hub-notation-sign sign --key KEY --cert CHAIN [--envelope jws|cose] [--ca-file CA] HOST/REPO@DIGEST`

func main() {
	if len(os.Args) < 2 {
		fail(errors.New(usage))
	}
	var err error
	switch os.Args[1] {
	case "cert":
		if len(os.Args) != 4 {
			fail(errors.New(usage))
		}
		err = writeTestCert(os.Args[2], os.Args[3])
	case "sign":
		err = sign(os.Args[2:])
	default:
		err = errors.New(usage)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "tenancy-hub-notation-sign: %v\n", err)
	os.Exit(1)
}

// subject is a lab certificate's subject; Notation's trusted identities need C, ST and O.
func subject(cn string) pkix.Name {
	return pkix.Name{Country: []string{"US"}, Province: []string{"WA"}, Organization: []string{"tenancy-hub lab"}, CommonName: cn}
}

// certificate makes a certificate of template for key, signed by parent's key (itself when nil).
func certificate(template *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, error) {
	if parent == nil {
		parent, parentKey = template, key
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(30 * 24 * time.Hour)
	template.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// writeTestCert writes a test CA, a code-signing certificate it issued to name, and its key.
func writeTestCert(dir, name string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca, err := certificate(&x509.Certificate{
		Subject:  subject(name + " CA"),
		IsCA:     true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, caKey, nil, nil)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf, err := certificate(&x509.Certificate{
		Subject:     subject(name),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}, key, ca, caKey)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	certPEM := func(certs ...*x509.Certificate) []byte {
		var out []byte
		for _, c := range certs {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		return out
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for file, data := range map[string][]byte{
		name + "-ca.crt": certPEM(ca),
		name + ".crt":    certPEM(leaf, ca),
		name + ".key":    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// sign signs one manifest digest and pushes the signature beside it.
func sign(args []string) error {
	flags := flag.NewFlagSet("sign", flag.ContinueOnError)
	key := flags.String("key", "", "PEM private key (PKCS#8)")
	chain := flags.String("cert", "", "PEM certificate chain, leaf first")
	envelope := flags.String("envelope", "jws", "signature envelope: jws or cose")
	caFile := flags.String("ca-file", "", "PEM CA of the registry's TLS certificate")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() != 1 || *key == "" || *chain == "" {
		return errors.New(usage)
	}
	mediaType := map[string]string{"jws": jws.MediaTypeEnvelope, "cose": cose.MediaTypeEnvelope}[*envelope]
	if mediaType == "" {
		return fmt.Errorf("--envelope must be jws or cose, not %q", *envelope)
	}
	s, err := signer.NewGenericSignerFromFiles(*key, *chain)
	if err != nil {
		return err
	}
	reference := flags.Arg(0)
	repo, err := remote.NewRepository(reference)
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no PEM certificate", *caFile)
		}
	}
	repo.Client = &auth.Client{
		Client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig}},
		Cache:  auth.NewCache(),
		Credential: auth.StaticCredential(repo.Reference.Registry, auth.Credential{
			Username: os.Getenv("NOTATION_USERNAME"),
			Password: os.Getenv("NOTATION_PASSWORD"),
		}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	desc, err := notation.Sign(ctx, s, registry.NewRepository(repo), notation.SignOptions{
		SignerSignOptions: notation.SignerSignOptions{SignatureMediaType: mediaType},
		ArtifactReference: reference,
	})
	if err != nil {
		return err
	}
	fmt.Printf("signed %s@%s\n", repo.Reference.Registry+"/"+repo.Reference.Repository, desc.Digest)
	return nil
}
