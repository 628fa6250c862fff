package main

// The export: the requested paths of one commit written under out, bounded and checked: clean
// relative paths, symlinks followed only where they stay inside, no submodule, the file://
// dependencies of a chart brought along.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"sigs.k8s.io/yaml"
)

const (
	// maxLinkHops bounds a chain of symlinks (as the kernel's ELOOP does).
	maxLinkHops = 40
	// maxChartYAML bounds the Chart.yaml read for its dependencies.
	maxChartYAML = 1 << 20
)

// exporter writes the paths of one commit under out, within the budget.
type exporter struct {
	ctx   context.Context
	store storer.EncodedObjectStorer
	root  *object.Tree
	out   string
	// What is left to write.
	bytesLeft int64
	filesLeft int
	// Files already written and dirs already exported (repository paths).
	files map[string]bool
	dirs  map[string]bool
}

// export writes the job's paths of the commit under its out directory.
func export(ctx context.Context, store storer.EncodedObjectStorer, commit *object.Commit, job fetchJob) ([]written, error) {
	root, err := commit.Tree()
	if err != nil {
		return nil, fail(errorNotFound, "the tree of commit %s is missing: %v", commit.Hash, err)
	}
	e := &exporter{ctx: ctx, store: store, root: root, out: job.out, bytesLeft: job.maxBytes, filesLeft: maxFiles,
		files: map[string]bool{}, dirs: map[string]bool{}}
	var answers []written
	for _, want := range job.paths {
		clean, err := cleanPath(want.Path)
		if err != nil {
			return nil, err
		}
		ok := true
		if want.Kind == "dir" {
			err = e.chart(clean)
		} else {
			ok, err = e.file(clean, want.Optional)
		}
		if err != nil {
			return nil, err
		}
		answers = append(answers, written{Path: want.Path, Written: ok})
	}
	return answers, nil
}

// cleanPath is a requested path cleaned, refused when absolute or escaping with "..".
func cleanPath(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", refuse(refusedPath, "path %q is empty or holds a NUL byte", p)
	}
	if strings.HasPrefix(p, "/") || filepath.IsAbs(p) {
		return "", refuse(refusedPath, "path %q is absolute; paths are relative to the repository's root", p)
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", refuse(refusedPath, "path %q leaves the repository", p)
	}
	return clean, nil
}

// inside tells whether p is dir or under it (dir "." holds everything).
func inside(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

// entry finds the tree entry at p ("." is the root tree).
func (e *exporter) entry(p string) (*object.TreeEntry, error) {
	if p == "." {
		return &object.TreeEntry{Name: ".", Mode: filemode.Dir, Hash: e.root.Hash}, nil
	}
	return e.root.FindEntry(p)
}

// follow resolves the symlinks of p, each hop staying inside within: the final path and entry.
func (e *exporter) follow(p string, ent *object.TreeEntry, within string) (string, *object.TreeEntry, error) {
	for hops := 0; ent.Mode == filemode.Symlink; hops++ {
		if hops == maxLinkHops {
			return "", nil, refuse(refusedSymlink, "symlink %s goes through more than %d links", p, maxLinkHops)
		}
		target, err := e.linkTarget(ent)
		if err != nil {
			return "", nil, err
		}
		if path.IsAbs(target) {
			return "", nil, refuse(refusedSymlink, "symlink %s points at the absolute path %s", p, target)
		}
		next := path.Join(path.Dir(p), target)
		if next == ".." || strings.HasPrefix(next, "../") || !inside(next, within) {
			where := "the repository"
			if within != "." {
				where = within
			}
			return "", nil, refuse(refusedSymlink, "symlink %s points at %s, outside %s", p, target, where)
		}
		p = next
		if ent, err = e.entry(p); err != nil {
			return "", nil, refuse(refusedSymlink, "symlink %s points at %s, which is not in the commit", p, target)
		}
	}
	return p, ent, nil
}

// linkTarget reads a symlink's target, bounded.
func (e *exporter) linkTarget(ent *object.TreeEntry) (string, error) {
	blob, err := object.GetBlob(e.store, ent.Hash)
	if err != nil {
		return "", fail(errorNotFound, "the target of symlink %s is missing: %v", ent.Name, err)
	}
	data, err := readBlob(blob, 4096)
	if err != nil {
		return "", refuse(refusedSymlink, "symlink %s: %v", ent.Name, err)
	}
	return string(data), nil
}

// file writes one file path: a regular file, symlinks followed within the repository.
func (e *exporter) file(p string, optional bool) (bool, error) {
	ent, err := e.entry(p)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		if optional {
			return false, nil
		}
		return false, fail(errorNotFound, "file %s is not in the commit; add it, or mark it optional", p)
	}
	if err != nil {
		return false, fail(errorNotFound, "file %s: %v", p, err)
	}
	_, target, err := e.follow(p, ent, ".")
	if err != nil {
		return false, err
	}
	switch {
	case target.Mode == filemode.Submodule:
		return false, refuse(refusedSubmodule, "%s is a submodule, not a file", p)
	case !target.Mode.IsFile():
		return false, refuse(refusedPath, "%s is a directory, not a file", p)
	}
	return true, e.write(p, target)
}

// chart exports a dir and, when it holds a Chart.yaml, its file:// dependencies, recursively.
func (e *exporter) chart(dir string) error {
	if e.dirs[dir] {
		return nil
	}
	if err := e.dir(dir); err != nil {
		return err
	}
	e.dirs[dir] = true
	deps, err := e.fileDependencies(dir)
	if err != nil {
		return err
	}
	for _, dep := range deps {
		if err := e.chart(dep); err != nil {
			return err
		}
	}
	return nil
}

// fileDependencies are the repository paths of the file:// dependencies of dir's Chart.yaml.
func (e *exporter) fileDependencies(dir string) ([]string, error) {
	name := path.Join(dir, "Chart.yaml")
	ent, err := e.entry(name)
	if err != nil {
		return nil, nil
	}
	if _, ent, err = e.follow(name, ent, dir); err != nil || !ent.Mode.IsFile() {
		return nil, err
	}
	blob, err := object.GetBlob(e.store, ent.Hash)
	if err != nil {
		return nil, fail(errorNotFound, "%s is missing: %v", name, err)
	}
	data, err := readBlob(blob, maxChartYAML)
	if err != nil {
		return nil, refuse(refusedSize, "%s: %v", name, err)
	}
	var chart struct {
		Dependencies []struct {
			Name       string `json:"name"`
			Repository string `json:"repository"`
		} `json:"dependencies"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		// Helm reports a broken Chart.yaml with its own words, later.
		return nil, nil
	}
	var deps []string
	for _, dep := range chart.Dependencies {
		rel, isFile := strings.CutPrefix(dep.Repository, "file://")
		if !isFile {
			continue
		}
		target := path.Join(dir, rel)
		if path.IsAbs(rel) || target == ".." || strings.HasPrefix(target, "../") {
			return nil, refuse(refusedPath, "dependency %s of %s is at %s, outside the repository", dep.Name, name, dep.Repository)
		}
		deps = append(deps, target)
	}
	return deps, nil
}

// dir writes every file under dir, refusing symlinks out of it and submodules.
func (e *exporter) dir(dir string) error {
	ent, err := e.entry(dir)
	if err != nil {
		return fail(errorNotFound, "directory %s is not in the commit; check the path", dir)
	}
	if ent.Mode != filemode.Dir {
		return fail(errorNotFound, "%s is not a directory in the commit; check the path and its kind", dir)
	}
	tree, err := object.GetTree(e.store, ent.Hash)
	if err != nil {
		return fail(errorNotFound, "the tree of %s is missing: %v", dir, err)
	}
	return e.walk(dir, dir, tree)
}

// walk writes the files of tree, which is at p under the exported dir.
func (e *exporter) walk(dir, p string, tree *object.Tree) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	for i := range tree.Entries {
		ent := &tree.Entries[i]
		if ent.Name == "" || ent.Name == "." || ent.Name == ".." || strings.ContainsAny(ent.Name, "/\x00") {
			return refuse(refusedPath, "%s holds an entry named %q, which no checkout can write", p, ent.Name)
		}
		name := path.Join(p, ent.Name)
		switch {
		case ent.Mode == filemode.Dir:
			sub, err := object.GetTree(e.store, ent.Hash)
			if err != nil {
				return fail(errorNotFound, "the tree of %s is missing: %v", name, err)
			}
			if err := e.walk(dir, name, sub); err != nil {
				return err
			}
		case ent.Mode == filemode.Submodule:
			return refuse(refusedSubmodule, "%s is a submodule (commit %s of another repository); charts are exported without submodules", name, ent.Hash)
		case ent.Mode == filemode.Symlink:
			_, target, err := e.follow(name, ent, dir)
			if err != nil {
				return err
			}
			if !target.Mode.IsFile() {
				return refuse(refusedSymlink, "symlink %s points at a directory; only links to files are copied", name)
			}
			if err := e.write(name, target); err != nil {
				return err
			}
		case ent.Mode.IsFile():
			if err := e.write(name, ent); err != nil {
				return err
			}
		default:
			return refuse(refusedPath, "%s has mode %s, which is not a file, directory or symlink", name, ent.Mode)
		}
	}
	return nil
}

// write writes the blob of ent at p under out: mode 0755 when executable, else 0644.
func (e *exporter) write(p string, ent *object.TreeEntry) error {
	if e.files[p] {
		return nil
	}
	blob, err := object.GetBlob(e.store, ent.Hash)
	if err != nil {
		return fail(errorNotFound, "the content of %s is missing: %v", p, err)
	}
	if e.filesLeft == 0 {
		return refuse(refusedSize, "the paths hold more than %d files; export a smaller directory", maxFiles)
	}
	if blob.Size > e.bytesLeft {
		return refuse(refusedSize, "writing %s (%d bytes) goes past maxBytes; export less or raise maxBytes", p, blob.Size)
	}
	mode := os.FileMode(0o644)
	if ent.Mode == filemode.Executable {
		mode = 0o755
	}
	dest := filepath.Join(e.out, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fail(errorRequest, "writing under out: %v", err)
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fail(errorRequest, "writing %s under out: %v", p, err)
	}
	r, err := blob.Reader()
	if err != nil {
		f.Close()
		return fail(errorNotFound, "reading %s: %v", p, err)
	}
	defer r.Close()
	n, err := io.Copy(f, io.LimitReader(r, e.bytesLeft+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(errorRequest, "writing %s under out: %v", p, err)
	}
	if n > e.bytesLeft {
		return refuse(refusedSize, "writing %s goes past maxBytes; export less or raise maxBytes", p)
	}
	e.bytesLeft -= n
	e.filesLeft--
	e.files[p] = true
	return nil
}

// readBlob reads a blob of at most limit bytes.
func readBlob(blob *object.Blob, limit int64) ([]byte, error) {
	if blob.Size > limit {
		return nil, fmt.Errorf("%d bytes, over %d", blob.Size, limit)
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, limit))
}

// containsAny tells whether s holds one of the words.
func containsAny(s string, words ...string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
