package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// zeros is 64 hex digits, the hex of a digest no test pushes.
var zeros = strings.Repeat("0", 64)

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sameJSON fails the test unless two JSON texts hold the same value.
func sameJSON(t *testing.T, what string, a, b []byte) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	if !bytes.Equal(xs, ys) {
		t.Errorf("%s changed in a round trip:\n%s\n%s", what, xs, ys)
	}
}

// Every fixture of testdata/protocol (which the operator's tests read too) is a message this side
// reads and writes back unchanged.
func TestTheProtocolFixturesRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/protocol/*.json")
	if len(files) < 6 {
		t.Fatalf("only %d fixtures", len(files))
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var again []byte
		if strings.HasPrefix(filepath.Base(file), "request-") {
			req, err := readRequest(bytes.NewReader(text))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			again, _ = json.Marshal(req)
		} else {
			var out answer
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&out); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			again, _ = json.Marshal(out)
		}
		sameJSON(t, file, text, again)
	}
}

func TestARequestOfAnotherProtocolSaysToRebuild(t *testing.T) {
	got := run(context.Background(), strings.NewReader(`{"protocol":2,"provenance":{}}`))

	wantError(t, got, errorRequest, "protocol 2", "kind/verifier.sh")
}

func TestARequestHoldsExactlyOneCheck(t *testing.T) {
	for _, text := range []string{`{"protocol":1}`, `{"protocol":1,"provenance":{},"cosign":{}}`} {
		wantError(t, run(context.Background(), strings.NewReader(text)), errorRequest, "exactly one of cosign, notation and provenance")
	}
}

func TestARequestIsBoundedAndStrict(t *testing.T) {
	huge := `{"protocol":1,"cosign":{"reference":"` + strings.Repeat("a", maxRequest) + `"}}`
	wantError(t, run(context.Background(), strings.NewReader(huge)), errorRequest, "over 4194304 bytes")

	wantError(t, run(context.Background(), strings.NewReader(`{"protocol":1,"cosign":{"publicKey":"x"}}`)), errorRequest, "unknown field")
	wantError(t, run(context.Background(), strings.NewReader(`{"protocol":1,"timeoutSeconds":86400,"cosign":{}}`)), errorRequest, "timeoutSeconds")
}

func TestAnAnswerIsOneLineOfJSON(t *testing.T) {
	var out bytes.Buffer
	if err := json.NewEncoder(&out).Encode(refused(refusedUnsigned, "no signature")); err != nil {
		t.Fatal(err)
	}
	if want := `{"protocol":1,"verified":false,"refused":"unsigned","reason":"no signature"}` + "\n"; out.String() != want {
		t.Errorf("got %s", out.String())
	}
}

func TestTheCheckHasADeadline(t *testing.T) {
	reg := startRegistry(t)
	_, pub := newCosignKey(t)
	digest := reg.pushChart(t, "charts/app", "1.0.0", []byte("chart one"))
	// A registry that never answers.
	stuck := make(chan struct{})
	defer close(stuck)
	reg.server.Config.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-stuck })
	req, _ := json.Marshal(request{Protocol: protocolVersion, TimeoutSeconds: 1, Cosign: &cosignCheck{
		Reference: reg.host + "/charts/app", Digest: digest, Registry: reg.access(), PublicKeys: []string{pub},
	}})

	got := run(context.Background(), bytes.NewReader(req))

	wantError(t, got, errorRegistry, "did not finish within 1s")
}

// roundTripper answers every request with one response.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRegistryCallsAreTLSOnlyAndBounded(t *testing.T) {
	body := func(n int, length int64) roundTripper {
		return func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, ContentLength: length, Body: io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("x"), n)))}, nil
		}
	}
	get := func(rt http.RoundTripper, url string) ([]byte, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}

	if _, err := get(bounded{next: body(1, 1), limit: 8}, "http://registry.example/v2/"); err == nil || !strings.Contains(err.Error(), "TLS only") {
		t.Errorf("plain HTTP: %v", err)
	}
	if data, err := get(bounded{next: body(8, -1), limit: 8}, "https://registry.example/v2/"); err != nil || len(data) != 8 {
		t.Errorf("a body of exactly the limit: %d bytes, %v", len(data), err)
	}
	if _, err := get(bounded{next: body(9, -1), limit: 8}, "https://registry.example/v2/"); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a body past the limit, of unknown length: %v", err)
	}
	if _, err := get(bounded{next: body(9, 9), limit: 8}, "https://registry.example/v2/"); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a body past the limit, of known length: %v", err)
	}
}

func TestDockerConfigKeysNameTheirRegistryHost(t *testing.T) {
	creds, err := parseCredentials(`{"auths":{
		"https://index.docker.io/v1/":{"username":"hub","password":"p1"},
		"https://registry.example:5000":{"auth":"dXNlcjpwMg=="},
		"ghcr.io/owner":{"identitytoken":"refresh"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"index.docker.io": "hub", "docker.io": "hub", "registry.example:5000": "user"} {
		entry, ok, err := creds.lookup(host)
		if err != nil || !ok || entry.Username != want {
			t.Errorf("%s: %+v %v %v", host, entry, ok, err)
		}
	}
	if entry, _, _ := creds.lookup("ghcr.io"); entry.IdentityToken != "refresh" {
		t.Errorf("ghcr.io: %+v", entry)
	}
	if _, ok, err := creds.lookup("elsewhere.example"); ok || err != nil {
		t.Errorf("a registry the config does not name is reached anonymously: %v %v", ok, err)
	}
	if _, err := parseCredentials(`{"auths": "registry.example:5000 user:s3cret"}`); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a config that does not parse: %v", err)
	}
}

func TestAReferenceIsARepositoryAndASha256Digest(t *testing.T) {
	for _, tc := range []struct{ reference, digest, words string }{
		{"https://registry.example/charts/app", "sha256:" + zeros, "without scheme"},
		{"registry.example/charts/app@sha256:" + zeros, "sha256:" + zeros, "without scheme or digest"},
		{"registry.example/charts/app", "sha512:" + zeros, "sha256:<64 hex digits>"},
		{"registry.example/charts/app", "latest", "sha256:<64 hex digits>"},
		{"registry.example/Charts/App", "sha256:" + zeros, "not an OCI repository"},
	} {
		if _, _, err := artifactDigest(tc.reference, tc.digest); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s@%s: %v", tc.reference, tc.digest, err)
		}
	}
	ref, h, err := artifactDigest("registry.example:5000/charts/app", "sha256:"+zeros)
	if err != nil || ref.String() != "registry.example:5000/charts/app@sha256:"+zeros || h.Hex != zeros {
		t.Errorf("%v %v %v", ref, h, err)
	}
}
