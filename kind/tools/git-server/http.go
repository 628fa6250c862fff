package main

// Smart HTTP: git http-backend behind net/http/cgi, after basic auth or a bearer token.

import (
	"crypto/subtle"
	"net/http"
	"net/http/cgi"
	"os/exec"
	"path/filepath"
	"strings"
)

// httpHandler checks the credentials, then hands the request to git http-backend; a push goes
// through push, for its webhooks.
func (s *server) httpHandler() http.Handler {
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		panic("git is required: " + err.Error())
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  append([]string{"GIT_PROJECT_ROOT=" + s.repos, "GIT_HTTP_EXPORT_ALL=1"}, gitEnv()...),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="tenancy-hub lab git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		repo, isPush := strings.CutSuffix(r.URL.Path, "/git-receive-pack")
		if !isPush || r.Method != http.MethodPost {
			backend.ServeHTTP(w, r)
			return
		}
		dir, err := s.repoDir(repo)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		_ = s.push(dir, func() error {
			backend.ServeHTTP(w, r)
			return nil
		})
	})
}

// authorized tells whether the request holds the server's basic auth or its bearer token.
func (s *server) authorized(r *http.Request) bool {
	same := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	if user, password, ok := r.BasicAuth(); ok {
		return same(user, s.creds.Username) && same(password, s.creds.Password)
	}
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return same(token, s.creds.Token)
	}
	return false
}
