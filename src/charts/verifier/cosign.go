package main

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// maxSignatures bounds the signatures of one digest that are checked, whichever the scheme.
const maxSignatures = 32

// cosignArtifactType is the artifactType of a cosign signature attached as an OCI 1.1 referrer
// (`cosign sign --registry-referrers-mode=oci-1-1`).
const cosignArtifactType = "application/vnd.dev.cosign.artifact.sig.v1+json"

// cosignCheck asks whether an OCI chart's manifest digest carries a cosign signature made by one
// of the public keys, or (keyless) by a certificate of a trusted identity chaining to trusted CAs.
type cosignCheck struct {
	// The chart's repository, host[:port]/path, without scheme, tag or digest.
	Reference string `json:"reference"`
	// The manifest digest that must be signed, sha256:<hex>.
	Digest   string         `json:"digest"`
	Registry registryAccess `json:"registry"`
	// PEM public keys (PKIX: ECDSA, RSA or Ed25519), any of which may have signed it.
	PublicKeys []string `json:"publicKeys"`
	// Keyless verification, besides the keys: either may verify.
	Keyless *keylessCheck `json:"keyless,omitempty"`
}

// cosignKey is one trusted public key and its fingerprint.
type cosignKey struct {
	verifier    signature.Verifier
	fingerprint string
}

// parseCosignKeys reads the PEM public keys; an error names the key by its place.
func parseCosignKeys(pems []string) ([]cosignKey, error) {
	keys := make([]cosignKey, 0, len(pems))
	for i, text := range pems {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("public key %d is not a PEM public key (%v); give the PUBLIC KEY block cosign wrote to cosign.pub", i+1, err)
		}
		verifier, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("public key %d cannot verify signatures: %v", i+1, err)
		}
		keys = append(keys, cosignKey{verifier: verifier, fingerprint: keyFingerprint(pub)})
	}
	return keys, nil
}

// keyFingerprint names a public key: the sha256 of its PKIX (DER) form.
func keyFingerprint(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "key of an unknown type"
	}
	sum := sha256.Sum256(der)
	return "key sha256:" + hex.EncodeToString(sum[:])
}

// artifactDigest parses the chart's repository and digest into one reference.
func artifactDigest(reference, digest string) (name.Digest, v1.Hash, error) {
	h, err := v1.NewHash(digest)
	if err != nil || h.Algorithm != "sha256" {
		return name.Digest{}, h, fmt.Errorf("digest %q is not sha256:<64 hex digits>", digest)
	}
	if strings.Contains(reference, "://") || strings.ContainsAny(reference, "@") {
		return name.Digest{}, h, fmt.Errorf("reference %q must be host[:port]/repository, without scheme or digest", reference)
	}
	ref, err := name.NewDigest(reference+"@"+digest, name.StrictValidation)
	if err != nil {
		return name.Digest{}, h, fmt.Errorf("reference %q is not an OCI repository: %v", reference, err)
	}
	return ref, h, nil
}

// verifyCosign checks the cosign signatures of one digest: those under the `sha256-<hex>.sig` tag
// and those attached as OCI 1.1 referrers.
func verifyCosign(ctx context.Context, check cosignCheck) answer {
	ref, h, err := artifactDigest(check.Reference, check.Digest)
	if err != nil {
		return failed(errorRequest, "%v", err)
	}
	keys, err := parseCosignKeys(check.PublicKeys)
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	var keyless *keylessTrust
	if check.Keyless != nil {
		if keyless, err = check.Keyless.parse(); err != nil {
			return failed(errorTrust, "%v", err)
		}
	} else if len(keys) == 0 {
		return failed(errorTrust, "no public key is given; give the cosign public key (cosign.pub) the charts are signed with, or the identities and CA certificates of keyless signing")
	}
	creds, transport, err := check.Registry.open()
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	opts := []ociremote.Option{ociremote.WithRemoteOptions(
		remote.WithContext(ctx),
		remote.WithTransport(transport),
		remote.WithAuthFromKeychain(creds),
	)}
	sigs, err := cosignSignatures(ref, h, opts)
	if err != nil {
		return registryError(ref.String(), err)
	}
	if len(sigs) == 0 {
		return refused(refusedUnsigned, fmt.Sprintf("no cosign signature of %s was found (neither the %s tag nor a referrer)", check.Digest, signatureTag(h)))
	}
	// Each signature's payload is read once, here, so a registry failure is told as one rather
	// than as a signature that does not verify.
	for i, sig := range sigs {
		if sigs[i], err = static.Copy(sig); err != nil {
			return registryError(ref.String(), err)
		}
	}
	return judgeCosign(ctx, sigs, h, keys, keyless)
}

// judgeCosign finds a signature made by a trusted key or identity over this digest, or says why
// there is none.
func judgeCosign(ctx context.Context, sigs []oci.Signature, h v1.Hash, keys []cosignKey, keyless *keylessTrust) answer {
	var mismatch, why string
	for _, sig := range sigs {
		for _, key := range keys {
			co := &cosign.CheckOpts{SigVerifier: key.verifier, IgnoreTlog: true, IgnoreSCT: true}
			if _, err := cosign.VerifyImageSignature(ctx, sig, h, co); err != nil {
				continue
			}
			// A trusted key made it; does it speak of this digest?
			if err := cosign.SimpleClaimVerifier(sig, h, nil); err != nil {
				mismatch = fmt.Sprintf("a signature by the trusted %s is of other content, not of %s: it was copied from another chart or the chart was changed after signing", key.fingerprint, h)
				continue
			}
			return verified(key.fingerprint, h.String())
		}
		if keyless == nil {
			continue
		}
		switch v := keyless.judge(ctx, sig, h); {
		case v.mismatch:
			mismatch = fmt.Sprintf("a signature by the trusted identity %s is of other content, not of %s: it was copied from another chart or the chart was changed after signing", strings.TrimPrefix(v.by, "keyless "), h)
		case v.by != "":
			return verified(v.by, h.String())
		case why == "" || why == noCertificate:
			// A signature with a certificate says more than a key's signature.
			why = v.why
		}
	}
	if mismatch != "" {
		return refused(refusedMismatch, mismatch)
	}
	if keyless == nil {
		return refused(refusedUntrusted, fmt.Sprintf("%s has %d cosign signature(s), none made by a trusted key; sign it with the key the policy names, or add its public key", h, len(sigs)))
	}
	return refused(refusedUntrusted, fmt.Sprintf("%s has %d cosign signature(s), none made by a trusted key or identity (the first: %s)", h, len(sigs), why))
}

// signatureTag is the tag cosign keeps a digest's signatures under.
func signatureTag(h v1.Hash) string {
	return fmt.Sprintf("%s-%s.sig", h.Algorithm, h.Hex)
}

// cosignSignatures fetches the signatures of a digest, at most maxSignatures: the tag scheme's and
// the OCI 1.1 referrers' (a registry without the referrers API is asked through its tag schema).
func cosignSignatures(ref name.Digest, h v1.Hash, opts []ociremote.Option) ([]oci.Signature, error) {
	tag := ref.Context().Tag(signatureTag(h))
	fromTag, err := ociremote.Signatures(tag, opts...)
	if err != nil {
		return nil, err
	}
	sigs, err := fromTag.Get()
	if err != nil {
		return nil, err
	}
	if len(sigs) >= maxSignatures {
		return sigs[:maxSignatures], nil
	}
	index, err := ociremote.Referrers(ref, cosignArtifactType, opts...)
	if err != nil {
		// The referrers are a second place to look; the tag's signatures still count.
		if len(sigs) > 0 {
			return sigs, nil
		}
		return nil, err
	}
	for _, desc := range index.Manifests {
		if len(sigs) >= maxSignatures {
			break
		}
		if desc.ArtifactType != "" && desc.ArtifactType != cosignArtifactType {
			continue
		}
		attached, err := ociremote.Signatures(ref.Context().Digest(desc.Digest.String()), opts...)
		if err != nil {
			return nil, err
		}
		more, err := attached.Get()
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, more...)
	}
	if len(sigs) > maxSignatures {
		sigs = sigs[:maxSignatures]
	}
	return sigs, nil
}
