package traineragent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestHoldsBuffer(t *testing.T) {
	for _, tc := range []struct {
		name               string
		limit, bytes       int64
		firstSeq, ackFloor uint64
		otherCaughtUp      bool
		want               bool
	}{
		{"holds the oldest, stream full, another reader waits", 100, 100, 5, 4, true, true},
		{"acked past the oldest: another reader holds it", 100, 500, 5, 5, true, false},
		{"stream below the bound", 100, 99, 5, 4, true, false},
		{"every reader has more to read: producers are just ahead", 100, 500, 5, 4, false, false},
		{"shedding off", 0, 500, 5, 4, true, false},
	} {
		if got := holdsBuffer(tc.limit, tc.bytes, tc.firstSeq, tc.ackFloor, tc.otherCaughtUp); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// readerReplay re-publishes a replay's shards on the asking reader's own
// subject, as functions do for broker.Replay's tasks.
type readerReplay struct {
	t     *testing.T
	e     env
	msgs  []outputMsg
	mu    sync.Mutex
	calls []map[int][]int
}

func (f *readerReplay) replay(ctx context.Context, _ jetstream.JetStream, job wire.Job, reader string, shards map[int][]int) (int, error) {
	f.mu.Lock()
	f.calls = append(f.calls, shards)
	nonce := len(f.calls)
	f.mu.Unlock()
	n := 0
	for e, ss := range shards {
		for _, s := range ss {
			n++
			for _, m := range f.msgs {
				if m.ref.Epoch == e && m.ref.Shard == s {
					msg := m.natsMsg(fmt.Sprintf("%s.r%d", m.ref.MsgID(), nonce))
					msg.Subject = wire.ReaderReplaySubject(job.Spec.ID, reader)
					if _, err := f.e.js.PublishMsg(ctx, msg); err != nil {
						return n, err
					}
				}
			}
		}
	}
	return n, nil
}

// TestALaggingReaderShedsAndAsksAgain: of two readers of one job, the
// slow one takes a batch and pauses. Past its lag bound it takes the rest
// off the stream unkept, owing their shards, so the stream keeps only the
// chunks it holds once the fast reader is done; when its trainer goes on
// it asks for the owed shards again, and gets every sample exactly once.
func TestALaggingReaderShedsAndAsksAgain(t *testing.T) {
	e := newEnv(t)
	l := layout{{4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}} // 48 samples an epoch
	job := testJob("lag", 2, 4, l)
	job.Spec.Readers = []string{"fast", "slow"}
	e.createStream(t, job)
	msgs := outputs(t, job, l)
	for _, m := range msgs {
		e.publish(t, m, "")
	}
	fast, err := New(e.nc, e.js, job, Options{Reader: "fast"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := New(e.nc, e.js, job, Options{Reader: "slow", PrefetchSamples: 4, MaxLagBytes: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fake := &readerReplay{t: t, e: e, msgs: msgs}
	slow.replay = fake.replay
	waitFast, waitSlow := runAgent(t, fast), runAgent(t, slow)

	first := take(t, slow, 1)
	if got := len(take(t, fast, -1)); got != 24 {
		t.Errorf("fast reader: %d batches, want 24", got)
	}
	if err := waitFast(); err != nil {
		t.Fatal(err)
	}
	// The fast reader acked everything; the slow one sheds what it does
	// not hold, so the stream is not held full for it.
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := e.streamMsgs(t, job.Spec.ID); n > 4 {
			return fmt.Errorf("the stream holds %d of %d messages for the slow reader, want at most the 4 it may hold", n, len(msgs))
		}
		return nil
	})
	if st := slow.Stats(); st.ShedMessages == 0 {
		t.Errorf("stats %+v: want messages shed", st)
	}
	if p := e.storedPosition(t, job.Spec.ID, "slow"); p.Epochs[0].Owed == "" && p.Epochs[1].Owed == "" {
		t.Errorf("recorded position %+v: want the shed shards owed", p)
	}

	rest := take(t, slow, -1)
	if err := waitSlow(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, b := range append(first, rest...) {
		for _, k := range b.Keys {
			got[fmt.Sprintf("%d/%s", b.Epoch, k)]++
		}
	}
	checkEveryOnce(t, job, l, got, 0)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.calls) == 0 {
		t.Error("the slow reader never asked for its owed shards")
	}
	t.Logf("replays asked: %v; shed %d messages", fake.calls, slow.Stats().ShedMessages)
}
