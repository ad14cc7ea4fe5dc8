package knative_test

import (
	"cmp"
	"context"
	"encoding/json"
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

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/controller"
	fnserver "github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/kvpoll"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// member is one component connected to NATS as its role's user, under
// its connection name (which the server's violations name).
type member struct {
	role natsperm.Role
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
}

// leastPrivilege is a real nats-server started from the shipped
// nats/nats.conf, with the auth callout's issuer in its environment, and
// a controller connected as its user that answers the callout, running
// jobs with one function replica over a small image dataset.
type leastPrivilege struct {
	t      *testing.T
	srv    *testenv.ConfiguredNATS
	dir    string
	ctl    *controller.Controller
	ctlReg *prometheus.Registry
	s3c    *s3.Client
	issuer nkeys.KeyPair
}

func startLeastPrivilege(t *testing.T) *leastPrivilege {
	ctx := context.Background()
	issuer, _ := setNATSEnv(t)
	t.Setenv("POD_NAME", "sluice-nats-0")
	e := &leastPrivilege{t: t, srv: testenv.NATSFromConfig(t, natsConfPath), dir: t.TempDir(), ctlReg: prometheus.NewRegistry(), issuer: issuer}

	// The dataset, and a function replica serving it.
	s3c, _ := testenv.S3(t, "")
	e.s3c = s3c
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

	// The controller creates the streams, runs jobs and lets agents in.
	ctl := e.connectAs(natsperm.Controller())
	c, err := controller.New(controller.Options{
		ID: "ctl", NC: ctl.nc, JS: ctl.js, Broker: broker.New(ctl.js, nil, streams.Options{}, nil),
		Actuator: &oneReplica{url: replica.URL, want: map[string]int{}}, LeaseTTL: 2 * time.Second, Tick: 100 * time.Millisecond, MaxReplicas: 1,
		CalloutIssuer: issuer,
	}, nil, e.ctlReg)
	if err != nil {
		t.Fatal(err)
	}
	e.ctl = c
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
	return e
}

// connectAs connects as r's static user, as the commands connect
// (password from a file, the role's inbox prefix).
func (e *leastPrivilege) connectAs(r natsperm.Role) member {
	e.t.Helper()
	pw := filepath.Join(e.dir, r.Name)
	if err := os.WriteFile(pw, []byte("pw-"+r.Name+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	c := connect.Default()
	c.NATS = connect.NATS{URLs: []string{e.srv.ClientURL()}, User: r.User(), PasswordFile: pw, InboxPrefix: r.InboxPrefix}
	name := "sluice-test-" + r.Name
	nc, js, err := c.ConnectNATS(context.Background(), name, nil)
	if err != nil {
		e.t.Fatalf("connecting as %s: %v", r.User(), err)
	}
	e.t.Cleanup(nc.Close)
	return member{role: r, name: name, nc: nc, js: js}
}

// connectAgent connects as `sluice agent --job job` does with the job's
// team key: as the job's user, with the password the key gives.
func (e *leastPrivilege) connectAgent(job string, key []byte, label string) (member, error) {
	r := natsperm.AgentFor(job)
	c := connect.Default()
	c.NATS = connect.NATS{URLs: []string{e.srv.ClientURL()}, User: wire.AgentNATSUser(job), Password: wire.AgentNATSPassword(key), InboxPrefix: r.InboxPrefix, RetryAuth: true}
	name := "sluice-test-agent-" + label
	nc, js, err := c.ConnectNATS(context.Background(), name, nil)
	if err != nil {
		return member{}, err
	}
	e.t.Cleanup(nc.Close)
	// As the command does: the record and plan are polled, not watched.
	return member{role: r, name: name, nc: nc, js: kvpoll.JetStream(js, 0)}, nil
}

func (e *leastPrivilege) mustConnectAgent(job string, key []byte, label string) member {
	e.t.Helper()
	m, err := e.connectAgent(job, key, label)
	if err != nil {
		e.t.Fatalf("connecting as an agent of %s: %v", job, err)
	}
	return m
}

// agentLogins is the controller's count of agents' logins with result.
func (e *leastPrivilege) agentLogins(result string) float64 {
	e.t.Helper()
	n, err := testenv.Counter(e.ctlReg, "sluice_controller_agent_logins_total", "result", result)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// newTeamKey is a team key as `sluice job submit` makes it.
func newTeamKey(t *testing.T) []byte {
	t.Helper()
	key, err := wire.ParseTeamKey(wire.NewTeamKey())
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// refused runs act as m and waits until the server logs m's violation of
// subject (ending in "...": of a subject starting so): what m's
// permissions do not allow is refused, and said so.
func (e *leastPrivilege) refused(m member, what, subject string, act func(ctx context.Context) error) {
	t := e.t
	t.Helper()
	e.srv.Violations() // none but this act's count
	var seen []string
	// A refused request is dropped, so it only times out.
	actx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := act(actx)
	want := fmt.Sprintf("%q", subject)
	if p, ok := strings.CutSuffix(subject, "..."); ok { // a subject starting so
		want = `"` + p
	}
	testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		seen = append(seen, e.srv.Violations()...)
		for _, v := range seen {
			if strings.Contains(v, m.name) && strings.Contains(v, want) {
				return nil
			}
		}
		return fmt.Errorf("%s: %s (err %v): the server logged no violation of %s:\n%s", m.name, what, err, want, strings.Join(seen, "\n"))
	})
	t.Logf("%s refused: %s (%s)", m.name, what, subject)
}

func kvOf(t *testing.T, m member, bucket string) jetstream.KeyValue {
	t.Helper()
	h, err := m.js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatalf("%s opening %s: %v", m.name, bucket, err)
	}
	return h
}

func put(t *testing.T, m member, bucket, key string, value []byte) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := kvOf(t, m, bucket).Put(ctx, key, value)
		return err
	}
}

func publish(m member, subject string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := m.nc.Publish(subject, []byte("{}")); err != nil {
			return err
		}
		return m.nc.FlushWithContext(ctx)
	}
}

func subscribe(m member, subject string) func(context.Context) error {
	return func(ctx context.Context) error {
		sub, err := m.nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		return m.nc.FlushWithContext(ctx)
	}
}

func request(m member, subject, body string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := m.nc.RequestWithContext(ctx, subject, []byte(body))
		return err
	}
}

// TestIntegrationNATSLeastPrivilege runs each component as its own user
// on the shipped nats/nats.conf: the cli submits a job, the controller
// runs it with a function replica, an agent (connected as its job, let in
// by the controller) reads it to the end, with no permissions violation
// on the way. Then each user is refused what its role does not allow,
// and the server says so.
func TestIntegrationNATSLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	e := startLeastPrivilege(t)
	srv := e.srv

	// Nobody gets in without a password, or with another role's.
	for name, n := range map[string]connect.NATS{
		"no credentials":  {},
		"wrong password":  {User: natsperm.Controller().User(), Password: "pw-cli"},
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

	ctl, cli, admin := e.connectAs(natsperm.Controller()), e.connectAs(natsperm.CLI()), e.connectAs(natsperm.Admin())

	// The cli submits, lists, reads the status and the planner's store;
	// an agent reads the job to its end.
	b := broker.New(cli.js, e.s3c, streams.Options{}, nil)
	spec := wire.JobSpec{ID: "least", Dataset: "s3://data/ds/", Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 1, Seed: 1}
	key := newTeamKey(t)
	if _, err := b.Submit(ctx, spec, broker.WithTeamKey(key)); err != nil {
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
	agent := e.mustConnectAgent(spec.ID, key, "least")
	samples := readToEnd(t, agent, spec.ID, key)
	if len(samples) != 8 {
		t.Errorf("agent read %d samples, want 8", len(samples))
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
	// connection as the job: the member asks the planner on the job's
	// team subjects and is answered in its inbox.
	team := wire.JobSpec{ID: "team", Dataset: spec.Dataset, Pipeline: spec.Pipeline, BatchSize: 2, Epochs: 1, Seed: 1}
	teamKey := newTeamKey(t)
	if _, err := b.Submit(ctx, team, broker.WithTeamKey(teamKey)); err != nil {
		t.Fatalf("submit as the cli: %v", err)
	}
	members := []member{e.mustConnectAgent(team.ID, teamKey, "team-0"), e.mustConnectAgent(team.ID, teamKey, "team-1")}
	if samples := readAsTeam(t, members, team.ID, teamKey); samples != 8 {
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
	deleteTaskStream := func(m member) func(context.Context) error {
		return func(ctx context.Context) error { return m.js.DeleteStream(ctx, wire.TaskStream) }
	}
	refused := e.refused

	refused(agent, "write a job record", "$KV."+wire.JobsBucket+".least", put(t, agent, wire.JobsBucket, "least", []byte("{}")))
	refused(agent, "write a dispatch plan", "$KV."+wire.DispatchBucket+".least", put(t, agent, wire.DispatchBucket, "least", []byte("{}")))
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
	refused(agent, "answer the auth callout", natsperm.CalloutSubject, subscribe(agent, natsperm.CalloutSubject))

	refused(cli, "write a reader position", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), put(t, cli, wire.ReadersBucket, wire.ReaderKey("least", "trainer"), []byte("{}")))
	refused(cli, "write a job status", "$KV."+wire.StatusBucket+".least", put(t, cli, wire.StatusBucket, "least", []byte("{}")))
	refused(cli, "write a learned plan", "$KV."+wire.PlansBucket+".x", put(t, cli, wire.PlansBucket, "x", []byte("{}")))
	refused(cli, "publish a shard result", wire.ResultSubject("least"), publish(cli, wire.ResultSubject("least")))
	refused(cli, "ask a reader's planner", wire.TeamSubject("least", "trainer", "join"), publish(cli, wire.TeamSubject("least", "trainer", "join")))
	pull := "$JS.API.CONSUMER.MSG.NEXT." + wire.TaskStream + "." + wire.DispatchConsumer("least")
	refused(cli, "take a task", pull, request(cli, pull, `{"batch":1,"no_wait":true}`))
	refused(cli, "delete the task stream", "$JS.API.STREAM.DELETE."+wire.TaskStream, deleteTaskStream(cli))
	refused(cli, "change the task stream", "$JS.API.STREAM.UPDATE."+wire.TaskStream, func(ctx context.Context) error {
		_, err := cli.js.UpdateStream(ctx, streams.Tasks(streams.Options{}))
		return err
	})
	refused(cli, "answer the auth callout", natsperm.CalloutSubject, subscribe(cli, natsperm.CalloutSubject))
	// Deleting a job purges its readers' positions: the admin's, not the cli's.
	refused(cli, "delete a job", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), func(ctx context.Context) error {
		return b.Delete(ctx, "least", false)
	})
	if err := broker.New(admin.js, nil, streams.Options{}, nil).Delete(ctx, "least", false); err != nil {
		t.Errorf("delete as the admin: %v", err)
	}

	refused(ctl, "write a reader position", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("least", "trainer"), put(t, ctl, wire.ReadersBucket, wire.ReaderKey("least", "trainer"), []byte("{}")))
	refused(ctl, "queue a task", wire.TaskSubject("least"), publish(ctl, wire.TaskSubject("least")))
	refused(ctl, "read the agents' replies", natsperm.AgentFor("least").InboxPrefix+".>", subscribe(ctl, natsperm.AgentFor("least").InboxPrefix+".>"))
}

// readToEnd reads job id as a trainer would, through an agent connected
// as m, and returns the samples' keys it got.
func readToEnd(t *testing.T, m member, id string, key []byte) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := traineragent.Open(ctx, m.nc, m.js, id, traineragent.Options{TeamKey: key}, nil, nil, nil)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	var keys []string
	for {
		batch, err := a.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
		keys = append(keys, batch.Keys...)
	}
	if err := <-ran; err != nil {
		t.Errorf("agent: %v", err)
	}
	return keys
}

// readAsTeam reads job id as a trainer of len(ms) ranks would, each rank
// through its own agent connected as its member, and returns how many
// samples the ranks got together.
func readAsTeam(t *testing.T, ms []member, id string, key []byte) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	counts := make([]int, len(ms))
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

// TestIntegrationNATSAgentActsOnItsJobOnly: with the shipped nats.conf,
// an agent of job A, let in as A by the controller, can touch nothing of
// job B: not B's done, position or failed-tasks keys (a forged done key
// used to mark B succeeded with none of its tasks done: issue 24's
// reproduction 15), B's tasks, B's record, B's demand, results and team
// subjects, or B's agents' replies. An agent with a wrong password, or
// as the shared user agents had before, is not let in, and the
// controller counts each refusal. B, untouched, delivers every sample
// once.
func TestIntegrationNATSAgentActsOnItsJobOnly(t *testing.T) {
	ctx := context.Background()
	e := startLeastPrivilege(t)
	cli := e.connectAs(natsperm.CLI())
	b := broker.New(cli.js, e.s3c, streams.Options{}, nil)
	keyA, keyB := newTeamKey(t), newTeamKey(t)
	jobA := wire.JobSpec{ID: "job-a", Dataset: "s3://data/ds/", Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 1, Seed: 1}
	jobB := jobA
	jobB.ID = "job-b"
	if _, err := b.Submit(ctx, jobA, broker.WithTeamKey(keyA)); err != nil {
		t.Fatal(err)
	}
	recB, err := b.Submit(ctx, jobB, broker.WithTeamKey(keyB))
	if err != nil {
		t.Fatal(err)
	}

	// Who is not let in.
	for name, login := range map[string]struct {
		job, user string
		key       []byte
		result    string
	}{
		"B's user with A's key":      {job: "job-b", key: keyA, result: "wrong_password"},
		"a job that does not exist":  {job: "job-c", key: keyA, result: "no_job"},
		"the shared user of before":  {user: "sluice-agent", key: keyA, result: "not_agent_user"},
		"a job without a credential": {job: "nokey", key: keyA, result: "no_credential"},
	} {
		if login.job == "nokey" {
			if _, err := b.Submit(ctx, wire.JobSpec{ID: "nokey", Dataset: jobA.Dataset, Pipeline: jobA.Pipeline, BatchSize: 4, Epochs: 1}); err != nil {
				t.Fatal(err)
			}
		}
		before := e.agentLogins(login.result)
		c := connect.Default()
		user := cmp.Or(login.user, wire.AgentNATSUser(login.job))
		c.NATS = connect.NATS{URLs: []string{e.srv.ClientURL()}, User: user, Password: wire.AgentNATSPassword(login.key)}
		nc, _, err := c.ConnectNATS(ctx, "intruder", nil)
		if !errors.Is(err, connect.ErrNATSAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("%s: %v, want refused", name, err)
			continue
		}
		if got := e.agentLogins(login.result); got != before+1 {
			t.Errorf("%s: the controller counted %v refusals %q, want %v", name, got, login.result, before+1)
		}
	}
	accepted := e.agentLogins("accepted")
	a := e.mustConnectAgent("job-a", keyA, "a")
	if got := e.agentLogins("accepted"); got != accepted+1 {
		t.Errorf("accepted logins %v, want %v", got, accepted+1)
	}

	// B's keys, as an agent of B would write them, and as A would forge
	// them: B done before any of its tasks, a rewound position, a failed
	// task.
	done, _ := json.Marshal(wire.ReaderDone{Submitted: recB.Submitted, Time: time.Now()})
	forgedAt := time.Now()
	e.refused(a, "mark B's reader done", "$KV."+wire.ReadersBucket+"."+wire.ReaderDoneKey("job-b", "trainer"),
		put(t, a, wire.ReadersBucket, wire.ReaderDoneKey("job-b", "trainer"), done))
	e.refused(a, "write B's reader position", "$KV."+wire.ReadersBucket+"."+wire.ReaderKey("job-b", "trainer"),
		put(t, a, wire.ReadersBucket, wire.ReaderKey("job-b", "trainer"), []byte("{}")))
	e.refused(a, "write B's tasks given up", "$KV."+wire.ReadersBucket+"."+wire.ShardsFailedKey("job-b"),
		put(t, a, wire.ReadersBucket, wire.ShardsFailedKey("job-b"), []byte("{}")))
	e.refused(a, "read B's reader position", "$JS.API.DIRECT.GET.KV_"+wire.ReadersBucket+".$KV."+wire.ReadersBucket+"."+wire.ReaderKey("job-b", "trainer"),
		func(ctx context.Context) error {
			_, err := kvOf(t, a, wire.ReadersBucket).Get(ctx, wire.ReaderKey("job-b", "trainer"))
			return err
		})
	e.refused(a, "read B's job record", "$JS.API.DIRECT.GET.KV_"+wire.JobsBucket+".$KV."+wire.JobsBucket+".job-b",
		func(ctx context.Context) error {
			_, err := kvOf(t, a, wire.JobsBucket).Get(ctx, "job-b")
			return err
		})
	e.refused(a, "read B's dispatch plan", "$JS.API.DIRECT.GET.KV_"+wire.DispatchBucket+".$KV."+wire.DispatchBucket+".job-b",
		func(ctx context.Context) error {
			_, err := kvOf(t, a, wire.DispatchBucket).Get(ctx, "job-b")
			return err
		})
	// No consumer on a bucket, not even on A's own record: JetStream
	// would deliver A's record to any subject the request names (B's
	// results here), whatever A's permissions.
	for _, bucket := range []string{wire.JobsBucket, wire.DispatchBucket} {
		create := "$JS.API.CONSUMER.CREATE.KV_" + bucket + ".w.$KV." + bucket + ".job-a"
		e.refused(a, "create a push consumer on its own "+bucket+" key", create, request(a, create,
			`{"stream_name":"KV_`+bucket+`","config":{"name":"w","deliver_subject":"sluice.results.job-b","filter_subject":"$KV.`+bucket+`.job-a","ack_policy":"none"}}`))
	}
	consumerB := wire.DispatchConsumer("job-b")
	pull := "$JS.API.CONSUMER.MSG.NEXT." + wire.TaskStream + "." + consumerB
	e.refused(a, "pull B's tasks", pull, request(a, pull, `{"batch":1,"no_wait":true}`))
	e.refused(a, "bind to B's task consumer", "$JS.API.CONSUMER.INFO."+wire.TaskStream+"."+consumerB, func(ctx context.Context) error {
		_, err := a.js.Consumer(ctx, wire.TaskStream, consumerB)
		return err
	})
	ack := "$JS.ACK." + wire.TaskStream + "." + consumerB + ".1.1.1.0.0"
	e.refused(a, "ack B's task", ack, publish(a, ack))
	e.refused(a, "publish B's demand", wire.DemandSubject("job-b"), publish(a, wire.DemandSubject("job-b")))
	e.refused(a, "publish B's results", wire.ResultSubject("job-b"), publish(a, wire.ResultSubject("job-b")))
	resume := wire.TeamSubject("job-b", "trainer", "resume")
	e.refused(a, "ask B's planner", resume, publish(a, resume))
	e.refused(a, "serve B's team", wire.TeamSubject("job-b", "trainer", "*"), subscribe(a, wire.TeamSubject("job-b", "trainer", "*")))
	inboxB := natsperm.AgentFor("job-b").InboxPrefix + ".>"
	e.refused(a, "read B's agents' replies", inboxB, subscribe(a, inboxB))
	e.refused(a, "answer B's agents", natsperm.AgentFor("job-b").InboxPrefix+".x.1", publish(a, natsperm.AgentFor("job-b").InboxPrefix+".x.1"))
	e.refused(a, "read every agent's replies", "_INBOX_sluice_agent.>", subscribe(a, "_INBOX_sluice_agent.>"))

	// B runs on, not done: its status is written a few ticks after the
	// forgery, and it is still running.
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		_, st, err := b.Status(ctx, "job-b")
		if err != nil {
			return err
		}
		if st.State == wire.JobSucceeded {
			return nil // the forgery took: checked below
		}
		if st.State != wire.JobRunning || !st.Updated.After(forgedAt.Add(time.Second)) {
			return fmt.Errorf("job-b %s, status of %v", st.State, st.Updated)
		}
		return nil
	})
	if rec, st, err := b.Status(ctx, "job-b"); err != nil || rec.State != wire.JobRunning {
		t.Fatalf("job-b is %s (%s) with %d of %d tasks done after an agent of job-a forged its done key, want running (%v)",
			rec.State, rec.Reason, st.Tasks.Done, recB.Tasks(), err)
	}

	// B's own agent reads B to its end: every sample once.
	keys := readToEnd(t, e.mustConnectAgent("job-b", keyB, "b"), "job-b", keyB)
	seen := map[string]int{}
	for _, k := range keys {
		seen[k]++
	}
	if len(keys) != 8 || len(seen) != 8 {
		t.Errorf("job-b's agent got %d samples, %d distinct, want 8 once each", len(keys), len(seen))
	}
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		_, st, err := b.Status(ctx, "job-b")
		if err != nil {
			return err
		}
		if st.State != wire.JobSucceeded || st.Tasks.Done != recB.Tasks() {
			return fmt.Errorf("job-b %s with %d of %d tasks done", st.State, st.Tasks.Done, recB.Tasks())
		}
		return nil
	})
}
