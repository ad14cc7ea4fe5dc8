package streams

import (
	"context"
	"errors"
	"testing"

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
