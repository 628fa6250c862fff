package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
// reads and writes back unchanged, and there is one of each kind.
func TestTheProtocolFixturesRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/protocol/*.json")
	kinds := map[string]bool{}
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
			kinds[req.Op] = true
			for _, k := range []string{req.Ref.Branch, req.Ref.Tag, req.Ref.Semver, req.Ref.Commit} {
				if k != "" {
					kinds["ref "+k[:1]] = true
				}
			}
			again, _ = json.Marshal(req)
		} else {
			var out answer
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&out); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			switch {
			case out.Ok != nil && out.Ok.Paths != nil:
				kinds["fetched"] = true
			case out.Ok != nil:
				kinds["resolved"] = true
			case out.Refused != nil:
				kinds["refused"] = true
			case out.Error != nil:
				kinds["error"] = true
			}
			again, _ = json.Marshal(out)
		}
		sameJSON(t, file, text, again)
	}
	if len(kinds) != 10 {
		t.Errorf("the fixtures miss a kind of message: %v", kinds)
	}
}

func TestARequestIsBoundedAndStrict(t *testing.T) {
	huge := `{"protocol":1,"op":"resolve","url":"` + strings.Repeat("a", maxRequest) + `"}`
	wantError(t, run(context.Background(), strings.NewReader(huge)), errorRequest, "over 4194304 bytes")
	wantError(t, run(context.Background(), strings.NewReader(`{"protocol":1,"op":"resolve","depth":3}`)), errorRequest, "unknown field")
	wantError(t, run(context.Background(), strings.NewReader(`{"protocol":2,"op":"resolve"}`)), errorRequest, "protocol 2", "kind/git.sh")
	base := request{Op: "resolve", URL: "https://git.example/team/charts.git", Ref: reference{Branch: "main"}}
	for _, tc := range []struct {
		change func(*request)
		kind   string
		words  string
	}{
		{func(r *request) { r.TimeoutSeconds = 601 }, errorRequest, "timeoutSeconds"},
		{func(r *request) { r.Op = "clone" }, errorRequest, "op must be resolve or fetch"},
		{func(r *request) { r.Ref = reference{Branch: "main", Tag: "v1"} }, errorRequest, "exactly one of branch"},
		{func(r *request) { r.Ref = reference{Commit: "abc"} }, errorRequest, "40 lowercase hex"},
		{func(r *request) { r.URL = "git@git.example:team/charts.git" }, errorUnsupported, "ssh://"},
		{func(r *request) { r.URL = "file:///etc" }, errorUnsupported, "not an http, https or ssh url"},
		{func(r *request) { r.URL = "git://git.example/x.git" }, errorUnsupported, "scheme"},
		{func(r *request) { r.URL = "https://user:pw@git.example/x.git" }, errorRequest, "give them in auth"},
		{func(r *request) { r.CABundle = "x"; r.URL = "http://git.example/x.git" }, errorRequest, "https only"},
		{func(r *request) { r.Auth = &credentials{BearerToken: "t", Password: "p"} }, errorRequest, "give one"},
		{func(r *request) { r.URL = "ssh://git@git.example/x.git" }, errorAuth, "no sshPrivateKey"},
		{func(r *request) { r.Out = "/tmp" }, errorRequest, "fetch"},
	} {
		req := base
		tc.change(&req)
		wantError(t, ask(t, req), tc.kind, tc.words)
	}
	fetch := request{Op: "fetch", URL: base.URL, Commit: strings.Repeat("a", 40), Out: t.TempDir(), Paths: []wanted{{Path: "c", Kind: "dir"}}}
	for _, tc := range []struct {
		change func(*request)
		words  string
	}{
		{func(r *request) { r.Commit = "main" }, "resolve the ref first"},
		{func(r *request) { r.Out = "relative" }, "absolute"},
		{func(r *request) { r.Paths = nil }, "at least one path"},
		{func(r *request) { r.Paths = []wanted{{Path: "c", Kind: "tree"}} }, "kind is dir or file"},
		{func(r *request) { r.Verify = &trust{} }, "exactly one of pgpKeys and sshKeys"},
		{func(r *request) { r.MaxBytes = -1 }, "maxBytes"},
	} {
		req := fetch
		tc.change(&req)
		wantError(t, ask(t, req), errorRequest, tc.words)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	req := fetch
	req.Out = full
	wantError(t, ask(t, req), errorRequest, "not empty")
}

func TestAnOperationHasADeadline(t *testing.T) {
	stuck := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-stuck }))
	defer server.Close()
	defer close(stuck)

	got := ask(t, request{Op: "resolve", URL: server.URL + "/x.git", Ref: reference{Branch: "main"}, TimeoutSeconds: 1})

	wantError(t, got, errorNetwork, "did not finish within 1s")
}

// A server that echoes what it was sent in its error page: the answer says what failed, without
// the credentials.
func TestCredentialsNeverReachAnAnswer(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "who are you, "+r.Header.Get("Authorization")+"?", http.StatusUnauthorized)
	}))
	defer server.Close()
	for _, auth := range []*credentials{
		{Username: "deploy-user", Password: "s3cret-password"},
		{BearerToken: "s3cret-token"},
	} {
		got := ask(t, request{Op: "resolve", URL: server.URL + "/x.git", Ref: reference{Branch: "main"}, Auth: auth})

		text := show(got)
		if got.Error == nil {
			t.Fatalf("want an error, got %s", text)
		}
		for _, secret := range []string{"deploy-user", "s3cret", "ZGVwbG95"} {
			if strings.Contains(text, secret) {
				t.Errorf("the answer holds %q: %s", secret, text)
			}
		}
	}
	got := masked(answer{Error: &failure{Message: "user u1 with pw p1"}}, []string{"u1", "p1", ""})
	if got.Error.Message != "user *** with pw ***" {
		t.Errorf("masked: %q", got.Error.Message)
	}
}
