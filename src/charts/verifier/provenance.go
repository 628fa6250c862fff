package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"helm.sh/helm/v4/pkg/provenance"
)

const (
	// maxArchive bounds the chart archive read (the operator's chart cache keeps the same bound).
	maxArchive = 64 << 20
	// maxProvenance bounds the .prov file read.
	maxProvenance = 1 << 20
)

// provenanceCheck asks whether a Helm repository chart's archive is the one its provenance file
// (.prov) lists, signed by a key of the keyring, as `helm verify` checks it.
type provenanceCheck struct {
	// Path of the chart archive.
	Archive string `json:"archive"`
	// Path of its .prov; empty or missing: the repository serves none (the chart is unsigned).
	Provenance string `json:"provenance"`
	// The archive's name as the repository lists it (chart-1.2.3.tgz), which the .prov names;
	// default: the base name of archive.
	FileName string `json:"fileName,omitempty"`
	// The PGP public keyring: armored (gpg --export --armor), binary (gpg --export) or a GnuPG
	// keybox; base64 in the JSON.
	Keyring []byte `json:"keyring"`
}

// readBounded reads a regular file of at most limit bytes.
func readBounded(path, what string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s: %v", what, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s: %v", what, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("the %s %s is not a regular file", what, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s: %v", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("the %s %s is over %d bytes", what, path, limit)
	}
	return data, nil
}

// dearmor turns an armored keyring into a binary one, every armored block of it: Helm's reader of
// armored keyrings (helm 4.3.1) keeps only the first block of `cat a.asc b.asc`, its decoder having
// buffered the rest away.
func dearmor(keyring []byte) ([]byte, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(keyring), []byte("-----BEGIN PGP")) {
		return keyring, nil
	}
	var out bytes.Buffer
	// One buffered reader for every block, so none is read ahead and lost.
	r := bufio.NewReader(bytes.NewReader(keyring))
	for {
		block, err := armor.Decode(r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the armored keyring does not parse: %v", err)
		}
		if block.Type != openpgp.PublicKeyType && block.Type != openpgp.PrivateKeyType {
			return nil, fmt.Errorf("the keyring holds a %q block, not public keys", block.Type)
		}
		if _, err := io.Copy(&out, block.Body); err != nil {
			return nil, fmt.Errorf("the armored keyring does not parse: %v", err)
		}
	}
	return out.Bytes(), nil
}

// loadKeyring reads a keyring as Helm does (armored, binary or keybox), through a private file.
func loadKeyring(keyring []byte) (*provenance.Signatory, error) {
	if len(keyring) == 0 {
		return nil, errors.New("no keyring is given; give the public keys the charts are signed with (gpg --export)")
	}
	keyring, err := dearmor(keyring)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenancy-hub-verify-")
	if err != nil {
		return nil, fmt.Errorf("cannot write the keyring for reading: %v", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keyring")
	if err := os.WriteFile(path, keyring, 0o600); err != nil {
		return nil, fmt.Errorf("cannot write the keyring for reading: %v", err)
	}
	signatory, err := provenance.NewFromKeyring(path, "")
	if err != nil {
		return nil, fmt.Errorf("the keyring does not parse as a PGP public keyring (armored, binary or keybox): %v", strings.ReplaceAll(err.Error(), path, "keyring"))
	}
	if len(signatory.KeyRing) == 0 {
		return nil, errors.New("the keyring holds no key")
	}
	return signatory, nil
}

// pgpSigner names the key that made a signature: its identity and fingerprint.
func pgpSigner(entity *openpgp.Entity) string {
	fingerprint := strings.ToUpper(hex.EncodeToString(entity.PrimaryKey.Fingerprint))
	if id := entity.PrimaryIdentity(); id != nil {
		return fmt.Sprintf("%s (PGP key %s)", id.Name, fingerprint)
	}
	return "PGP key " + fingerprint
}

// verifyProvenance checks a repository chart's .prov as `helm verify` does: the PGP signature by a
// key of the keyring, then the archive's sha256 against the one the .prov lists for its name.
func verifyProvenance(check provenanceCheck) answer {
	name := check.FileName
	if name == "" {
		name = filepath.Base(check.Archive)
	}
	signatory, err := loadKeyring(check.Keyring)
	if err != nil {
		return failed(errorTrust, "%v", err)
	}
	archive, err := readBounded(check.Archive, "chart archive", maxArchive)
	if err != nil {
		return failed(errorRequest, "%v", err)
	}
	sum := sha256.Sum256(archive)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if check.Provenance == "" {
		return refused(refusedUnsigned, fmt.Sprintf("%s has no provenance file (.prov)", name))
	}
	if _, err := os.Stat(check.Provenance); errors.Is(err, os.ErrNotExist) {
		return refused(refusedUnsigned, fmt.Sprintf("%s has no provenance file (.prov)", name))
	}
	prov, err := readBounded(check.Provenance, "provenance file", maxProvenance)
	if err != nil {
		return failed(errorRequest, "%v", err)
	}
	if block, _ := clearsign.Decode(prov); block == nil {
		return refused(refusedInvalid, fmt.Sprintf("the provenance file of %s holds no PGP signed message", name))
	}
	verification, err := signatory.Verify(archive, prov, name)
	if err == nil {
		return verified(pgpSigner(verification.SignedBy), digest)
	}
	switch {
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return refused(refusedUntrusted, fmt.Sprintf("the provenance file of %s is signed by a key that is not in the keyring; sign it with a key of the keyring, or add its public key", name))
	case verification != nil && verification.SignedBy != nil:
		// The signature holds; the archive is not the one it lists.
		return refused(refusedMismatch, fmt.Sprintf("%s (%s) is not the archive its provenance file lists (signed by %s): it was changed after signing", name, digest, pgpSigner(verification.SignedBy)))
	}
	return refused(refusedInvalid, fmt.Sprintf("the provenance file of %s does not verify: %v", name, err))
}
