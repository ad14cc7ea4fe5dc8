package knative_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/controller"
	fnserver "github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// member is one component connected to NATS as its role's user.
type member struct {
	role natsperm.Role
	nc   *nats.Conn
	js   jetstream.JetStream
}

// TestIntegrationNATSLeastPrivilege starts a real nats-server from the
// shipped nats/nats.conf and runs each component as its own user, as the
// commands connect (password from a file, the role's inbox prefix): the
// cli submits a job, the controller runs it with a function replica, an
// agent reads it to the end, with no permissions violation on the way.
// Then each user is refused what its role does not allow, and the server
// says so.
func TestIntegrationNATSLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	for _, r := range natsperm.Roles() {
		t.Setenv(r.PasswordEnv(), "pw-"+r.Name)
	}
	t.Setenv("POD_NAME", "sluice-nats-0")
	srv := testenv.NATSFromConfig(t, natsConfPath)
	dir := t.TempDir()

	connectAs := func(r natsperm.Role) member {
		t.Helper()
		pw := filepath.Join(dir, r.Name)
		if err := os.WriteFile(pw, []byte("pw-"+r.Name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := connect.Default()
		c.NATS = connect.NATS{URLs: []string{srv.ClientURL()}, User: r.User(), PasswordFile: pw, InboxPrefix: r.InboxPrefix}
		nc, js, err := c.ConnectNATS(ctx, "sluice-test-"+r.Name, nil)
		if err != nil {
			t.Fatalf("connecting as %s: %v", r.User(), err)
		}
		t.Cleanup(nc.Close)
		return member{role: r, nc: nc, js: js}
	}

	// Nobody gets in without a password, or with another role's.
	for name, n := range map[string]connect.NATS{
		"no credentials":  {},
		"wrong password":  {User: natsperm.Controller().User(), Password: "pw-agent"},
		"unknown user":    {User: "sluice", Password: "pw-admin"},
		"token, no users": {Token: "pw-admin"},
	} {
		c := connect.Default()
		n.URLs = []string{srv.ClientURL()}
		c.NATS = n
		if nc, _, err := c.ConnectNATS(ctx, "intruder", nil); !errors.Is(err, connect.ErrNATSAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("%s: %v, want refused", name, err)
		}
	}

	ctl, agent, cli, admin := connectAs(natsperm.Controller()), connectAs(natsperm.Agent()), connectAs(natsperm.CLI()), connectAs(natsperm.Admin())

	// The dataset, and a function replica serving it.
	s3c, _ := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: 8, Shards: 4, Seed: 1, MinSide: 24, MaxSide: 40, Quality: 60, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	fn, err := fnserver.New(fnserver.Config{}, s3c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	replica := httptest.NewServer(fn.Handler())
	t.Cleanup(replica.Close)

	// The controller creates the streams and runs jobs.
	c, err := controller.New(controller.Options{
		ID: "ctl", NC: ctl.nc, JS: ctl.js, Broker: broker.New(ctl.js, nil, streams.Options{}, nil),
		Actuator: &oneReplica{url: replica.URL, want: map[string]int{}}, LeaseTTL: 2 * time.Second, Tick: 100 * time.Millisecond, MaxReplicas: 1,
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if !c.Ready() {
			return errors.New("controller not ready")
		}
		return nil
	})

	// The cli submits, lists, reads the status and the planner's store;
	// an agent reads the job to its end.
	b := broker.New(cli.js, s3c, streams.Options{}, nil)
	spec := wire.JobSpec{ID: "least", Dataset: "s3://data/ds/", Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 1, Seed: 1}
	if _, err := b.Submit(ctx, spec); err != nil {
		t.Fatalf("submit as the cli: %v", err)
	}
	if jobs, err := b.List(ctx); err != nil || len(jobs) != 1 {
		t.Errorf("list as the cli: %d jobs, %v", len(jobs), err)
	}
	if _, err := b.Sweep(ctx, "none"); !errors.Is(err, broker.ErrSweepNotFound) {
		t.Errorf("sweep status as the cli: %v, want not found", err)
	}
	if plans, err := planner.Open(ctx, cli.js); err != nil {
		t.Errorf("plan store as the cli: %v", err)
	} else if _, err := plans.Get(ctx, spec.Pipeline, spec.Dataset); err != nil && !errors.Is(err, planner.ErrNoRate) {
		t.Errorf("reading a plan as the cli: %v", err)
	}
	samples := readToEnd(t, agent, spec.ID)
	if samples != 8 {
		t.Errorf("agent read %d samples, want 8", samples)
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		_, st, err := b.Status(ctx, spec.ID)
		if err != nil {
			return err
		}
		if st.State != wire.JobSucceeded {
			return fmt.Errorf("job %s (%s)", st.State, st.Reason)
		}
		return nil
	})
	// A reader's team: two agents, one rank of two each, each its own
	// sluice-agent connection: the member asks the planner on the team
	// subjects and is answered in its inbox.
	team := wire.JobSpec{ID: "team", Dataset: spec.Dataset, Pipeline: spec.Pipeline, BatchSize: 2, Epochs: 1, Seed: 1}
	if _, err := b.Submit(ctx, team); err != nil {
		t.Fatalf("submit as the cli: %v", err)
	}
	if samples := readAsTeam(t, []member{agent, connectAs(natsperm.Agent())}, team.ID); samples != 8 {
		t.Errorf("a team of two agents read %d samples, want 8", samples)
	}
	// A second job, cancelled by the cli.
	if _, err := b.Submit(ctx, wire.JobSpec{ID: "second", Dataset: spec.Dataset, Pipeline: spec.Pipeline, BatchSize: 4, Epochs: 1}); err != nil {
		t.Fatalf("second submit: %v", err)
	}
	if _, err := b.Cancel(ctx, "second", "test"); err != nil {
		t.Errorf("cancel as the cli: %v", err)
	}
	if v := srv.Violations(); len(v) > 0 {
		t.Errorf("permissions violations running a job as least-privilege users:\n%s", strings.Join(v, "\n"))
	}

	// Outside its permissions, each is refused.
	refused := func(m member, what, subject string, act func(ctx context.Context) error) {
		t.Helper()
		srv.Violations() // none but this act's count
		var seen []string
		// A refused request is dropped, so it only times out.
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := act(actx)
		want := fmt.Sprintf("%q", subject)
		testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
			seen = append(seen, srv.Violations()...)
			for _, v := range seen {
				if strings.Contains(v, "sluice-test-"+m.role.Name) && strings.Contains(v, want) {
					return nil
				}
			}
			return fmt.Errorf("%s: %s as %s (err %v): the server logged no violation of %s:\n%s", m.role.Name, what, m.role.User(), err, want, strings.Join(seen, "\n"))
		})
		t.Logf("%s refused: %s (%s)", m.role.User(), what, subject)
	}
	kv := func(m member, bucket string) jetstream.KeyValue {
		t.Helper()
		h, err := m.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("%s opening %s: %v", m.role.Name, bucket, err)
		}
		return h
	}
	put := func(m member, bucket, key string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := kv(m, bucket).Put(ctx, key, []byte(`{"forged":true}`))
			return err
		}
	}
	publish := func(m member, subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := m.nc.Publish(subject, []byte("{}")); err != nil {
				return err
			}
			return m.nc.FlushWithContext(ctx)
		}
	}
	subscribe := func(m member, subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			sub, err := m.nc.SubscribeSync(subject)
			if err != nil {
				return err
			}
			defer sub.Unsubscribe()
			return m.nc.FlushWithContext(ctx)
		}
	}
	deleteTaskStream := func(m member) func(context.Context) error {
		return func(ctx context.Context) error { return m.js.DeleteStream(ctx, wire.TaskStream) }
	}

	refused(agent, "write a job record", "$KV."+wire.JobsBucket+".least", put(agent, wire.JobsBucket, "least"))
	refused(agent, "write a dispatch plan", "$KV."+wire.DispatchBucket+".least", put(agent, wire.DispatchBucket, "least"))
	refused(agent, "take a job's lease", "$KV."+wire.LeasesBucket+".least", func(ctx context.Context) error {
		return agent.nc.PublishMsg(&nats.Msg{Subject: "$KV." + wire.LeasesBucket + ".least", Data: []byte("{}")})
	})
	refused(agent, "delete the task stream", "$JS.API.STREAM.DELETE."+wire.TaskStream, deleteTaskStream(agent))
	refused(agent, "create a consumer on the task stream", "$JS.API.CONSUMER.CREATE."+wire.TaskStream+".steal.sluice.tasks.least",
		func(ctx context.Context) error {
			_, err := agent.js.CreateConsumer(ctx, wire.TaskStream, jetstream.ConsumerConfig{Durable: "steal", FilterSubject: wire.TaskSubject("least")})
			return err
		})
	refused(agent, "queue a task", wire.TaskSubject("least"), publish(agent, wire.TaskSubject("least")))
	refused(agent, "read the controller's replies", natsperm.Controller().InboxPrefix+".>", subscribe(agent, natsperm.Controller().InboxPrefix+".>"))
	refused(agent, "read other agents' shard results", wire.ResultSubjects, subscribe(agent, wire.ResultSubjects))

	refused(cli, "write a reader position", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), put(cli, wire.ReadersBucket, wire.ReaderKey("least", "trainer")))
	refused(cli, "write a job status", "$KV."+wire.StatusBucket+".least", put(cli, wire.StatusBucket, "least"))
	refused(cli, "write a learned plan", "$KV."+wire.PlansBucket+".x", put(cli, wire.PlansBucket, "x"))
	refused(cli, "publish a shard result", wire.ResultSubject("least"), publish(cli, wire.ResultSubject("least")))
	refused(cli, "ask a reader's planner", wire.TeamSubject("least", "trainer", "join"), publish(cli, wire.TeamSubject("least", "trainer", "join")))
	pull := "$JS.API.CONSUMER.MSG.NEXT." + wire.TaskStream + "." + wire.DispatchConsumer("least")
	refused(cli, "take a task", pull, func(ctx context.Context) error {
		_, err := cli.nc.RequestWithContext(ctx, pull, []byte(`{"batch":1,"no_wait":true}`))
		return err
	})
	refused(cli, "delete the task stream", "$JS.API.STREAM.DELETE."+wire.TaskStream, deleteTaskStream(cli))
	refused(cli, "change the task stream", "$JS.API.STREAM.UPDATE."+wire.TaskStream, func(ctx context.Context) error {
		_, err := cli.js.UpdateStream(ctx, streams.Tasks(streams.Options{}))
		return err
	})
	// Deleting a job purges its readers' positions: the admin's, not the cli's.
	refused(cli, "delete a job", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), func(ctx context.Context) error {
		return b.Delete(ctx, "least", false)
	})
	if err := broker.New(admin.js, nil, streams.Options{}, nil).Delete(ctx, "least", false); err != nil {
		t.Errorf("delete as the admin: %v", err)
	}

	refused(ctl, "write a reader position", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), put(ctl, wire.ReadersBucket, wire.ReaderKey("least", "trainer")))
	refused(ctl, "queue a task", wire.TaskSubject("least"), publish(ctl, wire.TaskSubject("least")))
	refused(ctl, "read the agents' replies", natsperm.Agent().InboxPrefix+".>", subscribe(ctl, natsperm.Agent().InboxPrefix+".>"))
}

// readToEnd reads job id as a trainer would, through an agent connected
// as m, and returns how many samples it got.
func readToEnd(t *testing.T, m member, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := traineragent.Open(ctx, m.nc, m.js, id, traineragent.Options{}, nil, nil, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	n := 0
	for {
		batch, err := a.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
		n += len(batch.Keys)
	}
	if err := <-ran; err != nil {
		t.Errorf("agent: %v", err)
	}
	return n
}

// readAsTeam reads job id as a trainer of len(ms) ranks would, each rank
// through its own agent connected as its member, and returns how many
// samples the ranks got together.
func readAsTeam(t *testing.T, ms []member, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	counts := make([]int, len(ms))
	key, err := wire.ParseTeamKey(wire.NewTeamKey()) // what job submit writes
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		opts := traineragent.Options{Name: fmt.Sprintf("team-%d", i), WorldSize: len(ms), Ranks: []int{i}, TeamKey: key}
		a, err := traineragent.Open(ctx, m.nc, m.js, id, opts, nil, nil, nil)
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		srv := httptest.NewServer(a.Handler())
		defer srv.Close()
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil {
				t.Errorf("agent %d: %v", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			counts[i] = readRank(ctx, t, srv.URL, i, len(ms))
		}()
	}
	wg.Wait()
	return counts[0] + counts[1]
}

// readRank GETs rank's batches until 410 and returns how many samples it got.
func readRank(ctx context.Context, t *testing.T, url string, rank, world int) int {
	n := 0
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/batch?rank=%d&world_size=%d", url, rank, world), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return n
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusGone:
			return n
		case err != nil || resp.StatusCode != http.StatusOK:
			t.Errorf("rank %d: %s %s %v", rank, resp.Status, body, err)
			return n
		}
		b, err := traineragent.DecodeBatch(body)
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return n
		}
		n += len(b.Keys)
	}
}

// oneReplica is an actuator whose every job's replicas are one function
// server, ready as soon as asked for.
type oneReplica struct {
	url  string
	mu   sync.Mutex
	want map[string]int
}

func (o *oneReplica) Scale(_ context.Context, job string, n int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.want[job] = n
	return nil
}

func (o *oneReplica) Ready(job string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return min(o.want[job], 1)
}

func (o *oneReplica) Endpoints(job string) []string {
	if o.Ready(job) == 0 {
		return nil
	}
	return []string{o.url}
}
