package main

// The repository and how to reach it: its url, the credentials and trust for its scheme, listing
// its references (ls-remote) and resolving a ref to a commit.

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/skeema/knownhosts"
)

// maxRefs bounds the references a server may advertise.
const maxRefs = 100000

// commitPattern is a full SHA-1 commit id, as the protocol carries it.
var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// repository is a checked url with the credentials that open it.
type repository struct {
	url  string
	auth transport.AuthMethod
}

// parseRepository checks the url and builds the credentials its scheme takes.
func parseRepository(req request) (repository, error) {
	u, err := url.Parse(req.URL)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return repository{}, fail(errorUnsupported, "url %q is not an http, https or ssh url with a host (scp-like user@host:path is not taken: write ssh://user@host/path)", req.URL)
	}
	repo := repository{url: req.URL}
	auth := req.Auth
	if auth == nil {
		auth = &credentials{}
	}
	switch u.Scheme {
	case "http", "https":
		if u.User != nil {
			return repository{}, fail(errorRequest, "the url of %s holds credentials; give them in auth instead", u.Host)
		}
		if auth.SSHPrivateKey != "" || auth.KnownHosts != "" || auth.SSHPassphrase != "" {
			return repository{}, fail(errorRequest, "an ssh key is given for the %s url of %s; use an ssh:// url or basic auth or a token", u.Scheme, u.Host)
		}
		switch {
		case auth.BearerToken != "" && (auth.Username != "" || auth.Password != ""):
			return repository{}, fail(errorRequest, "auth holds both a bearer token and basic auth for %s; give one", u.Host)
		case auth.BearerToken != "":
			repo.auth = &githttp.TokenAuth{Token: auth.BearerToken}
		case auth.Username != "" || auth.Password != "":
			repo.auth = &githttp.BasicAuth{Username: auth.Username, Password: auth.Password}
		}
		if req.CABundle != "" && u.Scheme != "https" {
			return repository{}, fail(errorRequest, "a caBundle is given for the plain http url of %s; it is for https only", u.Host)
		}
		limit := int64(resolveBodyLimit)
		if req.Op == "fetch" {
			limit = max(req.MaxBytes, defaultMaxBytes) + resolveBodyLimit
		}
		if err := installHTTP([]byte(req.CABundle), limit); err != nil {
			return repository{}, err
		}
	case "ssh":
		if auth.Username != "" || auth.Password != "" || auth.BearerToken != "" {
			return repository{}, fail(errorRequest, "basic auth or a token is given for the ssh url of %s; ssh takes sshPrivateKey and knownHosts", u.Host)
		}
		if req.CABundle != "" {
			return repository{}, fail(errorRequest, "a caBundle is given for the ssh url of %s; it is for https only", u.Host)
		}
		if _, set := u.User.Password(); set {
			return repository{}, fail(errorRequest, "the ssh url of %s holds a password; ssh takes a key", u.Host)
		}
		repo.auth, err = sshAuth(u, auth)
		if err != nil {
			return repository{}, err
		}
	default:
		return repository{}, fail(errorUnsupported, "url scheme %q of %s is not taken; use https, http or ssh", u.Scheme, u.Host)
	}
	return repo, nil
}

// sshAuth is the key auth for an ssh url, accepting only the host keys of knownHosts.
func sshAuth(u *url.URL, auth *credentials) (transport.AuthMethod, error) {
	user := u.User.Username()
	if user == "" {
		return nil, fail(errorRequest, "the ssh url of %s names no user; write ssh://git@%s/...", u.Host, u.Host)
	}
	if auth.SSHPrivateKey == "" {
		return nil, fail(errorAuth, "no sshPrivateKey for ssh://%s; give the deploy key of the repository", u.Host)
	}
	if strings.TrimSpace(auth.KnownHosts) == "" {
		return nil, fail(errorAuth, "no knownHosts for ssh://%s; give the server's host key (ssh-keyscan -p PORT HOST), no unknown host is accepted", u.Host)
	}
	keys, err := gitssh.NewPublicKeys(user, []byte(auth.SSHPrivateKey), auth.SSHPassphrase)
	if err != nil {
		return nil, fail(errorAuth, "the sshPrivateKey for ssh://%s does not parse (a wrong or missing sshPassphrase?): %v", u.Host, err)
	}
	db, err := knownHostsDB(auth.KnownHosts)
	if err != nil {
		return nil, fail(errorAuth, "the knownHosts for ssh://%s do not parse: %v", u.Host, err)
	}
	port := u.Port()
	if port == "" {
		port = "22"
	}
	address := net.JoinHostPort(u.Hostname(), port)
	keys.HostKeyCallback = db.HostKeyCallback()
	keys.HostKeyAlgorithms = db.HostKeyAlgorithms(address)
	return keys, nil
}

// knownHostsDB parses known_hosts lines: the library reads files only, so they go through a file
// of a private temporary directory, removed before any connection is made.
func knownHostsDB(lines string) (*knownhosts.HostKeyDB, error) {
	dir, err := os.MkdirTemp("", "tenancy-hub-git-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(file, []byte(lines+"\n"), 0o600); err != nil {
		return nil, err
	}
	return knownhosts.NewDB(file)
}

// transportError turns an error of go-git's transports into an answer's error, naming the host.
func transportError(repo repository, what string, err error) error {
	host := repo.url
	if u, perr := url.Parse(repo.url); perr == nil {
		host = u.Host
	}
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return fail(errorAuth, "%s: %s refused the credentials (%v); check the auth the policy names", what, host, err)
	case knownhosts.IsHostUnknown(err):
		return fail(errorAuth, "%s: the ssh host key of %s is not in knownHosts; add the server's key (ssh-keyscan) to knownHosts", what, host)
	case knownhosts.IsHostKeyChanged(err):
		return fail(errorAuth, "%s: the ssh host key of %s is not the one knownHosts holds; check the server, or update knownHosts if its key changed", what, host)
	case errors.Is(err, errBodyTooBig):
		return fail(errorLimit, "%s: %s answered more than this fetcher reads (%v)", what, host, err)
	case strings.Contains(err.Error(), "unable to authenticate"):
		return fail(errorAuth, "%s: %s refused the ssh key (%v); check the deploy key", what, host, err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fail(errorNotFound, "%s: no repository at %s; check the url", what, repo.url)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fail(errorNotFound, "%s: the repository %s is empty; push a commit first", what, repo.url)
	case strings.Contains(err.Error(), "x509:") || strings.Contains(err.Error(), "certificate"):
		return fail(errorAuth, "%s: the TLS certificate of %s is not trusted (%v); give its CA in caBundle", what, host, err)
	}
	return fail(errorNetwork, "%s: %s: %v; retry, or check that the server is reachable", what, host, err)
}

// listRefs lists the repository's references, annotated tags peeled (as name^{}).
func listRefs(ctx context.Context, repo repository) ([]*plumbing.Reference, error) {
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{repo.url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: repo.auth, PeelingOption: git.AppendPeeled})
	if err != nil {
		return nil, transportError(repo, "listing the references", err)
	}
	if len(refs) > maxRefs {
		return nil, fail(errorLimit, "%s advertises %d references, over %d", repo.url, len(refs), maxRefs)
	}
	return refs, nil
}

// resolveOnly checks the fields of a resolve request: what belongs to a fetch is absent.
func resolveOnly(req request) error {
	if req.Commit != "" || req.MaxBytes != 0 || req.Out != "" || len(req.Paths) > 0 || req.Verify != nil {
		return fail(errorRequest, "resolve takes url, ref, auth, caBundle and timeoutSeconds only (commit, maxBytes, out, paths and verify are for fetch)")
	}
	return checkRef(req.Ref)
}

// checkRef checks that exactly one field of the ref is set, and a commit is 40 hex digits.
func checkRef(ref reference) error {
	set := 0
	for _, v := range []string{ref.Branch, ref.Tag, ref.Semver, ref.Commit} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return fail(errorRequest, "ref must hold exactly one of branch, tag, semver and commit")
	}
	if len(ref.Tags) > 0 && ref.Semver == "" {
		return fail(errorRequest, "ref.tags (the tag patterns a semver range picks among) goes with semver only")
	}
	if ref.Commit != "" && !commitPattern.MatchString(ref.Commit) {
		return fail(errorRequest, "ref.commit %q is not a full commit id (40 lowercase hex digits)", ref.Commit)
	}
	return nil
}

// resolve answers the commit a ref names.
func resolve(ctx context.Context, repo repository, ref reference) (*success, error) {
	if ref.Commit != "" {
		return &success{Commit: ref.Commit}, nil
	}
	var semverRange *semver.Constraints
	if ref.Semver != "" {
		c, err := semver.NewConstraint(ref.Semver)
		if err != nil {
			return nil, fail(errorRequest, "ref.semver %q is not a version range: %v", ref.Semver, err)
		}
		semverRange = c
	}
	refs, err := listRefs(ctx, repo)
	if err != nil {
		return nil, err
	}
	commits := peeled(refs)
	var name plumbing.ReferenceName
	switch {
	case ref.Branch != "":
		name = plumbing.NewBranchReferenceName(ref.Branch)
	case ref.Tag != "":
		name = plumbing.NewTagReferenceName(ref.Tag)
	default:
		tag, ok := newestMatching(allowedTags(tagNames(commits), ref.Tags), semverRange)
		if !ok && len(ref.Tags) > 0 {
			return nil, fail(errorNotFound, "no tag of %s allowed by the patterns %s is a version in the range %q", repo.url, strings.Join(ref.Tags, ", "), ref.Semver)
		}
		if !ok {
			return nil, fail(errorNotFound, "no tag of %s is a version in the range %q", repo.url, ref.Semver)
		}
		name = plumbing.NewTagReferenceName(tag)
	}
	commit, ok := commits[name]
	if !ok {
		return nil, fail(errorNotFound, "%s has no %s; check the name", repo.url, name)
	}
	return &success{Commit: commit.String(), Ref: name.String()}, nil
}

// peeled maps each ref name to the commit it names: an annotated tag's own object is replaced by
// the object it points at (its name^{} entry).
func peeled(refs []*plumbing.Reference) map[plumbing.ReferenceName]plumbing.Hash {
	out := make(map[plumbing.ReferenceName]plumbing.Hash, len(refs))
	for _, ref := range refs {
		if ref.Type() != plumbing.HashReference {
			continue
		}
		name := ref.Name().String()
		if base, isPeeled := strings.CutSuffix(name, "^{}"); isPeeled {
			out[plumbing.ReferenceName(base)] = ref.Hash()
			continue
		}
		if _, seen := out[ref.Name()]; !seen {
			out[ref.Name()] = ref.Hash()
		}
	}
	// A peeled entry may come before or after its tag: peel again where both were seen.
	for _, ref := range refs {
		if base, isPeeled := strings.CutSuffix(ref.Name().String(), "^{}"); isPeeled {
			out[plumbing.ReferenceName(base)] = ref.Hash()
		}
	}
	return out
}

// tagNames are the short names of the tags among refs.
func tagNames(refs map[plumbing.ReferenceName]plumbing.Hash) []string {
	var tags []string
	for name := range refs {
		if name.IsTag() {
			tags = append(tags, name.Short())
		}
	}
	return tags
}

// allowedTags are the tags some pattern allows (every tag when there is no pattern), so a range
// never picks a tag the policy does not allow, however new.
func allowedTags(tags, patterns []string) []string {
	var out []string
	for _, tag := range tags {
		if tagAllowed(patterns, tag) {
			out = append(out, tag)
		}
	}
	return out
}

// tagAllowed tells whether a pattern (an exact name, "prefix*" or "*") allows the tag; with no
// pattern, every tag is allowed.
func tagAllowed(patterns []string, tag string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if prefix, isPrefix := strings.CutSuffix(p, "*"); isPrefix && strings.HasPrefix(tag, prefix) || p == tag {
			return true
		}
	}
	return false
}

// newestMatching picks the tag of the newest version (a leading "v" allowed) in the range; of two
// tags of one version ("1.0.0", "v1.0.0") the one sorting last.
func newestMatching(tags []string, within *semver.Constraints) (string, bool) {
	sort.Strings(tags)
	var best string
	var bestVersion *semver.Version
	for _, tag := range tags {
		v, err := semver.NewVersion(tag)
		if err != nil || !within.Check(v) {
			continue
		}
		if bestVersion == nil || !v.LessThan(bestVersion) {
			best, bestVersion = tag, v
		}
	}
	return best, bestVersion != nil
}

// secretsOf are the request's credentials, masked in every message.
func secretsOf(req request) []string {
	if req.Auth == nil {
		return nil
	}
	a := req.Auth
	basic := ""
	if a.Username != "" || a.Password != "" {
		basic = base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
	}
	return []string{basic, a.Username, a.Password, a.BearerToken, a.SSHPassphrase, a.SSHPrivateKey}
}

// masked replaces each secret in the answer's message with "***".
func masked(out answer, secrets []string) answer {
	mask := func(s string) string {
		for _, secret := range secrets {
			if secret != "" {
				s = strings.ReplaceAll(s, secret, "***")
			}
		}
		return s
	}
	if out.Refused != nil {
		out.Refused.Message = mask(out.Refused.Message)
	}
	if out.Error != nil {
		out.Error.Message = mask(out.Error.Message)
	}
	return out
}
