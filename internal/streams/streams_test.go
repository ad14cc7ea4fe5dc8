package streams

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestIsCASConflict(t *testing.T) {
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Ensure(ctx, js, Options{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "j", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "j", []byte("b")); !IsCASConflict(err) {
		t.Errorf("Create of an existing key: %v, want a conflict", err)
	}
	if _, err := kv.Update(ctx, "j", []byte("c"), rev+7); !IsCASConflict(err) {
		t.Errorf("Update at a stale revision: %v, want a conflict", err)
	}
	if _, err := kv.Update(ctx, "j", []byte("d"), rev); err != nil {
		t.Errorf("Update at the current revision: %v", err)
	}
	if IsCASConflict(errors.New("nats: timeout")) || IsCASConflict(nil) {
		t.Error("an unrelated error (or none) counted as a conflict")
	}
}

// Ensure creates every bucket, the dispatch plans' among them, and a job's
// task consumer holds its tasks for any of its agents until acked.
func TestEnsureAndDispatch(t *testing.T) {
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 { // idempotent
		if err := Ensure(ctx, js, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range Buckets(Options{}) {
		if _, err := js.KeyValue(ctx, b.Bucket); err != nil {
			t.Errorf("bucket %s: %v", b.Bucket, err)
		}
	}
	if _, err := js.KeyValue(ctx, wire.DispatchBucket); err != nil {
		t.Errorf("dispatch plans: %v", err)
	}
	cfg := Dispatch("j", 0)
	if cfg.Durable != wire.DispatchConsumer("j") || cfg.FilterSubject != wire.TaskSubject("j") ||
		cfg.AckWait != DispatchAckWait || cfg.MaxDeliver != -1 || cfg.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("dispatch consumer %+v", cfg)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, wire.TaskStream, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, wire.TaskSubject("j"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("j"))
	if err != nil {
		t.Fatal(err)
	}
	// The server counts a stored message into a consumer's pending
	// asynchronously: a busy machine once read 0 just after the publish.
	testenv.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 1 {
			return fmt.Errorf("%d tasks pending on the consumer, want 1", info.NumPending)
		}
		return nil
	})
}
