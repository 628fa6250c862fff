package main

// The HTTP client of the smart HTTP transport: the system's roots plus the request's caBundle, and
// every response body bounded (go-git reads an error page whole).

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// resolveBodyLimit bounds what one HTTP response of a resolve may hold (the advertised refs).
const resolveBodyLimit = 32 << 20

// errBodyTooBig is a response past its bound.
var errBodyTooBig = errors.New("the server's answer is over the limit")

// installHTTP makes go-git's http and https transports use a client trusting caBundle (besides
// the system's roots) whose response bodies stop at limit bytes. The program answers one request,
// so the transport registry go-git keeps is this request's.
func installHTTP(caBundle []byte, limit int64) error {
	base := http.DefaultTransport.(*http.Transport).Clone()
	if len(caBundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caBundle) {
			return fail(errorRequest, "caBundle holds no PEM certificate; give the CA of the server")
		}
		base.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	httpClient := &http.Client{Transport: boundedTransport{next: base, limit: limit}}
	transport := githttp.NewClient(httpClient)
	client.InstallProtocol("http", transport)
	client.InstallProtocol("https", transport)
	return nil
}

// boundedTransport cuts every response body at limit bytes.
type boundedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (b boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > b.limit {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %d bytes, over %d", errBodyTooBig, resp.ContentLength, b.limit)
	}
	resp.Body = &boundedBody{next: resp.Body, left: b.limit}
	return resp, nil
}

// boundedBody reads a body until its bound, then fails.
type boundedBody struct {
	next io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.next.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: more than the bound", errBodyTooBig)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.next.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.next.Close() }
