package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// keyFile writes a new ed25519 key as an OpenSSH private key file: its path and its public key.
func keyFile(t *testing.T, dir, name string) (string, gossh.PublicKey) {
	t.Helper()
	_, private, _ := ed25519.GenerateKey(rand.Reader)
	block, err := gossh.MarshalPrivateKey(private, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, _ := gossh.NewSignerFromKey(private)
	return path, signer.PublicKey()
}

// lab is a server on loopback with one repository, team/charts.git, and what a client needs.
type lab struct {
	server                 *server
	http, ssh              string
	clientKey, knownHosts  string
	dir, repo              string
	pushAuth, pushAuthBody string
}

func startLab(t *testing.T) *lab {
	t.Helper()
	dir := t.TempDir()
	repos := filepath.Join(dir, "repos")
	repo := filepath.Join(repos, "team", "charts.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", repo).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	hostKey, hostPublic := keyFile(t, dir, "host")
	clientKey, clientPublic := keyFile(t, dir, "client")
	authorized := filepath.Join(dir, "authorized_keys")
	os.WriteFile(authorized, gossh.MarshalAuthorizedKey(clientPublic), 0o600)
	s := &server{repos: repos, authorizedKeys: authorized, creds: httpCredentials{Username: "lab", Password: "pw", Token: "tok"}}
	httpServer := httptest.NewServer(s.httpHandler())
	t.Cleanup(httpServer.Close)
	sshListener, err := listenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sshServer, err := s.sshServer(hostKey)
	if err != nil {
		t.Fatal(err)
	}
	go sshServer.Serve(sshListener)
	t.Cleanup(func() { sshServer.Close() })
	port := sshListener.Addr().(*net.TCPAddr).Port
	s.httpURL, s.sshURL = httpServer.URL, fmt.Sprintf("ssh://git@127.0.0.1:%d", port)
	known := filepath.Join(dir, "known_hosts")
	os.WriteFile(known, []byte(fmt.Sprintf("[127.0.0.1]:%d %s", port, gossh.MarshalAuthorizedKey(hostPublic))), 0o600)
	return &lab{server: s, http: httpServer.URL, ssh: s.sshURL, clientKey: clientKey, knownHosts: known, dir: dir, repo: repo}
}

// git runs the git CLI in dir as a client of the lab: basic auth through an extra header (never
// in argv), the lab's SSH key and known_hosts, strictly.
func (l *lab) git(t *testing.T, dir, authorization string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Lab", "GIT_AUTHOR_EMAIL=lab@example.invalid", "GIT_COMMITTER_NAME=Lab", "GIT_COMMITTER_EMAIL=lab@example.invalid",
		"GIT_SSH_COMMAND=ssh -i "+l.clientKey+" -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="+l.knownHosts,
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+authorization)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func basic(user, password string) string {
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

func TestTheGitCLIPushesAndClonesOverHTTPAndSSH(t *testing.T) {
	l := startLab(t)
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "Chart.yaml"), []byte("name: web\n"), 0o644)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "one"}} {
		if out, err := l.git(t, work, "X-None: 1", args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	if out, err := l.git(t, work, basic("lab", "pw"), "push", "-q", l.http+"/team/charts.git", "HEAD:refs/heads/main"); err != nil {
		t.Fatalf("push over HTTP: %v: %s", err, out)
	}
	if out, err := l.git(t, work, basic("lab", "wrong"), "push", "-q", l.http+"/team/charts.git", "HEAD:refs/heads/other"); err == nil {
		t.Fatalf("a push with a wrong password went through: %s", out)
	}
	for _, tc := range []struct{ url, auth string }{
		{l.http + "/team/charts.git", basic("lab", "pw")},
		{l.http + "/team/charts.git", "Authorization: Bearer tok"},
		{l.ssh + "/team/charts.git", "X-None: 1"},
	} {
		clone := filepath.Join(t.TempDir(), "clone")
		if out, err := l.git(t, t.TempDir(), tc.auth, "clone", "-q", tc.url, clone); err != nil {
			t.Fatalf("clone %s: %v: %s", tc.url, err, out)
		}
		if data, _ := os.ReadFile(filepath.Join(clone, "Chart.yaml")); string(data) != "name: web\n" {
			t.Errorf("clone %s: %q", tc.url, data)
		}
	}
	os.WriteFile(filepath.Join(work, "Chart.yaml"), []byte("name: web\nversion: 2\n"), 0o644)
	l.git(t, work, "X-None: 1", "commit", "-q", "-am", "two")
	if out, err := l.git(t, work, "X-None: 1", "push", "-q", l.ssh+"/team/charts.git", "HEAD:refs/heads/main"); err != nil {
		t.Fatalf("push over SSH: %v: %s", err, out)
	}
	if out, err := l.git(t, work, "X-None: 1", "ls-remote", l.ssh+"/team/../../etc"); err == nil {
		t.Errorf("a path out of the repositories was served: %s", out)
	}
}

func TestAPushIsAnnouncedAsAGiteaWebhook(t *testing.T) {
	l := startLab(t)
	received := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- r
		bodies <- body
	}))
	defer hook.Close()
	config, _ := json.Marshal(webhook{URL: hook.URL + "/hooks/gitea", Secret: "hook-secret"})
	os.WriteFile(filepath.Join(l.repo, webhookFile), config, 0o600)
	work := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "one"}} {
		l.git(t, work, "X-None: 1", args...)
	}
	after, _ := l.git(t, work, "X-None: 1", "rev-parse", "HEAD")

	if out, err := l.git(t, work, basic("lab", "pw"), "push", "-q", l.http+"/team/charts.git", "HEAD:refs/heads/main"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	select {
	case r := <-received:
		body := <-bodies
		mac := hmac.New(sha256.New, []byte("hook-secret"))
		mac.Write(body)
		if r.Header.Get("X-Gitea-Event") != "push" || r.Header.Get("X-Gitea-Signature") != hex.EncodeToString(mac.Sum(nil)) {
			t.Errorf("headers: %v", r.Header)
		}
		var event pushEvent
		json.Unmarshal(body, &event)
		if event.Ref != "refs/heads/main" || event.After != strings.TrimSpace(after) || event.Before != zeroHash ||
			event.Repository.CloneURL != l.http+"/team/charts.git" || event.Repository.SSHURL != l.ssh+"/team/charts.git" {
			t.Errorf("event: %s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook within 10s of the push")
	}
	if !bytes.Contains([]byte(l.http), []byte("127.0.0.1")) {
		t.Errorf("the server is not on loopback: %s", l.http)
	}
}
