package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
)

// The resume scenarios drive real sluice.Loader ranks (threads of
// clients/python/tests/ranks.py, one process or several) against real
// agents, kill them with requests in flight, and resume a new
// generation of ranks from a checkpoint the way a DDP job does: every
// rank loads a state at the same moment. What the model saw is the first
// run's samples before the checkpoint and all of the last run's; it must
// be every sample of every epoch exactly once, in steps taken in order.

// rankLayout is a generation's ranks: which agent serves which (one
// entry: a lone agent serving every rank) and which trainer process runs
// which (threads of one process).
type rankLayout struct {
	world int
	nodes [][]int
	procs [][]int
}

func (l rankLayout) String() string {
	return fmt.Sprintf("%d ranks, agents %v, processes %v", l.world, l.nodes, l.procs)
}

// resumeCase is one scenario.
type resumeCase struct {
	kind          string // "images", "mixed" or "packed"
	before, after rankLayout
	own           bool          // each rank loads its own state (else rank 0's)
	stagger       float64       // the resumed ranks start up to this many seconds apart
	ckptAfter     int           // batches each rank takes before the checkpoint
	stopAfter     int           // and before it stops (it does not finish the job: the agents would end)
	readOn        time.Duration // the first run reads on this long past its checkpoint (at most to stopAfter)
	pause         time.Duration // between the kill and the resume
	secondKill    time.Duration // > 0: the resumed run is killed this long after it starts, and resumed again
	// tokens: each run's ranks name their launch (Loader's generation, as
	// under torchrun or sluice.torch); else the agent goes by which ranks
	// resumed.
	tokens bool
}

func (rc resumeCase) String() string {
	s := fmt.Sprintf("%s: %v -> %v, checkpoint after %d batches, read on %v (at most %d batches), resume after %v",
		rc.kind, rc.before, rc.after, rc.ckptAfter, rc.readOn, rc.stopAfter, rc.pause)
	if rc.own {
		s += ", each rank its own state"
	}
	if rc.stagger > 0 {
		s += fmt.Sprintf(", staggered up to %.1fs", rc.stagger)
	}
	if rc.secondKill > 0 {
		s += fmt.Sprintf(", killed again %v into the resume", rc.secondKill)
	}
	if rc.tokens {
		s += ", each launch named"
	}
	return s
}

// resumeData is what the scenarios' jobs read.
type resumeData struct {
	images    Dataset
	web, code Dataset // the mixed jobs' sources, 3:1
	corpus    string  // the packed jobs' dataset
	vocab     string
	lmRows    int // rows of an epoch of a packed job
}

const (
	resumeEpochs = 2
	resumeBatch  = 4
)

// uploadResumeData writes every kind's dataset once.
func uploadResumeData(t *testing.T, c *Cluster) resumeData {
	t.Helper()
	d := resumeData{
		images: c.UploadImages("resume", "img/", SmallImages(120, 4, 41)),
		web:    c.UploadImages("resume", "web/", SmallImages(90, 6, 42)),
		code:   c.UploadImages("resume", "code/", SmallImages(30, 2, 43)),
		corpus: "s3://resume/lm/",
		vocab:  filepath.Join(c.Dir, "vocab"),
	}
	if err := os.MkdirAll(d.vocab, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.vocab, "tokenizer.json"), synth.ByteTokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	lm := lmShards(t, "lm", 4, webDocs(t))
	d.lmRows = len(lm) * lmRowsPerShard
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := synth.Upload(ctx, c.S3.Client(t), "resume", "lm/", lm); err != nil {
		t.Fatal(err)
	}
	return d
}

// spec is job id's spec of kind.
func (d resumeData) spec(id, kind string, batch int) Spec {
	s := Spec{"id": id, "batch_size": batch, "epochs": resumeEpochs, "seed": 7, "max_replicas": 2}
	switch kind {
	case "images":
		s["dataset"], s["pipeline"] = d.images.URL(), "imagenet-eval"
	case "mixed":
		s["pipeline"] = "imagenet-eval"
		s["sources"] = []map[string]any{{"dataset": d.web.URL(), "weight": 3}, {"dataset": d.code.URL(), "weight": 1}}
	case "packed":
		s["dataset"], s["pipeline"] = d.corpus, lmPipeline
	}
	return s
}

// want is what every epoch of a job of kind holds: "source/key" of each
// sample (nil for packed rows, whose keys only the replicas know), and
// how many.
func (d resumeData) want(kind string) ([]string, int) {
	var keys []string
	switch kind {
	case "images":
		for _, k := range d.images.Keys {
			keys = append(keys, "-1/"+k)
		}
	case "mixed":
		for src, ds := range []Dataset{d.web, d.code} {
			for _, k := range ds.Keys {
				keys = append(keys, strconv.Itoa(src)+"/"+k)
			}
		}
	case "packed":
		return nil, d.lmRows
	}
	return keys, len(keys)
}

// resumeEnv is a cluster the scenarios share: one controller (with the
// packed jobs' vocabulary), the datasets, and Python.
type resumeEnv struct {
	c      *Cluster
	data   resumeData
	py     string
	script string
}

func startResumeEnv(t *testing.T) *resumeEnv {
	t.Helper()
	py := pythonWithNumpy(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, binaries(t), ClusterOptions{})
	data := uploadResumeData(t, c)
	c.StartController("controller", ControllerOptions{VocabDir: data.vocab})
	return &resumeEnv{c: c, data: data, py: py, script: filepath.Join(root, "clients", "python", "tests", "ranks.py")}
}

// pythonWithNumpy is Python with the client's only dependency.
func pythonWithNumpy(t *testing.T) string { return pythonWith(t, "numpy") }

// run runs scenario rc as job id, with the resumed ranks' delays drawn
// from seed, and returns what the check found.
func (e *resumeEnv) run(t *testing.T, id string, rc resumeCase, batch int, seed uint64) {
	c := e.c.For(t)
	c.Submit(e.data.spec(id, rc.kind, batch))
	dir := filepath.Join(c.Dir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agents, urls := startLayout(c, id, "a", rc.before)
	defer func() {
		for _, a := range agents {
			a.Stop(5 * time.Second)
		}
		// The cluster's controller serves every seed's job: one left with
		// tasks (its agents stopped before they settled them all) would
		// hold its replicas from the next seeds.
		c.Sluice(nil, "job", "delete", id, "--force")
	}()

	first := e.startRanks(c, dir, "run1", rc.before, urls, seed, "--ckpt-after", strconv.Itoa(rc.ckptAfter), "--stop-after", strconv.Itoa(rc.stopAfter))
	waitFiles(t, first, dir, "run1", rc.before.world, "state-rank%d.json")
	time.Sleep(rc.readOn)
	killAll(first) // requests in flight on every agent
	state := ReadLoaderStateFile(t, filepath.Join(dir, "run1-state-rank0.json"))

	switch {
	case len(rc.before.nodes) == 1 && len(rc.after.nodes) == 1:
		urls = slices.Repeat(urls[:1], rc.after.world) // a lone agent takes any world
	case !slices.EqualFunc(rc.before.nodes, rc.after.nodes, slices.Equal):
		for _, a := range agents {
			_ = a.Kill()
		}
		agents, urls = startLayout(c, id, "b", rc.after)
	}
	time.Sleep(rc.pause)
	resume := []string{"--resume", filepath.Join(dir, "run1-state-rank0.json")}
	if rc.own {
		resume = []string{"--resume-own", "run1"}
	}
	if rc.stagger > 0 {
		resume = append(resume, "--stagger", strconv.FormatFloat(rc.stagger, 'f', 2, 64))
	}
	launch := func(run string) []string {
		if !rc.tokens {
			return resume
		}
		return append(slices.Clip(resume), "--generation", id+"-"+run)
	}
	last := "run2"
	var final []*Process
	if rc.secondKill == 0 {
		final = e.startRanks(c, dir, last, rc.after, urls, seed, launch(last)...)
	} else {
		// Killed a moment into the resume, before it could finish.
		final = e.startRanks(c, dir, last, rc.after, urls, seed, append(launch(last), "--stop-after", "1", "--prefetch", "1")...)
		time.Sleep(rc.secondKill)
		killAll(final)
		last = "run3"
		final = e.startRanks(c, dir, last, rc.after, urls, seed+1, launch(last)...)
	}
	for _, p := range final {
		if err := p.Wait(jobTimeout); err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, p.Tail(20))
		}
	}
	for r := range rc.after.world {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-rank%d.err", last, r))); err == nil {
			t.Fatalf("%s rank %d failed: %s", last, r, b)
		}
	}

	keys, total := e.data.want(rc.kind)
	before := ReadRankLines(t, dir, "run1", rc.before.world, func(l KeyLine) bool {
		return state.Before(l)
	})
	after := ReadRankLines(t, dir, last, rc.after.world, nil)
	if err := CheckResumed(before, after, state, keys, total, resumeEpochs); err != nil {
		for _, a := range agents {
			t.Logf("%s:\n%s", a.Name, grepLog(a.Log(), "resum", 12))
		}
		t.Fatal(err)
	}
	t.Logf("%s: checkpoint at epoch %d step %d; every sample of %d epochs once (%d before it, %d after)",
		id, state.Epoch, state.Step, resumeEpochs, CountLines(before), CountLines(after))
}

// startLayout starts a generation's agents (named from tag): a lone
// agent when it has one node.
func startLayout(c *Cluster, job, tag string, l rankLayout) ([]*Agent, []string) {
	nodes := l.nodes
	if len(nodes) == 1 {
		nodes = nil
	}
	urls, agents := startNodes(c, job, tag, l.world, nodes)
	return agents, urls
}

// startRanks starts a run's trainer processes.
func (e *resumeEnv) startRanks(c *Cluster, dir, run string, l rankLayout, urls []string, seed uint64, extra ...string) []*Process {
	var procs []*Process
	for i, ranks := range l.procs {
		args := []string{e.script, "--world-size", strconv.Itoa(l.world), "--out", dir, "--run", run,
			"--seed", strconv.FormatUint(seed+uint64(i), 10)}
		for _, r := range ranks {
			args = append(args, "--rank", fmt.Sprintf("%d=%s", r, urls[r]))
		}
		args = append(args, extra...)
		p := StartProcess(c.T, dir, fmt.Sprintf("%s-p%d", run, i), e.py, args, []string{"PYTHONUNBUFFERED=1"})
		*c.procs = append(*c.procs, p)
		procs = append(procs, p)
	}
	return procs
}

func killAll(procs []*Process) {
	for _, p := range procs {
		_ = p.Kill()
	}
}

// waitFiles waits until each rank of run wrote the file named by pattern
// (or one of its processes exited: then it fails).
func waitFiles(t *testing.T, procs []*Process, dir, run string, world int, pattern string) {
	t.Helper()
	testenv.CheckFor(t, jobTimeout, 20*time.Millisecond, func() error {
		for _, p := range procs {
			if !p.Running() {
				t.Fatalf("%s exited before its checkpoint: %v\n%s\n%s", p.Name, p.ExitErr(), p.Tail(20), rankErrs(dir, run, world))
			}
		}
		for r := range world {
			if _, err := os.Stat(filepath.Join(dir, run+"-"+fmt.Sprintf(pattern, r))); err != nil {
				return fmt.Errorf("rank %d has not checkpointed", r)
			}
		}
		return nil
	})
}

func rankErrs(dir, run string, world int) string {
	var out []string
	for r := range world {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-rank%d.err", run, r))); err == nil {
			out = append(out, fmt.Sprintf("rank %d: %s", r, b))
		}
	}
	return strings.Join(out, "")
}

// grepLog is the last n lines of log that contain s.
func grepLog(log, s string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(len(out)-n, 0):], "\n")
}

// nodesOf splits world ranks over n agents, in order.
func nodesOf(world, n int) [][]int {
	var out [][]int
	for i := range n {
		lo, hi := i*world/n, (i+1)*world/n
		out = append(out, intRange(lo, hi))
	}
	return out
}

func intRange(lo, hi int) []int {
	var out []int
	for r := lo; r < hi; r++ {
		out = append(out, r)
	}
	return out
}

// TestIntegrationResumeDDPAtOnce (issue 31's report): a team of two
// agents (2 nodes x 2 ranks), 600 images x 2 epochs in batches of 8. Four
// ranks read 5 batches and each saves its state at the same step; they
// read on for a moment and die with requests in flight; 0.5 s later four
// new ranks each load rank 0's state at once, on the same agents, and
// read to the end. Once with the ranks as threads of one process, once
// as four processes; SLUICE_RESUME_RUNS repeats each (default 1).
func TestIntegrationResumeDDPAtOnce(t *testing.T) {
	e := startResumeEnv(t)
	d := e.c.UploadImages("ddpatonce", "img/", SmallImages(600, 6, 44))
	runs := 1
	if v := os.Getenv("SLUICE_RESUME_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_RESUME_RUNS=%q: want a count", v)
		}
		runs = n
	}
	nodes := [][]int{{0, 1}, {2, 3}}
	for _, mode := range []struct {
		name  string
		procs [][]int
	}{{"threads", [][]int{{0, 1, 2, 3}}}, {"processes", [][]int{{0}, {1}, {2}, {3}}}} {
		t.Run(mode.name, func(t *testing.T) {
			for i := range runs {
				l := rankLayout{world: 4, nodes: nodes, procs: mode.procs}
				rc := resumeCase{kind: "images", before: l, after: l, ckptAfter: 5, stopAfter: 8, readOn: 150 * time.Millisecond, pause: 500 * time.Millisecond}
				env := *e
				env.data.images = d
				env.run(t, fmt.Sprintf("ddp%s%d", mode.name[:1], i), rc, 8, uint64(i))
			}
		})
	}
}

// randomResumeCase is seed's scenario: world sizes before and after
// (1-6 ranks on 1-3 agents), the trainer processes, whose state is
// loaded, at once or staggered by up to 2 s, a second kill during the
// resume, a checkpoint at an epoch's boundary, and the job's kind.
func randomResumeCase(seed uint64) resumeCase {
	rng := rand.New(rand.NewPCG(seed, 31))
	layout := func() rankLayout {
		w := 1 + rng.IntN(6)
		l := rankLayout{world: w, nodes: nodesOf(w, 1+rng.IntN(min(w, 3)))}
		switch rng.IntN(3) {
		case 0:
			l.procs = [][]int{intRange(0, w)} // every rank a thread of one process
		case 1:
			l.procs = l.nodes // a process per node
		default:
			for r := range w {
				l.procs = append(l.procs, []int{r})
			}
		}
		return l
	}
	rc := resumeCase{kind: []string{"images", "mixed", "packed"}[rng.IntN(3)], before: layout()}
	rc.after = rc.before
	if rng.IntN(2) == 0 {
		rc.after = layout()
	}
	rc.own = rng.IntN(2) == 0
	if rng.IntN(2) == 0 {
		rc.stagger = 2 * rng.Float64()
	}
	// Steps of an epoch: 120 samples (images and mixed) or 64 rows
	// (packed) in steps of world batches of resumeBatch.
	per := 120
	if rc.kind == "packed" {
		per = 4 * lmRowsPerShard
	}
	steps := (per + rc.before.world*resumeBatch - 1) / (rc.before.world * resumeBatch)
	if rng.IntN(4) == 0 {
		rc.ckptAfter = steps // at the epoch's boundary
	} else {
		rc.ckptAfter = 1 + rng.IntN(steps+steps/2)
	}
	// No run before the last may finish the job: its agents would end,
	// delivered. A rank stopped after n batches was handed up to n+4 parts
	// (prefetched: 2 queued, 1 on its way, 1 a member's poll holds); a run
	// killed during its resume stops after one, with a prefetch of one.
	total := resumeEpochs * steps
	rc.ckptAfter = min(rc.ckptAfter, total-5)
	rc.stopAfter = min(rc.ckptAfter+rng.IntN(4), total-5)
	rc.readOn = time.Duration(rng.IntN(300)) * time.Millisecond
	rc.pause = time.Duration(rng.IntN(500)) * time.Millisecond
	if rng.IntN(3) == 0 {
		rc.secondKill = time.Duration(100+rng.IntN(1400)) * time.Millisecond
	}
	// A launch killed during its resume needs names (generations);
	// otherwise half the seeds go by which ranks resumed.
	rc.tokens = rc.secondKill > 0 || rng.IntN(2) == 0
	if rc.secondKill > 0 && stepsLeft(per, rc.before.world, rc.after.world, rc.ckptAfter) < 5 {
		// The killed resume would be handed every step left (see above)
		// and its agents end, delivered.
		rc.secondKill = 0
	}
	return rc
}

// stepsLeft is how many steps of after ranks follow a checkpoint taken
// after ckpt steps of before ranks, with per samples an epoch.
func stepsLeft(per, before, after, ckpt int) int {
	stepsOf := func(rows, world int) int { return (rows + world*resumeBatch - 1) / (world * resumeBatch) }
	sb := stepsOf(per, before)
	e, s := ckpt/sb, ckpt%sb
	if e >= resumeEpochs {
		return 0
	}
	return stepsOf(per-min(s*before*resumeBatch, per), after) + (resumeEpochs-1-e)*stepsOf(per, after)
}

// TestIntegrationResumeRandom: randomized resumes with the real Python
// client, one cluster, a job per seed. SLUICE_RESUME_SEEDS=N runs seeds
// 1..N (the long form: 500); SLUICE_RESUME_SEED=S runs seed S alone; the
// short form, in make test, runs 4.
func TestIntegrationResumeRandom(t *testing.T) {
	seeds := intRange(1, 5)
	if v := os.Getenv("SLUICE_RESUME_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_RESUME_SEEDS=%q: want a count", v)
		}
		seeds = intRange(1, n+1)
	}
	if v := os.Getenv("SLUICE_RESUME_SEED"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SLUICE_RESUME_SEED=%q: want a seed", v)
		}
		seeds = []int{s}
	}
	e := startResumeEnv(t)
	for _, s := range seeds {
		rc := randomResumeCase(uint64(s))
		t.Run(fmt.Sprintf("seed%d", s), func(t *testing.T) {
			t.Logf("seed %d: %v", s, rc)
			e.run(t, fmt.Sprintf("rz%d", s), rc, resumeBatch, uint64(s))
		})
	}
}

// TestIntegrationResumeMixtureRefused: two ranks of one generation load
// different checkpoints (rank 1's a step later): the second to arrive
// is refused with 409, naming both positions, never served a mixture.
func TestIntegrationResumeMixtureRefused(t *testing.T) {
	e := startResumeEnv(t)
	c := e.c
	c.Submit(e.data.spec("mixture", "images", resumeBatch))
	dir := filepath.Join(c.Dir, "mixture")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := rankLayout{world: 2, nodes: [][]int{{0, 1}}, procs: [][]int{{0, 1}}}
	_, urls := startLayout(c, "mixture", "a", l)
	first := e.startRanks(c, dir, "run1", l, urls, 1, "--ckpt-after", "3", "--stop-after", "4")
	waitFiles(t, first, dir, "run1", 2, "state-rank%d.json")
	killAll(first)
	st := ReadLoaderStateFile(t, filepath.Join(dir, "run1-state-rank0.json"))
	var raw map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "run1-state-rank0.json"))
	if err != nil || json.Unmarshal(b, &raw) != nil {
		t.Fatalf("the state: %v", err)
	}
	raw["step"] = st.Step + 1 // another checkpoint's step
	later, _ := json.Marshal(raw)
	if err := os.WriteFile(filepath.Join(dir, "later.json"), later, 0o644); err != nil {
		t.Fatal(err)
	}
	one := rankLayout{world: 2, procs: [][]int{{0}}}
	p0 := e.startRanks(c, dir, "run2", one, urls, 2, "--resume", filepath.Join(dir, "run1-state-rank0.json"))
	waitFiles(t, p0, dir, "run2", 1, "rank%d.keys")
	p1 := e.startRanks(c, dir, "run2b", rankLayout{world: 2, procs: [][]int{{1}}}, urls, 3, "--resume", filepath.Join(dir, "later.json"))
	if err := p1[0].Wait(jobTimeout); err != nil {
		t.Fatal(err)
	}
	msg, err := os.ReadFile(filepath.Join(dir, "run2b-rank1.err"))
	if err != nil {
		t.Fatalf("rank 1, loading another checkpoint, was not refused: %v", err)
	}
	for _, want := range []string{"409", fmt.Sprintf("epoch %d step %d", st.Epoch, st.Step+1), fmt.Sprintf("epoch %d step %d", st.Epoch, st.Step)} {
		if !strings.Contains(string(msg), want) {
			t.Errorf("rank 1's error %q lacks %q", msg, want)
		}
	}
	t.Logf("rank 1 was told: %s", strings.TrimSpace(string(msg)))
}
