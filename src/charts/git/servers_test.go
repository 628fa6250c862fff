package main

// Real repositories for the tests: made with the git CLI in temporary directories and served by
// git's own programs, over smart HTTP (git http-backend behind net/http/cgi, with basic auth or a
// bearer token, plain or TLS) and over SSH (git-upload-pack behind a small x/crypto/ssh server).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// gitEnv is the environment every git command of the tests runs in: no user or system config,
// a fixed identity.
func gitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.invalid")
}

// gitRun runs git in dir, failing the test on error; returns its trimmed stdout.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return gitRunEnv(t, dir, nil, args...)
}

// gitRunEnv is gitRun with more environment (GNUPGHOME for signing).
func gitRunEnv(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(gitEnv(dir), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// testRepo is a bare repository under root (served as /team/charts.git) and a work tree pushing
// to it.
type testRepo struct {
	root string
	bare string
	work string
	// More environment for its commits (GNUPGHOME).
	env []string
}

// newRepo makes an empty bare repository and its work tree.
func newRepo(t *testing.T) *testRepo {
	t.Helper()
	root := t.TempDir()
	r := &testRepo{root: root, bare: filepath.Join(root, "team", "charts.git"), work: filepath.Join(t.TempDir(), "work")}
	gitRun(t, root, "init", "-q", "--bare", "-b", "main", r.bare)
	if err := os.MkdirAll(r.work, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, r.work, "init", "-q", "-b", "main")
	return r
}

// write puts files (path: content) in the work tree; a content "-> target" makes a symlink.
func (r *testRepo) write(t *testing.T, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(r.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
		var err error
		if target, isLink := strings.CutPrefix(content, "-> "); isLink {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// commit writes files, commits everything (with extra git commit args, e.g. signing) and pushes
// the branch main; returns the commit.
func (r *testRepo) commit(t *testing.T, files map[string]string, args ...string) string {
	t.Helper()
	r.write(t, files)
	gitRun(t, r.work, "add", "-A")
	gitRunEnv(t, r.work, r.env, append([]string{"commit", "-q", "--allow-empty", "-m", "change"}, args...)...)
	gitRun(t, r.work, "push", "-q", r.bare, "HEAD:refs/heads/main")
	return gitRun(t, r.work, "rev-parse", "HEAD")
}

// tag tags HEAD (annotated when message is not empty) and pushes the tag.
func (r *testRepo) tag(t *testing.T, name, message string) {
	t.Helper()
	if message != "" {
		gitRun(t, r.work, "tag", "-a", "-m", message, name)
	} else {
		gitRun(t, r.work, "tag", name)
	}
	gitRun(t, r.work, "push", "-q", r.bare, "refs/tags/"+name)
}

// httpGit serves the repositories under root with git http-backend. With user and password set,
// requests need that basic auth; with token set, that bearer token (either one does).
type httpGit struct {
	user, password, token string
	// Whether upload-pack gives a commit asked for by id (uploadpack.allowReachableSHA1InWant).
	byID bool
}

// handler is the http-backend behind the auth check.
func (g httpGit) handler(root string) http.Handler {
	backend := &cgi.Handler{
		Path: gitExecPath() + "/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=uploadpack.allowReachableSHA1InWant", fmt.Sprintf("GIT_CONFIG_VALUE_0=%t", g.byID)},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.user != "" || g.token != "" {
			user, password, basic := r.BasicAuth()
			okBasic := basic && g.user != "" && user == g.user && password == g.password
			okToken := g.token != "" && r.Header.Get("Authorization") == "Bearer "+g.token
			if !okBasic && !okToken {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	})
}

// serveHTTP serves root over plain HTTP: the repository's url.
func (g httpGit) serveHTTP(t *testing.T, root string) string {
	server := httptest.NewServer(g.handler(root))
	t.Cleanup(server.Close)
	return server.URL + "/team/charts.git"
}

// serveTLS serves root over HTTPS: the repository's url and the PEM of the CA that trusts it.
func (g httpGit) serveTLS(t *testing.T, root string) (string, string) {
	server := httptest.NewTLSServer(g.handler(root))
	t.Cleanup(server.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	return server.URL + "/team/charts.git", string(ca)
}

// gitExecPath is where git keeps its programs (git-http-backend, git-upload-pack).
func gitExecPath() string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(out))
}

// sshKeyPair is a new ed25519 key: its OpenSSH private key PEM, its signer and authorized_keys line.
func sshKeyPair(t *testing.T) (string, ssh.Signer, string) {
	t.Helper()
	_, private, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(private, "test")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(private)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block)), signer, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

// serveSSH serves root's repositories to the one client key over SSH, running git-upload-pack:
// the repository's url and the known_hosts line of the server's host key.
func serveSSH(t *testing.T, root string, client ssh.PublicKey) (string, string) {
	t.Helper()
	_, hostSigner, _ := sshKeyPair(t)
	config := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(key.Marshal(), client.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	config.AddHostKey(hostSigner)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go serveSSHConn(conn, config, root)
		}
	}()
	addr := listener.Addr().(*net.TCPAddr)
	known := fmt.Sprintf("[127.0.0.1]:%d %s", addr.Port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))))
	return fmt.Sprintf("ssh://git@127.0.0.1:%d/team/charts.git", addr.Port), known
}

// serveSSHConn runs the exec requests of one connection's sessions: git-upload-pack only.
func serveSSHConn(conn net.Conn, config *ssh.ServerConfig, root string) {
	server, chans, reqs, err := ssh.NewServerConn(conn, config)
	if err != nil {
		conn.Close()
		return
	}
	defer server.Close()
	go ssh.DiscardRequests(reqs)
	for newChannel := range chans {
		if newChannel.ChannelType() != "session" {
			_ = newChannel.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		channel, requests, err := newChannel.Accept()
		if err != nil {
			return
		}
		go func() {
			defer channel.Close()
			for req := range requests {
				if req.Type != "exec" {
					_ = req.Reply(req.Type == "env", nil)
					continue
				}
				command := string(req.Payload[4:])
				program, repo, _ := strings.Cut(command, " ")
				if program != "git-upload-pack" {
					_ = req.Reply(false, nil)
					return
				}
				_ = req.Reply(true, nil)
				cmd := exec.CommandContext(context.Background(), "git-upload-pack", filepath.Join(root, strings.Trim(repo, "'")))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = channel, channel, channel.Stderr()
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
				}
				payload := make([]byte, 4)
				binary.BigEndian.PutUint32(payload, status)
				_, _ = channel.SendRequest("exit-status", false, payload)
				return
			}
		}()
	}
}

// ask runs one request through the whole program (decoding, deadline, masking).
func ask(t *testing.T, req request) answer {
	t.Helper()
	if req.Protocol == 0 {
		req.Protocol = protocolVersion
	}
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return run(context.Background(), bytes.NewReader(data))
}

// wantOk fails the test unless the answer is ok.
func wantOk(t *testing.T, got answer) *success {
	t.Helper()
	if got.Ok == nil {
		t.Fatalf("want ok, got %s", show(got))
	}
	return got.Ok
}

// wantRefused fails the test unless the answer is refused with code, its message holding words.
func wantRefused(t *testing.T, got answer, code string, words ...string) {
	t.Helper()
	if got.Refused == nil || got.Refused.Code != code {
		t.Fatalf("want refused %s, got %s", code, show(got))
	}
	for _, w := range words {
		if !strings.Contains(got.Refused.Message, w) {
			t.Errorf("the refusal %q does not say %q", got.Refused.Message, w)
		}
	}
}

// wantError fails the test unless the answer is an error of kind, its message holding words.
func wantError(t *testing.T, got answer, kind string, words ...string) {
	t.Helper()
	if got.Error == nil || got.Error.Kind != kind {
		t.Fatalf("want error %s, got %s", kind, show(got))
	}
	for _, w := range words {
		if !strings.Contains(got.Error.Message, w) {
			t.Errorf("the error %q does not say %q", got.Error.Message, w)
		}
	}
}

// show is an answer as JSON, for failure messages.
func show(a answer) string {
	data, _ := json.Marshal(a)
	return string(data)
}
