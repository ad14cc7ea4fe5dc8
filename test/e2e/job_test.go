package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/test/integration"
	"github.com/sluice-project/sluice/wire"
)

// dataset uploads a synthetic image dataset to the cluster's S3 server:
// small images (64 to 128 pixels a side) unless sides gives the least and
// the most.
func (e *env) dataset(t *testing.T, prefix string, samples, shards int, sides ...int) integration.Dataset {
	t.Helper()
	o := integration.SmallImages(samples, shards, 11)
	if len(sides) == 2 {
		o.MinSide, o.MaxSide = sides[0], sides[1]
	}
	sh, err := synth.Images(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := synth.Upload(ctx, e.s3Client(t), "e2e", prefix, sh); err != nil {
		t.Fatal(err)
	}
	return integration.DatasetOf(t, "e2e", prefix, sh)
}

// submit writes spec and runs `sluice job submit` as the cli user.
func (e *env) submit(t *testing.T, spec map[string]any) {
	t.Helper()
	b, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, fmt.Sprint(spec["id"])+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, "cli", "job", "submit", path)
	if r.Code != 0 {
		t.Fatalf("%s", r)
	}
}

// run runs a sluice command beside the cluster as user.
func (e *env) run(t *testing.T, user string, args ...string) integration.Result {
	t.Helper()
	return integration.RunSluice(t, e.sluice, e.nodeEnv(t, user), 2*time.Minute, args...)
}

// agent starts `sluice agent` for job beside the cluster (the agent
// user, the function token), as a trainer pod's sidecar would run.
func (e *env) agent(t *testing.T, name, job string, extra ...string) (*integration.Process, string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(integration.MustFreePort(t))
	args := append([]string{"agent", "--job", job, "--name", name, "--listen", addr}, extra...)
	p := integration.StartProcess(t, e.dir, name, e.sluice, args, e.nodeEnv(t, "agent"))
	url, err := p.Ready(2 * time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(30))
	}
	return p, url
}

// jetStream is a client of the cluster's NATS as the cli user.
func (e *env) jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	// Pinging as Sluice's own clients do: a member on a node cut off
	// (9_nodes_test.go) goes silent, and the test must reconnect too.
	nc, err := nats.Connect(natsURL, nats.UserInfo("sluice-cli", e.secrets["cli"]),
		nats.CustomInboxPrefix(natsperm.CLI().InboxPrefix), nats.MaxReconnects(-1),
		nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitJob waits until job is in state want.
func (e *env) waitJob(t *testing.T, js jetstream.JetStream, id string, want wire.JobState, within time.Duration) {
	t.Helper()
	waitFor(t, within, time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		j, err := integration.Job(ctx, js, id)
		if err != nil {
			return err
		}
		if j.State != want {
			return fmt.Errorf("job %s is %s, want %s", id, j.State, want)
		}
		return nil
	})
}

// sample is one second of a job on the cluster: the replicas Sluice's
// controller asked for (over all jobs) and the function's pods.
type sample struct {
	At               time.Duration
	Requested        int
	Pods, PodsReady  int
	ControllerScrape bool
}

// sampler records a sample each second until stopped.
type sampler struct {
	mu      sync.Mutex
	start   time.Time
	samples []sample
	stop    chan struct{}
	done    chan struct{}
}

func (e *env) sample(t *testing.T, service string) *sampler {
	s := &sampler{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
			smp := sample{At: time.Since(s.start).Round(time.Second)}
			smp.Pods, smp.PodsReady, _, _ = e.fnPods(ctx, service)
			if n, ok := e.requested(ctx); ok {
				smp.Requested, smp.ControllerScrape = n, true
			}
			cancel()
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { s.Stop() })
	return s
}

// Stop ends the sampling and returns the samples.
func (s *sampler) Stop() []sample {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

// requested is the sum of sluice_knative_requested_replicas on the
// controller's pods.
func (e *env) requested(ctx context.Context) (int, bool) {
	pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sluice-controller"})
	if err != nil {
		return 0, false
	}
	total, found := 0.0, false
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		v, ok, err := integration.ScrapeSum(ctx, "http://"+p.Status.PodIP+":9090/metrics", "sluice_knative_requested_replicas")
		if err != nil {
			continue
		}
		found = true
		if ok {
			total += v
		}
	}
	return int(total), found
}

// runningJob is a job submitted on the cluster with its agent beside it and
// a trainer reading every batch in the background.
type runningJob struct {
	id      string
	d       integration.Dataset
	epochs  int
	start   time.Time
	agent   *integration.Process
	trainer *integration.Trainer
	done    chan error
	first   chan time.Duration // when the first batch came, since start

	agentReady time.Duration      // when its agent was ready, since start
	stop       context.CancelFunc // ends the trainer

	mu   sync.Mutex
	wait time.Duration // the trainer's wait for batches (startPacedJob)
}

// startJob submits an image job over d and starts its agent and trainer;
// more sets other fields of the spec. The job's id is name and this run's
// suffix: a cluster kept up between runs keeps its jobs.
func (e *env) startJob(t *testing.T, name string, d integration.Dataset, epochs, maxReplicas int, more ...map[string]any) *runningJob {
	t.Helper()
	return e.startPacedJob(t, name, d, epochs, maxReplicas, nil, more...)
}

// startPacedJob is startJob with a trainer that, after each batch, computes
// for compute() (nil: not at all) before it asks for the next, as a GPU's
// step would; wait is then the time it spent waiting for batches.
func (e *env) startPacedJob(t *testing.T, name string, d integration.Dataset, epochs, maxReplicas int,
	compute func() time.Duration, more ...map[string]any) *runningJob {
	t.Helper()
	id := name + "-" + e.suffix
	j := &runningJob{id: id, d: d, epochs: epochs, start: time.Now(), trainer: integration.NewTrainer(),
		done: make(chan error, 1), first: make(chan time.Duration, 1)}
	var once sync.Once
	asked := j.start // when the trainer last asked for a batch
	j.trainer.AfterBatch(func(int) {
		now := time.Now()
		once.Do(func() { j.first <- now.Sub(j.start) })
		j.mu.Lock()
		j.wait += now.Sub(asked)
		j.mu.Unlock()
		if compute != nil {
			time.Sleep(compute())
		}
		asked = time.Now()
	})
	spec := map[string]any{
		"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": 16, "epochs": epochs, "seed": 7, "max_replicas": maxReplicas,
	}
	for _, m := range more {
		maps.Copy(spec, m)
	}
	e.submit(t, spec)
	var url string
	j.agent, url = e.agent(t, "agent-"+id, id)
	j.agentReady = time.Since(j.start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	j.stop = cancel
	go func() { j.done <- j.trainer.Run(ctx, func() string { return url }) }()
	return j
}

// waited is how long the trainer has waited for batches so far (from its
// start to its first batch, and after each step's compute to the next).
func (j *runningJob) waited() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.wait
}

// firstBatch waits for the first batch and returns when it came, since the
// job's submission.
func (j *runningJob) firstBatch(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-j.first:
		return d
	case err := <-j.done:
		j.done <- err
		t.Fatalf("job %s ended before its first batch: %v", j.id, err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("job %s: no first batch within 3 minutes", j.id)
	}
	return 0
}

// waitSamples waits until the trainer received n samples.
func (j *runningJob) waitSamples(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 5*time.Minute, 100*time.Millisecond, func() error {
		select {
		case err := <-j.done:
			j.done <- err
			return fmt.Errorf("job %s ended at %d samples before %d: %v", j.id, j.trainer.Samples(), n, err)
		default:
		}
		if got := j.trainer.Samples(); got < n {
			return fmt.Errorf("job %s: %d samples of %d", j.id, got, n)
		}
		return nil
	})
}

// finish waits for the trainer's last batch, checks every sample came
// once, and waits for the job to succeed.
func (j *runningJob) finish(t *testing.T, e *env, js jetstream.JetStream) integration.Report {
	t.Helper()
	if err := <-j.done; err != nil {
		t.Fatalf("job %s: trainer: %v\n%s", j.id, err, j.agent.Tail(30))
	}
	r := j.trainer.Check(j.id, j.d.Keys, j.epochs, j.d.Corrupt, time.Since(j.start))
	t.Log(r.Line())
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, js, j.id, wire.JobSucceeded, 2*time.Minute)
	return r
}
