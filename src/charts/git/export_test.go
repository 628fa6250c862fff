package main

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// chartFiles is a small chart in charts/web with values files beside it.
var chartFiles = map[string]string{
	"charts/web/Chart.yaml":                "apiVersion: v2\nname: web\nversion: 1.0.0\n",
	"charts/web/values.yaml":               "replicas: 1\n",
	"charts/web/templates/deployment.yaml": "kind: Deployment\n",
	"values/member-1.yaml":                 "replicas: 2\n",
	"README.md":                            "not exported\n",
}

// fetchOver asks for paths of commit from url with the fetch fields set, into a new directory.
func fetchOver(t *testing.T, url, commit string, paths []wanted, change ...func(*request)) (answer, string) {
	t.Helper()
	out := t.TempDir()
	req := request{Op: "fetch", URL: url, Ref: reference{Branch: "main"}, Commit: commit, Out: out, Paths: paths}
	for _, c := range change {
		c(&req)
	}
	return ask(t, req), out
}

// files lists what is under dir: relative path → content.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			got[filepath.ToSlash(rel)] = string(data)
		} else if !d.IsDir() {
			t.Errorf("%s is neither a file nor a directory", p)
		}
		return nil
	})
	return got
}

var chartPaths = []wanted{{Path: "charts/web", Kind: "dir"}, {Path: "values/member-1.yaml", Kind: "file"}, {Path: "values/member-9.yaml", Kind: "file", Optional: true}}

func TestAFetchWritesTheDirsAndFilesOfTheCommitOnly(t *testing.T) {
	repo := newRepo(t)
	commit := repo.commit(t, chartFiles)
	repo.write(t, map[string]string{"charts/web/run.sh": "#!/bin/sh\n"})
	os.Chmod(filepath.Join(repo.work, "charts/web/run.sh"), 0o755)
	executable := repo.commit(t, nil)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, commit, chartPaths)

	ok := wantOk(t, got)
	if ok.Commit != commit || ok.Ref != "refs/heads/main" || len(ok.Paths) != 3 || !ok.Paths[0].Written || !ok.Paths[1].Written || ok.Paths[2].Written {
		t.Errorf("answer: %s", show(got))
	}
	want := map[string]string{}
	for k, v := range chartFiles {
		if k != "README.md" {
			want[k] = v
		}
	}
	if have := files(t, out); len(have) != len(want) {
		t.Errorf("written: %v", have)
	} else {
		for k, v := range want {
			if have[k] != v {
				t.Errorf("%s: %q, want %q", k, have[k], v)
			}
		}
	}

	got, out = fetchOver(t, url, executable, chartPaths[:1])

	wantOk(t, got)
	for name, mode := range map[string]os.FileMode{"charts/web/run.sh": 0o755, "charts/web/values.yaml": 0o644} {
		info, err := os.Stat(filepath.Join(out, name))
		if err != nil || info.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", name, info.Mode(), err, mode)
		}
	}
}

// A server that gives no commit by id: the fetch takes the ref that points at it, or at last
// every branch and tag (an older commit of main).
func TestACommitIsFetchedWhereTheServerGivesNoCommitById(t *testing.T) {
	repo := newRepo(t)
	older := repo.commit(t, chartFiles)
	tip := repo.commit(t, map[string]string{"charts/web/values.yaml": "replicas: 3\n"})
	url := httpGit{byID: false}.serveHTTP(t, repo.root)

	for commit, replicas := range map[string]string{tip: "3", older: "1"} {
		got, out := fetchOver(t, url, commit, chartPaths[:1])

		wantOk(t, got)
		if data, _ := os.ReadFile(filepath.Join(out, "charts/web/values.yaml")); string(data) != "replicas: "+replicas+"\n" {
			t.Errorf("commit %s: values %q", commit, data)
		}
	}
	got, _ := fetchOver(t, url, strings.Repeat("1", 40), chartPaths[:1])

	wantError(t, got, errorNotFound, strings.Repeat("1", 40))
}

func TestMissingPathsAreNotFound(t *testing.T) {
	repo := newRepo(t)
	commit := repo.commit(t, chartFiles)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, _ := fetchOver(t, url, commit, []wanted{{Path: "values/member-9.yaml", Kind: "file"}})
	wantError(t, got, errorNotFound, "values/member-9.yaml", "optional")

	got, _ = fetchOver(t, url, commit, []wanted{{Path: "charts/api", Kind: "dir"}})
	wantError(t, got, errorNotFound, "charts/api")

	got, _ = fetchOver(t, url, commit, []wanted{{Path: "charts/web", Kind: "file"}})
	wantRefused(t, got, refusedPath, "not a file")
}

func TestPathsLeavingTheRepositoryAreRefused(t *testing.T) {
	repo := newRepo(t)
	commit := repo.commit(t, chartFiles)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	for _, p := range []string{"../charts/web", "charts/../../etc", "/etc/passwd", ".."} {
		got, out := fetchOver(t, url, commit, []wanted{{Path: p, Kind: "dir"}})

		wantRefused(t, got, refusedPath, p)
		if have := files(t, out); len(have) != 0 {
			t.Errorf("%s wrote %v", p, have)
		}
	}
	if clean, err := cleanPath("charts/./web/"); err != nil || clean != "charts/web" {
		t.Errorf("a path is cleaned: %q %v", clean, err)
	}
}

func TestSymlinksAreCopiedInsideTheirDirAndRefusedOutside(t *testing.T) {
	repo := newRepo(t)
	tree := map[string]string{"charts/web/templates/shared.yaml": "-> ../values.yaml", "values/link.yaml": "-> member-1.yaml"}
	for k, v := range chartFiles {
		tree[k] = v
	}
	inside := repo.commit(t, tree)
	outside := repo.commit(t, map[string]string{"charts/web/templates/secret.yaml": "-> ../../../values/member-1.yaml"})
	escaping := repo.commit(t, map[string]string{"charts/web/templates/secret.yaml": "-> ../../../../../etc/passwd", "values/escape.yaml": "-> ../../x"})
	toDir := repo.commit(t, map[string]string{"charts/web/templates/secret.yaml": "-> ../templates"})
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, inside, []wanted{{Path: "charts/web", Kind: "dir"}, {Path: "values/link.yaml", Kind: "file"}})

	wantOk(t, got)
	for name, want := range map[string]string{"charts/web/templates/shared.yaml": "replicas: 1\n", "values/link.yaml": "replicas: 2\n"} {
		info, err := os.Lstat(filepath.Join(out, name))
		data, _ := os.ReadFile(filepath.Join(out, name))
		if err != nil || !info.Mode().IsRegular() || string(data) != want {
			t.Errorf("%s: %v %v %q", name, info, err, data)
		}
	}

	got, _ = fetchOver(t, url, outside, chartPaths[:1])
	wantRefused(t, got, refusedSymlink, "charts/web/templates/secret.yaml", "outside charts/web")

	got, _ = fetchOver(t, url, escaping, chartPaths[:1])
	wantRefused(t, got, refusedSymlink, "outside charts/web")

	got, _ = fetchOver(t, url, escaping, []wanted{{Path: "values/escape.yaml", Kind: "file"}})
	wantRefused(t, got, refusedSymlink, "outside the repository")

	got, _ = fetchOver(t, url, toDir, chartPaths[:1])
	wantRefused(t, got, refusedSymlink, "directory")
}

func TestASubmoduleIsRefused(t *testing.T) {
	repo := newRepo(t)
	repo.commit(t, chartFiles)
	gitRun(t, repo.work, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("ab", 20)+",charts/web/charts/evil")
	gitRun(t, repo.work, "commit", "-q", "-m", "submodule")
	gitRun(t, repo.work, "push", "-q", repo.bare, "HEAD:refs/heads/main")
	commit := gitRun(t, repo.work, "rev-parse", "HEAD")
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, _ := fetchOver(t, url, commit, chartPaths[:1])

	wantRefused(t, got, refusedSubmodule, "charts/web/charts/evil")
}

func TestFileDependenciesOfAChartComeAlong(t *testing.T) {
	repo := newRepo(t)
	tree := map[string]string{
		"charts/web/Chart.yaml":  "apiVersion: v2\nname: web\nversion: 1.0.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../../libs/lib\n- name: redis\n  version: 1.0.0\n  repository: https://charts.example\n",
		"libs/lib/Chart.yaml":    "apiVersion: v2\nname: lib\nversion: 0.1.0\ntype: library\ndependencies:\n- name: base\n  repository: file://../base\n",
		"libs/lib/templates/x":   "x\n",
		"libs/base/Chart.yaml":   "apiVersion: v2\nname: base\nversion: 0.1.0\n",
		"libs/unused/Chart.yaml": "apiVersion: v2\nname: unused\nversion: 0.1.0\n",
	}
	commit := repo.commit(t, tree)
	escaping := repo.commit(t, map[string]string{"libs/base/Chart.yaml": "apiVersion: v2\nname: base\nversion: 0.1.0\ndependencies:\n- name: out\n  repository: file://../../../elsewhere\n"})
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, commit, chartPaths[:1])

	wantOk(t, got)
	have := files(t, out)
	for _, name := range []string{"charts/web/Chart.yaml", "libs/lib/Chart.yaml", "libs/lib/templates/x", "libs/base/Chart.yaml"} {
		if _, ok := have[name]; !ok {
			t.Errorf("%s is not written: %v", name, have)
		}
	}
	if _, ok := have["libs/unused/Chart.yaml"]; ok {
		t.Errorf("a chart no one depends on is written")
	}

	got, _ = fetchOver(t, url, escaping, chartPaths[:1])

	wantRefused(t, got, refusedPath, "dependency out", "outside the repository")
}

func TestMaxBytesBoundsThePackAndTheFilesWritten(t *testing.T) {
	repo := newRepo(t)
	random := make([]byte, 256<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	big := repo.commit(t, map[string]string{"charts/web/Chart.yaml": "name: web\n", "charts/web/blob": string(random)})
	// Zeros pack into a few hundred bytes and are written as 1 MiB.
	bomb := repo.commit(t, map[string]string{"charts/web/blob": strings.Repeat("\x00", 1<<20)})
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, big, chartPaths[:1], func(r *request) { r.MaxBytes = 64 << 10 })
	wantRefused(t, got, refusedSize, "maxBytes")
	if have := files(t, out); len(have) != 0 {
		t.Errorf("a refused fetch wrote %v", have)
	}

	got, _ = fetchOver(t, url, bomb, chartPaths[:1], func(r *request) { r.MaxBytes = 256 << 10 })
	wantRefused(t, got, refusedSize, "charts/web/blob", "maxBytes")

	got, _ = fetchOver(t, url, big, chartPaths[:1], func(r *request) { r.MaxBytes = 4 << 20 })
	wantOk(t, got)
}

// A tree made by hand (git mktree takes any name) with an entry "..": no checkout writes it, nor
// does the export, which would land outside the dir.
func TestATreeEntryNoCheckoutCouldWriteIsRefused(t *testing.T) {
	repo := newRepo(t)
	repo.commit(t, chartFiles)
	mktree := func(lines string) string {
		cmd := exec.Command("git", "mktree")
		cmd.Dir, cmd.Env, cmd.Stdin = repo.work, gitEnv(repo.work), strings.NewReader(lines)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git mktree: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	chart := gitRun(t, repo.work, "rev-parse", "HEAD:charts/web/Chart.yaml")
	evil := mktree("100644 blob " + chart + "\tevil\n")
	web := mktree("100644 blob " + chart + "\tChart.yaml\n040000 tree " + evil + "\t..\n")
	charts := mktree("040000 tree " + web + "\tweb\n")
	root := mktree("040000 tree " + charts + "\tcharts\n")
	commit := gitRun(t, repo.work, "commit-tree", root, "-m", "hostile")
	gitRun(t, repo.work, "push", "-q", repo.bare, "+"+commit+":refs/heads/main")
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, commit, chartPaths[:1])

	wantRefused(t, got, refusedPath, `".."`)
	if _, err := os.Stat(filepath.Join(out, "charts/evil")); err == nil {
		t.Errorf("the entry was written outside the dir")
	}
}

// Only the commit is fetched, not its history: a big file of an older commit is not received.
func TestAFetchIsShallow(t *testing.T) {
	repo := newRepo(t)
	random := make([]byte, 512<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	repo.commit(t, map[string]string{"charts/web/Chart.yaml": "name: web\n", "charts/web/big": string(random)})
	os.Remove(filepath.Join(repo.work, "charts/web/big"))
	small := repo.commit(t, nil)
	url := httpGit{byID: true}.serveHTTP(t, repo.root)

	got, out := fetchOver(t, url, small, chartPaths[:1], func(r *request) { r.MaxBytes = 64 << 10 })

	wantOk(t, got)
	if have := files(t, out); len(have) != 1 {
		t.Errorf("written: %v", have)
	}
}
