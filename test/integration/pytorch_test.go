package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// The PyTorch scenarios' sizes: small, so that five torch processes per
// scenario stay quick on two cores. Per rank 4 samples a step: 96 samples
// make 12 steps an epoch for 2 ranks, 8 for 3.
const (
	ddpSamples = 96
	ddpShards  = 4
	ddpEpochs  = 2
	ddpBatch   = 4
)

// ddpPipeline outputs 16x16 uint8 crops: the model's input is 768 values.
const ddpPipeline = "{\"name\": \"ddp\", \"label\": {\"member\": \"cls\"}, \"ops\": [\"decode\"," +
	" {\"op\": \"random_resized_crop\", \"size\": 16}, {\"op\": \"random_horizontal_flip\"}, \"to_uint8_hwc\"]}"

// TestIntegrationPyTorchResume: a real DDP training loop
// (clients/python/tests/train.py: torch.distributed over gloo, a linear
// model, sluice.torch.SluiceIterableDataset) trains part of an epoch,
// checkpointing the model with the loader's state; the trainers and the
// agent are SIGKILLed (prefetched batches die with them); a new set of
// ranks resumes from the checkpoint through a restarted agent and trains
// to the end. The samples the model saw, by (epoch, key) — those of the
// first run up to the checkpoint, and all of the second's — must be every
// sample of every epoch exactly once. The ranks of the first two read
// their agent's Unix socket (batches as memfds), the third's TCP. Three scenarios (each about 30 s on
// two cores, most of it torch starting up): 2 ranks resumed by 3 from a
// checkpoint in epoch 0; 2 by 2 after a crash between checkpoints in
// epoch 1; and 2 nodes of 2 ranks, each node's ranks reading from their
// own agent (a team), resumed by 3 nodes of 1 rank with new agents.
func TestIntegrationPyTorchResume(t *testing.T) {
	py := pythonWithTorch(t)
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("ddp", "train/", SmallImages(ddpSamples, ddpShards, 21))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	for i, sc := range []struct {
		name              string
		first, second     int // world sizes
		stopAfter, ckptAt int // steps of the first run; it checkpoints every ckptAt
		// nodes, when set, are the ranks of each agent of the first and
		// the second run (one agent per node: a team); else one agent
		// serves every rank and is restarted between the runs.
		nodes [2][][]int
	}{
		// 2 ranks checkpoint at step 5 of epoch 0 and are killed; 3 resume.
		{name: "2-then-3-ranks", first: 2, second: 3, stopAfter: 5, ckptAt: 5},
		// The same world size, killed in epoch 1 three steps after its last
		// checkpoint (steps 16-18; 12 steps an epoch, checkpoints every 5
		// and at the epoch's end): those steps' samples are seen again by
		// the resumed run, once.
		{name: "same-world-size-crash-between-checkpoints", first: 2, second: 2, stopAfter: 18, ckptAt: 5},
		// 2 nodes of 2 ranks (6 steps an epoch) checkpoint at step 4 and
		// are killed with their agents; 3 nodes of 1 rank resume.
		{name: "2-nodes-x-2-then-3-x-1", first: 4, second: 3, stopAfter: 4, ckptAt: 4,
			nodes: [2][][]int{{{0, 1}, {2, 3}}, {{0}, {1}, {2}}}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			c := c.For(t)
			job := "ddp" + strconv.Itoa(i)
			start := time.Now()
			spec := imageJob(job, d, ddpPipeline)
			spec["batch_size"], spec["epochs"] = ddpBatch, ddpEpochs
			c.Submit(spec)
			urls, agents := startNodes(c, job, "run1", sc.first, sc.nodes[0])
			dir := filepath.Join(c.Dir, job)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			ckpt := filepath.Join(dir, "ckpt.pt")

			first := startTrainers(c, py, urls, dir, "run1", sc.first, ckpt,
				"--ckpt-every", strconv.Itoa(sc.ckptAt), "--stop-after", strconv.Itoa(sc.stopAfter))
			waitStopped(t, first, sc.stopAfter)
			for _, p := range first {
				_ = p.Kill()
			}
			state := readLoaderState(t, ckpt)
			t.Logf("run 1 (%d ranks) stopped after %d steps; checkpoint at epoch %d step %d", sc.first, sc.stopAfter, state.Epoch, state.Step)
			if sc.nodes[1] == nil {
				// The same socket path: the killed agent's file is stale.
				if _, err := agents[0].Restart(); err != nil {
					t.Fatal(err)
				}
				urls = slices.Repeat(urls[:1], sc.second)
			} else {
				for _, a := range agents {
					_ = a.Kill()
				}
				urls, _ = startNodes(c, job, "run2", sc.second, sc.nodes[1])
			}

			second := startTrainers(c, py, urls, dir, "run2", sc.second, ckpt, "--resume")
			for _, p := range second {
				if err := p.Wait(jobTimeout); err != nil {
					t.Fatalf("%s: %v\n%s", p.Name, err, p.Tail(30))
				}
			}
			if i := strings.Index(second[0].Log(), "resumed: "); i >= 0 {
				t.Logf("the agent's answer to the resume: %s", strings.SplitN(second[0].Log()[i+len("resumed: "):], "\n", 2)[0])
			}
			took := time.Since(start)
			waitReleased(t, c, js, job, wire.JobSucceeded, ctrl)

			tr := NewTrainer()
			before, after := 0, 0
			for r := range sc.first {
				for _, l := range readKeyLines(t, filepath.Join(dir, fmt.Sprintf("run1-rank%d.keys", r))) {
					if l.epoch < state.Epoch || (l.epoch == state.Epoch && l.step < state.Step) {
						tr.seen[epochKey(l.epoch, l.key)]++
						before++
					} else {
						after++
					}
				}
			}
			resumed := 0
			for r := range sc.second {
				for _, l := range readKeyLines(t, filepath.Join(dir, fmt.Sprintf("run2-rank%d.keys", r))) {
					tr.seen[epochKey(l.epoch, l.key)]++
					resumed++
				}
			}
			t.Logf("samples: %d before the checkpoint, %d after it in run 1 (seen again in run 2), %d in run 2", before, after, resumed)
			logReport(t, tr.Check("pytorch-"+sc.name, d.Keys, ddpEpochs, nil, took))
		})
	}
}

// pythonWithTorch is $SLUICE_PYTHON or /usr/bin/python3, with torch. The
// scenario fails without it on CI and is skipped elsewhere.
func pythonWithTorch(t *testing.T) string { return pythonWith(t, "torch, numpy") }

// pythonWith is $SLUICE_PYTHON or /usr/bin/python3, with modules (a Python
// import list). The scenario fails without them on CI and is skipped
// elsewhere.
func pythonWith(t *testing.T, modules string) string {
	t.Helper()
	py := os.Getenv("SLUICE_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	out, err := exec.Command(py, "-c", "import "+modules).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("%s with %s is needed (set SLUICE_PYTHON): %v: %s", py, modules, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// startNodes starts the agents of a run of world ranks: one for every
// rank (nodes nil), or one per entry of nodes serving its ranks; it
// returns each rank's agent URL and the agents.
func startNodes(c *Cluster, job, run string, world int, nodes [][]int) ([]string, []*Agent) {
	c.T.Helper()
	if nodes == nil {
		// One agent for every rank, which read it on its Unix socket: each
		// batch a memfd the trainer maps.
		sock := filepath.Join(c.Dir, job+".sock")
		a := c.StartAgent("agent-"+job, job, "--listen-unix", sock)
		return slices.Repeat([]string{"unix:" + sock}, world), []*Agent{a}
	}
	urls := make([]string, world)
	var agents []*Agent
	for i, ranks := range nodes {
		list := make([]string, len(ranks))
		for j, r := range ranks {
			list[j] = strconv.Itoa(r)
		}
		a := c.StartAgent(fmt.Sprintf("%s-%s-node%d", job, run, i), job,
			"--world-size", strconv.Itoa(world), "--ranks", strings.Join(list, ","))
		for _, r := range ranks {
			urls[r] = a.URL
		}
		agents = append(agents, a)
	}
	return urls, agents
}

// startTrainers starts world ranks of train.py, named run-rankR, rank r
// reading from urls[r], each appending the keys it trained on to
// dir/run-rankR.keys.
func startTrainers(c *Cluster, py string, urls []string, dir, run string, world int, ckpt string, extra ...string) []*Process {
	c.T.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		c.T.Fatal(err)
	}
	script := filepath.Join(root, "clients", "python", "tests", "train.py")
	port := strconv.Itoa(MustFreePort(c.T))
	var procs []*Process
	for r := range world {
		name := fmt.Sprintf("%s-rank%d", run, r)
		args := append([]string{script, "--url", urls[r], "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(world),
			"--master-port", port, "--ckpt", ckpt, "--keys-file", filepath.Join(dir, name+".keys")}, extra...)
		p := StartProcess(c.T, dir, name, py, args, []string{"PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1"})
		*c.procs = append(*c.procs, p)
		procs = append(procs, p)
	}
	return procs
}

// waitStopped waits until every rank wrote its ".stopped" marker after
// steps steps (train.py --stop-after).
func waitStopped(t *testing.T, procs []*Process, steps int) {
	t.Helper()
	testenv.CheckFor(t, jobTimeout, 100*time.Millisecond, func() error {
		for _, p := range procs {
			if !p.Running() {
				t.Fatalf("%s exited before stopping at step %d: %v\n%s", p.Name, steps, p.ExitErr(), p.Tail(30))
			}
			marker := strings.TrimSuffix(p.LogPath, ".log") + ".keys.stopped"
			if _, err := os.Stat(marker); err != nil {
				return fmt.Errorf("%s has not reached step %d", p.Name, steps)
			}
		}
		return nil
	})
}

// readLoaderState reads the loader state train.py writes beside each
// checkpoint (ckpt + ".loader.json"), which Go can read without pickle.
func readLoaderState(t *testing.T, ckpt string) LoaderState {
	t.Helper()
	b, err := os.ReadFile(ckpt + ".loader.json")
	if err != nil {
		t.Fatalf("the first run left no checkpoint: %v", err)
	}
	var s LoaderState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("loader state %s: %v", b, err)
	}
	return s
}

type keyLine struct {
	epoch, step int
	key         string
}

// readKeyLines reads train.py's "epoch step key" lines.
func readKeyLines(t *testing.T, path string) []keyLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []keyLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l keyLine
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %s", &l.epoch, &l.step, &l.key); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}
