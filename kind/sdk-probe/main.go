// Command sdk-probe measures what one release costs when helm runs inside a long-lived process
// (Helm's Go SDK, one kube client per cluster) instead of one `helm` process per release: the
// figure the choice of executor rests on (BENCHMARKS.md, "The helm call").
//
//	cd kind/sdk-probe && go run . -kubeconfig ../../.lab/kubeconfig -context member-1 -releases 20
//
// It installs the example chart into `-releases` new namespaces, upgrades each once, and prints
// the CPU seconds per release of each step, the first release's cost (discovery and clients
// built), and the process's peak RSS; with -openapi-check, as helm's CLI does by default.
// The namespaces are made first, as the operator does, and removed at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	kubeconfig := flag.String("kubeconfig", "../../.lab/kubeconfig", "the lab's kubeconfig")
	kubeContext := flag.String("context", "member-1", "the cluster")
	chartDir := flag.String("chart", "../../config/charts/deployment-example", "the chart")
	releases := flag.Int("releases", 20, "releases installed, then upgraded")
	openAPICheck := flag.Bool("openapi-check", false, "keep helm's client-side OpenAPI check")
	flag.Parse()

	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig, flags.Context = kubeconfig, kubeContext
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// One kube client for the cluster, shared by every release: its discovery is done once.
	client := kube.New(flags)
	client.SetLogger(logger.Handler())
	kubectl := func(args ...string) {
		base := []string{"--kubeconfig", *kubeconfig, "--context", *kubeContext}
		if out, err := exec.Command("kubectl", append(base, args...)...).CombinedOutput(); err != nil {
			log.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
	}
	run := fmt.Sprintf("sdk-%d", time.Now().Unix())
	namespaces := make([]string, *releases)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("%s-%d", run, i)
		kubectl("create", "namespace", namespaces[i])
	}
	defer func() {
		for _, ns := range namespaces {
			kubectl("delete", "namespace", ns, "--wait=false")
		}
	}()

	labels := map[string]string{"multitenancy.dev/managed-by": "tenancy-hub"}
	var first float64
	for step, name := range []string{"install", "upgrade"} {
		began, before := time.Now(), cpuSeconds()
		for i, ns := range namespaces {
			cfg := action.NewConfiguration()
			cfg.SetLogger(logger.Handler())
			if err := cfg.Init(flags, ns, "secret"); err != nil {
				log.Fatal(err)
			}
			client.Namespace = ns
			cfg.KubeClient = client
			chart, err := loader.Load(*chartDir)
			if err != nil {
				log.Fatal(err)
			}
			values := map[string]any{"replicaCount": step + 1}
			if _, err := cfg.Releases.History("app"); errors.Is(err, driver.ErrReleaseNotFound) {
				install := action.NewInstall(cfg)
				install.ReleaseName, install.Namespace, install.Labels = "app", ns, labels
				install.WaitStrategy, install.Timeout = kube.HookOnlyStrategy, 5*time.Minute
				install.DisableOpenAPIValidation = !*openAPICheck
				if _, err := install.RunWithContext(context.Background(), chart, values); err != nil {
					log.Fatal(err)
				}
			} else {
				upgrade := action.NewUpgrade(cfg)
				upgrade.Namespace, upgrade.Labels, upgrade.ResetValues, upgrade.MaxHistory = ns, labels, true, 5
				upgrade.WaitStrategy, upgrade.Timeout = kube.HookOnlyStrategy, 5*time.Minute
				upgrade.DisableOpenAPIValidation = !*openAPICheck
				if _, err := upgrade.RunWithContext(context.Background(), "app", chart, values); err != nil {
					log.Fatal(err)
				}
			}
			if step == 0 && i == 0 {
				first = cpuSeconds() - before
			}
		}
		n := float64(len(namespaces))
		fmt.Printf("%s: %d releases, %.3f s wall and %.4f CPU s per release\n",
			name, len(namespaces), time.Since(began).Seconds()/n, (cpuSeconds()-before)/n)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("first release (clients and discovery built): %.3f CPU s; peak RSS %.1f MiB\n", first, float64(ru.Maxrss)/1024)
}
