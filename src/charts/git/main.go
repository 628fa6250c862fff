// Command tenancy-hub-git fetches charts and values files from Git for tenancy-hub, at the hub:
// it resolves a reference of a repository to a commit, and exports paths of one commit into a
// directory, bounded, checked and (where asked) verified against the keys a policy trusts.
//
// # Protocol (version 1)
//
// The operator runs it once per question, writes one JSON request on its stdin (at most 4 MiB) and
// reads one JSON answer on its stdout; the exit status is 0 whenever an answer was written.
// Credentials and trust material travel on the pipe only: never in argv, a file left behind, a log
// or an answer. testdata/protocol holds an example of every request and answer; the tests of both
// sides parse them.
//
// A request names the protocol, an op ("resolve" or "fetch"), the repository's url (http, https
// or ssh scheme; an ssh url names its user, as ssh://git@host:port/team/charts.git), a ref (exactly
// one of branch, tag, semver, commit), a deadline for the whole operation (timeoutSeconds: 0 means
// 60, at most 600), optional auth (username and password, or bearerToken, over http(s); or
// sshPrivateKey, sshPassphrase and knownHosts over ssh) and an optional caBundle (https only).
//
// resolve lists the repository's references (ls-remote) and answers the commit a ref names: a
// branch's tip; a tag's commit (an annotated tag peeled); for a semver range, the newest tag (a
// leading "v" allowed) whose version is in the range, among the tags its ref.tags patterns allow
// (an exact name, "prefix*" or "*"; none given: every tag); a commit as given, without asking the
// server (fetch checks it exists).
//
// fetch also names the commit (what resolve answered), maxBytes (0 means 64 MiB), an empty
// directory out, the paths to export (each a "dir" or a "file", a file possibly optional) and
// optionally verify (pgpKeys: armored public keys; or sshKeys: authorized_keys lines). It fetches
// exactly that commit, shallow (depth 1), where the server lets a client ask for a commit;
// otherwise the ref that points at it, or at last the branches and tags, always within maxBytes of
// pack received. It then checks the commit's signature when asked and writes the paths under out:
//   - a path is relative and clean; an absolute one or one escaping with ".." is refused (path);
//   - a dir is written with every file under it, modes 0644 or 0755 and nothing else; a symlink in
//     it pointing at a file inside the dir is written as a copy of that file, one pointing outside
//     (or at a directory) is refused (symlink); a submodule in it is refused (submodule);
//   - a dir holding a Chart.yaml brings the dependencies whose repository is file://<relative>, at
//     their relative places, recursively; one leaving the repository is refused (path);
//   - a file must be a regular file; a symlink to it is followed within the repository only;
//   - a missing file is written=false when optional, else the error notfound; a missing dir is
//     notfound;
//   - the bytes written, like the bytes received, stay within maxBytes, and the files written
//     within maxFiles; past either the fetch is refused (size).
//
// Signatures: the commit's gpgsig header, PGP or SSH (namespace "git"), must be by one of the
// keys: an unsigned commit is refused (unsigned), one signed by another key (untrusted), a
// signature that does not parse or does not match the commit (invalid).
//
// The answer holds protocol and exactly one of ok (commit and ref; for fetch, the paths in the
// request's order with written, and signedBy when verified), refused (code and message) or error
// (kind: request, auth, network, notfound, limit or unsupported; a message saying what to do). No
// message holds a credential: the request's secrets are masked in every message.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// protocolVersion is the version of the request and the answer. Bump it when either changes, with
// the operator's side and the fixtures in testdata/protocol.
const protocolVersion = 1

const (
	// maxRequest bounds the request read from stdin (keys, CA bundles, keyrings).
	maxRequest = 4 << 20
	// defaultTimeout is the deadline of an operation when the request gives none.
	defaultTimeout = 60 * time.Second
	// maxTimeout is the longest deadline a request may ask for.
	maxTimeout = 10 * time.Minute
	// defaultMaxBytes bounds a fetch when the request gives no maxBytes.
	defaultMaxBytes = 64 << 20
	// maxFiles bounds the number of files one fetch writes.
	maxFiles = 10000
)

// request is the one JSON object on stdin.
type request struct {
	// Must be protocolVersion.
	Protocol int `json:"protocol"`
	// "resolve" or "fetch".
	Op string `json:"op"`
	// The repository: http://, https:// or ssh://user@host[:port]/path.
	URL string `json:"url"`
	// The reference to resolve: exactly one of its fields.
	Ref reference `json:"ref"`
	// The deadline of the whole operation; 0: defaultTimeout.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// Credentials; none for a public repository.
	Auth *credentials `json:"auth,omitempty"`
	// PEM certificates trusted besides the system's, for https.
	CABundle string `json:"caBundle,omitempty"`

	// Fetch: the commit to fetch (40 hex digits), as resolve answered.
	Commit string `json:"commit,omitempty"`
	// Fetch: the bound on the pack received and on the bytes written; 0: defaultMaxBytes.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// Fetch: an empty directory (absolute path) the files are written under.
	Out string `json:"out,omitempty"`
	// Fetch: what to write.
	Paths []wanted `json:"paths,omitempty"`
	// Fetch: the keys one of which must have signed the commit.
	Verify *trust `json:"verify,omitempty"`
}

// reference names what to resolve: exactly one of branch, tag, semver and commit is set.
type reference struct {
	Branch string `json:"branch,omitempty"`
	Tag    string `json:"tag,omitempty"`
	Semver string `json:"semver,omitempty"`
	Commit string `json:"commit,omitempty"`
	// With semver only: the tag patterns (an exact name, "prefix*" or "*") the range picks
	// among, as the policy allows them; none: every tag.
	Tags []string `json:"tags,omitempty"`
}

// empty tells whether no field of the ref is set.
func (r reference) empty() bool {
	return r.Branch == "" && r.Tag == "" && r.Semver == "" && r.Commit == "" && len(r.Tags) == 0
}

// credentials open a private repository: basic auth or a bearer token over http(s), a key over ssh.
type credentials struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	BearerToken   string `json:"bearerToken,omitempty"`
	SSHPrivateKey string `json:"sshPrivateKey,omitempty"`
	SSHPassphrase string `json:"sshPassphrase,omitempty"`
	// known_hosts lines; the only host keys an ssh connection accepts.
	KnownHosts string `json:"knownHosts,omitempty"`
}

// wanted is one path of the commit to write under out.
type wanted struct {
	Path string `json:"path"`
	// "dir" or "file".
	Kind string `json:"kind"`
	// A file only: absent is no error.
	Optional bool `json:"optional,omitempty"`
}

// trust holds the keys a commit must be signed by: PGP or SSH, not both.
type trust struct {
	// Armored PGP public keys.
	PGPKeys []string `json:"pgpKeys,omitempty"`
	// SSH public keys, one authorized_keys line each.
	SSHKeys []string `json:"sshKeys,omitempty"`
}

// Refusal codes: why a fetch was refused, for the operator to count and show.
const (
	refusedUnsigned  = "unsigned"
	refusedUntrusted = "untrusted"
	refusedInvalid   = "invalid"
	refusedPath      = "path"
	refusedSymlink   = "symlink"
	refusedSubmodule = "submodule"
	refusedSize      = "size"
)

// Error kinds: why no answer could be reached, and so who must act.
const (
	// The request is malformed: the operator's bug or the spec's.
	errorRequest = "request"
	// The server refused the credentials, or its host key is not trusted: fix the access.
	errorAuth = "auth"
	// The server could not be reached or timed out: retry.
	errorNetwork = "network"
	// The repository, ref, commit or path does not exist.
	errorNotFound = "notfound"
	// The server answered more than a bound allows outside a fetch's pack (e.g. too many refs).
	errorLimit = "limit"
	// The request asks for something this fetcher does not do.
	errorUnsupported = "unsupported"
)

// answer is the one JSON object written on stdout: exactly one of Ok, Refused and Error.
type answer struct {
	Protocol int      `json:"protocol"`
	Ok       *success `json:"ok,omitempty"`
	Refused  *refusal `json:"refused,omitempty"`
	Error    *failure `json:"error,omitempty"`
}

// success is what resolve and fetch answer.
type success struct {
	// The commit, 40 hex digits.
	Commit string `json:"commit"`
	// The full name of the ref that named it (refs/heads/main, refs/tags/v1.2.0); empty for a commit.
	Ref string `json:"ref"`
	// Fetch: each requested path, in the request's order.
	Paths []written `json:"paths,omitempty"`
	// Fetch with verify: the key that signed the commit (SSH: SHA256 fingerprint; PGP: key id).
	SignedBy string `json:"signedBy,omitempty"`
}

// written says whether one requested path was written.
type written struct {
	Path    string `json:"path"`
	Written bool   `json:"written"`
}

// refusal is a fetch refused for what the repository holds.
type refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// failure is an answer's error: one of the error kinds and a message saying what to do.
type failure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// outcome is an answer in the making: a refusal or an error, as a Go error.
type outcome struct{ answer answer }

func (o *outcome) Error() string {
	if o.answer.Refused != nil {
		return o.answer.Refused.Message
	}
	return o.answer.Error.Message
}

// refuse is a refusal as an error, for the code that finds it deep in an export.
func refuse(code, format string, args ...any) error {
	return &outcome{answer{Protocol: protocolVersion, Refused: &refusal{Code: code, Message: fmt.Sprintf(format, args...)}}}
}

// fail is an error answer as an error.
func fail(kind, format string, args ...any) error {
	return &outcome{answer{Protocol: protocolVersion, Error: &failure{Kind: kind, Message: fmt.Sprintf(format, args...)}}}
}

// answerOf turns the result of an operation into the answer: an outcome as it is, any other error
// as an error of kind fallback.
func answerOf(ok *success, err error) answer {
	if err == nil {
		return answer{Protocol: protocolVersion, Ok: ok}
	}
	if o, isOutcome := err.(*outcome); isOutcome {
		return o.answer
	}
	return answer{Protocol: protocolVersion, Error: &failure{Kind: errorNetwork, Message: err.Error()}}
}

// readRequest reads and decodes the request, within maxRequest bytes.
func readRequest(r io.Reader) (request, error) {
	var req request
	data, err := io.ReadAll(io.LimitReader(r, maxRequest+1))
	if err != nil {
		return req, fmt.Errorf("reading the request: %w", err)
	}
	if len(data) > maxRequest {
		return req, fmt.Errorf("the request is over %d bytes", maxRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("the request is not valid JSON of protocol %d: %w", protocolVersion, err)
	}
	return req, nil
}

// run decodes one request, carries it out within its deadline and returns the answer, every
// secret of the request masked in its message.
func run(ctx context.Context, in io.Reader) answer {
	req, err := readRequest(in)
	if err != nil {
		return answerOf(nil, fail(errorRequest, "%v", err))
	}
	out := within(ctx, req)
	return masked(out, secretsOf(req))
}

// within checks the request's version and deadline and runs its op, answering when the deadline
// passes even if the op (a stuck server) has not returned.
func within(ctx context.Context, req request) answer {
	if req.Protocol != protocolVersion {
		return answerOf(nil, fail(errorRequest, "the request speaks protocol %d, this fetcher %d; rebuild it from this operator's source with kind/git.sh", req.Protocol, protocolVersion))
	}
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > maxTimeout {
		return answerOf(nil, fail(errorRequest, "timeoutSeconds must be between 0 and %d", int(maxTimeout.Seconds())))
	}
	timeout := defaultTimeout
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan answer, 1)
	go func() { done <- answerOf(operate(ctx, req)) }()
	select {
	case out := <-done:
		if out.Error != nil && ctx.Err() != nil {
			return answerOf(nil, fail(errorNetwork, "%s did not finish within %s (%s); retry, or give it more time", req.Op, timeout, out.Error.Message))
		}
		return out
	case <-ctx.Done():
		return answerOf(nil, fail(errorNetwork, "%s of %s did not finish within %s; retry, or give it more time", req.Op, req.URL, timeout))
	}
}

// operate runs the request's op.
func operate(ctx context.Context, req request) (*success, error) {
	repo, err := parseRepository(req)
	if err != nil {
		return nil, err
	}
	switch req.Op {
	case "resolve":
		if err := resolveOnly(req); err != nil {
			return nil, err
		}
		return resolve(ctx, repo, req.Ref)
	case "fetch":
		job, err := parseFetch(req)
		if err != nil {
			return nil, err
		}
		return fetch(ctx, repo, job)
	default:
		return nil, fail(errorRequest, "op must be resolve or fetch, not %q", req.Op)
	}
}

// stats receives one line per fetch on what it cost (no secret): stderr in the program, nothing
// in the tests.
var stats io.Writer = io.Discard

func main() {
	stats = os.Stderr
	out := run(context.Background(), os.Stdin)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "tenancy-hub-git: writing the answer: %v\n", err)
		os.Exit(1)
	}
	// The op may still run (a server that never answers): the answer is out, so stop it here.
	os.Exit(0)
}
