package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"helm.sh/helm/v4/pkg/provenance"
)

// newPGPKey is a signing key as `gpg --quick-gen-key` makes.
func newPGPKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	entity, err := openpgp.NewEntity(name, "", strings.ToLower(name)+"@charts.lab", nil)
	if err != nil {
		t.Fatal(err)
	}
	return entity
}

// publicKeyring is the public half of entities, binary (gpg --export) or armored a block per key
// (cat a.asc b.asc of gpg --export --armor).
func publicKeyring(t *testing.T, armored bool, entities ...*openpgp.Entity) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, entity := range entities {
		if !armored {
			if err := entity.Serialize(&out); err != nil {
				t.Fatal(err)
			}
			continue
		}
		w, err := armor.Encode(&out, openpgp.PublicKeyType, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := entity.Serialize(w); err != nil {
			t.Fatal(err)
		}
		w.Close()
		out.WriteString("\n")
	}
	return out.Bytes()
}

// signedChart writes an archive named chart-1.0.0.tgz and, signed by entity, its .prov (as `helm
// package --sign` makes it) into a directory; it returns both paths.
func signedChart(t *testing.T, entity *openpgp.Entity, archive []byte) (string, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "chart-1.0.0.tgz")
	if err := os.WriteFile(path, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	prov, err := (&provenance.Signatory{Entity: entity}).ClearSign(archive, "chart-1.0.0.tgz", []byte("apiVersion: v2\nname: chart\nversion: 1.0.0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".prov", []byte(prov), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, path + ".prov"
}

func TestProvenanceVerifiesASignedChartWithAnArmoredOrABinaryKeyring(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	for _, armored := range []bool{true, false} {
		check := provenanceCheck{Archive: archive, Provenance: prov, Keyring: publicKeyring(t, armored, newPGPKey(t, "Other"), signer)}

		got := verifyProvenance(check)

		wantVerified(t, got, "sha256:"+sha256Hex([]byte("chart one")), "Charts <charts@charts.lab> (PGP key ")
	}
}

func TestProvenanceChecksTheNameTheRepositoryLists(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	// The chart cache keeps archives under their digest; the .prov names the repository's file.
	cached := filepath.Join(t.TempDir(), "sha256-of-it")
	if err := os.Rename(archive, cached); err != nil {
		t.Fatal(err)
	}
	check := provenanceCheck{Archive: cached, Provenance: prov, FileName: "chart-1.0.0.tgz", Keyring: publicKeyring(t, true, signer)}

	wantVerified(t, verifyProvenance(check), "sha256:"+sha256Hex([]byte("chart one")), "Charts")

	check.FileName = "other-1.0.0.tgz"
	wantRefused(t, verifyProvenance(check), refusedMismatch, "other-1.0.0.tgz", "changed after signing")
}

func TestProvenanceRefusesAChartWithoutProv(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	os.Remove(prov)

	for _, path := range []string{prov, ""} {
		got := verifyProvenance(provenanceCheck{Archive: archive, Provenance: path, Keyring: publicKeyring(t, true, signer)})

		wantRefused(t, got, refusedUnsigned, "chart-1.0.0.tgz has no provenance file")
	}
}

func TestProvenanceRefusesAChartSignedByAnotherKey(t *testing.T) {
	archive, prov := signedChart(t, newPGPKey(t, "Stranger"), []byte("chart one"))

	got := verifyProvenance(provenanceCheck{Archive: archive, Provenance: prov, Keyring: publicKeyring(t, true, newPGPKey(t, "Charts"))})

	wantRefused(t, got, refusedUntrusted, "not in the keyring")
}

func TestProvenanceRefusesAnArchiveSwappedAfterSigning(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	if err := os.WriteFile(archive, []byte("chart one, changed"), 0o600); err != nil {
		t.Fatal(err)
	}

	got := verifyProvenance(provenanceCheck{Archive: archive, Provenance: prov, Keyring: publicKeyring(t, true, signer)})

	wantRefused(t, got, refusedMismatch, "chart-1.0.0.tgz (sha256:"+sha256Hex([]byte("chart one, changed")), "changed after signing")
}

func TestProvenanceRefusesAProvWhoseTextWasEdited(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	text, _ := os.ReadFile(prov)
	edited := strings.Replace(string(text), "version: 1.0.0", "version: 9.9.9", 1)
	if err := os.WriteFile(prov, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}

	got := verifyProvenance(provenanceCheck{Archive: archive, Provenance: prov, Keyring: publicKeyring(t, true, signer)})

	wantRefused(t, got, refusedInvalid, "does not verify")
}

func TestProvenanceBoundsWhatItReads(t *testing.T) {
	signer := newPGPKey(t, "Charts")
	archive, prov := signedChart(t, signer, []byte("chart one"))
	big := filepath.Join(t.TempDir(), "big.prov")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), maxProvenance+1), 0o600); err != nil {
		t.Fatal(err)
	}

	wantError(t, verifyProvenance(provenanceCheck{Archive: archive, Provenance: big, Keyring: publicKeyring(t, true, signer)}), errorRequest, "over 1048576 bytes")
	wantError(t, verifyProvenance(provenanceCheck{Archive: archive, Provenance: prov, Keyring: []byte("not a keyring")}), errorTrust, "keyring does not parse")
	wantError(t, verifyProvenance(provenanceCheck{Archive: archive, Provenance: prov}), errorTrust, "no keyring")
}
