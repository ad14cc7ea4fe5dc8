package main

import (
	"context"
	"fmt"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-project/sluice/autoscale/knative"
	"github.com/sluice-project/sluice/internal/k8senv"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationControllerWithKnativeActuator runs `sluice controller
// --actuator knative` as deploy/knative does, with the token of the
// manifests' own ServiceAccount, against a real kube-apiserver where
// k8senv.FakeKnative plays Knative in front of a real `sluice fn serve`.
// A job runs from zero pods to success, and the function goes back to
// zero without a new Revision.
func TestIntegrationControllerWithKnativeActuator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and processes")
	}
	env := k8senv.Start(t)
	const ns = "sluice"
	env.Kubectl(t, "create", "namespace", ns)
	env.Kubectl(t, "apply", "--server-side", "-k", filepath.Join("..", "..", "deploy", "knative", "overlays", "example"))
	token := env.Token(t, ns, "sluice-controller")

	e := newControllerEnv(t, 48, 12)
	// The pods' process: one fn serve behind the fake's route, which lets
	// each ready pod take containerConcurrency (4) requests at once.
	fn := exec.Command(os.Args[0], "fn", "serve", "--listen", "127.0.0.1:0",
		"--s3-endpoint", e.s3Endpoint, "--concurrency", "64", "--log-level", "warn")
	fn.Env = append(append(os.Environ(), replicaEnv+"=1"), testenv.S3Env()...)
	base := testenv.StartReady(t, fn)
	t.Cleanup(func() { _ = fn.Process.Signal(syscall.SIGTERM); _ = fn.Wait() }) // drained first, as a pod
	target, _ := url.Parse(base)
	admin, err := knative.NewClient(env.Admin())
	if err != nil {
		t.Fatal(err)
	}
	fk := k8senv.StartKnative(t, admin, ns, knative.DefaultService, httputil.NewSingleHostReverseProxy(target), k8senv.KnativeOptions{})
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if fk.Revisions() != 1 {
			return fmt.Errorf("no revision yet (%v)", fk.Err())
		}
		return nil
	})

	startControllerProcess(t, e, "knative", "--actuator", "knative", "--kubeconfig", env.KubeconfigFor(t, token),
		"--knative-namespace", ns, "--replica-concurrency", "4", "--max-replicas", "16")
	if _, err := e.b.Submit(context.Background(), wire.JobSpec{ID: "kn", Dataset: "s3://data/ds/",
		Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	readWithAgent(t, e, "kn")
	testenv.CheckFor(t, 2*time.Minute, 50*time.Millisecond, func() error {
		s, err := jobStatus(e.js, "kn")
		if err != nil {
			return err
		}
		if s.State != wire.JobSucceeded {
			return fmt.Errorf("job is %s %q (tasks %+v)", s.State, s.Reason, s.Tasks)
		}
		if s.SamplesProcessed != 96 {
			return fmt.Errorf("%d samples processed, want 96", s.SamplesProcessed)
		}
		return nil
	})
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		h := fk.History()
		if last := h[len(h)-1]; last.Pods != 0 || last.InFlight != 0 {
			return fmt.Errorf("after the job: %+v, want no pods and nothing in flight", last)
		}
		return nil
	})
	peak := 0
	for _, s := range fk.History() {
		peak = max(peak, s.Ready)
	}
	if peak == 0 {
		t.Error("no pod was ever ready: the job ran without the Knative route?")
	}
	if got := fk.Revisions(); got != 1 {
		t.Errorf("%d Revisions, want 1: a job without min replicas changes no template", got)
	}
	t.Logf("peak ready pods %d, revisions %d", peak, fk.Revisions())
}

// TestControllerRunsAJobWithTheKPAEmulation: with `sluice loadtest
// controller --local-scaling kpa` the KPA alone sizes the local replicas; the job still succeeds and
// its replicas go away when it ends.
func TestControllerRunsAJobWithTheKPAEmulation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	e := newControllerEnv(t, 24, 6)
	startControllerCommand(t, e, []string{"loadtest", "controller"}, "kpa", "--local-scaling", "kpa", "--kpa-window", "6s")
	if _, err := e.b.Submit(context.Background(), wire.JobSpec{ID: "kpa", Dataset: "s3://data/ds/",
		Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	readWithAgent(t, e, "kpa")
	testenv.CheckFor(t, 2*time.Minute, 50*time.Millisecond, func() error {
		s, err := jobStatus(e.js, "kpa")
		if err != nil {
			return err
		}
		if s.State != wire.JobSucceeded || s.SamplesProcessed != 48 {
			return fmt.Errorf("job is %s %q, %d samples processed (want succeeded, 48)", s.State, s.Reason, s.SamplesProcessed)
		}
		return nil
	})
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if pids := markedProcesses("kpa"); len(pids) != 1 {
			return fmt.Errorf("processes %v, want the controller alone once the job is done", pids)
		}
		return nil
	})
}
