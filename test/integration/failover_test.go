package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"

	"github.com/sluice-project/sluice/internal/testenv"
)

// TestIntegrationControllerFailover: two controllers run from the start;
// the one owning the job is SIGKILLed mid-epoch and the standby takes the
// expired lease and finishes the job. Two samples are corrupt: they must be
// reported failed, every other sample delivered exactly once.
func TestIntegrationControllerFailover(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	o := SmallImages(scenarioSamples, scenarioShards, 11)
	o.Corrupt = 2
	d := c.UploadImages("failover", "train/", o)
	_, js := c.JetStream()
	ctrls := []*Controller{
		c.StartController("controller-a", ControllerOptions{}),
		c.StartController("controller-b", ControllerOptions{}),
	}

	start := time.Now()
	c.Submit(imageJob("failover", d, "imagenet-eval"))
	agent := c.StartAgent("agent", "failover")
	tr := NewTrainer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trained := runTrainer(ctx, tr, agent)

	waitSamples(t, tr, scenarioSamples/2, trained)
	owner := leaseOwner(t, js, "failover")
	victim := ownerProcess(t, owner, ctrls)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("SIGKILLed %s (lease owner %q) after %d samples", victim.Name, owner, tr.Samples())
	// The standby takes the lease once it expires (--lease-ttl 3s).
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if o := leaseOwner(t, js, "failover"); o == victim.Name {
			return fmt.Errorf("lease still owned by %s", o)
		}
		return nil
	})
	t.Logf("standby took the lease %.1fs after the kill", time.Since(killed).Seconds())

	waitTrained(t, trained)
	took := time.Since(start)
	waitReleased(t, c, js, "failover", wire.JobSucceeded, ctrls...)
	logReport(t, tr.Check("controller-failover", d.Keys, scenarioEpochs, d.Corrupt, took))
	if r := tr.Check("", d.Keys, scenarioEpochs, d.Corrupt, took); r.Failed != len(d.Corrupt)*scenarioEpochs {
		t.Errorf("failed samples reported: %d, want %d (the corrupt ones, each epoch)", r.Failed, len(d.Corrupt)*scenarioEpochs)
	}
}

// leaseOwner reads the owner of job's lease, waiting for one.
func leaseOwner(t *testing.T, js jetstream.JetStream, job string) string {
	t.Helper()
	var owner string
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, wire.LeasesBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, job)
		if err != nil {
			return fmt.Errorf("lease of %s: %w", job, err)
		}
		var l wire.Lease
		if err := json.Unmarshal(e.Value(), &l); err != nil {
			return err
		}
		if l.Owner == "" || l.Expired(time.Now()) {
			return fmt.Errorf("lease of %s: %+v: no live owner", job, l)
		}
		owner = l.Owner
		return nil
	})
	return owner
}

// ownerProcess finds the controller an owner id names (their --id).
func ownerProcess(t *testing.T, owner string, ctrls []*Controller) *Controller {
	t.Helper()
	for _, p := range ctrls {
		if owner == p.Name {
			return p
		}
	}
	t.Fatalf("lease owner %q is none of the controllers", owner)
	return nil
}
