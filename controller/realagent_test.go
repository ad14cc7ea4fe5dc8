package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// realFunction answers a shard task as `sluice fn serve` does, with one
// safetensors chunk of the shard's samplesPerShard samples (keys KEY#i,
// two bytes of image each) and the shard's end: output the real agent
// assembles, where function's zeros are for the fake agent only.
func realFunction(w http.ResponseWriter, r *http.Request) {
	var task wire.ShardTask
	if err := json.NewDecoder(r.Body).Decode(&task); err != nil || task.Validate() != nil {
		w.Header().Set(wire.HeaderTaskRejected, "true")
		http.Error(w, fmt.Sprintf("bad task: %v", err), http.StatusBadRequest)
		return
	}
	keys := make([]string, samplesPerShard)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s#%d", task.Key, i)
	}
	kj, _ := json.Marshal(keys)
	chunk, err := safetensors.Encode([]safetensors.Tensor{
		{Name: "image", DType: safetensors.U8, Shape: []int{len(keys), 2}, Data: make([]byte, 2*len(keys))},
	}, map[string]string{
		wire.MetaJob: task.Job, wire.MetaEpoch: strconv.Itoa(task.Epoch), wire.MetaShard: strconv.Itoa(task.Shard),
		wire.MetaChunk: "0", wire.MetaKeys: string(kj),
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	end, _ := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunks: 1,
		Samples: len(keys), Bytes: int64(len(chunk)), Cache: "miss", S3Bytes: 100})
	w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	w.WriteHeader(http.StatusOK)
	if wire.WriteFrame(w, wire.FrameChunk, 0, chunk) != nil {
		return
	}
	_ = wire.WriteFrame(w, wire.FrameEnd, 0, end)
}

// TestJobRunsWithTheRealAgent: a job run by the controller and read
// through the real trainer agent (package traineragent, in process, as
// `sluice agent` runs it), not the hand-written fake, each on NATS as a
// deployment runs them (the shipped authorization: the controller as its
// user, answering the auth callout; the agent as its job, with the team
// key the job was submitted with): the agent follows
// the controller's dispatch plan to the replicas the controller scaled
// up, every sample of every epoch reaches the trainer once, the agent's
// done key ends the job as succeeded, its status counts every task and
// sample and the reader's progress from the agent's demand, and the
// replicas go back to zero.
func TestJobRunsWithTheRealAgent(t *testing.T) {
	e := newSecureEnv(t, 3)
	fn := httptest.NewServer(http.HandlerFunc(realFunction))
	t.Cleanup(fn.Close)
	replicas := newPool(fn.URL)
	e.startController(t, "c1", Options{Actuator: replicas})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("real", "img", 2), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	anc, ajs, err := e.secure.ConnectAgent(t, "real", key)
	if err != nil {
		t.Fatalf("the agent connecting as its job: %v", err)
	}
	agent, err := traineragent.Open(ctx, anc, ajs, "real", traineragent.Options{Name: "node-a", DemandInterval: 100 * time.Millisecond, TeamKey: key}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := agent.Job()
	ran := make(chan error, 1)
	go func() { ran <- agent.Run(ctx) }()

	seen := map[string]int{}
	for {
		b, err := agent.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d samples: %v", len(seen), err)
		}
		for _, k := range b.Keys {
			seen[fmt.Sprintf("epoch %d %s", b.Epoch, k)]++
		}
	}
	if err := <-ran; err != nil {
		t.Fatalf("agent: %v", err)
	}
	want := len(job.Shards) * samplesPerShard * job.Spec.Epochs
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s handed out %d times", k, n)
		}
	}
	if len(seen) != want {
		t.Errorf("%d samples handed out, want %d", len(seen), want)
	}

	s := e.waitState(t, "real", wire.JobSucceeded, 20*time.Second)
	rs := s.Readers[wire.DefaultReader]
	if s.Tasks.Done != job.Tasks() || s.Tasks.Failed != 0 || s.SamplesProcessed != int64(want) ||
		rs.SamplesDelivered != int64(want) || !rs.Done {
		t.Errorf("final status: tasks %+v, samples processed %d, reader %+v; want %d tasks done, %d samples processed and delivered, the reader done",
			s.Tasks, s.SamplesProcessed, rs, job.Tasks(), want)
	}
	replicas.mu.Lock()
	most := replicas.maxJob["real"]
	replicas.mu.Unlock()
	if most == 0 {
		t.Error("the job never had a replica")
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := replicas.Ready("real"); n != 0 {
			return fmt.Errorf("%d replicas after the job, want 0", n)
		}
		return nil
	})
}
