package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/fdhttp"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/kvpoll"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newAgentFlags(stderr)
	if err := f.parse(args); err != nil {
		return err
	}
	logger := newLogger(stderr, *f.logLevel).With("component", "agent")
	// Refuse an open listener beyond loopback before anything else.
	ln, auth, err := listenAuthed(*f.listen, bearer.Agent, f.agentToken, *f.insecure)
	if err != nil {
		return err
	}
	defer ln.Close()

	nc, js, err := f.connectAsJob(ctx, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := f.options()
	// GPU utilisation goes into the demand signals where NVML finds a GPU;
	// elsewhere the wait time alone measures the trainer's stall.
	if gpu, closeGPU, err := traineragent.OpenNVML(logger); err == nil {
		opts.GPU = gpu
		defer closeGPU()
	} else {
		logger.Info("no GPU utilisation", "reason", err)
	}
	ops := newOpsServer()
	reg := ops.Registry
	metrics := traineragent.NewMetrics(reg)

	// Serve at once: a trainer's GET /v1/batch waits for the job to appear.
	s := &agentServer{nc: nc, opened: make(chan struct{}), gone: make(chan struct{})}
	ops.probes(s.readyz)
	ops.Mux.Handle("/v1/", s)
	ops.Mux.Handle("/r/", s) // a job with several readers: /r/READER/v1/...
	hs, served := ops.serve(ln, httpserve.Options{Token: f.agentToken, Source: bearer.Agent, Logger: logger})
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx) // lets a batch being written finish
	}()
	if *f.listenUnix != "" {
		uln, err := fdhttp.Listen(*f.listenUnix, 0o660)
		if err != nil {
			return fmt.Errorf("--listen-unix: %w", err)
		}
		us := fdhttp.New(hs.Handler, fdhttp.Options{Logger: logger})
		both := make(chan error, 2)
		go func(tcp <-chan error) { both <- <-tcp }(served)
		go func() { both <- us.Serve(uln) }()
		served = both
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = us.Shutdown(sctx)
			_ = os.Remove(*f.listenUnix)
		}()
	}
	ops.announce(stdout)
	logger.Info("serving", "addr", ops.addr(), "unix", *f.listenUnix, "job", *f.jobID, "world_size", *f.worldSize, "ranks", f.ranks, "drop_last", *f.dropLast, "auth", auth,
		"function_token", f.fnToken.IsSet())

	opened := make(chan error, 1)
	go func() {
		a, err := traineragent.Open(ctx, nc, js, *f.jobID, opts, logger, metrics, reg)
		if err == nil {
			s.handler = a.Handler()
			s.agent.Store(a)
			close(s.opened)
		}
		opened <- err
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case err := <-opened:
		if err != nil {
			if ctx.Err() != nil {
				return nil // SIGTERM while waiting for the job
			}
			return err
		}
	}
	linger := *f.linger
	if *f.sidecar {
		linger = -1
	}
	return s.run(ctx, served, linger, logger)
}

// run runs the agent to the end and, after the last batch or the job's
// end, lets the trainer learn it from a 410 (within linger) rather than a
// refused connection. A negative linger waits for ctx (a sidecar's
// SIGTERM) instead.
func (s *agentServer) run(ctx context.Context, served <-chan error, linger time.Duration, logger *slog.Logger) error {
	a := s.agent.Load()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	var err error
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case err = <-ran:
	}
	switch {
	case err == nil:
		st := a.Stats()
		logger.Info("every batch delivered", "samples", st.SamplesDelivered, "batches", st.BatchesDelivered, "epochs", st.Epochs,
			"world_size", st.WorldSize, "dropped_samples", st.DroppedSamples)
	case ctx.Err() != nil:
		logger.Info("stopped")
		return nil
	case !errors.Is(err, traineragent.ErrJobEnded):
		return err
	}
	if linger < 0 {
		<-ctx.Done()
		return err
	}
	select {
	case <-s.gone:
	case <-time.After(linger):
	case <-ctx.Done():
	}
	return err
}

// agentFlags are the flags of `sluice agent`, and what parse resolved
// from them.
type agentFlags struct {
	fs                                *flag.FlagSet
	jobID, listen, name, maxLag       *string
	listenUnix                        *string
	logLevel, ranksFlag, teamKeyFile  *string
	prefetch, worldSize               *int
	nodeRank, nprocPerNode            *int
	dropLast, insecure, sidecar       *bool
	linger, localityWait, taskAckWait *time.Duration
	connFlags                         *connect.Flags
	agentTokenFlag, fnTokenFlag       *bearer.Flag
	conn                              connect.Config
	maxLagBytes                       int64
	ranks                             []int
	teamKey                           []byte
	nodeCredFile                      *string
	node                              *wire.NodeIdentity
	agentToken, fnToken               bearer.Token
}

func newAgentFlags(stderr io.Writer) *agentFlags {
	fs := newFlagSet("agent", stderr)
	f := &agentFlags{fs: fs}
	f.jobID = fs.String("job", "", "`ID` of the job to read (required)")
	f.listen = fs.String("listen", "127.0.0.1:8081", "host:port (`ADDR`) to serve the trainer on (0.0.0.0:PORT for ranks on other nodes)")
	f.listenUnix = fs.String("listen-unix", "", "also serve the trainers on a Unix socket at `PATH` (mode 0660: who may open it may connect; the token applies too): "+
		"the same API, each batch handed over as a memfd the trainer maps (the Python client's unix:PATH), so its process copies nothing")
	f.name = fs.String("name", "", "this agent's `NAME` in demand signals and the job's dispatch shares (default: host name and process id)")
	f.prefetch = fs.Int("prefetch", 0, "samples (`N`) held in batches ready for the trainer (0: 4 batches per rank, at least 256)")
	f.worldSize = fs.Int("world-size", 0, "number of ranks (`W`) of the trainer: the agent serves them all, or those --ranks names (0: set by the first request's world_size)")
	f.ranksFlag = fs.String("ranks", "", "comma-separated ranks of --world-size this agent serves (`LIST`, e.g. 2,3: those on its node; default: all). "+
		"The agent serving rank 0 plans every step; the others join it over NATS (give each its own --name, kept across restarts). All agents of one reader need the same --world-size and --drop-last")
	f.nodeRank = fs.Int("node-rank", -1, "with --nproc-per-node, instead of --ranks: this node's index `N` among the trainer's nodes (torchrun's --node-rank; an Indexed Job's completion index), "+
		"so that the agent serves ranks N*P..N*P+P-1 of --world-size")
	f.nprocPerNode = fs.Int("nproc-per-node", 0, "with --node-rank: the ranks (`P`) each node runs (torchrun's --nproc-per-node)")
	f.dropLast = fs.Bool("drop-last", false, "drop each epoch's last step when it would be partial (counted in /v1/stats dropped_samples), rather than split its samples evenly over the ranks")
	f.sidecar = fs.Bool("sidecar", false, "run as a Kubernetes sidecar beside the trainer's container: after the last batch or the job's end, answer 410 until SIGTERM rather than exit "+
		"(the kubelet restarts a sidecar that exits, and stops it once the trainer's container ends); --linger does not apply")
	f.linger = fs.Duration("linger", 10*time.Second, "after the last batch, or the job's end, how long GET /v1/batch may still get its 410 before the agent exits (it exits at once after one)")
	f.maxLag = fs.String("max-lag-bytes", "0", "what a reader of a job with several readers may hold (a `size` such as 256MiB), its prefetch full, before it keeps no new shard while another reader wants more, and asks for those shards again when its trainer gets there; 0: half the job's output buffer; -1: never")
	f.localityWait = fs.Duration("locality-wait", dispatch.DefaultLocalityWait, "longest a task waits for the busy replica whose shard cache holds its shard before going to another; 0: never wait")
	f.taskAckWait = fs.Duration("task-ack-wait", 0, "how long the task queue waits for a task this agent holds before giving it to another agent, were this one to die (0: the queue's, 30s); held tasks are kept alive meanwhile")
	f.logLevel = fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
	f.teamKeyFile = fs.String("team-key-file", "", "`FILE` holding the job's team key, which `sluice job submit` wrote: the agent connects to NATS as its job with it (unless NATS credentials are given), and an agent of a team (--ranks) signs its messages with it "+
		"(default: $"+wire.TeamKeyFileEnv+", else $"+wire.TeamKeyEnv+" (the key itself), else the job's file in $"+wire.TeamKeyDirEnv+" or the user's config directory)")
	f.nodeCredFile = fs.String("node-credential-file", "", "`FILE` holding this node's credential, which `sluice job node-credential` wrote: given, the agent needs no team key, and acts as that node only "+
		"(its --name is the node's) (default: $"+wire.NodeCredentialFileEnv+")")
	f.connFlags = connect.Register(fs, connect.PartNATS)
	f.agentTokenFlag = bearer.Agent.Register(fs, "the token the trainers must send (Authorization: Bearer) to /v1/ and /r/, required when --listen is beyond loopback")
	f.fnTokenFlag = bearer.Function.Register(fs, "the token sent with each task to the function replicas (their "+bearer.Function.Env+")")
	f.insecure = bearer.RegisterInsecure(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice agent --job ID [flags]\n\n"+
			"Feeds a job's batches to the ranks of the trainers on this node: it takes the job's shard\n"+
			"tasks from the queue (shared with the job's agents on other nodes), sends each to a function\n"+
			"replica and receives the output itself. GET /v1/batch?rank=R&world_size=W gives rank R's\n"+
			"part of the next global step (W batches of one epoch) as a safetensors file (410 once the\n"+
			"rank got every step, or when the job was cancelled or deleted; 409 for another world size);\n"+
			"POST /v1/resume rewinds to a trainer's checkpoint; also GET /v1/stats, /healthz, /readyz,\n"+
			"/metrics. A job with several readers (a sweep's trials) has each under /r/READER/v1/...\n"+
			"A trainer on several nodes runs one agent per node, each serving its node's --ranks (a job\n"+
			"with one reader): the agent serving rank 0 plans every step, the others join it over NATS\n"+
			"and hand out their ranks' parts of the chunks they hold. All agents of one reader need the\n"+
			"same --world-size and --drop-last.\n"+
			"With a token ("+bearer.Agent.Env+"), /v1/ and /r/ require it; /healthz, /readyz and /metrics stay open.\n"+
			"Publishes the trainers' demand for the autoscaler. Prints %q and the URL once\n"+
			"serving; exits 0 once every rank got every step, or on SIGTERM.\n\n",
			ready.Prefix)
		fs.PrintDefaults()
	}
	return f
}

// parse parses args and checks them, each problem named by its flag.
func (f *agentFlags) parse(args []string) error {
	return parse(f.fs, args,
		loadToken(f.agentTokenFlag, &f.agentToken),
		loadToken(f.fnTokenFlag, &f.fnToken),
		func() error {
			if *f.jobID == "" {
				return errors.New("--job: required")
			}
			return wire.ValidateJobID(*f.jobID)
		},
		func() error {
			if *f.name != "" {
				return wire.ValidateReader(*f.name)
			}
			return nil
		},
		intRange("prefetch", f.prefetch, 0, 1<<24),
		intRange("world-size", f.worldSize, 0, 1<<16),
		f.parseRanks,
		durationRange("linger", f.linger, 0, 10*time.Minute),
		oneOf("log-level", f.logLevel, logLevels...),
		durationRange("locality-wait", f.localityWait, 0, time.Minute),
		func() error {
			if *f.maxLag == "-1" {
				f.maxLagBytes = -1
				return nil
			}
			n, err := bytesize.Parse(*f.maxLag)
			if err != nil {
				return fmt.Errorf("--max-lag-bytes %q: %v", *f.maxLag, err)
			}
			f.maxLagBytes = n
			return nil
		},
		durationRange("task-ack-wait", f.taskAckWait, 0, time.Hour),
		f.loadNodeCredential,
		f.loadTeamKey,
		resolve(f.connFlags, &f.conn),
	)
}

// connectAsJob connects the agent to NATS as its job: user
// wire.AgentNATSUser(job), the password its team key gives, which the
// controllers check (the server's auth callout) and grant that job's
// permissions only. NATS credentials given explicitly (a server without
// the callout) are used instead; with neither, it connects without any.
func (f *agentFlags) connectAsJob(ctx context.Context, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	conn, job := f.conn, *f.jobID
	asJob := !conn.NATS.HasCredentials() && (f.teamKey != nil || f.node != nil)
	if asJob {
		conn.NATS.User = wire.AgentNATSUser(job)
		if f.node != nil {
			conn.NATS.Password = f.node.NATSPassword
		} else {
			conn.NATS.Password = wire.AgentNATSPassword(f.teamKey)
		}
		// The first connect, or a reconnect, may come while no controller
		// answers the callout in time: retried (connect.NATS.RetryAuth).
		conn.NATS.RetryAuth = true
	}
	nc, js, err := agentAs(ctx, conn, natsperm.AgentFor(job), "sluice-agent "+job, logger)
	if err == nil {
		// The job's record and plan are followed by reading them: an
		// agent creates no consumer on a bucket (natsperm.AgentFor).
		js = kvpoll.JetStream(js, 0)
	}
	if errors.Is(err, connect.ErrNATSAuthorization) {
		switch {
		case asJob:
			err = fmt.Errorf("%w: the job's team key is not the one its submit wrote (a key of another job, or of an earlier submission of job %s?), "+
				"or the NATS server's auth callout has no controller answering", err, job)
		case conn.NATS.User == "sluice-agent":
			err = fmt.Errorf("%w: the NATS user sluice-agent, which agents shared, is gone: an agent connects as its job with the job's team key "+
				"(--team-key-file or $%s); unset $SLUICE_NATS_USER and its password", err, wire.TeamKeyFileEnv)
		case !conn.NATS.HasCredentials():
			err = fmt.Errorf("%w: an agent connects as its job with the job's team key, which `sluice job submit` wrote: "+
				"give it with --team-key-file or $%s", err, wire.TeamKeyFileEnv)
		}
	}
	return nc, js, err
}

// loadNodeCredential reads --node-credential-file (else
// $SLUICE_NODE_CREDENTIAL_FILE), if given: a credential of the job, whose
// node is the agent's --name.
func (f *agentFlags) loadNodeCredential() error {
	file, from := *f.nodeCredFile, "--node-credential-file"
	if file == "" {
		file, from = os.Getenv(wire.NodeCredentialFileEnv), "$"+wire.NodeCredentialFileEnv
	}
	if file == "" {
		return nil
	}
	id, err := loadNodeCredential(file)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	switch {
	case id.Job != *f.jobID:
		return fmt.Errorf("%s %s: a credential of job %s, not of --job %s", from, file, id.Job, *f.jobID)
	case *f.name != "" && *f.name != id.Node:
		return fmt.Errorf("%s %s: node %s's credential: --name must be the node's, or unset", from, file, id.Node)
	}
	*f.name = id.Node
	f.node = id
	return nil
}

// errNoTeamKey: the job's team key file is not in the key directory.
var errNoTeamKey = errors.New("no team key")

// loadTeamKey reads the job's team key, the agent's credential: from
// --team-key-file, $SLUICE_TEAM_KEY_FILE, $SLUICE_TEAM_KEY, or the job's
// file in the key directory. An agent of a team (--ranks fewer than
// --world-size) needs it; a lone agent without one connects with the NATS
// settings alone. Its errors name where the key came from, never the key.
func (f *agentFlags) loadTeamKey() error {
	if f.node != nil {
		return nil // the node's credential is the agent's
	}
	team := len(f.ranks) > 0 && len(f.ranks) < *f.worldSize
	err := f.findTeamKey()
	if errors.Is(err, errNoTeamKey) && !team {
		return nil
	}
	return err
}

// findTeamKey sets f.teamKey from where loadTeamKey says; errNoTeamKey
// when the key directory has none for the job.
func (f *agentFlags) findTeamKey() error {
	file, from := *f.teamKeyFile, "--team-key-file"
	if file == "" {
		file, from = os.Getenv(wire.TeamKeyFileEnv), "$"+wire.TeamKeyFileEnv
	}
	if file == "" {
		if k := os.Getenv(wire.TeamKeyEnv); k != "" {
			key, err := wire.ParseTeamKey([]byte(k))
			if err != nil {
				return fmt.Errorf("$%s: %w", wire.TeamKeyEnv, err)
			}
			f.teamKey = key
			return nil
		}
		dir, err := teamKeyDir()
		if err != nil {
			return fmt.Errorf("--team-key-file: a team (--ranks) needs the job's team key: %w (%w)", errNoTeamKey, err)
		}
		file, from = wire.TeamKeyPath(dir, *f.jobID), "the job's team key file"
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s %s: a team (--ranks) needs the job's team key, which `sluice job submit` wrote: %w", from, file, errNoTeamKey)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: the job's team key, which `sluice job submit` wrote: %w", from, err)
	}
	if f.teamKey, err = wire.ParseTeamKey(data); err != nil {
		return fmt.Errorf("%s %s: %w", from, file, err)
	}
	return nil
}

// teamKeyDir is the directory of the team key files `sluice job submit`
// writes: $SLUICE_TEAM_KEY_DIR, else sluice/teamkeys in the user's config
// directory.
func teamKeyDir() (string, error) {
	if d := os.Getenv(wire.TeamKeyDirEnv); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no $%s and no user config directory: %w", wire.TeamKeyDirEnv, err)
	}
	return filepath.Join(d, "sluice", "teamkeys"), nil
}

// parseRanks reads --ranks, distinct ranks of --world-size, or
// --node-rank and --nproc-per-node, a node's consecutive ranks as torchrun
// numbers them.
func (f *agentFlags) parseRanks() error {
	if *f.nodeRank >= 0 || *f.nprocPerNode != 0 {
		return f.parseNodeRank()
	}
	if *f.ranksFlag == "" {
		return nil
	}
	if *f.worldSize < 1 {
		return fmt.Errorf("--ranks %q: needs --world-size, the number of ranks they are of", *f.ranksFlag)
	}
	seen := map[int]bool{}
	for _, s := range strings.Split(*f.ranksFlag, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		switch {
		case err != nil:
			return fmt.Errorf("--ranks %q: %q is not a rank number", *f.ranksFlag, s)
		case r < 0 || r >= *f.worldSize:
			return fmt.Errorf("--ranks %q: rank %d: want 0..%d (--world-size %d)", *f.ranksFlag, r, *f.worldSize-1, *f.worldSize)
		case seen[r]:
			return fmt.Errorf("--ranks %q: rank %d given twice", *f.ranksFlag, r)
		}
		seen[r] = true
		f.ranks = append(f.ranks, r)
	}
	return nil
}

func (f *agentFlags) parseNodeRank() error {
	n, p, w := *f.nodeRank, *f.nprocPerNode, *f.worldSize
	switch {
	case *f.ranksFlag != "":
		return errors.New("--ranks and --node-rank: give one")
	case n < 0 || p < 1:
		return fmt.Errorf("--node-rank %d --nproc-per-node %d: give both, a node index from 0 and at least 1 rank a node", n, p)
	case w < 1:
		return fmt.Errorf("--node-rank %d: needs --world-size, the number of ranks of all nodes", n)
	case w%p != 0:
		return fmt.Errorf("--world-size %d is not a whole number of nodes of --nproc-per-node %d", w, p)
	case n >= w/p:
		return fmt.Errorf("--node-rank %d: want 0..%d (--world-size %d / --nproc-per-node %d)", n, w/p-1, w, p)
	}
	for r := n * p; r < (n+1)*p; r++ {
		f.ranks = append(f.ranks, r)
	}
	return nil
}

// options are the agent's options from the flags.
func (f *agentFlags) options() traineragent.Options {
	opts := traineragent.Options{Name: *f.name, PrefetchSamples: *f.prefetch, WorldSize: *f.worldSize, Ranks: f.ranks, DropLast: *f.dropLast, MaxLagBytes: f.maxLagBytes,
		TeamKey: f.teamKey, Node: f.node,
		Dispatch: dispatch.Options{LocalityWait: *f.localityWait, AckWait: *f.taskAckWait, Token: f.fnToken}}
	if *f.localityWait == 0 {
		opts.Dispatch.LocalityWait = -1 // never wait; the option's zero is the default
	}
	return opts
}

// agentServer serves the agent once the job was found.
type agentServer struct {
	nc    *nats.Conn
	agent atomic.Pointer[traineragent.Agent]
	// handler is the agent's, built once; set before opened closes.
	handler http.Handler
	opened  chan struct{} // closed once agent and handler are set
	gone    chan struct{} // closed at the first 410
	once    sync.Once
}

func (s *agentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.opened:
	case <-r.Context().Done():
		return
	}
	s.handler.ServeHTTP(&goneWatcher{ResponseWriter: w, s: s}, r)
}

func (s *agentServer) readyz(w http.ResponseWriter, _ *http.Request) {
	switch a := s.agent.Load(); {
	case !s.nc.IsConnected():
		http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
	case a == nil || !a.Ready():
		http.Error(w, "not dispatching the job's tasks (yet)", http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ready")
	}
}

// goneWatcher notes that the trainer got a 410: it knows the end.
type goneWatcher struct {
	http.ResponseWriter
	s *agentServer
}

func (g *goneWatcher) WriteHeader(code int) {
	g.ResponseWriter.WriteHeader(code)
	if code == http.StatusGone {
		g.s.once.Do(func() { close(g.s.gone) })
	}
}
