package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// A team scenario's sizes: 150 samples in 5 shards, batches of 8 for a
// world of 4, so each epoch has 4 full steps and a last one of 22 split
// over the ranks.
const (
	teamSamples = 150
	teamShards  = 5
	teamBatch   = 8
	teamWorld   = 4
)

// teamJob is a spec over d with a team scenario's sizes.
func teamJob(id string, d Dataset) Spec {
	return Spec{"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": teamBatch, "epochs": scenarioEpochs, "seed": 7, "max_replicas": 2}
}

// startTeam starts a reader's team of two `sluice agent` processes, as on
// two nodes: the planner serving ranks 0 and 1, and the member serving 2
// and 3, each on its own port with its own name.
func startTeam(c *Cluster, job string) (planner, member *Agent) {
	c.T.Helper()
	world := "--world-size=" + strconv.Itoa(teamWorld)
	planner = c.StartAgent("agent-node0", job, world, "--ranks=0,1")
	member = c.StartAgent("agent-node1", job, world, "--ranks=2,3")
	return planner, member
}

// TestIntegrationTeam: one job read by a DDP trainer of 4 ranks on two
// "nodes", each with its own `sluice agent` (--ranks 0,1 and --ranks
// 2,3), each rank's client reading its own node's agent until 410. Every
// sample of every epoch reaches exactly one rank exactly once, every rank
// takes the same steps of each epoch, the job succeeds and no output
// passes through NATS.
func TestIntegrationTeam(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("team", "train/", SmallImages(teamSamples, teamShards, 21))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(teamJob("team", d))
	planner, member := startTeam(c, "team")
	bytes := c.MeasureNATSBytes()
	tr := NewTrainer()
	ranks := NewTeamRanks(t, tr, teamWorld, func(r int) string {
		if r < 2 {
			return planner.URL
		}
		return member.URL
	})
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	if err := ranks.Run(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	bytes.Check(t, "team", tr.Bytes())
	waitReleased(t, c, js, "team", wire.JobSucceeded, ctrl)
	ranks.CheckSteps(t, scenarioEpochs)
	t.Logf("shard sends answered (tasks and rows produced again): planner %.0f, member %.0f, for %d tasks",
		ranks.Sends(planner.URL), ranks.Sends(member.URL), teamShards*scenarioEpochs)
	logReport(t, tr.Check("team", d.Keys, scenarioEpochs, nil, took))
}

// TestIntegrationTeamMemberRestart: the member agent (ranks 2 and 3) is
// SIGKILLed mid-epoch 0 and again mid-epoch 1, and started again with the
// same flags; its ranks' clients retry at once, as a trainer's would,
// until it serves again. The planner has the rows the killed member held
// produced again, and every sample still reaches one rank exactly once.
//
// The kills come between the member's ranks' requests: both park after
// the same step, the member is killed and restarted, and they go on (a
// part being written when its agent dies is lost or repeated, as in
// TestIntegrationAgentRestart).
func TestIntegrationTeamMemberRestart(t *testing.T) {
	teamMemberRestart(t, "team-restart", false)
}

// TestIntegrationTeamMemberRestartReady is TestIntegrationTeamMemberRestart
// with the member's ranks waiting for the restarted member's /readyz
// before they go on.
func TestIntegrationTeamMemberRestartReady(t *testing.T) {
	teamMemberRestart(t, "team-restart-ready", true)
}

func teamMemberRestart(t *testing.T, job string, waitReady bool) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages(job, "train/", SmallImages(teamSamples, teamShards, 22))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(teamJob(job, d))
	planner, member := startTeam(c, job)
	tr := NewTrainer()
	ranks := NewTeamRanks(t, tr, teamWorld, func(r int) string {
		if r < 2 {
			return planner.URL
		}
		return member.URL
	})
	// Each rank's parts of the whole run (5 per epoch): mid epoch 0, and
	// mid epoch 1.
	ranks.PauseAfter([]int{2, 3}, []int{2, 7}, func(n int) {
		url, err := member.Restart()
		if err != nil {
			t.Errorf("restarting the member after its ranks' part %d: %v", n, err)
			return
		}
		if waitReady {
			testenv.CheckFor(t, time.Minute, 20*time.Millisecond, func() error { return readyz(url) })
		}
		t.Logf("SIGKILLed and restarted the member agent after its ranks' part %d (%d samples delivered); serving again at %s",
			n, tr.Samples(), url)
	})
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	if err := ranks.Run(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	waitReleased(t, c, js, job, wire.JobSucceeded, ctrl)
	ranks.CheckSteps(t, scenarioEpochs)
	t.Logf("shard sends answered (tasks and rows produced again): planner %.0f, member %.0f over its 3 runs, for %d tasks",
		ranks.Sends(planner.URL), ranks.Sends(member.URL), teamShards*scenarioEpochs)
	logReport(t, tr.Check(job, d.Keys, scenarioEpochs, nil, took))
}

// readyz is nil once the agent at url answers /readyz with 200.
func readyz(url string) error {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s/readyz: %s %s", url, resp.Status, body)
	}
	return nil
}
