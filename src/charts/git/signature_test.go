package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// sshFormat makes git sign with ssh-keygen (gpg.format=ssh), the key file given as the signing key.
var sshFormat = []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=gpg.format", "GIT_CONFIG_VALUE_0=ssh"}

// sshSigningKey writes a new SSH key to a file for git to sign with: its path and public line.
func sshSigningKey(t *testing.T) (string, string) {
	t.Helper()
	private, _, public := sshKeyPair(t)
	file := filepath.Join(t.TempDir(), "signing")
	if err := os.WriteFile(file, []byte(private), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, public
}

// pgpKey makes a PGP signing key in a GNUPGHOME of its own (its agent stopped after the test):
// the environment that signs with it, its fingerprint and its armored public key.
func pgpKey(t *testing.T) ([]string, string, string) {
	t.Helper()
	// A short path: the agent's socket lives in it.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"GNUPGHOME=" + home}
	gpg := func(args ...string) string {
		cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return string(out)
	}
	t.Cleanup(func() {
		cmd := exec.Command("gpgconf", "--kill", "gpg-agent")
		cmd.Env = append(os.Environ(), env...)
		_ = cmd.Run()
		os.RemoveAll(home)
	})
	gpg("--quick-gen-key", "Test <test@example.invalid>", "ed25519", "sign", "never")
	var fingerprint string
	for _, line := range strings.Split(gpg("--list-secret-keys", "--with-colons"), "\n") {
		if fields := strings.Split(line, ":"); fields[0] == "fpr" && fingerprint == "" {
			fingerprint = fields[9]
		}
	}
	return env, fingerprint, gpg("--armor", "--export", fingerprint)
}

func TestSSHSignedCommitsAreVerifiedAgainstTheTrustedKeys(t *testing.T) {
	repo := newRepo(t)
	keyFile, public := sshSigningKey(t)
	_, otherPublic := sshSigningKey(t)
	repo.env = sshFormat
	signed := repo.commit(t, chartFiles, "--gpg-sign="+keyFile)
	repo.env = nil
	unsigned := repo.commit(t, map[string]string{"values/member-1.yaml": "replicas: 5\n"})
	url := httpGit{byID: true}.serveHTTP(t, repo.root)
	sshTrust := func(keys ...string) func(*request) {
		return func(r *request) { r.Verify = &trust{SSHKeys: keys} }
	}

	got, _ := fetchOver(t, url, signed, chartPaths[:1], sshTrust(otherPublic, public))
	ok := wantOk(t, got)
	key, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(public))
	if ok.SignedBy != ssh.FingerprintSHA256(key) {
		t.Errorf("signed by %q, want %s", ok.SignedBy, ssh.FingerprintSHA256(key))
	}

	got, out := fetchOver(t, url, signed, chartPaths[:1], sshTrust(otherPublic))
	wantRefused(t, got, refusedUntrusted, "SHA256:", "does not trust")
	if have := files(t, out); len(have) != 0 {
		t.Errorf("an untrusted commit was written: %v", have)
	}

	got, _ = fetchOver(t, url, unsigned, chartPaths[:1], sshTrust(public))
	wantRefused(t, got, refusedUnsigned, unsigned)

	_, _, pgpPublic := pgpKey(t)
	got, _ = fetchOver(t, url, signed, chartPaths[:1], func(r *request) { r.Verify = &trust{PGPKeys: []string{pgpPublic}} })
	wantRefused(t, got, refusedUntrusted, "SSH key", "PGP keys only")
}

func TestPGPSignedCommitsAreVerifiedAgainstTheTrustedKeys(t *testing.T) {
	repo := newRepo(t)
	env, fingerprint, public := pgpKey(t)
	_, _, other := pgpKey(t)
	repo.env = env
	signed := repo.commit(t, chartFiles, "--gpg-sign="+fingerprint)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, _ := fetchOver(t, url, signed, chartPaths[:1], func(r *request) { r.Verify = &trust{PGPKeys: []string{other, public}} })
	ok := wantOk(t, got)
	if !strings.HasSuffix(fingerprint, ok.SignedBy) || len(ok.SignedBy) != 16 {
		t.Errorf("signed by %q, want the key id of %s", ok.SignedBy, fingerprint)
	}

	got, _ = fetchOver(t, url, signed, chartPaths[:1], func(r *request) { r.Verify = &trust{PGPKeys: []string{other}} })
	wantRefused(t, got, refusedUntrusted, "PGP key the policy does not trust")

	got, _ = fetchOver(t, url, signed, chartPaths[:1], func(r *request) { r.Verify = &trust{PGPKeys: []string{"not a key"}} })
	wantError(t, got, errorRequest, "verify.pgpKeys")
}

// A signature copied onto another commit (its content changed, its gpgsig kept) is invalid.
func TestASignatureOfOtherContentIsInvalid(t *testing.T) {
	repo := newRepo(t)
	keyFile, public := sshSigningKey(t)
	repo.env = sshFormat
	repo.commit(t, chartFiles, "--gpg-sign="+keyFile)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)
	got, _ := fetchOver(t, url, gitRun(t, repo.work, "rev-parse", "HEAD"), chartPaths[:1], func(r *request) { r.Verify = &trust{SSHKeys: []string{public}} })
	wantOk(t, got)
	commit := &object.Commit{Message: "forged\n"}
	raw := gitRun(t, repo.work, "cat-file", "commit", "HEAD")
	start := strings.Index(raw, "gpgsig ")
	end := strings.Index(raw, "-----END SSH SIGNATURE-----")
	if start < 0 || end < 0 {
		t.Fatalf("no SSH signature in %s", raw)
	}
	var sig []string
	for _, line := range strings.Split(raw[start+len("gpgsig "):end+len("-----END SSH SIGNATURE-----")], "\n") {
		sig = append(sig, strings.TrimPrefix(line, " "))
	}
	commit.PGPSignature = strings.Join(sig, "\n") + "\n"

	_, err := verifySignature(commit, trust{SSHKeys: []string{public}})

	if o, ok := err.(*outcome); !ok || o.answer.Refused == nil || o.answer.Refused.Code != refusedInvalid {
		t.Errorf("want refused invalid, got %v", err)
	}
}
