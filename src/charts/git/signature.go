package main

// Commit signatures: the gpgsig header of a commit, PGP (armored) or SSH (SSHSIG, namespace
// "git"), checked against the keys a policy trusts.

import (
	"bytes"
	"errors"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

const (
	// sshArmor begins an SSH signature, as git writes it with gpg.format=ssh.
	sshArmor = "-----BEGIN SSH SIGNATURE-----"
	// pgpArmor begins a PGP signature.
	pgpArmor = "-----BEGIN PGP SIGNATURE-----"
	// sshNamespace is the namespace git signs commits in.
	sshNamespace = "git"
)

// verifySignature checks that a key of the trust signed the commit, answering which.
func verifySignature(commit *object.Commit, keys trust) (string, error) {
	sig := strings.TrimSpace(commit.PGPSignature)
	if sig == "" {
		return "", refuse(refusedUnsigned, "commit %s is not signed; sign it with a key the policy trusts", commit.Hash)
	}
	message, err := unsignedCommit(commit)
	if err != nil {
		return "", refuse(refusedInvalid, "commit %s cannot be re-encoded to check its signature: %v", commit.Hash, err)
	}
	switch {
	case strings.HasPrefix(sig, sshArmor):
		if len(keys.SSHKeys) == 0 {
			return "", refuse(refusedUntrusted, "commit %s is signed with an SSH key; the policy trusts PGP keys only", commit.Hash)
		}
		return verifySSH(commit.Hash, message, sig, keys.SSHKeys)
	case strings.HasPrefix(sig, pgpArmor):
		if len(keys.PGPKeys) == 0 {
			return "", refuse(refusedUntrusted, "commit %s is signed with a PGP key; the policy trusts SSH keys only", commit.Hash)
		}
		return verifyPGP(commit.Hash, message, sig, keys.PGPKeys)
	}
	return "", refuse(refusedInvalid, "commit %s has a signature that is neither PGP nor SSH (x509 signatures are not checked)", commit.Hash)
}

// unsignedCommit is the commit as it was signed: encoded without its signature.
func unsignedCommit(commit *object.Commit) ([]byte, error) {
	encoded := &plumbing.MemoryObject{}
	if err := commit.EncodeWithoutSignature(encoded); err != nil {
		return nil, err
	}
	r, err := encoded.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(r)
	return buf.Bytes(), err
}

// verifySSH checks an SSHSIG signature by one of the authorized keys: the key is its SHA256
// fingerprint.
func verifySSH(commit plumbing.Hash, message []byte, armored string, authorized []string) (string, error) {
	sig, err := sshsig.Unarmor([]byte(armored))
	if err != nil {
		return "", refuse(refusedInvalid, "the SSH signature of commit %s does not parse: %v", commit, err)
	}
	fingerprint := ssh.FingerprintSHA256(sig.PublicKey)
	for _, line := range authorized {
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return "", fail(errorRequest, "verify.sshKeys holds a line that is not an SSH public key (%v); fix the policy's keys", err)
		}
		if !bytes.Equal(key.Marshal(), sig.PublicKey.Marshal()) {
			continue
		}
		if err := sshsig.Verify(bytes.NewReader(message), sig, key, sig.HashAlgorithm, sshNamespace); err != nil {
			return "", refuse(refusedInvalid, "the SSH signature of commit %s by %s does not match the commit: %v", commit, fingerprint, err)
		}
		return fingerprint, nil
	}
	return "", refuse(refusedUntrusted, "commit %s is signed by SSH key %s, which the policy does not trust", commit, fingerprint)
}

// verifyPGP checks an armored PGP signature by one of the keys: the key is its key id.
func verifyPGP(commit plumbing.Hash, message []byte, armored string, keys []string) (string, error) {
	var ring openpgp.EntityList
	for _, key := range keys {
		entities, err := openpgp.ReadArmoredKeyRing(strings.NewReader(key))
		if err != nil {
			return "", fail(errorRequest, "verify.pgpKeys holds a key that does not parse (%v); give armored public keys", err)
		}
		ring = append(ring, entities...)
	}
	signer, err := openpgp.CheckArmoredDetachedSignature(ring, bytes.NewReader(message), strings.NewReader(armored), nil)
	switch {
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return "", refuse(refusedUntrusted, "commit %s is signed by a PGP key the policy does not trust", commit)
	case err != nil:
		return "", refuse(refusedInvalid, "the PGP signature of commit %s does not verify: %v", commit, err)
	}
	return signer.PrimaryKey.KeyIdString(), nil
}
