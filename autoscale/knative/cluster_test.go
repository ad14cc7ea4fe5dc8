package knative_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/knative"
	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/k8senv"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// stubFunction answers a shard task like `sluice fn serve` does, after
// taking d, without reading the shard: the test is about scaling. Its
// output is the shard's end frame alone.
func stubFunction(d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var task wire.ShardTask
		if err := ev.DataAs(&task); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(d)
		end, _ := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Samples: 2})
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		w.WriteHeader(http.StatusOK)
		_ = wire.WriteFrame(w, wire.FrameEnd, 0, end)
	})
}

// agents play a job's agents, as far as scaling sees them: they keep the
// job's in-flight budget (Requested x concurrency, what the controller's
// dispatch plan gives them) in flight to the Service's URL until every
// task is done, and are the job's backlog.
type agents struct {
	act  *knative.Actuator
	job  wire.Job
	per  int
	hc   *http.Client
	done chan struct{} // a send returned

	mu               sync.Mutex
	queued, inflight int
	sent             int
}

func newAgents(act *knative.Actuator, job wire.Job, per int) *agents {
	return &agents{act: act, job: job, per: per, hc: &http.Client{Timeout: time.Minute},
		done: make(chan struct{}, 1), queued: job.Tasks()}
}

// inputs are the job's backlog as a tick's inputs, with demand d
// received at now.
func (a *agents) inputs(d *wire.Demand, now time.Time) map[string]autoscale.Inputs {
	a.mu.Lock()
	defer a.mu.Unlock()
	return map[string]autoscale.Inputs{a.job.Spec.ID: {Demand: d, DemandAt: now,
		Pending: a.queued, InFlight: a.inflight, Done: a.queued == 0 && a.inflight == 0}}
}

// run sends until every task is done or ctx ends.
func (a *agents) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		budget := a.act.Requested().Ready(a.job.Spec.ID) * a.per
		eps := a.act.Endpoints(a.job.Spec.ID)
		a.mu.Lock()
		if a.queued == 0 && a.inflight == 0 {
			a.mu.Unlock()
			return nil
		}
		for len(eps) > 0 && a.queued > 0 && a.inflight < budget {
			task := a.job.Task(0, a.sent%len(a.job.Shards))
			a.queued--
			a.inflight++
			a.sent++
			wg.Go(func() {
				err := a.send(ctx, eps[0], task)
				a.mu.Lock()
				a.inflight--
				if err != nil {
					a.queued++ // sent again, as an agent would
				}
				a.mu.Unlock()
				select {
				case a.done <- struct{}{}:
				default:
				}
			})
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// send posts task as an agent does and reads the shard's frames to its end.
func (a *agents) send(ctx context.Context, url string, task wire.ShardTask) error {
	_, err := dispatch.Sender{Client: a.hc}.Send(ctx, url, task, nil)
	return err
}

// tickRecord is one autoscaler round as the test saw it.
type tickRecord struct {
	decided, requested, ready, revisions int
}

// TestIntegrationJobScalesFromZeroUpAndBackToZero runs one job end to end
// against a real kube-apiserver: the function Service of deploy/knative,
// a fake Knative (k8senv.FakeKnative: revisions, activator, KPA, cold
// starts), agents keeping the in-flight budget a dispatch plan sized by
// the actuator's requested replicas gives them, and the autoscale.Runner
// with a trainer signalling stall. The job starts
// from zero pods, scales up, and goes back to zero, and creates no
// Revision; a second job with min replicas creates exactly two (its start
// and its end), however many ticks pass.
func TestIntegrationJobScalesFromZeroUpAndBackToZero(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver: skipped with -short")
	}
	env := k8senv.Start(t)
	const ns = "sluice"
	env.Kubectl(t, "create", "namespace", ns)
	env.Kubectl(t, "apply", "--server-side", "-n", ns, "-f", filepath.Join("..", "..", "deploy", "knative", "base", "function.yaml"))
	client, err := knative.NewClient(env.Admin())
	if err != nil {
		t.Fatal(err)
	}
	const coldStart = 400 * time.Millisecond
	fk := k8senv.StartKnative(t, client, ns, knative.DefaultService, stubFunction(250*time.Millisecond),
		k8senv.KnativeOptions{ColdStart: coldStart, Window: 500 * time.Millisecond, Grace: 500 * time.Millisecond})
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if fk.Revisions() != 1 {
			return fmt.Errorf("%d revisions (fake knative: %v)", fk.Revisions(), fk.Err())
		}
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	act, err := knative.New(client, knative.Options{Namespace: ns, Concurrency: 4, Poll: 50 * time.Millisecond, WakeTimeout: -1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := act.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	bg.Go(func() { act.Run(ctx) })

	// A job of 120 shards.
	spec := wire.JobSpec{ID: "j1", Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1, Seed: 11}.WithDefaults()
	job := wire.Job{Spec: spec, Bucket: "data"}
	for i := range 120 {
		job.Shards = append(job.Shards, fmt.Sprintf("ds/shard-%06d.tar", i))
	}
	disp := newAgents(act, job, 4)
	dispDone := make(chan error, 1)
	bg.Go(func() { dispDone <- disp.run(ctx) })

	cfg := autoscale.DefaultConfig()
	cfg.MaxReplicas, cfg.ScaleDownDelay = 4, time.Second
	runner, err := autoscale.NewRunner(act, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runner.AddJob("j1", autoscale.Job{MaxReplicas: 4})

	// The trainer is half stalled: it would take 20 samples/s, and one
	// ready replica delivers 5/s, so the policy wants 1.2 x 20 / 5 = 5,
	// capped at 4.
	var records []tickRecord
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(90 * time.Second)
	for done := false; !done; {
		select {
		case err := <-dispDone:
			if err != nil {
				t.Fatalf("agents: %v", err)
			}
			done = true
		case <-deadline:
			t.Fatalf("job not done in 90s; last records %v; fake knative %v", tail(records, 10), fk.Err())
		case now := <-tick.C:
			ready := act.Ready("j1")
			d := &wire.Demand{Job: "j1", Time: now, IntervalS: 1, ConsumedPerS: 10,
				ArrivedPerS: 5 * float64(ready), StallFraction: 0.5, BufferCapacity: 100}
			runner.Tick(ctx, now, disp.inputs(d, now))
			records = append(records, tickRecord{runner.Replicas("j1"), act.Requested().Ready("j1"), act.ReadyTotal(), fk.Revisions()})
		}
	}
	// The job is done: the runner scales it to zero and ends it.
	runner.Tick(ctx, time.Now(), disp.inputs(nil, time.Time{}))
	if got := act.Requested().Ready("j1"); got != 0 {
		t.Errorf("requested after the job: %d, want 0", got)
	}
	runner.RemoveJob("j1")
	runner.Tick(ctx, time.Now(), nil)

	trace := ""
	for _, r := range records {
		trace += fmt.Sprintf(" %d/%d", r.decided, r.ready)
	}
	t.Logf("decided/ready per 100ms tick:%s", trace)

	// From zero: the first decision is one replica, and it is held while
	// that replica starts, though the trainer stalls all along.
	firstReady := -1
	for i, r := range records {
		if r.ready > 0 {
			firstReady = i
			break
		}
		if r.decided > 1 {
			t.Errorf("tick %d: decided %d with no replica ready yet: a cold start read as too slow", i, r.decided)
		}
	}
	if firstReady < 0 || records[0].ready != 0 {
		t.Fatalf("no scale from zero: records %v", records)
	}
	peak := 0
	for _, r := range records {
		peak = max(peak, r.ready)
	}
	if peak < 3 {
		t.Errorf("peak ready replicas %d, want the job to scale up to 3 or 4", peak)
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := act.ReadyTotal(); n != 0 {
			return fmt.Errorf("%d replicas ready after the job, want 0", n)
		}
		return nil
	})
	if got := fk.Revisions(); got != 1 {
		t.Errorf("the job created %d Revisions, want none beyond the first (1)", got)
	}
	h := fk.History()
	t.Logf("job j1: %d ticks; first replica ready after %d ticks (cold start %v); peak %d ready; %d fake-knative samples, peak in flight %d",
		len(records), firstReady, coldStart, peak, len(h), peakInFlight(h))

	// A job with min replicas: one Revision when it starts, one when it
	// ends, none for the ticks in between.
	// Nothing to do yet: no inputs.
	runner.AddJob("j2", autoscale.Job{MinReplicas: 1, MaxReplicas: 4})
	for range 20 {
		runner.Tick(ctx, time.Now(), nil)
		time.Sleep(20 * time.Millisecond)
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := act.ReadyTotal(); n != 1 {
			return fmt.Errorf("%d replicas ready with min-scale 1, want 1", n)
		}
		return nil
	})
	runner.RemoveJob("j2")
	for range 5 {
		runner.Tick(ctx, time.Now(), nil)
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := act.ReadyTotal(); n != 0 {
			return fmt.Errorf("%d replicas ready after j2 ended, want 0", n)
		}
		return nil
	})
	if got := fk.Revisions(); got != 3 {
		t.Errorf("%d Revisions after a job with min replicas, want 3 (first, its start, its end)", got)
	}
}

func peakInFlight(h []k8senv.Sample) int {
	n := 0
	for _, s := range h {
		n = max(n, s.InFlight)
	}
	return n
}

func tail[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
