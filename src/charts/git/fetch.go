package main

// fetch: one commit into a temporary object store, shallow where the server allows, the pack
// received counted against maxBytes; then the signature check and the export.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/go-git/go-billy/v5/osfs"
)

// fetchJob is a checked fetch request.
type fetchJob struct {
	ref      reference
	commit   plumbing.Hash
	maxBytes int64
	out      string
	paths    []wanted
	verify   *trust
}

// parseFetch checks the fields of a fetch request.
func parseFetch(req request) (fetchJob, error) {
	if !req.Ref.empty() {
		if err := checkRef(req.Ref); err != nil {
			return fetchJob{}, err
		}
	}
	if !commitPattern.MatchString(req.Commit) {
		return fetchJob{}, fail(errorRequest, "commit %q is not a full commit id (40 lowercase hex digits); resolve the ref first", req.Commit)
	}
	if req.MaxBytes < 0 {
		return fetchJob{}, fail(errorRequest, "maxBytes must not be negative")
	}
	maxBytes := req.MaxBytes
	if maxBytes == 0 {
		maxBytes = defaultMaxBytes
	}
	if !filepath.IsAbs(req.Out) {
		return fetchJob{}, fail(errorRequest, "out %q must be an absolute path", req.Out)
	}
	entries, err := os.ReadDir(req.Out)
	if err != nil {
		return fetchJob{}, fail(errorRequest, "out %s is not a readable directory: %v", req.Out, err)
	}
	if len(entries) > 0 {
		return fetchJob{}, fail(errorRequest, "out %s is not empty", req.Out)
	}
	if len(req.Paths) == 0 {
		return fetchJob{}, fail(errorRequest, "a fetch names at least one path")
	}
	for _, p := range req.Paths {
		if p.Kind != "dir" && p.Kind != "file" {
			return fetchJob{}, fail(errorRequest, "path %q has kind %q; kind is dir or file", p.Path, p.Kind)
		}
		if p.Kind == "dir" && p.Optional {
			return fetchJob{}, fail(errorRequest, "dir %q is optional; only a file may be", p.Path)
		}
	}
	if v := req.Verify; v != nil && (len(v.PGPKeys) == 0) == (len(v.SSHKeys) == 0) {
		return fetchJob{}, fail(errorRequest, "verify holds exactly one of pgpKeys and sshKeys, not empty")
	}
	return fetchJob{ref: req.Ref, commit: plumbing.NewHash(req.Commit), maxBytes: maxBytes, out: req.Out, paths: req.Paths, verify: req.Verify}, nil
}

// fetch fetches the commit, checks its signature if asked and exports the paths.
func fetch(ctx context.Context, repo repository, job fetchJob) (*success, error) {
	scratch, err := os.MkdirTemp("", "tenancy-hub-git-")
	if err != nil {
		return nil, fail(errorRequest, "making a temporary directory: %v", err)
	}
	defer os.RemoveAll(scratch)
	b := &budget{limit: job.maxBytes, scratch: scratch}
	store, ref, err := fetchCommit(ctx, repo, b, job)
	if err != nil {
		return nil, err
	}
	commit, err := object.GetCommit(store, job.commit)
	if err != nil {
		return nil, fail(errorNotFound, "%s has no commit %s; resolve the ref again", repo.url, job.commit)
	}
	ok := &success{Commit: job.commit.String(), Ref: ref}
	if job.verify != nil {
		if ok.SignedBy, err = verifySignature(commit, *job.verify); err != nil {
			return nil, err
		}
	}
	if ok.Paths, err = export(ctx, store, commit, job); err != nil {
		return nil, err
	}
	fmt.Fprintf(stats, "tenancy-hub-git: commit %s: %d bytes of pack received in %d fetches\n", job.commit, b.received, b.tries)
	return ok, nil
}

// fetchCommit brings the commit into a store: by its id at depth 1 where the server lets clients
// ask for any reachable commit; else by the ref advertising it, at depth 1; else every branch and
// tag, whole. Each try starts from an empty store; all share the budget. It answers the store and
// the full name of the ref the commit was asked for by, if any.
func fetchCommit(ctx context.Context, repo repository, b *budget, job fetchJob) (*boundedStore, string, error) {
	refName := ""
	if job.ref.Branch != "" {
		refName = plumbing.NewBranchReferenceName(job.ref.Branch).String()
	} else if job.ref.Tag != "" {
		refName = plumbing.NewTagReferenceName(job.ref.Tag).String()
	}
	get := func(specs []config.RefSpec, depth int) (*boundedStore, error) {
		store, err := b.store()
		if err != nil {
			return nil, err
		}
		remote := git.NewRemote(store, &config.RemoteConfig{Name: "origin", URLs: []string{repo.url}})
		err = remote.FetchContext(ctx, &git.FetchOptions{RefSpecs: specs, Depth: depth, Auth: repo.auth, Tags: git.NoTags})
		if b.over {
			return nil, refuse(refusedSize, "%s sent more than maxBytes (%d bytes) for commit %s; raise maxBytes or keep the repository small", repo.url, job.maxBytes, job.commit)
		}
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			err = nil
		}
		return store, err
	}
	store, err := get([]config.RefSpec{config.RefSpec(job.commit.String() + ":refs/fetched/commit")}, 1)
	if err == nil && store.has(job.commit) {
		return store, refName, nil
	}
	if err != nil && !errors.Is(err, git.ErrExactSHA1NotSupported) && !isNotOurRef(err) {
		return nil, "", fetchError(repo, job, err)
	}
	// The server does not give commits by id: fetch the ref that points at it.
	refs, err := listRefs(ctx, repo)
	if err != nil {
		return nil, "", err
	}
	for name, hash := range peeled(refs) {
		if hash != job.commit || !(name.IsBranch() || name.IsTag()) {
			continue
		}
		store, err := get([]config.RefSpec{config.RefSpec("+" + name.String() + ":refs/fetched/ref")}, 1)
		if err != nil {
			return nil, "", fetchError(repo, job, err)
		}
		if store.has(job.commit) {
			return store, refName, nil
		}
	}
	// Not a tip (or it moved): every branch and tag, whole, within the same bound.
	store, err = get([]config.RefSpec{"+refs/heads/*:refs/fetched/heads/*", "+refs/tags/*:refs/fetched/tags/*"}, 0)
	if err != nil {
		return nil, "", fetchError(repo, job, err)
	}
	if !store.has(job.commit) {
		return nil, "", fail(errorNotFound, "%s has no commit %s on any branch or tag; resolve the ref again", repo.url, job.commit)
	}
	return store, refName, nil
}

// fetchError is the answer's error for a failed fetch.
func fetchError(repo repository, job fetchJob, err error) error {
	var o *outcome
	if errors.As(err, &o) {
		return err
	}
	return transportError(repo, fmt.Sprintf("fetching commit %s", job.commit), err)
}

// isNotOurRef is a server's refusal to send a commit asked for by its id.
func isNotOurRef(err error) bool {
	return err != nil && (containsAny(err.Error(), "not our ref", "no such remote ref", "unadvertised object", "object not found"))
}

// budget is what the tries of one fetch may receive, and where their stores live.
type budget struct {
	limit    int64
	received int64
	over     bool
	scratch  string
	tries    int
}

// store is an empty object store in a new directory of the scratch directory.
func (b *budget) store() (*boundedStore, error) {
	b.tries++
	dir := filepath.Join(b.scratch, fmt.Sprintf("try-%d", b.tries))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fail(errorRequest, "making a temporary directory: %v", err)
	}
	return &boundedStore{Storage: filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), budget: b}, nil
}

// boundedStore is a temporary object store whose packs count against the budget.
type boundedStore struct {
	*filesystem.Storage
	budget *budget
}

// PackfileWriter counts the pack the server sends as it is written, failing past the budget.
func (s *boundedStore) PackfileWriter() (io.WriteCloser, error) {
	w, err := s.Storage.PackfileWriter()
	if err != nil {
		return nil, err
	}
	return &countingWriter{budget: s.budget, next: w}, nil
}

// has tells whether the store holds the commit.
func (s *boundedStore) has(hash plumbing.Hash) bool {
	_, err := object.GetCommit(s, hash)
	return err == nil
}

// errTooBig stops a pack past the budget.
var errTooBig = errors.New("the pack is over maxBytes")

// countingWriter passes a pack to the store while it stays within the budget.
type countingWriter struct {
	budget *budget
	next   io.WriteCloser
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.budget.received+int64(len(p)) > w.budget.limit {
		w.budget.over = true
		return 0, errTooBig
	}
	w.budget.received += int64(len(p))
	return w.next.Write(p)
}

func (w *countingWriter) Close() error {
	if w.budget.over {
		// A truncated pack is not indexed; the store is thrown away.
		_ = w.next.Close()
		return errTooBig
	}
	return w.next.Close()
}
