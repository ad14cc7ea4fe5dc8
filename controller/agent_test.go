package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	traineragent "github.com/sluice-project/sluice/trainer-agent"
	"github.com/sluice-project/sluice/wire"
)

// TestJobWithTheRealAgent runs a job end to end through the controller and
// the trainer agent: the agent's demand signals reach the autoscaler and
// the status, its batches hold every sample of every epoch once, and the
// job succeeds once it has acked everything.
func TestJobWithTheRealAgent(t *testing.T) {
	e := newEnv(t, 24, 6)
	e.gate.release()
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("agent", "img", 2))
	agent, err := traineragent.New(e.nc, e.js, job, traineragent.Options{DemandInterval: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- agent.Run(ctx) }()

	seen := map[string]int{}
	for {
		b, err := agent.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("next batch: %v", err)
		}
		for _, k := range b.Keys {
			seen[fmt.Sprintf("%d/%s", b.Epoch, k)]++
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) != 2*e.samples || dups != 0 {
		t.Errorf("trainer got %d distinct samples with %d duplicates, want %d once each", len(seen), dups, 2*e.samples)
	}
	s := e.waitState(t, "agent", wire.JobSucceeded, 30*time.Second)
	if r, ok := s.Readers[wire.DefaultReader]; !ok || r.SamplesDelivered == 0 {
		t.Errorf("status readers %+v: want the agent's progress", s.Readers)
	}
	cancel()
	<-runErr
}
