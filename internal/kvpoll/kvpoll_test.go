package kvpoll_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/kvpoll"
	"github.com/sluice-project/sluice/internal/testenv"
)

// TestWatchPollsWithoutAConsumer: a polled watch gives what a watch gives
// (the current entry, nil, each new revision, a delete), creates no
// consumer on the bucket's stream, and refuses what it cannot poll.
func TestWatchPollsWithoutAConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, nc := testenv.NATS(t)
	raw, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	js := kvpoll.JetStream(raw, 10*time.Millisecond)
	kv, err := js.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("one")); err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e, ok := <-w.Updates():
			if !ok {
				t.Fatal("updates closed")
			}
			return e
		case <-ctx.Done():
			t.Fatal("no update")
		}
		return nil
	}
	if e := next(); e == nil || string(e.Value()) != "one" {
		t.Fatalf("first update %v, want the current entry", e)
	}
	if e := next(); e != nil {
		t.Fatalf("second update %v, want nil (the current value came)", e)
	}
	if _, err := kv.Put(ctx, "k", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || string(e.Value()) != "two" || e.Operation() != jetstream.KeyValuePut {
		t.Fatalf("update %v, want two", e)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Operation() != jetstream.KeyValueDelete || e.Key() != "k" {
		t.Fatalf("update %v, want a delete", e)
	}
	info, err := raw.Stream(ctx, "KV_b")
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers on the bucket's stream, want none", n)
	}
	_ = w.Stop()
	if _, ok := <-w.Updates(); ok {
		t.Error("updates open after Stop")
	}
	for _, key := range []string{"*", "a.>", ""} {
		if _, err := kv.Watch(ctx, key); err == nil {
			t.Errorf("Watch(%q): want refused", key)
		}
	}
	if _, err := kv.Watch(ctx, "k", jetstream.UpdatesOnly()); err == nil {
		t.Error("Watch with options: want refused")
	}
	// A key that does not exist yet: nil first, then the entry.
	w2, err := kv.Watch(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if e := <-w2.Updates(); e != nil {
		t.Fatalf("first update of a missing key %v, want nil", e)
	}
	if _, err := kv.Put(ctx, "later", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if e := <-w2.Updates(); e == nil || string(e.Value()) != "x" {
		t.Fatalf("update %v, want x", e)
	}
}
