package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
)

func TestTheNewestTagInTheRangeIsPicked(t *testing.T) {
	tags := []string{"v1.0.0", "1.2.0", "v1.10.0", "v2.0.0", "v1.11.0-rc.1", "release-7", "v1.10.0"}
	for _, tc := range []struct{ within, want string }{
		{">=1.0.0 <2.0.0", "v1.10.0"},
		{"~1.2", "1.2.0"},
		{">=2", "v2.0.0"},
		{">=1.11.0-0 <2", "v1.11.0-rc.1"},
		{">=3", ""},
	} {
		c, err := semver.NewConstraint(tc.within)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := newestMatching(tags, c)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.within, got, ok, tc.want)
		}
	}
}

// A repository with a branch, a lightweight tag and annotated tags of three versions.
func taggedRepo(t *testing.T) (*testRepo, map[string]string) {
	repo := newRepo(t)
	commits := map[string]string{}
	for _, v := range []string{"v1.0.0", "v1.2.0", "v2.0.0"} {
		commits[v] = repo.commit(t, map[string]string{"charts/web/Chart.yaml": "version: " + v + "\n"})
		repo.tag(t, v, "release "+v)
	}
	commits["main"] = repo.commit(t, map[string]string{"charts/web/values.yaml": "x: 1\n"})
	repo.tag(t, "light", "")
	return repo, commits
}

func TestResolveAnswersTheCommitOfEachKindOfRef(t *testing.T) {
	repo, commits := taggedRepo(t)
	url := httpGit{user: "deploy", password: "pw-1"}.serveHTTP(t, repo.root)
	auth := &credentials{Username: "deploy", Password: "pw-1"}

	for _, tc := range []struct {
		ref        reference
		commit, to string
	}{
		{reference{Branch: "main"}, commits["main"], "refs/heads/main"},
		{reference{Tag: "v1.2.0"}, commits["v1.2.0"], "refs/tags/v1.2.0"},
		{reference{Tag: "light"}, commits["main"], "refs/tags/light"},
		{reference{Semver: ">=1.0.0 <2.0.0"}, commits["v1.2.0"], "refs/tags/v1.2.0"},
		{reference{Commit: commits["v1.0.0"]}, commits["v1.0.0"], ""},
	} {
		got := ask(t, request{Op: "resolve", URL: url, Ref: tc.ref, Auth: auth})

		ok := wantOk(t, got)
		if ok.Commit != tc.commit || ok.Ref != tc.to {
			t.Errorf("%+v: %s, want %s at %s", tc.ref, show(got), tc.commit, tc.to)
		}
	}
	wantError(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: ">=3"}, Auth: auth}), errorNotFound, `range ">=3"`)
	wantError(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "gone"}, Auth: auth}), errorNotFound, "refs/heads/gone")
	wantError(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: "not a range"}, Auth: auth}), errorRequest, "not a version range")
}

func TestASemverRangePicksOnlyAmongTheTagsItsPatternsAllow(t *testing.T) {
	repo := newRepo(t)
	commits := map[string]string{}
	for _, v := range []string{"v1.2.0", "1.3.0", "v2.0.0"} {
		commits[v] = repo.commit(t, map[string]string{"charts/web/Chart.yaml": "version: " + v + "\n"})
		repo.tag(t, v, "release "+v)
	}
	url := httpGit{user: "deploy", password: "pw-1"}.serveHTTP(t, repo.root)
	auth := &credentials{Username: "deploy", Password: "pw-1"}

	// 1.3.0 is the newest version in the range, but no pattern allows it.
	ok := wantOk(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: ">=1.0.0 <2.0.0", Tags: []string{"v1*", "v1.2.0"}}, Auth: auth}))
	if ok.Commit != commits["v1.2.0"] || ok.Ref != "refs/tags/v1.2.0" {
		t.Errorf("picked %s at %s, want v1.2.0 (%s)", ok.Commit, ok.Ref, commits["v1.2.0"])
	}
	ok = wantOk(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: ">=1.0.0 <2.0.0"}, Auth: auth}))
	if ok.Ref != "refs/tags/1.3.0" {
		t.Errorf("without patterns picked %s, want 1.3.0", ok.Ref)
	}
	wantError(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: ">=1.3.0 <2", Tags: []string{"v*"}}, Auth: auth}), errorNotFound, "allowed by the patterns v*")
	wantError(t, ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main", Tags: []string{"v*"}}, Auth: auth}), errorRequest, "ref.tags")
}

func TestTagPatternsAreExactNamesPrefixesOrEverything(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		tag      string
		want     bool
	}{
		{nil, "anything", true},
		{[]string{"*"}, "v9", true},
		{[]string{"v1.*"}, "v1.2.0", true},
		{[]string{"v1.*"}, "v10.0.0", false},
		{[]string{"v1.2.0"}, "v1.2.0", true},
		{[]string{"v1.2.0"}, "v1.2.0-rc.1", false},
	} {
		if got := tagAllowed(tc.patterns, tc.tag); got != tc.want {
			t.Errorf("%v allows %s: %v, want %v", tc.patterns, tc.tag, got, tc.want)
		}
	}
}

func TestBasicAuthAndBearerTokensOpenTheRepository(t *testing.T) {
	repo, commits := taggedRepo(t)
	url := httpGit{user: "deploy", password: "pw-1", token: "tok-1"}.serveHTTP(t, repo.root)
	main := reference{Branch: "main"}

	for _, auth := range []*credentials{{Username: "deploy", Password: "pw-1"}, {BearerToken: "tok-1"}} {
		ok := wantOk(t, ask(t, request{Op: "resolve", URL: url, Ref: main, Auth: auth}))
		if ok.Commit != commits["main"] {
			t.Errorf("%s", ok.Commit)
		}
	}
	for _, auth := range []*credentials{nil, {Username: "deploy", Password: "wrong-pw"}, {BearerToken: "wrong-tok"}} {
		got := ask(t, request{Op: "resolve", URL: url, Ref: main, Auth: auth})

		wantError(t, got, errorAuth, "refused the credentials")
		if strings.Contains(show(got), "wrong-") {
			t.Errorf("the answer holds the credentials: %s", show(got))
		}
	}
	wantError(t, ask(t, request{Op: "resolve", URL: strings.Replace(url, "charts", "nothing", 1), Ref: main, Auth: &credentials{BearerToken: "tok-1"}}), errorNotFound, "no repository")
}

func TestHTTPSTrustsTheCABundle(t *testing.T) {
	repo, commits := taggedRepo(t)
	url, ca := httpGit{token: "tok-1"}.serveTLS(t, repo.root)
	auth := &credentials{BearerToken: "tok-1"}

	got := ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: auth, CABundle: ca})
	if ok := wantOk(t, got); ok.Commit != commits["main"] {
		t.Errorf("%s", show(got))
	}
	got, out := fetchOver(t, url, commits["main"], []wanted{{Path: "charts/web", Kind: "dir"}}, func(r *request) { r.Auth = auth; r.CABundle = ca })
	wantOk(t, got)
	if _, err := os.Stat(filepath.Join(out, "charts/web/values.yaml")); err != nil {
		t.Error(err)
	}

	got = ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: auth})
	wantError(t, got, errorAuth, "certificate", "caBundle")
}

func TestSSHTakesAKeyAndOnlyKnownHosts(t *testing.T) {
	repo, commits := taggedRepo(t)
	key, signer, _ := sshKeyPair(t)
	url, known := serveSSH(t, repo.root, signer.PublicKey())
	_, _, otherLine := sshKeyPair(t)
	auth := &credentials{SSHPrivateKey: key, KnownHosts: known}

	got := ask(t, request{Op: "resolve", URL: url, Ref: reference{Semver: "^1"}, Auth: auth})
	if ok := wantOk(t, got); ok.Commit != commits["v1.2.0"] {
		t.Errorf("%s", show(got))
	}
	got, out := fetchOver(t, url, commits["main"], []wanted{{Path: "charts/web", Kind: "dir"}}, func(r *request) { r.Auth = auth })
	wantOk(t, got)
	if _, err := os.Stat(filepath.Join(out, "charts/web/Chart.yaml")); err != nil {
		t.Error(err)
	}

	host := url[strings.Index(url, "@")+1:]
	host = host[:strings.Index(host, "/")]
	unknown := "[127.0.0.2]:22 " + otherLine
	got = ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: &credentials{SSHPrivateKey: key, KnownHosts: unknown}})
	wantError(t, got, errorAuth, host, "not in knownHosts")

	changed := known[:strings.Index(known, " ")] + " " + otherLine
	got = ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: &credentials{SSHPrivateKey: key, KnownHosts: changed}})
	wantError(t, got, errorAuth, host)

	otherKey, _, _ := sshKeyPair(t)
	got = ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: &credentials{SSHPrivateKey: otherKey, KnownHosts: known}})
	wantError(t, got, errorAuth, "refused the ssh key")

	got = ask(t, request{Op: "resolve", URL: url, Ref: reference{Branch: "main"}, Auth: &credentials{SSHPrivateKey: key}})
	wantError(t, got, errorAuth, "no knownHosts", "no unknown host is accepted")
}
