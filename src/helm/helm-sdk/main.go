// Command tenancy-hub-helm is tenancy-hub's long-lived Helm executor: Helm's own Go SDK
// (helm.sh/helm/v4/pkg/action) in one process, with kube clients, discovery and REST mappings
// kept per cluster and identity, so a release costs its render and its API calls instead of a
// whole `helm` process (BENCHMARKS.md, "The helm call").
//
// The operator starts it and speaks JSON lines over its stdin and stdout: first the executor's
// hello (its protocol and Helm versions, checked by the operator before it sends any work), then
// one request per line, answered in any order, matched by id (see request and response below).
// testdata/protocol holds an example of every message, which the tests of both sides check.
// Requests run at once, as many as the operator sends; the operator's queue bounds them. Values
// travel on the pipe, never in argv or a file. Log lines go to stderr. It exits when stdin
// closes, and dies with the operator (the operator sets the parent-death signal), so no Helm work
// outlives it.
//
// Every action is the one `helm upgrade --install`, `helm uninstall` and `helm rollback` run, with
// the same defaults and the same error texts, so the operator reads failures alike whichever
// executor ran the job.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/storage"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The client-side rate limit of each cluster and identity's clients, shared by every release
// there. Helm's CLI gets a fresh limiter (5 per second, bursts of 100) in every process, so one
// release is never held by it; shared by every release of a cluster, that limit would queue them
// (30 releases took 9 s on 1 CPU s). The operator's per-cluster job cap bounds the load, and the
// API server's priority and fairness protects itself.
const (
	clientQPS   = 100
	clientBurst = 200
)

// capabilitiesTTL bounds how long a cluster's version and API versions are reused between
// releases. Helm's CLI asks for them in every call; a chart bringing its own CRDs still gets them
// fresh (see run).
const capabilitiesTTL = 30 * time.Second

// protocolVersion is the version of the messages on the pipe: hello, request and response. Bump it
// when a message changes, with the operator's PROTOCOL_VERSION (src/helm/sdk.rs) and the
// shared fixtures in testdata/protocol, which the tests of both sides check.
const protocolVersion = 4

// hello is the first line the executor writes, before it reads any request. Its "protocol" field
// keeps its name and type in every version, so an operator can always tell which one an executor
// speaks.
type hello struct {
	Protocol int `json:"protocol"`
	// The version of Helm's Go SDK (the helm.sh/helm/v4 module) the executor is built with.
	Helm string `json:"helm"`
}

// sayHello writes the hello line.
func sayHello(w io.Writer) error {
	return json.NewEncoder(w).Encode(hello{Protocol: protocolVersion, Helm: helmVersion()})
}

// helmVersion is the version of the helm.sh/helm/v4 module built in, as the build recorded it.
func helmVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path != "helm.sh/helm/v4" {
				continue
			}
			if dep.Replace != nil && dep.Replace.Version != "" {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}

// cluster names the cluster a request goes to and as whom.
type cluster struct {
	// Kubeconfig file and context; both empty: the in-cluster configuration.
	Kubeconfig string `json:"kubeconfig"`
	Context    string `json:"context"`
	// Changes whenever the file's content does, so changed credentials get new clients.
	Digest string `json:"digest"`
	// Impersonated user and groups; empty: the context's own credentials.
	User   string   `json:"user,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// The registered cluster name, bound into every record's seal.
	Name string `json:"name"`
}

// request is one line on stdin.
type request struct {
	ID uint64 `json:"id"`
	// "upgrade" (install when missing), "uninstall" or "rollback".
	Op        string  `json:"op"`
	Cluster   cluster `json:"cluster"`
	Namespace string  `json:"namespace"`
	Release   string  `json:"release"`
	// A chart directory or archive on local disk.
	Chart string `json:"chart,omitempty"`
	// Values (a JSON object), then `--set` expressions applied over them in order.
	Values     json.RawMessage   `json:"values,omitempty"`
	Set        []string          `json:"set,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	HistoryMax int               `json:"historyMax"`
	// Helm's timeout; for an upgrade, the longer of its install's and its upgrade's, which the
	// request's deadline follows.
	TimeoutSeconds int `json:"timeoutSeconds"`
	// How an upgrade installs a release that is not there, and upgrades one that is.
	Install *phase `json:"install,omitempty"`
	Upgrade *phase `json:"upgrade,omitempty"`
	// How an uninstall goes: skipping the delete hooks, keeping the records, waiting for the
	// objects to be gone.
	DisableHooks bool `json:"disableHooks,omitempty"`
	KeepHistory  bool `json:"keepHistory,omitempty"`
	Wait         bool `json:"wait,omitempty"`
	// Server-side apply forcing conflicts (a drift repair, a rollback).
	ForceConflicts bool   `json:"forceConflicts,omitempty"`
	Description    string `json:"description,omitempty"`
	// The revision a rollback goes to.
	Revision int `json:"revision,omitempty"`
	// The chart's tests, run after an upgrade request installs or upgrades (testing.go).
	Test *testRun `json:"test,omitempty"`
	// An upgrade's post-render patches and common metadata (postrender.go), run as Helm's
	// post-renderer of the install or upgrade, so the record holds the patched manifest.
	PostRender *postRender `json:"postRender,omitempty"`
	// The operator's sealing key, hex: records are sealed with it and read back only when they
	// verify (seal.go). Required.
	Seal string `json:"seal"`
	// An upgrade may take over the release when no record of it is sealed (adopt.go).
	Adopt bool `json:"adopt,omitempty"`
}

// phase is how one action of an upgrade request goes: its install or its upgrade.
type phase struct {
	TimeoutSeconds int  `json:"timeoutSeconds"`
	Wait           bool `json:"wait,omitempty"`
	WaitForJobs    bool `json:"waitForJobs,omitempty"`
	DisableHooks   bool `json:"disableHooks,omitempty"`
	// "Skip", "Create" (the chart's missing CRDs are created) or "CreateReplace" (and the others
	// replaced), before Helm's action (see applyCRDs).
	Crds string `json:"crds"`
	// Replace what cannot be patched, applying client-side (upgrades only).
	Force bool `json:"force,omitempty"`
	// Delete what a failed upgrade created (upgrades only).
	CleanupOnFail bool `json:"cleanupOnFail,omitempty"`
	// What is done when the action fails, its tests included: "uninstall", "rollback" (upgrades
	// only), or nothing (empty: the failed revision stays).
	Remediate string `json:"remediate,omitempty"`
}

// The remediations of a failed action.
const (
	remediateUninstall = "uninstall"
	remediateRollback  = "rollback"
)

// phaseOr is p, or the action's defaults when the request names none: the request's timeout,
// no wait, hooks run, and crds as given.
func phaseOr(p *phase, req request, crds string) phase {
	if p != nil {
		return *p
	}
	return phase{TimeoutSeconds: req.TimeoutSeconds, Crds: crds}
}

// strategy is the wait strategy of an action: the CLI's `--wait` (watcher) when asked, else
// hooks only.
func strategy(wait bool) kube.WaitStrategy {
	if wait {
		return kube.StatusWatcherStrategy
	}
	return kube.HookOnlyStrategy
}

// decodeRequest reads one request line. A field this executor does not know is refused, not
// ignored: the operator that sent it speaks another protocol, whatever its version says.
func decodeRequest(line []byte) (request, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var req request
	if err := dec.Decode(&req); err != nil {
		return request{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return request{}, errors.New("more than one JSON value on the line")
	}
	return req, nil
}

// response is one line on stdout.
type response struct {
	ID uint64 `json:"id"`
	// Helm's error text, as the CLI prints it after "Error: "; empty on success.
	Error        string `json:"error,omitempty"`
	Revision     int    `json:"revision,omitempty"`
	ChartVersion string `json:"chartVersion,omitempty"`
	// The tests the request ran and how they ended, failed ones included.
	Tests []testResult `json:"tests,omitempty"`
	// What became of the chart's CRDs; omitted when it brings none.
	Crds *crdReport `json:"crds,omitempty"`
	// After an adoption: the labels of the record taken over (adopt.go).
	Adopted map[string]string `json:"adopted,omitempty"`
}

// clients are the kube clients of one cluster and identity, kept across requests.
type clients struct {
	of        cluster
	flags     *genericclioptions.ConfigFlags
	factory   kube.Factory
	clientset kubernetes.Interface
}

// capabilities of one cluster, with when they were read.
type capabilities struct {
	caps *common.Capabilities
	at   time.Time
}

type executor struct {
	logger *slog.Logger
	mu     sync.Mutex
	byKey  map[string]*clients
	caps   map[string]capabilities
}

func clusterKey(c cluster) string { return c.Kubeconfig + "\x00" + c.Context + "\x00" + c.Digest }

func (e *executor) clientsFor(c cluster) (*clients, error) {
	key := clusterKey(c) + "\x00" + c.User + "\x00" + strings.Join(c.Groups, "\x00")
	e.mu.Lock()
	defer e.mu.Unlock()
	if cl, ok := e.byKey[key]; ok {
		return cl, nil
	}
	// Credentials changed: drop the clients of the file's older content.
	for k, old := range e.byKey {
		if old.of.Kubeconfig == c.Kubeconfig && old.of.Context == c.Context && old.of.Digest != c.Digest {
			delete(e.byKey, k)
			delete(e.caps, clusterKey(old.of))
		}
	}
	flags := genericclioptions.NewConfigFlags(true)
	if c.Kubeconfig != "" {
		flags.KubeConfig, flags.Context = &c.Kubeconfig, &c.Context
	}
	if c.User != "" {
		user, groups := c.User, append([]string(nil), c.Groups...)
		flags.Impersonate, flags.ImpersonateGroup = &user, &groups
	}
	if dir := os.Getenv("KUBECACHEDIR"); dir != "" {
		flags.CacheDir = &dir
	}
	flags.WithWrapConfigFn(func(config *rest.Config) *rest.Config {
		config.QPS, config.Burst = clientQPS, clientBurst
		return config
	})
	factory := kube.New(flags).Factory
	clientset, err := factory.KubernetesClientSet()
	if err != nil {
		return nil, err
	}
	cl := &clients{of: c, flags: flags, factory: factory, clientset: clientset}
	e.byKey[key] = cl
	return cl, nil
}

// configuration is a fresh action configuration for one request, on the kept clients, whose
// release storage seals what it writes and reads back only what it sealed.
func (e *executor) configuration(cl *clients, namespace string, key []byte, cluster string) *action.Configuration {
	handler := e.logger.Handler()
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(handler))
	cfg.RESTClientGetter = cl.flags
	kc := &kube.Client{Factory: cl.factory, Namespace: namespace}
	kc.SetLogger(handler)
	cfg.KubeClient = kc
	secrets := newSealedSecrets(cl.clientset.CoreV1().Secrets(namespace), key, cluster, namespace)
	secrets.inner.SetLogger(handler)
	cfg.Releases = storage.Init(secrets)
	cfg.HookOutputFunc = func(_, _, _ string) io.Writer { return io.Discard }
	return cfg
}

func (e *executor) cachedCapabilities(c cluster) *common.Capabilities {
	e.mu.Lock()
	defer e.mu.Unlock()
	if got, ok := e.caps[clusterKey(c)]; ok && time.Since(got.at) < capabilitiesTTL {
		return got.caps
	}
	return nil
}

func (e *executor) keepCapabilities(c cluster, caps *common.Capabilities, fresh bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := clusterKey(c)
	switch {
	case caps == nil:
		delete(e.caps, key)
	case fresh:
		e.caps[key] = capabilities{caps: caps, at: time.Now()}
	}
}

// waitOptions are the CLI's defaults for every wait.
func waitOptions() []kube.WaitOption {
	return []kube.WaitOption{kube.WithStatusComputeWorkers(8)}
}

// refusal tells why a request cannot run at all, before any cluster is reached; "" when it can.
func refusal(req request) string {
	if key, err := hex.DecodeString(req.Seal); err != nil || len(key) < 32 || req.Cluster.Name == "" {
		return "the request carries no sealing key or cluster name: the operator must send both"
	}
	for _, p := range []*phase{req.Install, req.Upgrade} {
		if p != nil && p.Crds != crdCreate && p.Crds != crdSkip && p.Crds != crdCreateReplace {
			return fmt.Sprintf("unknown CRD policy %q: this executor does Skip, Create and CreateReplace", p.Crds)
		}
	}
	if req.Install != nil && req.Install.Remediate != "" && req.Install.Remediate != remediateUninstall {
		return fmt.Sprintf("unknown remediation %q of an install: this executor uninstalls a failed install", req.Install.Remediate)
	}
	if u := req.Upgrade; u != nil && u.Remediate != "" && u.Remediate != remediateUninstall && u.Remediate != remediateRollback {
		return fmt.Sprintf("unknown remediation %q of an upgrade: this executor does rollback and uninstall", u.Remediate)
	}
	switch req.Op {
	case "upgrade", "uninstall", "rollback":
		return ""
	default:
		return fmt.Sprintf("unknown operation %q", req.Op)
	}
}

func (e *executor) run(ctx context.Context, req request) response {
	out := response{ID: req.ID}
	if why := refusal(req); why != "" {
		out.Error = why
		return out
	}
	key, _ := hex.DecodeString(req.Seal)
	cl, err := e.clientsFor(req.Cluster)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	cfg := e.configuration(cl, req.Namespace, key, req.Cluster.Name)
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	switch req.Op {
	case "upgrade":
		if req.Adopt {
			secrets, _ := cfg.Releases.Driver.(*sealedSecrets)
			if out.Adopted, err = prepareAdoption(ctx, cfg, cl.clientset, secrets, req); err != nil {
				out.Error = err.Error()
				return out
			}
			if out.Adopted != nil {
				req = adoptingUpgrade(req)
			}
		}
		rel, crds, installed, err := e.upgrade(ctx, cfg, req)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		out.Revision, out.ChartVersion = rel.Version, rel.Chart.Metadata.Version
		if !crds.empty() {
			out.Crds = crds
		}
		if req.Test == nil {
			return out
		}
		var failed error
		out.Tests, failed = runTests(cfg, req, rel)
		if failed != nil && !req.Test.IgnoreFailures {
			out.Error = afterFailedTests(cfg, req, rel, installed, failed).Error()
		}
	case "uninstall":
		if _, err := uninstallAction(cfg, req).Run(req.Release); err != nil {
			out.Error = err.Error()
		}
	case "rollback":
		rollback := action.NewRollback(cfg)
		rollback.Version, rollback.Timeout, rollback.MaxHistory = req.Revision, timeout, req.HistoryMax
		rollback.WaitStrategy, rollback.WaitOptions = kube.HookOnlyStrategy, waitOptions()
		rollback.ServerSideApply, rollback.ForceConflicts = "true", req.ForceConflicts
		rollback.Description = req.Description
		if err := rollback.Run(req.Release); err != nil {
			out.Error = err.Error()
		}
	}
	return out
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "post-render" {
		// A preview's post-render (tenancy-hub diff): one request on stdin, the manifest on stdout.
		if err := preview(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: tenancy-hub-helm [post-render] (no arguments: the tenancy-hub operator starts it and speaks JSON lines on stdin and stdout; post-render: patches the manifest of one JSON request on stdin, for a preview)")
		os.Exit(2)
	}
	level := slog.LevelWarn
	if os.Getenv("TENANCY_HUB_HELM_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	e := &executor{logger: logger, byKey: map[string]*clients{}, caps: map[string]capabilities{}}

	// The hello goes first: the operator sends work only once it has checked the protocol.
	if err := sayHello(os.Stdout); err != nil {
		logger.Error("cannot greet the operator; exiting", "error", err)
		os.Exit(1)
	}
	var write sync.Mutex
	encoder := json.NewEncoder(os.Stdout)
	reply := func(r response) {
		write.Lock()
		defer write.Unlock()
		if err := encoder.Encode(r); err != nil {
			logger.Error("cannot answer the operator; exiting", "error", err)
			os.Exit(1)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// When the last request in flight is answered and none follows for a moment, the heap a
	// burst of releases grew goes back to the system, so a quiet executor stays small.
	var busy sync.Mutex
	running := 0
	settle := time.AfterFunc(time.Hour, func() {
		busy.Lock()
		quiet := running == 0
		busy.Unlock()
		if quiet {
			debug.FreeOSMemory()
		}
	})
	settle.Stop()
	begin := func() {
		busy.Lock()
		running++
		busy.Unlock()
		settle.Stop()
	}
	end := func() {
		busy.Lock()
		running--
		if running == 0 {
			settle.Reset(2 * time.Second)
		}
		busy.Unlock()
	}
	lines := bufio.NewScanner(os.Stdin)
	lines.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for lines.Scan() {
		if len(strings.TrimSpace(lines.Text())) == 0 {
			continue
		}
		req, err := decodeRequest(lines.Bytes())
		if err != nil {
			logger.Error("a request this executor does not understand; exiting", "protocol", protocolVersion, "error", err)
			os.Exit(1)
		}
		begin()
		go func() {
			defer end()
			// A deadline past helm's own timeout, as the operator's kill of a helm process is.
			limit := time.Duration(req.TimeoutSeconds)*time.Second + 30*time.Second
			rctx, done := context.WithTimeout(ctx, limit)
			defer done()
			reply(e.run(rctx, req))
		}()
	}
	if err := lines.Err(); err != nil {
		logger.Error("reading requests", "error", err)
		os.Exit(1)
	}
}
