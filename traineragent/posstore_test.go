package traineragent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// replicaBehind is the readers bucket as seen through a member catching
// up (back from a partition): Get answers with the entries queued in
// stale, oldest first, before the bucket's own. lostAcks Updates land
// and report a timeout, as a write whose reply the cut lost.
type replicaBehind struct {
	jetstream.KeyValue
	mu       sync.Mutex
	stale    []jetstream.KeyValueEntry
	lostAcks int
	gets     int
}

func (r *replicaBehind) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	r.mu.Lock()
	r.gets++
	if len(r.stale) > 0 {
		e := r.stale[0]
		r.stale = r.stale[1:]
		r.mu.Unlock()
		return e, nil
	}
	r.mu.Unlock()
	return r.KeyValue.Get(ctx, key)
}

func (r *replicaBehind) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := r.KeyValue.Update(ctx, key, value, last)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.lostAcks > 0 {
		r.lostAcks--
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// TestPositionWriteOutlastsAReplicaBehind: a position write lands but its
// reply is lost, and the retry's conflict is read from a replica behind,
// which answers with the reader's own two earlier records, oldest first.
// Neither is taken for a record put back, nor for another agent's: the
// write reads again until it sees its own landed write, and succeeds. The
// reader's check for another agent passes over an earlier record too.
// (Judged as read, the first looked put back and was written over, and the
// second then looked like another run of this node: the agent stopped,
// "another agent is reading as this reader", as in a 20 s partition.)
func TestPositionWriteOutlastsAReplicaBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	const job = "behind"
	key := wire.ReaderKey(job, wire.DefaultReader)
	check, err := wire.NewNodeVerifier(job, wire.JobNodeKey(testTeamKey))
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	seals := recordSeals{node: testNode(t, job, "node0"), check: check, refused: func(reason string, _ error) {
		refused = append(refused, reason)
	}}
	behind := &replicaBehind{KeyValue: kv}
	log, logs := logbuf.Logger(slog.LevelInfo)
	s := &positionStore{kv: behind, key: key, seals: seals, log: log}
	record := func(i int) []byte { return fmt.Appendf(nil, `{"step":%d}`, i) }

	var earlier []jetstream.KeyValueEntry
	for i := 1; i <= 2; i++ {
		if err := s.write(ctx, record(i)); err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		earlier = append(earlier, e)
	}
	behind.stale, behind.lostAcks, behind.gets = earlier, 1, 0
	if err := s.write(ctx, record(3)); err != nil {
		t.Fatalf("the third write: %v\n%s", err, logs)
	}
	got, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rec, node, over, err := check.OpenRecord(key, got.Value())
	switch {
	case err != nil:
		t.Fatal(err)
	case string(rec) != string(record(3)) || node != "node0" || over != earlier[1].Revision():
		t.Errorf("stored %s by %q over %d; want %s by node0 over %d", rec, node, over, record(3), earlier[1].Revision())
	case s.rev != got.Revision():
		t.Errorf("the store's revision is %d, want the landed write's %d", s.rev, got.Revision())
	}
	if behind.gets < 3 {
		t.Errorf("the write read %d times; want past both earlier records", behind.gets)
	}

	behind.stale = earlier
	if err := s.taken(ctx); err != nil {
		t.Errorf("taken, reading an earlier record: %v", err)
	}
	if len(refused) > 0 {
		t.Errorf("refused %v: an earlier record read from a replica behind is not one put back", refused)
	}
	if after, err := kv.Get(ctx, key); err != nil || after.Revision() != got.Revision() {
		t.Errorf("the position was written again (revision %d, was %d): %v", after.Revision(), got.Revision(), err)
	}
}

// TestResumeOfAReaderThatCouldNotReadItsPosition: the reader's recorded
// position is not sealed by a node of the job, so the agent stops before
// it has a position; a trainer's resume arriving meanwhile is answered
// that the reader stopped (a 503), not by a crash of the request.
func TestResumeOfAReaderThatCouldNotReadItsPosition(t *testing.T) {
	e := newEnv(t)
	job := keyed(fixture.Job("unread", 2, 1, teamLayout))
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), wire.ReaderKey(job.Spec.ID, wire.DefaultReader), []byte(`{"plain":true}`)); err != nil {
		t.Fatal(err)
	}
	a, err := New(e.nc, e.js, job, teamOptions("node0", 1, []int{0}), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() {
		st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 1}
		_, err := a.readers[0].Resume(context.Background(), st, 1, 0, "")
		resumed <- err
	}()
	wait := runAgent(t, a)
	if err := wait(); err == nil || !strings.Contains(err.Error(), "not sealed by a node") {
		t.Fatalf("Run = %v, want it stopped on the unsealed position", err)
	}
	select {
	case err := <-resumed:
		if !errors.Is(err, readerstate.ErrStopped) {
			t.Errorf("the resume: %v, want ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resume was not answered")
	}
}
