package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// take calls Next n times (n < 0: until io.EOF) and checks every batch.
func take(t *testing.T, a interface {
	Next(context.Context) (Batch, error)
}, n int) []Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []Batch
	for n < 0 || len(out) < n {
		b, err := a.Next(ctx)
		if errors.Is(err, io.EOF) && n < 0 {
			return out
		}
		if err != nil {
			t.Fatalf("after %d batches: %v", len(out), err)
		}
		fixture.CheckBatch(t, b)
		out = append(out, b)
	}
	return out
}

// storedPosition reads a reader's recorded position.
func (e env) storedPosition(t *testing.T, job, reader string) assembly.Position {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), wire.ReaderKey(job, reader))
	if err != nil {
		t.Fatalf("position of %s: %v", reader, err)
	}
	p, err := assembly.DecodePosition(entry.Value())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTwoReadersEachGetEverySampleAtTheirOwnPace(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}}
	job := fixture.Job("two", 2, 4, l)
	job.Spec.Readers = []string{"fast", "slow"}
	f := newFunction(t, job, l)
	e.submit(t, job, f, 2)
	dm := e.watchDemand(t, job.Spec.ID)
	a, err := New(e.nc, e.js, job, Options{DemandInterval: 20 * time.Millisecond}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	fast, slow := a.Reader("fast"), a.Reader("slow")
	// The fast reader takes everything while the slow one takes nothing.
	checkDelivery(t, job, l, take(t, fast, -1))
	if st := slow.Stats(); st.SamplesDelivered != 0 {
		t.Fatalf("slow reader delivered %d samples before asking", st.SamplesDelivered)
	}
	// A task is settled only once both readers recorded its shard.
	if n := e.taskBacklog(t, job.Spec.ID); n == 0 {
		t.Fatal("every task settled while the slow reader had taken nothing")
	}
	got := take(t, slow, 3)
	checkDelivery(t, job, l, append(got, take(t, slow, -1)...))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// Each shard was produced once, for both readers.
	for ep := range job.Spec.Epochs {
		for s := range l {
			if n := f.sendsOf(ep, s); n != 1 {
				t.Errorf("shard %d of epoch %d sent %d times, want once for both readers", s, ep, n)
			}
		}
	}
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
	for _, r := range job.Spec.Readers {
		if p := e.storedPosition(t, job.Spec.ID, r); p.Finished != 2 || len(p.Epochs) != 0 {
			t.Errorf("position of %s = %+v, want 2 epochs finished", r, p)
		}
	}
	// Run flushed each final demand before returning; the subscriber here
	// may still be handing them over.
	testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		done := map[string]bool{}
		for _, d := range dm.all() {
			if d.Done {
				done[d.Reader] = true
			}
		}
		if !done["fast"] || !done["slow"] {
			return fmt.Errorf("final demands by reader: %v, want one from each", done)
		}
		return nil
	})
}

func TestNewRefusesAnUndeclaredReader(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("j", 1, 1, fixture.Layout{{1}})
	job.Spec.Readers = []string{"rank0", "rank1"}
	_, err := New(e.nc, e.js, job, Options{Readers: []string{"rank2"}}, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `no reader "rank2"`) || !strings.Contains(err.Error(), "rank0, rank1") {
		t.Errorf("New with an undeclared reader: %v; want an error naming the declared ones", err)
	}
	// The job's agents share its tasks: an agent serves every reader.
	if _, err := New(e.nc, e.js, job, Options{Readers: []string{"rank1"}}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "serves all of them") {
		t.Errorf("New with some of the readers: %v", err)
	}
	// A spec declaring none has the default reader only.
	job.Spec.Readers = nil
	if _, err := New(e.nc, e.js, job, Options{Readers: []string{"other"}}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), wire.DefaultReader) {
		t.Errorf("New with reader other of a job declaring none: %v", err)
	}
	if _, err := New(e.nc, e.js, job, Options{}, nil, nil, nil); err != nil {
		t.Errorf("New with the default reader: %v", err)
	}
}

// TestAgentResumesWhereItsBatchesEnded stops agents of one reader twice,
// once in the middle of a chunk in epoch 0 and once after an epoch finished
// (with tasks of the other settled, which the position must remember):
// over the three runs every sample of every epoch is delivered exactly
// once, batches full but for each epoch's last, and every task is settled.
func TestAgentResumesWhereItsBatchesEnded(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3, 6}, {5}, {1, 2, 3}, {6}} // 26 samples per epoch
	job := fixture.Job("resume", 2, 4, l)
	e.submit(t, job, newFunction(t, job, l), 1)
	run := func() (*Agent, context.CancelFunc, chan error) {
		a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 4}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- a.Run(ctx) }()
		t.Cleanup(cancel)
		return a, cancel, errc
	}
	stop := func(cancel context.CancelFunc, errc chan error) {
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run after cancel: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not stop")
		}
	}

	var all []Batch
	a, cancel, errc := run()
	all = append(all, take(t, a, 3)...) // 12 samples: shard 0's 9, 3 of shard 1's 5
	stop(cancel, errc)
	p := e.storedPosition(t, job.Spec.ID, wire.DefaultReader)
	partial := 0
	for _, sh := range p.Epochs[0].Shards {
		if sh.Handed != "" {
			partial++
		}
	}
	if p.Finished != 0 || partial == 0 {
		t.Errorf("position after 3 batches = %+v, want epoch 0 open with a chunk partly handed out", p)
	}

	a, cancel, errc = run()
	for a.Stats().Epochs == 0 {
		all = append(all, take(t, a, 1)...)
	}
	stop(cancel, errc)
	// Epochs may finish out of order (tasks sent again come after new ones).
	p = e.storedPosition(t, job.Spec.ID, wire.DefaultReader)
	finished := p.Finished
	for _, ep := range p.Epochs {
		if ep.Complete == fmt.Sprintf("0-%d", len(l)-1) {
			finished++
		}
	}
	if finished != 1 {
		t.Errorf("position after an epoch was delivered = %+v, want 1 epoch finished", p)
	}

	a, _, errc = run()
	all = append(all, take(t, a, -1)...)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	checkDelivery(t, job, l, all)
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
	// A fourth agent has nothing left to deliver.
	a, _, errc = run()
	if _, err := a.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("Next of an agent after the end: %v, want io.EOF", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("Run of an agent after the end: %v", err)
	}
}

// TestALaggingReaderDoesNotHoldBackTheOther feeds two readers through a
// small output buffer, one of which takes nothing until the other is done:
// the lagging one sheds the shards it has not started, so the other gets
// every sample without waiting; then the laggard gets every sample too,
// its shed shards produced again for it.
func TestALaggingReaderDoesNotHoldBackTheOther(t *testing.T) {
	e := newEnv(t)
	chunks := make([]int, 5)
	for i := range chunks {
		chunks[i] = 4
	}
	l := fixture.Layout{chunks, chunks, chunks, chunks, chunks, chunks} // 120 samples in 6 shards of 5 chunks
	job := fixture.Job("lag", 1, 4, l)
	job.Spec.Readers = []string{"fast", "slow"}
	one := len(fixture.ChunkBytes(t, job.Spec.ID, 0, 0, 0, []string{fixture.SampleKey(0, 0, 0), fixture.SampleKey(0, 0, 1), fixture.SampleKey(0, 0, 2), fixture.SampleKey(0, 0, 3)}))
	job.Spec.OutputBufferBytes = int64(12 * one) // two shards and a bit
	f := newFunction(t, job, l)
	e.submit(t, job, f, 1)
	a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 8}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	fast, slow := a.Reader("fast"), a.Reader("slow")
	checkDelivery(t, job, l, take(t, fast, -1))
	shed := slow.Stats().ShedShards
	if shed == 0 {
		t.Fatal("the fast reader got everything, the slow one shed nothing: the buffer held every shard?")
	}
	checkDelivery(t, job, l, take(t, slow, -1))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	sends := 0
	for s := range l {
		sends += f.sendsOf(0, s)
	}
	if sends != len(l)+int(shed) {
		t.Errorf("%d sends, want %d shards and the %d shed once more", sends, len(l), shed)
	}
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
	t.Logf("the slow reader shed %d of %d shards", shed, len(l))
}

// recordable makes job a record the agent takes when it opens a job by
// its id (broker.CheckRecord): a running job whose shards lie under its
// dataset.
func recordable(job wire.Job) wire.Job {
	job.Spec.Weight = 1
	job.Spec.OutputBufferBytes = 4 * int64(job.Spec.ChunkMaxBytes)
	for i := range job.Shards {
		job.Shards[i] = "p/" + job.Shards[i]
	}
	job.Submitted = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	job.State = wire.JobRunning
	return job
}

// TestOpenRefusesARecordThatDoesNotCheck: a record written straight into
// the job store (here: a shard outside its dataset) is refused as the
// controller refuses it, naming what is wrong.
func TestOpenRefusesARecordThatDoesNotCheck(t *testing.T) {
	e := newEnv(t)
	job := recordable(fixture.Job("outside", 1, 2, fixture.Layout{{2}}))
	job.Shards[0] = "other/secrets.tar"
	e.record(t, job)
	_, err := Open(context.Background(), e.nc, e.js, job.Spec.ID, Options{}, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "other/secrets.tar") {
		t.Errorf("Open of a record with a shard outside its dataset: %v", err)
	}
}

func TestAgentStopsWhenTheJobIsCancelledOrDeleted(t *testing.T) {
	for _, end := range []string{"cancelled", "deleted"} {
		t.Run(end, func(t *testing.T) {
			e := newEnv(t)
			l := fixture.Layout{{2}, {2}}
			job := recordable(fixture.Job("gone", 1, 2, l))
			f := newFunction(t, job, l)
			// Open waits for the record.
			opened := make(chan *Agent, 1)
			go func() {
				a, err := Open(context.Background(), e.nc, e.js, job.Spec.ID, Options{}, nil, nil, nil)
				if err != nil {
					t.Error(err)
				}
				opened <- a
			}()
			e.submit(t, job, f, 2)
			a := <-opened
			if a == nil {
				t.FailNow()
			}
			wait := runAgent(t, a)
			srv := httptest.NewServer(a.Handler())
			t.Cleanup(srv.Close)
			b := take(t, a, 1)
			if len(b[0].Keys) != 2 {
				t.Fatalf("first batch %v", b[0].Keys)
			}

			kv, err := e.js.KeyValue(context.Background(), wire.JobsBucket)
			if err != nil {
				t.Fatal(err)
			}
			if end == "cancelled" {
				job.State, job.Reason = wire.JobCancelled, "cancelled by alice"
				e.record(t, job)
			} else if err := kv.Purge(context.Background(), job.Spec.ID); err != nil {
				t.Fatal(err)
			}
			if err := wait(); !errors.Is(err, readerstate.ErrJobEnded) {
				t.Fatalf("Run after the job was %s: %v, want readerstate.ErrJobEnded", end, err)
			}
			if _, err := a.Next(context.Background()); !errors.Is(err, readerstate.ErrJobEnded) || !strings.Contains(err.Error(), end) {
				t.Errorf("Next after the job was %s: %v", end, err)
			}
			resp, err := http.Get(srv.URL + "/v1/batch")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusGone || !strings.Contains(string(body), end) || resp.Header.Get(wire.AgentHeaderEnd) != wire.AgentEndEnded {
				t.Errorf("GET /v1/batch after the job was %s: %s (%s %q) %s", end, resp.Status, wire.AgentHeaderEnd, resp.Header.Get(wire.AgentHeaderEnd), body)
			}
			if end == "cancelled" && !strings.Contains(string(body), "alice") {
				t.Errorf("410 body %q does not give the reason", body)
			}
		})
	}
	t.Run("succeeded through another agent", func(t *testing.T) {
		e := newEnv(t)
		job := recordable(fixture.Job("done", 1, 2, fixture.Layout{{2}}))
		job.State = wire.JobSucceeded
		e.record(t, job)
		a, err := Open(context.Background(), e.nc, e.js, job.Spec.ID, Options{}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := runAgent(t, a)(); !errors.Is(err, readerstate.ErrJobEnded) || !strings.Contains(err.Error(), "succeeded") {
			t.Errorf("Run of an agent with nothing delivered of a succeeded job: %v", err)
		}
	})
	t.Run("refused at open", func(t *testing.T) {
		e := newEnv(t)
		job := recordable(fixture.Job("over", 1, 2, fixture.Layout{{2}}))
		job.State, job.Reason = wire.JobFailed, "no sample could be processed"
		e.record(t, job)
		_, err := Open(context.Background(), e.nc, e.js, job.Spec.ID, Options{}, nil, nil, nil)
		if !errors.Is(err, readerstate.ErrJobEnded) || !strings.Contains(err.Error(), "no sample could be processed") {
			t.Errorf("Open of a failed job: %v", err)
		}
	})
}

func TestAgentIgnoresThePositionOfAnEarlierJobUnderItsID(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{2}, {3}}
	job := fixture.Job("again", 1, 2, l)
	job.Submitted = time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	stale := `{"v":1,"submitted":"2026-11-22T05:00:00Z","finished":1}`
	if _, err := kv.Put(context.Background(), wire.ReaderKey(job.Spec.ID, wire.DefaultReader), []byte(stale)); err != nil {
		t.Fatal(err)
	}
	e.submit(t, job, newFunction(t, job, l), 2)
	a, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	checkDelivery(t, job, l, take(t, a, -1))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if p := e.storedPosition(t, job.Spec.ID, wire.DefaultReader); p.Submitted != "2026-11-23T05:00:00Z" || p.Finished != 1 {
		t.Errorf("position after the job = %+v", p)
	}
}

// TestTwoAgentsOfOneReaderDoNotBothDeliver runs two agents serving every
// rank of one reader: they split the job's tasks until one's
// compare-and-set of the position fails. The loser stops without handing
// out that batch and returns its tasks; the other delivers the rest, every
// sample once over both. (If the winner took every task first, the other
// just waits.)
func TestTwoAgentsOfOneReaderDoNotBothDeliver(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}, {5}}
	job := fixture.Job("twice", 2, 2, l)
	e.submit(t, job, newFunction(t, job, l), 2)
	type result struct {
		batches []Batch
		err     error
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results := make(chan result, 2)
	for range 2 {
		a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 2}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		runAgent(t, a)
		go func() {
			var r result
			for {
				b, err := a.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					r.err = err
					break
				}
				r.batches = append(r.batches, b)
			}
			results <- r
		}()
	}
	// The loser may have handed out batches before the winner loaded the
	// position recording them (it then resumed after them, as a restarted
	// agent does), never after: together every sample comes once.
	var all []Batch
	winners := 0
	for range 2 {
		r := <-results
		all = append(all, r.batches...)
		switch {
		case r.err == nil:
			winners++
			cancel() // the other has nothing left to wait for
		case errors.Is(r.err, ErrReaderTaken), errors.Is(r.err, context.Canceled) && winners == 1:
			t.Logf("the other agent, after %d batches: %v", len(r.batches), r.err)
		default:
			t.Fatalf("agent: %v", r.err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d agents delivered the job, want 1", winners)
	}
	slices.SortStableFunc(all, func(x, y Batch) int { return x.Epoch - y.Epoch })
	checkDelivery(t, job, l, all)
}
