package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/stepplan"
	"github.com/sluice-project/sluice/wire"
)

// The team's data path against one agent's, side by side: a reader of 4
// ranks (batches of 32 ImageNet-size uint8 224x224x3 samples, chunks of
// about 3 MiB) served by one agent, or by two agents of 2 ranks each (a
// team: the one serving rank 0 plans). The function replica and the NATS
// server run in child processes (this test binary again, see
// TestTeamBenchChild), so that this process's CPU time is the agents'
// own: receiving, telling the planner, planning, cutting and handing out.
// Each agent has its own NATS connection and its goroutines carry the
// pprof label agent=<name>, so `go tool pprof -tags` on a -cpuprofile
// splits the CPU between the planner and the member.
const (
	tbShards, tbChunks, tbPerChunk = 10, 4, 20 // 800 samples an epoch
	tbEpochs, tbBatch, tbWorld     = 2, 32, 4  // 6 full steps and a tail of 8 per rank
	tbInFlight                     = 4         // tasks in flight, over all agents
	tbChildEnv                     = "SLUICE_TEAMBENCH_CHILD"
)

// BenchmarkTeam: agents=1 serves the 4 ranks from one agent; agents=2
// from two (ranks 0,1 and 2,3), each rank a goroutine calling its agent's
// nextPart as a trainer's requests do. Metrics per op (one job of 2
// epochs): samples/s and MB/s delivered; CPU seconds per GB delivered of
// this process (the agents), of the function replica and of the NATS
// server; bytes through the NATS server (varz in+out) per byte
// delivered; the team's requests by kind; the function's sends beyond
// one per shard and epoch (rows produced again).
func BenchmarkTeam(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) { benchTeam(b, n) })
	}
}

func benchTeam(b *testing.B, agents int) {
	e := newTeamBenchEnv(b)
	var (
		bytes, samples int64
		wall, selfCPU  time.Duration
		fnCPU, natsCPU time.Duration
		natsBytes      int64
		resends, lost  int64
		chunks         int64
	)
	reqs := map[string]int64{}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("team%d-%d", agents, e.next())
		job := fixture.Job(id, tbEpochs, tbBatch, tbLayout())
		e.submit(b, job, agents)
		runs := e.newAgents(b, job, agents)
		fn0, nats0, self0, varz0 := e.fn.cpu(b), e.nats.cpu(b), selfCPUTime(b), e.varz(b)
		start := time.Now()
		b.StartTimer()

		counter := &teamCounter{}
		got := runTeam(ctx, b, runs, func() { counter = e.countTeam(b, id) })

		b.StopTimer()
		wall += time.Since(start)
		selfCPU += selfCPUTime(b) - self0
		fnCPU += e.fn.cpu(b) - fn0
		natsCPU += e.nats.cpu(b) - nats0
		v := e.varz(b)
		counter.close()
		natsBytes += v.InBytes + v.OutBytes - varz0.InBytes - varz0.OutBytes - counter.bytes.Load()
		if want := int64(tbEpochs * tbShards * tbChunks * tbPerChunk); got.samples != want {
			b.Fatalf("%d samples delivered, want %d", got.samples, want)
		}
		bytes += got.bytes
		samples += got.samples
		chunks += tbEpochs * tbShards * tbChunks
		s := e.sends(b, id)
		resends += int64(s.Sends - s.Shards)
		lost += int64(s.Again)
		for op, n := range counter.counts() {
			reqs[op] += n
		}
		b.StartTimer()
	}
	b.StopTimer()
	gb := float64(bytes) / 1e9
	b.SetBytes(bytes / int64(b.N))
	b.ReportMetric(float64(samples)/wall.Seconds(), "samples/s")
	b.ReportMetric(selfCPU.Seconds()/gb, "agents-cpu-s/GB")
	b.ReportMetric(fnCPU.Seconds()/gb, "fn-cpu-s/GB")
	b.ReportMetric(natsCPU.Seconds()/gb, "nats-cpu-s/GB")
	b.ReportMetric(float64(natsBytes)/float64(bytes), "nats-B/B")
	b.ReportMetric(float64(resends)/float64(b.N), "resends/op")
	b.ReportMetric(float64(lost)/float64(b.N), "resends-own/op")
	if agents > 1 {
		for _, op := range []string{wire.TeamOpNotes, wire.TeamOpPart, wire.TeamOpStatus} {
			b.ReportMetric(float64(reqs[op])/float64(chunks), op+"-reqs/chunk")
		}
	}
}

func tbLayout() fixture.Layout {
	l := make(fixture.Layout, tbShards)
	for s := range l {
		l[s] = make([]int, tbChunks)
		for c := range l[s] {
			l[s][c] = tbPerChunk
		}
	}
	return l
}

// delivered is what the ranks took.
type delivered struct{ samples, bytes int64 }

// agentRun is an agent of the benchmark and the ranks it serves.
type agentRun struct {
	name  string
	a     *Agent
	ranks []int
}

// runTeam runs every agent and its ranks until each rank got every step
// and every agent's Run returned. With a team, the planner runs first and
// planning is called once it answers the team's requests: a subscriber
// counting them must not be there before, or the members' first requests
// find it rather than no responders, and wait for their timeout.
func runTeam(ctx context.Context, b *testing.B, runs []agentRun, planning func()) delivered {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var samples, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, tbWorld+len(runs))
	for i, ar := range runs {
		// The label reaches every goroutine the agent starts, and those
		// of the ranks it serves (on a node, its trainer's requests).
		pprof.Do(ctx, pprof.Labels("agent", ar.name), func(ctx context.Context) {
			wg.Go(func() {
				if err := ar.a.Run(ctx); err != nil {
					errs[tbWorld+i] = fmt.Errorf("agent %s: %w", ar.name, err)
				}
			})
			r := ar.a.readers[0]
			if i == 0 && len(runs) > 1 {
				waitPlanner(ctx, b, ar.a.nc, ar.a.job.Spec.ID)
				planning()
			}
			for _, rank := range ar.ranks {
				wg.Go(func() {
					for {
						p, err := r.nextPart(ctx, readerstate.RankRequest{Rank: rank, World: tbWorld})
						if errors.Is(err, io.EOF) {
							return
						}
						if err != nil {
							errs[rank] = fmt.Errorf("rank %d: %w", rank, err)
							cancel()
							return
						}
						n := len(p.Keys)
						if len(p.Tensors) != 2 || p.DataLen(0) != n*224*224*3 {
							errs[rank] = fmt.Errorf("rank %d: a part of %d samples with tensors %v", rank, n, p.Tensors)
							cancel()
							return
						}
						samples.Add(int64(n))
						for j := range p.Tensors {
							bytes.Add(int64(p.DataLen(j)))
						}
					}
				})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return delivered{samples.Load(), bytes.Load()}
}

// waitPlanner returns once job's planner answers a request.
func waitPlanner(ctx context.Context, b *testing.B, nc *nats.Conn, job string) {
	for {
		_, err := nc.RequestWithContext(ctx, wire.TeamSubject(job, wire.DefaultReader, "probe"), nil)
		if err == nil {
			return
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			b.Fatalf("probing the planner: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// teamBenchEnv is the benchmark's NATS server and function replica, each
// a child process, and this process's connection to the server.
type teamBenchEnv struct {
	fn, nats *child
	natsURL  string
	fnURL    string
	varzURL  string
	nc       *nats.Conn
	js       jetstream.JetStream
	jobs     atomic.Int64
}

func newTeamBenchEnv(b *testing.B) *teamBenchEnv {
	b.Helper()
	e := &teamBenchEnv{}
	var addrs []string
	e.nats, addrs = startChild(b, "nats")
	e.natsURL, e.varzURL = addrs[0], addrs[1]
	e.fn, addrs = startChild(b, "function")
	e.fnURL = addrs[0]
	e.nc, e.js = benchConnect(b, e.natsURL)
	b.Cleanup(e.nc.Close)
	if err := streams.Ensure(context.Background(), e.js, streams.Options{}); err != nil {
		b.Fatal(err)
	}
	return e
}

func (e *teamBenchEnv) next() int64 { return e.jobs.Add(1) }

// submit records job, queues its tasks and publishes a dispatch plan of
// tbInFlight tasks shared evenly by the agents.
func (e *teamBenchEnv) submit(b *testing.B, job wire.Job, agents int) {
	b.Helper()
	ctx := context.Background()
	env{e.nc, e.js}.record(b, job)
	if _, err := e.js.CreateOrUpdateConsumer(ctx, wire.TaskStream, streams.Dispatch(job.Spec.ID, 0)); err != nil {
		b.Fatal(err)
	}
	for ep := range job.Spec.Epochs {
		for s := range job.Shards {
			data, err := json.Marshal(job.Task(ep, s))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.js.Publish(ctx, wire.TaskSubject(job.Spec.ID), data); err != nil {
				b.Fatal(err)
			}
		}
	}
	shares := map[string]int{}
	for i := range agents {
		shares[tbAgentName(agents, i)] = tbInFlight / agents
	}
	kv, err := e.js.KeyValue(ctx, wire.DispatchBucket)
	if err != nil {
		b.Fatal(err)
	}
	data, err := json.Marshal(wire.DispatchPlan{Job: job.Spec.ID, Time: time.Now(), Endpoints: []string{e.fnURL},
		PerEndpoint: tbInFlight, InFlight: tbInFlight, Shares: shares})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kv.Put(ctx, job.Spec.ID, data); err != nil {
		b.Fatal(err)
	}
}

func tbAgentName(agents, i int) string {
	if agents == 1 {
		return "solo"
	}
	return fmt.Sprintf("node%d", i)
}

// newAgents makes the job's agents, each with its own connection.
func (e *teamBenchEnv) newAgents(b *testing.B, job wire.Job, agents int) []agentRun {
	b.Helper()
	var runs []agentRun
	for i := range agents {
		name := tbAgentName(agents, i)
		// Each agent has its own connections, as on its own node; its
		// sends name it, for the function's log.
		opts := Options{Name: name, WorldSize: tbWorld, Dispatch: dispatch.Options{
			HTTPClient: &http.Client{Transport: namedTransport{name, http.DefaultTransport.(*http.Transport).Clone()}}}}
		ranks := []int{0, 1, 2, 3}
		if agents > 1 {
			ranks = ranks[i*tbWorld/agents : (i+1)*tbWorld/agents]
			opts.Ranks = ranks
			opts.TeamKey = testTeamKey
		}
		var nc *nats.Conn
		var js jetstream.JetStream
		pprof.Do(context.Background(), pprof.Labels("agent", name), func(context.Context) {
			nc, js = benchConnect(b, e.natsURL)
		})
		b.Cleanup(nc.Close)
		var log *slog.Logger
		if os.Getenv("SLUICE_TEAMBENCH_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		if opts.TeamKey != nil {
			job = keyed(job)
		}
		a, err := New(nc, js, job, opts, log, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		runs = append(runs, agentRun{name: name, a: a, ranks: ranks})
	}
	return runs
}

// namedTransport names the agent in each request's X-Bench-Agent header.
type namedTransport struct {
	name string
	rt   http.RoundTripper
}

func (t namedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Bench-Agent", t.name)
	return t.rt.RoundTrip(r)
}

// teamCounter counts the team's requests of a job by kind, and their bytes.
type teamCounter struct {
	sub   *nats.Subscription
	mu    sync.Mutex
	ops   map[string]int64
	bytes atomic.Int64
}

func (e *teamBenchEnv) countTeam(b *testing.B, job string) *teamCounter {
	c := &teamCounter{ops: map[string]int64{}}
	sub, err := e.nc.Subscribe(wire.TeamSubject(job, wire.DefaultReader, "*"), func(m *nats.Msg) {
		op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		c.mu.Lock()
		c.ops[op]++
		c.mu.Unlock()
		// What the server sent this counter is not the team's traffic.
		c.bytes.Add(int64(len(m.Subject) + len(m.Reply) + len(m.Data)))
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	c.sub = sub
	return c
}

func (c *teamCounter) close() {
	if c.sub != nil {
		_ = c.sub.Drain()
	}
}

func (c *teamCounter) counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// natsVarz is what the benchmark reads of the server's varz.
type natsVarz struct {
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
}

func (e *teamBenchEnv) varz(b *testing.B) natsVarz {
	b.Helper()
	var v natsVarz
	getJSON(b, e.varzURL, &v)
	return v
}

// fnSends is how often the function replica was asked for a job's shards.
type fnSends struct {
	Sends  int `json:"sends"`  // requests
	Shards int `json:"shards"` // distinct (epoch, shard)
	// Again counts sends by the agent that was sent the shard first: it
	// lost rows it held (rows moved to another agent's ranks are produced
	// again by that agent).
	Again int `json:"again"`
}

func (e *teamBenchEnv) sends(b *testing.B, job string) fnSends {
	b.Helper()
	var s fnSends
	getJSON(b, e.fnURL+"/sends?job="+job, &s)
	return s
}

func getJSON(b *testing.B, url string, v any) {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		b.Fatalf("GET %s: %v", url, err)
	}
}

// selfCPUTime is this process's user and system CPU time.
func selfCPUTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// child is a child process of the benchmark.
type child struct {
	cmd *exec.Cmd
}

// startChild runs TestTeamBenchChild in kind's role and returns the
// addresses it prints.
func startChild(b *testing.B, kind string) (*child, []string) {
	b.Helper()
	cmd, addrs := testenv.StartChild(b, "TestTeamBenchChild", tbChildEnv+"="+kind)
	return &child{cmd: cmd}, addrs
}

// cpu is the child's user and system CPU time, from /proc.
func (c *child) cpu(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	// Fields from the state (3rd): utime is the 14th, stime the 15th,
	// in clock ticks (USER_HZ, 100 on Linux).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// TestTeamBenchChild is a child process of BenchmarkTeam (skipped
// otherwise): the NATS server, or the function replica answering every
// task with ready-made frames. It prints READY and its addresses, and
// serves until its stdin closes.
func TestTeamBenchChild(t *testing.T) {
	kind := os.Getenv(tbChildEnv)
	if kind == "" {
		t.Skip("a child process of BenchmarkTeam")
	}
	var addrs []string
	switch kind {
	case "nats":
		srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown()
		varz := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, err := srv.Server.Varz(nil)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(natsVarz{InBytes: v.InBytes, OutBytes: v.OutBytes})
		}))
		addrs = []string{srv.URL(), varz}
	case "function":
		addrs = []string{serveLoopback(t, newReadyFunction(t))}
	default:
		t.Fatalf("%s=%q: want nats or function", tbChildEnv, kind)
	}
	fmt.Println("READY", strings.Join(addrs, " "))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func serveLoopback(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// readyFunction answers each shard task of any job with the chunks of
// the benchmark's layout, encoded once (rows of zeros; keys by shard),
// then the shard's end; it counts the tasks it was sent.
type readyFunction struct {
	chunks [][][]byte // per shard, per chunk
	mu     sync.Mutex
	sends  map[string]map[assembly.ShardRef]int
	first  map[string]map[assembly.ShardRef]string // the agent sent it first
	again  map[string]int
}

func newReadyFunction(t *testing.T) *readyFunction {
	f := &readyFunction{sends: map[string]map[assembly.ShardRef]int{}, first: map[string]map[assembly.ShardRef]string{}, again: map[string]int{}}
	img := make([]byte, tbPerChunk*224*224*3)
	lab := make([]byte, tbPerChunk*8)
	for s := range tbShards {
		var cs [][]byte
		for c := range tbChunks {
			keys := make([]string, tbPerChunk)
			for k := range keys {
				keys[k] = fixture.SampleKey(s, c, k)
			}
			kj, _ := json.Marshal(keys)
			data, err := safetensors.Encode([]safetensors.Tensor{
				{Name: "image", DType: safetensors.U8, Shape: []int{tbPerChunk, 224, 224, 3}, Data: img},
				{Name: "label", DType: safetensors.I64, Shape: []int{tbPerChunk}, Data: lab},
			}, map[string]string{wire.MetaKeys: string(kj), wire.MetaChunk: strconv.Itoa(c)})
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, data)
		}
		f.chunks = append(f.chunks, cs)
	}
	return f
}

func (f *readyFunction) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/sends" {
		f.mu.Lock()
		m := f.sends[r.URL.Query().Get("job")]
		s := fnSends{Shards: len(m), Again: f.again[r.URL.Query().Get("job")]}
		for _, n := range m {
			s.Sends += n
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(s)
		return
	}
	var task wire.ShardTask
	if err := json.NewDecoder(r.Body).Decode(&task); err != nil || task.Validate() != nil || task.Shard >= tbShards {
		http.Error(w, fmt.Sprintf("bad task: %v", err), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	k, agent := assembly.ShardRef{Epoch: task.Epoch, Shard: task.Shard}, r.Header.Get("X-Bench-Agent")
	if f.sends[task.Job] == nil {
		f.sends[task.Job], f.first[task.Job] = map[assembly.ShardRef]int{}, map[assembly.ShardRef]string{}
	}
	f.sends[task.Job][k]++
	n := f.sends[task.Job][k]
	if first, ok := f.first[task.Job][k]; !ok {
		f.first[task.Job][k] = agent
	} else if first == agent {
		f.again[task.Job]++
	}
	f.mu.Unlock()
	if os.Getenv("SLUICE_TEAMBENCH_LOG") != "" {
		fmt.Fprintf(os.Stderr, "%s function: %s epoch %d shard %d (send %d) from %s\n",
			time.Now().Format("15:04:05.000"), task.Job, task.Epoch, task.Shard, n, r.Header.Get("X-Bench-Agent"))
	}
	w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	w.WriteHeader(http.StatusOK)
	var size int64
	for c, data := range f.chunks[task.Shard] {
		if err := wire.WriteFrame(w, wire.FrameChunk, c, data); err != nil {
			return
		}
		size += int64(len(data))
		w.(http.Flusher).Flush()
	}
	end, _ := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard,
		Chunks: tbChunks, Samples: tbChunks * tbPerChunk, Bytes: size})
	_ = wire.WriteFrame(w, wire.FrameEnd, 0, end)
}

// BenchmarkPlanTeamStep is the planner's per-request policy work at scale:
// stepplan.TeamStep over the ready batches of N agents of 8 ranks each, 4
// global steps ready (the default prefetch), as teamWants runs it (under
// the reader's lock) for every chunk note, shard end and status a member
// sends, and formTeamStep for every step.
func BenchmarkPlanTeamStep(b *testing.B) {
	for _, nodes := range []int{2, 8, 32, 64} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			const perNode, steps, batch = 8, 4, 32
			holders := make([]string, nodes*perNode)
			for r := range holders {
				holders[r] = fmt.Sprintf("node%d", r/perNode)
			}
			var sup stepplan.TeamSupply
			for range steps * perNode {
				for n := range nodes {
					sup.Ready = append(sup.Ready, stepplan.TeamBatch{Holder: fmt.Sprintf("node%d", n), Rows: batch})
				}
			}
			// The last agent is one batch short: the step waits, as it
			// does whenever teamWants asks whether that agent should take more.
			sup.Ready = sup.Ready[:len(sup.Ready)-1]
			for b.Loop() {
				if p := stepplan.TeamStep(sup, holders, batch, false); p.Action != stepplan.StepFull && p.Action != stepplan.StepWait {
					b.Fatalf("action %v", p.Action)
				}
			}
		})
	}
}
