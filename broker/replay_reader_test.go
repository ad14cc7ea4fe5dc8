package broker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sluice-project/sluice/wire"
)

// A replay asked for by one reader reaches that reader's consumer only:
// its tasks publish to the reader's replay subject, which the other
// readers' consumers do not match, so they neither read it again nor keep
// it in the stream once they are done.
func TestReplayReachesOnlyTheReaderThatAsked(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	spec := testSpec("rr", 1)
	spec.Readers = []string{"a", "b"}
	job := e.submit(t, spec)
	if _, err := Replay(ctx, e.js, job, "a", map[int][]int{0: {1}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tasks.GetLastMsgForSubject(ctx, wire.ReplaySubject("rr"))
	if err != nil {
		t.Fatal(err)
	}
	var task wire.ShardTask
	if err := json.Unmarshal(m.Data, &task); err != nil {
		t.Fatal(err)
	}
	if task.OutputSubject != wire.ReaderReplaySubject("rr", "a") {
		t.Fatalf("replay task publishes to %q; want reader a's replay subject", task.OutputSubject)
	}
	if _, err := Replay(ctx, e.js, job, "no.such", map[int][]int{0: {1}}); err == nil {
		t.Errorf("Replay for reader %q: want an error, not a subject with a dot in it", "no.such")
	}

	// What a function publishes there: one chunk for everyone, one replay for a.
	for _, subj := range []string{wire.OutputSubject("rr"), task.OutputSubject} {
		if _, err := e.js.Publish(ctx, subj, []byte("chunk")); err != nil {
			t.Fatalf("publishing to %s: %v", subj, err)
		}
	}
	for reader, want := range map[string]uint64{"a": 2, "b": 1} {
		c, err := e.js.Consumer(ctx, wire.OutputStream("rr"), wire.ReaderConsumer(reader))
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending != want {
			t.Errorf("reader %s: %d pending; want %d", reader, info.NumPending, want)
		}
	}
	// b acks its one message: the stream keeps only a's replay and the
	// chunk a has not acked.
	c, _ := e.js.Consumer(ctx, wire.OutputStream("rr"), wire.ReaderConsumer("b"))
	msgs, err := c.FetchNoWait(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.js.Stream(ctx, wire.OutputStream("rr"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("output stream holds %d messages; want 2 (a has acked none)", info.State.Msgs)
	}
}
