package main

// Registries that act against the hub: one redirecting its blobs to another host, to collect the
// platform's credentials there; one whose token service answers without end.

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notaryproject/notation-core-go/signature/jws"
)

// stranger is a TLS server on another host than the registry ([::1], where the registry is on
// 127.0.0.1), trusted through the same CA bundle, recording what reaches it.
type stranger struct {
	server *httptest.Server
	mu     sync.Mutex
	// The Authorization header of every request it was sent, "" where there was none.
	authorizations []string
}

// startStranger serves handler on [::1] with the certificate every test server shares.
func startStranger(t *testing.T, handler http.Handler) *stranger {
	t.Helper()
	listener, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("another host is played on the IPv6 loopback, which is not here: %v", err)
	}
	s := &stranger{}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.authorizations = append(s.authorizations, r.Header.Get("Authorization"))
		s.mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	s.server.Listener.Close()
	s.server.Listener = listener
	s.server.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.server.StartTLS()
	t.Cleanup(s.server.Close)
	return s
}

// seen returns the Authorization headers of the requests so far.
func (s *stranger) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.authorizations...)
}

// redirectBlobs makes the registry answer every blob request with a redirect to the stranger,
// which serves the blob from the registry as its own storage would (a signed URL needs no login).
func redirectBlobs(t *testing.T, reg *testRegistry) *stranger {
	t.Helper()
	registry := reg.server.Config.Handler
	s := startStranger(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.SetBasicAuth(registryUser, registryPassword)
		registry.ServeHTTP(w, r)
	}))
	reg.server.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/sha256:") && r.Method == http.MethodGet {
			http.Redirect(w, r, s.server.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		registry.ServeHTTP(w, r)
	})
	return s
}

// wantNoCredentials fails the test unless the stranger was reached and never got a credential.
func wantNoCredentials(t *testing.T, s *stranger) {
	t.Helper()
	seen := s.seen()
	if len(seen) == 0 {
		t.Fatal("the registry's redirect was not followed: the stranger got no request")
	}
	for _, a := range seen {
		if a != "" {
			t.Fatalf("a credential reached the other host: an Authorization header of %d bytes", len(a))
		}
	}
}

func TestARegistryRedirectingBlobsToAnotherHostGetsNoCredentialsThereCosign(t *testing.T) {
	reg := startRegistry(t)
	key, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	cosignSign(t, reg, "charts/app", digest, digest, key, false)
	s := redirectBlobs(t, reg)

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantVerified(t, got, digest, "key sha256:")
	wantNoCredentials(t, s)
}

func TestARegistryRedirectingBlobsToAnotherHostGetsNoCredentialsThereNotation(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	notationSign(t, reg, "charts/app", digest, ca.issue(t, "charts.lab"), jws.MediaTypeEnvelope)
	s := redirectBlobs(t, reg)

	got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, labSigner))

	wantVerified(t, got, digest, "CN=charts.lab")
	wantNoCredentials(t, s)
}

// endlessTokens makes the registry ask for a bearer token from a service on another host that
// answers with a token that never ends, counting the bytes it managed to send.
func endlessTokens(t *testing.T, reg *testRegistry) *atomic.Int64 {
	t.Helper()
	var sent atomic.Int64
	chunk := []byte(strings.Repeat("A", 64<<10))
	s := startStranger(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write([]byte(`{"token":"`)); err != nil {
			return
		}
		// Bounded so the test ends whatever the client does: 1 GiB, or 60 s.
		deadline := time.Now().Add(60 * time.Second)
		for sent.Load() < 1<<30 && time.Now().Before(deadline) {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	reg.server.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+s.server.URL+`/token",service="charts",scope="repository:charts/app:pull"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
	})
	return &sent
}

// wantCutOff fails the test unless the token service was read no further than the bound on
// every response (with what the sockets buffer on top) and the check ended soon.
func wantCutOff(t *testing.T, got answer, sent *atomic.Int64, took time.Duration) {
	t.Helper()
	t.Logf("answer: %+v %+v", got, got.Error)
	wantError(t, got, errorRegistry)
	if n := sent.Load(); n > maxResponseBody+(16<<20) {
		t.Errorf("the token service sent %d bytes before it was cut off, the bound is %d", n, maxResponseBody)
	}
	if took > 30*time.Second {
		t.Errorf("the check took %s", took)
	}
}

func TestATokenServiceAnsweringWithoutEndIsCutOffCosign(t *testing.T) {
	reg := startRegistry(t)
	_, pub := newCosignKey(t)
	sent := endlessTokens(t, reg)
	digest := "sha256:" + strings.Repeat("ab", 32)
	start := time.Now()

	got := verifyCosign(context.Background(), cosignRequest(reg, digest, pub))

	wantCutOff(t, got, sent, time.Since(start))
}

func TestATokenServiceAnsweringWithoutEndIsCutOffNotation(t *testing.T) {
	reg := startRegistry(t)
	ca := newNotationCA(t, "Lab CA")
	sent := endlessTokens(t, reg)
	digest := "sha256:" + strings.Repeat("ab", 32)
	start := time.Now()

	got := verifyNotation(context.Background(), notationRequest(reg, digest, ca, labSigner))

	wantCutOff(t, got, sent, time.Since(start))
}
