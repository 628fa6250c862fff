// Command tenancy-hub-git-server is the lab's Git server: real Git over smart HTTP (git's own
// http-backend behind net/http/cgi) and over SSH (git's own upload-pack and receive-pack), for the
// end-to-end tests of Git chart sources. It is a lab tool, not part of the operator.
//
//	tenancy-hub-git-server --repos DIR --http 127.0.0.1:PORT --ssh 127.0.0.1:PORT \
//	    --auth FILE --host-key FILE --authorized-keys FILE
//
// Both listen on loopback only. Over HTTP a request needs the basic auth or the bearer token of the
// --auth file (JSON: username, password, token; secrets stay out of argv); over SSH a client key
// of the --authorized-keys file (read at each login, so tests may add keys), any user name. The
// repositories are the bare ones under --repos (`git init --bare DIR/team/charts.git` is served
// as /team/charts.git); a commit is asked for by its id is given (allowReachableSHA1InWant), as
// the large forges do.
//
// After a push (receive-pack, over either transport) that changed refs, and when the repository's
// directory holds tenancy-hub-webhook.json ({"url": "http://127.0.0.1:PORT/...", "secret": "..."},
// read at each push), it POSTs one Gitea push event per changed ref to that loopback url, signed
// as Gitea signs (X-Gitea-Signature: hex HMAC-SHA256 of the body with the secret).
//
// SIGTERM or SIGINT stops it: no new connection is taken, the ones in flight get 10 seconds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// gitConfig is the configuration every git program of the server runs with (GIT_CONFIG_COUNT).
var gitConfig = [][2]string{
	{"uploadpack.allowReachableSHA1InWant", "true"},
	{"uploadpack.allowFilter", "true"},
	{"http.receivepack", "true"},
}

// server holds what both transports share.
type server struct {
	repos string
	creds httpCredentials
	// The lab's urls, for the webhook payloads.
	httpURL, sshURL string
	authorizedKeys  string
	// One push at a time per repository, so the refs before and after are that push's.
	pushes sync.Map
	hooks  sync.WaitGroup
}

// httpCredentials open the HTTP side.
type httpCredentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Token    string `json:"token"`
}

func main() {
	repos := flag.String("repos", "", "directory of the bare repositories")
	httpAddr := flag.String("http", "127.0.0.1:0", "loopback address of smart HTTP")
	sshAddr := flag.String("ssh", "127.0.0.1:0", "loopback address of SSH")
	authFile := flag.String("auth", "", "JSON file: the HTTP username, password and token")
	hostKey := flag.String("host-key", "", "the SSH host key (OpenSSH private key file)")
	authorized := flag.String("authorized-keys", "", "authorized_keys file of the SSH clients")
	flag.Parse()
	if err := serve(*repos, *httpAddr, *sshAddr, *authFile, *hostKey, *authorized); err != nil {
		log.Fatalf("tenancy-hub-git-server: %v", err)
	}
}

// serve runs both transports until SIGTERM or SIGINT.
func serve(repos, httpAddr, sshAddr, authFile, hostKey, authorized string) error {
	if repos == "" || authFile == "" || hostKey == "" || authorized == "" {
		return errors.New("--repos, --auth, --host-key and --authorized-keys are required")
	}
	s := &server{authorizedKeys: authorized}
	var err error
	if s.repos, err = filepath.Abs(repos); err != nil {
		return err
	}
	data, err := os.ReadFile(authFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &s.creds); err != nil || s.creds.Username == "" || s.creds.Password == "" || s.creds.Token == "" {
		return fmt.Errorf("%s must hold a JSON object with username, password and token (%v)", authFile, err)
	}
	httpListener, err := listenLoopback(httpAddr)
	if err != nil {
		return err
	}
	sshListener, err := listenLoopback(sshAddr)
	if err != nil {
		return err
	}
	s.httpURL = "http://" + httpListener.Addr().String()
	s.sshURL = "ssh://git@" + sshListener.Addr().String()
	httpServer := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	sshServer, err := s.sshServer(hostKey)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	failed := make(chan error, 2)
	go func() { failed <- httpServer.Serve(httpListener) }()
	go func() { failed <- sshServer.Serve(sshListener) }()
	log.Printf("serving %s over %s and %s", s.repos, s.httpURL, s.sshURL)
	select {
	case <-ctx.Done():
	case err := <-failed:
		return err
	}
	log.Printf("stopping")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = httpServer.Shutdown(shutdown)
	_ = sshServer.Shutdown(shutdown)
	s.hooks.Wait()
	return nil
}

// listenLoopback listens on addr, which must be a loopback address.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%s is not a loopback address; the lab serves on loopback only", addr)
	}
	return net.Listen("tcp", addr)
}

// gitEnv is the environment of a git program: the server's config, nothing of the user's.
func gitEnv() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(gitConfig))}
	for i, kv := range gitConfig {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// repoDir is the bare repository a request names (/team/charts.git), inside the repos directory.
func (s *server) repoDir(name string) (string, error) {
	clean := filepath.Clean("/" + strings.Trim(name, "'\""))
	dir := filepath.Join(s.repos, clean)
	if !strings.HasPrefix(dir, s.repos+string(filepath.Separator)) {
		return "", fmt.Errorf("%q is not a repository of the server", name)
	}
	if info, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil || !info.Mode().IsRegular() {
		return "", fmt.Errorf("no repository %s", clean)
	}
	return dir, nil
}

// push runs a receive-pack on dir, one at a time per repository, and sends the webhooks of the
// refs it changed.
func (s *server) push(dir string, receive func() error) error {
	lock, _ := s.pushes.LoadOrStore(dir, &sync.Mutex{})
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	before := refs(dir)
	err := receive()
	after := refs(dir)
	for name, hash := range after {
		if old, existed := before[name]; !existed {
			s.notify(dir, name, zeroHash, hash)
		} else if old != hash {
			s.notify(dir, name, old, hash)
		}
	}
	for name, hash := range before {
		if _, kept := after[name]; !kept {
			s.notify(dir, name, hash, zeroHash)
		}
	}
	return err
}

// zeroHash is the id git gives a ref that does not exist.
const zeroHash = "0000000000000000000000000000000000000000"

// refs maps each ref of a repository to its object.
func refs(dir string) map[string]string {
	cmd := exec.Command("git", "--git-dir", dir, "for-each-ref", "--format=%(objectname) %(refname)")
	cmd.Env = append(os.Environ(), gitEnv()...)
	out, err := cmd.Output()
	if err != nil {
		log.Printf("listing the refs of %s: %v", dir, err)
	}
	found := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if hash, name, ok := strings.Cut(line, " "); ok {
			found[name] = hash
		}
	}
	return found
}
