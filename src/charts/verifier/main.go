// Command tenancy-hub-verify checks the signature of one chart for tenancy-hub, at the hub, before
// the chart is planned or shipped: cosign or Notation signatures of an OCI chart's manifest digest,
// or the Helm provenance (.prov) of a repository chart's archive.
//
// The operator runs it once per chart digest and trust material (it caches the verdict), writes
// one JSON request on its stdin and reads one JSON answer on its stdout (see request and answer
// below; testdata/protocol holds an example of every message, which the tests of both sides
// check). Credentials and trust material travel on the pipe, never in argv, a file or a log.
// Everything it reads is bounded: the request, every registry response, the archive and its .prov;
// every network call has a timeout, and the whole check a deadline.
//
// An answer is always one of three: verified (by which key or identity, of which digest), refused
// (with a code and clear words: unsigned, signed by an untrusted key, signature of other content,
// invalid signature), or an error saying what to do (an unreachable registry, a bad key, a request
// it does not support). The exit status is 0 whenever an answer was written.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// protocolVersion is the version of the request and the answer. Bump it when either changes, with
// the operator's PROTOCOL_VERSION (src/charts/verify.rs) and the fixtures in testdata/protocol.
const protocolVersion = 1

const (
	// maxRequest bounds the request read from stdin (keys, CA bundles, keyrings, a docker config).
	maxRequest = 4 << 20
	// defaultTimeout is the deadline of a check when the request gives none.
	defaultTimeout = 60 * time.Second
	// maxTimeout is the longest deadline a request may ask for.
	maxTimeout = 10 * time.Minute
)

// request is the one JSON object on stdin: exactly one of cosign, notation and provenance.
type request struct {
	// Must be protocolVersion.
	Protocol int `json:"protocol"`
	// The deadline of the whole check, registry calls included; 0: defaultTimeout.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`

	Cosign     *cosignCheck     `json:"cosign,omitempty"`
	Notation   *notationCheck   `json:"notation,omitempty"`
	Provenance *provenanceCheck `json:"provenance,omitempty"`
}

// Refusal codes: why a chart is not verified, for the operator to count and show.
const (
	// No signature of this digest (or no .prov) was found.
	refusedUnsigned = "unsigned"
	// Signatures were found, none by a trusted key or identity.
	refusedUntrusted = "untrusted"
	// A trusted signature, of other content: a swapped archive, a signature copied to another digest.
	refusedMismatch = "mismatch"
	// A signature that does not parse or whose envelope is broken.
	refusedInvalid = "invalid"
)

// Error kinds: why no verdict could be reached, and so who must act.
const (
	// The request is malformed or names files that cannot be read: the operator's bug or setup.
	errorRequest = "request"
	// The trust material (keys, certificates, keyring, identities) does not parse: the policy's to fix.
	errorTrust = "trust"
	// The registry could not be reached, refused the credentials or timed out: retry, or fix the access.
	errorRegistry = "registry"
	// The request asks for something this verifier does not do.
	errorUnsupported = "unsupported"
)

// answer is the one JSON object written on stdout.
type answer struct {
	Protocol int `json:"protocol"`
	// True only for a verified chart; false for a refusal and for an error.
	Verified bool `json:"verified"`
	// Verified: the key (fingerprint), certificate subject or PGP identity that signed it.
	By string `json:"by,omitempty"`
	// Verified: the digest that was verified (the OCI manifest's, or the archive's sha256).
	Digest string `json:"digest,omitempty"`
	// Refused: one of the refusal codes, and the reason in words.
	Refused string `json:"refused,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// No verdict: what failed and what to do.
	Error *failure `json:"error,omitempty"`
}

// failure is an answer's error: one of the error kinds and a message saying what to do.
type failure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func verified(by, digest string) answer {
	return answer{Protocol: protocolVersion, Verified: true, By: by, Digest: digest}
}

func refused(code, reason string) answer {
	return answer{Protocol: protocolVersion, Refused: code, Reason: reason}
}

func failed(kind, format string, args ...any) answer {
	return answer{Protocol: protocolVersion, Error: &failure{Kind: kind, Message: fmt.Sprintf(format, args...)}}
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

// run decodes one request, checks it and returns the answer.
func run(ctx context.Context, in io.Reader) answer {
	req, err := readRequest(in)
	if err != nil {
		return failed(errorRequest, "%v", err)
	}
	if req.Protocol != protocolVersion {
		return failed(errorRequest, "the request speaks protocol %d, this verifier %d; rebuild it from this operator's source with kind/verifier.sh", req.Protocol, protocolVersion)
	}
	timeout := defaultTimeout
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > maxTimeout {
		return failed(errorRequest, "timeoutSeconds must be between 0 and %d", int(maxTimeout.Seconds()))
	}
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out answer
	switch {
	case req.Cosign != nil && req.Notation == nil && req.Provenance == nil:
		out = verifyCosign(ctx, *req.Cosign)
	case req.Notation != nil && req.Cosign == nil && req.Provenance == nil:
		out = verifyNotation(ctx, *req.Notation)
	case req.Provenance != nil && req.Cosign == nil && req.Notation == nil:
		out = verifyProvenance(*req.Provenance)
	default:
		return failed(errorRequest, "the request must hold exactly one of cosign, notation and provenance")
	}
	if out.Error != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return failed(errorRegistry, "the check did not finish within %s (%s); retry, or give it more time", timeout, out.Error.Message)
	}
	return out
}

func main() {
	out := run(context.Background(), os.Stdin)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "tenancy-hub-verify: writing the answer: %v\n", err)
		os.Exit(1)
	}
}
