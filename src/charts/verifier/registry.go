package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Bounds of every registry call.
const (
	dialTimeout     = 10 * time.Second
	tlsTimeout      = 10 * time.Second
	headerTimeout   = 20 * time.Second
	maxHeaderBytes  = 64 << 10
	maxResponseBody = 4 << 20
)

// registryAccess is how to reach an OCI registry: the platform team's credentials and CA, inline.
type registryAccess struct {
	// A docker config (config.json) whose "auths" hold the registry's credentials, by host.
	// Credential helpers (credsStore, credHelpers) are not run.
	DockerConfig string `json:"dockerConfig,omitempty"`
	// PEM CA certificates the registry's TLS certificate must chain to, in place of the system's.
	CABundle string `json:"caBundle,omitempty"`
}

// dockerConfig is what a docker config holds that the verifier reads.
type dockerConfig struct {
	Auths       map[string]authn.AuthConfig `json:"auths"`
	CredsStore  string                      `json:"credsStore"`
	CredHelpers map[string]string           `json:"credHelpers"`
}

// credentials are the registry credentials of a docker config, by registry host (host[:port]).
type credentials struct {
	byHost map[string]authn.AuthConfig
	// The config names a credential helper, which is not run.
	helpers bool
}

// parseCredentials reads a docker config; its content never appears in an error.
func parseCredentials(text string) (credentials, error) {
	creds := credentials{byHost: map[string]authn.AuthConfig{}}
	if strings.TrimSpace(text) == "" {
		return creds, nil
	}
	var config dockerConfig
	if err := json.Unmarshal([]byte(text), &config); err != nil {
		return creds, errors.New("the docker config is not valid JSON of a config.json with \"auths\"; write it as `docker login` or `kubectl create secret docker-registry` does")
	}
	for key, entry := range config.Auths {
		creds.byHost[registryHost(key)] = entry
	}
	creds.helpers = config.CredsStore != "" || len(config.CredHelpers) > 0
	return creds, nil
}

// registryHost is the host[:port] of a docker config key: `host`, `https://host/v1/` and the like.
// Docker Hub's names are one.
func registryHost(key string) string {
	host := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, _, _ = strings.Cut(host, "/")
	switch host {
	case "docker.io", "registry-1.docker.io":
		return "index.docker.io"
	}
	return host
}

// lookup returns the credentials of a registry host, or none (anonymous access).
func (c credentials) lookup(host string) (authn.AuthConfig, bool, error) {
	entry, ok := c.byHost[registryHost(host)]
	if !ok && c.helpers {
		return entry, false, fmt.Errorf("the docker config names a credential helper for %s, which the verifier does not run; put the registry's credentials under \"auths\"", host)
	}
	return entry, ok, nil
}

// Resolve makes credentials a go-containerregistry keychain (cosign's registry client).
func (c credentials) Resolve(target authn.Resource) (authn.Authenticator, error) {
	entry, ok, err := c.lookup(target.RegistryStr())
	if err != nil || !ok {
		return authn.Anonymous, err
	}
	return authn.FromConfig(entry), nil
}

// credential makes credentials an oras credential function (Notation's registry client).
func (c credentials) credential(_ context.Context, hostport string) (auth.Credential, error) {
	entry, ok, err := c.lookup(hostport)
	if err != nil || !ok {
		return auth.EmptyCredential, err
	}
	return auth.Credential{
		Username:     entry.Username,
		Password:     entry.Password,
		RefreshToken: entry.IdentityToken,
		AccessToken:  entry.RegistryToken,
	}, nil
}

// open reads what reaching the registry takes: the credentials of its docker config and a
// transport trusting its CA bundle.
func (a registryAccess) open() (credentials, http.RoundTripper, error) {
	creds, err := parseCredentials(a.DockerConfig)
	if err != nil {
		return credentials{}, nil, err
	}
	transport, err := newTransport(a.CABundle)
	if err != nil {
		return credentials{}, nil, err
	}
	return creds, transport, nil
}

// newTransport is the HTTP transport of every registry call: TLS only, verified against the CA
// bundle when one is given (else the system's roots), with a timeout on each step and every
// response body bounded.
func newTransport(caBundle string) (http.RoundTripper, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if strings.TrimSpace(caBundle) != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caBundle)) {
			return nil, errors.New("the registry's CA bundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	base := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    tlsTimeout,
		ResponseHeaderTimeout:  headerTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4,
		IdleConnTimeout:        30 * time.Second,
	}
	return bounded{next: base, limit: maxResponseBody}, nil
}

// bounded refuses plain HTTP (a registry's credentials go over TLS only) and bounds the body of
// every response.
type bounded struct {
	next  http.RoundTripper
	limit int64
}

func (b bounded) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("refusing plain HTTP to %s: registries are reached over TLS only", req.URL.Host)
	}
	resp, err := b.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > b.limit {
		resp.Body.Close()
		return nil, fmt.Errorf("%s answered %s with %d bytes, over the limit of %d", req.URL.Host, req.URL.Path, resp.ContentLength, b.limit)
	}
	resp.Body = &limitedBody{body: resp.Body, left: b.limit, limit: b.limit, host: req.URL.Host}
	return resp, nil
}

// limitedBody fails a read past its limit instead of truncating silently.
type limitedBody struct {
	body        io.ReadCloser
	left, limit int64
	host        string
	// The body ended exactly at the limit.
	ended bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.ended {
		return 0, io.EOF
	}
	if l.left <= 0 {
		return 0, fmt.Errorf("a response of %s is over the limit of %d bytes", l.host, l.limit)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.body.Read(p)
	l.left -= int64(n)
	if l.left <= 0 && err == nil {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		m, probe := l.body.Read(one[:])
		if m > 0 {
			return n, fmt.Errorf("a response of %s is over the limit of %d bytes", l.host, l.limit)
		}
		l.ended = errors.Is(probe, io.EOF)
		if l.ended {
			return n, io.EOF
		}
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.body.Close() }

// statusOf is the HTTP status of the registry's answer that failed, where the client kept it
// (go-containerregistry's and oras' errors), else 0.
func statusOf(err error) int {
	var ggcr *transport.Error
	if errors.As(err, &ggcr) {
		return ggcr.StatusCode
	}
	var oras *errcode.ErrorResponse
	if errors.As(err, &oras) {
		return oras.StatusCode
	}
	return 0
}

// registryError says what to do about a failed registry call, without the credentials (which no
// client puts in its errors) or anything the registry sent beyond its error codes. The status
// is the client's where it kept it; otherwise words of the error say it, never a bare number,
// which a digest or a port in the same text may hold.
func registryError(reference string, err error) answer {
	text := err.Error()
	status := statusOf(err)
	says := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(text, w) {
				return true
			}
		}
		return false
	}
	switch {
	case says("certificate signed by unknown authority", "x509:", "tls:"):
		return failed(errorRegistry, "the TLS certificate of %s is not trusted (%v); give the source its CA bundle", reference, err)
	case status == http.StatusUnauthorized,
		status == 0 && says("401 Unauthorized", "UNAUTHORIZED", "unauthorized"):
		return failed(errorRegistry, "%s refused the credentials (401); check the source's docker config", reference)
	case status == http.StatusForbidden,
		status == 0 && says("403 Forbidden", "DENIED", "denied"):
		return failed(errorRegistry, "%s denied access (403); give the source's credentials pull access to the repository", reference)
	}
	return failed(errorRegistry, "reading the signatures of %s failed: %v; check that the registry is reachable", reference, err)
}
