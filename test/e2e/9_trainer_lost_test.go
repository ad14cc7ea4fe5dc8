package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/integration"
	"github.com/sluice-project/sluice/wire"
)

// nodeRanks starts clients/python/tests/ranks.py on node n (in its
// network namespace, as a trainer pod's processes run): world ranks,
// every one a sluice.Loader on agent url, which it authenticates to with
// the token in tokFile.
func (e *env) nodeRanks(t *testing.T, n int, dir, run string, world int, url, tokFile string, extra ...string) *integration.Process {
	t.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import numpy").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s with numpy is needed (the Python client's one dependency): %v: %s", py, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", nodeNetns(n), py, filepath.Join(root, "clients", "python", "tests", "ranks.py"),
		"--world-size", strconv.Itoa(world), "--out", dir, "--run", run}
	for r := range world {
		args = append(args, "--rank", fmt.Sprintf("%d=%s", r, url))
	}
	return integration.StartProcess(t, dir, run, "ip", append(args, extra...),
		[]string{"PYTHONUNBUFFERED=1", "SLUICE_AGENT_TOKEN_FILE=" + tokFile})
}

// TestTrainerNodeLostResumedOnAnotherNode: a trainer of 2 ranks on node
// 2, with node 2's agent, checkpoints at its 5th step and reads on. Node
// 2 is then lost: cut off (its NATS member with it) and its trainer and
// agent killed, as a power loss leaves them. The job resumes from the
// checkpoint on node 3, with 3 ranks and node 3's agent, every rank
// loading rank 0's state (DDP). What the model saw, the first run's steps
// before the checkpoint and every step of the resumed run, is every
// sample of every epoch once, in steps every rank took in order; the job
// succeeds.
func TestTrainerNodeLostResumedOnAnotherNode(t *testing.T) {
	e := need(t)
	if e.nodes < 3 {
		t.Skipf("the cluster has %d nodes, this needs 3", e.nodes)
	}
	js := e.jetStream(t)
	const samples, shards, epochs, batch = 480, 24, 2, 8
	id := "trainer-lost-" + e.suffix
	d := e.dataset(t, id+"/", samples, shards)
	dir := filepath.Join(e.dir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tok, err := bearer.Random()
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(tokFile, []byte(tok.Reveal()), 0o600); err != nil {
		t.Fatal(err)
	}
	e.submit(t, map[string]any{"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": batch, "epochs": epochs, "seed": 7, "max_replicas": 2})

	agentA, urlA := e.nodeAgent(t, 2, "agent-node2-"+id, id, tok, "--world-size=2")
	run1 := e.nodeRanks(t, 2, dir, "run1", 2, urlA, tokFile, "--ckpt-after", "5", "--stop-after", "20")
	waitFor(t, 5*time.Minute, 50*time.Millisecond, func() error {
		if !run1.Running() {
			t.Fatalf("run1 exited before its checkpoint: %v\n%s\nagent:\n%s", run1.ExitErr(), run1.Tail(20), agentA.Tail(20))
		}
		for r := range 2 {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("run1-state-rank%d.json", r))); err != nil {
				return fmt.Errorf("rank %d has not checkpointed", r)
			}
		}
		return nil
	})
	time.Sleep(time.Second) // reading on past the checkpoint, requests in flight

	heal := e.cutNode(t, 2)
	lostAt := time.Now()
	t.Cleanup(func() { heal(); e.waitNodeBack(t, nodeNetns(2)) })
	_ = run1.Kill()
	_ = agentA.Kill()
	state := integration.ReadLoaderStateFile(t, filepath.Join(dir, "run1-state-rank0.json"))
	t.Logf("node %s lost; the checkpoint is at epoch %d step %d", nodeNetns(2), state.Epoch, state.Step)

	agentB, urlB := e.nodeAgent(t, 3, "agent-node3-"+id, id, tok, "--world-size=3")
	agentUp := time.Since(lostAt)
	run2 := e.nodeRanks(t, 3, dir, "run2", 3, urlB, tokFile, "--resume", filepath.Join(dir, "run1-state-rank0.json"))
	if err := run2.Wait(10 * time.Minute); err != nil {
		t.Fatalf("run2: %v\n%s\nnode 3's agent:\n%s", err, run2.Tail(20), agentB.Tail(30))
	}
	took := time.Since(lostAt)
	for r := range 3 {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("run2-rank%d.err", r))); err == nil {
			t.Fatalf("run2 rank %d failed: %s", r, b)
		}
	}
	e.waitJob(t, js, id, wire.JobSucceeded, 2*time.Minute)

	keys := make([]string, len(d.Keys))
	for i, k := range d.Keys {
		keys[i] = "-1/" + k
	}
	before := integration.ReadRankLines(t, dir, "run1", 2, state.Before)
	after := integration.ReadRankLines(t, dir, "run2", 3, nil)
	if err := integration.CheckResumed(before, after, state, keys, len(keys), epochs); err != nil {
		t.Fatalf("%v\nnode 3's agent:\n%s", err, agentB.Tail(30))
	}
	t.Logf("figures: scenario=trainer-node-lost ranks=2->3 checkpoint=epoch%d/step%d before=%d after=%d "+
		"agent_ready_after_loss_s=%.1f resumed_run_s=%.1f lost=0 duplicates=0",
		state.Epoch, state.Step, integration.CountLines(before), integration.CountLines(after),
		agentUp.Seconds(), took.Seconds())
}
