package planner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.Get(ctx, "imagenet-train", "s3://b/a/"); !errors.Is(err, ErrNoRate) {
		t.Fatalf("empty store: %v, want ErrNoRate", err)
	}
	at := time.Unix(1000, 0).UTC()
	if err := s.Record(ctx, "imagenet-train", "s3://b/a/", Observation{Job: "j1", PerReplica: 300, ReplicaSeconds: 60, At: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, "imagenet-train", "s3://b/other/", Observation{Job: "j2", PerReplica: 100, ReplicaSeconds: HalfLife, At: at}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, "imagenet-train", "s3://b/a/")
	if err != nil || e.Source != SourceDataset || e.PerReplica != 300 {
		t.Fatalf("same dataset: %+v, %v; want 300/s from the dataset's record", e, err)
	}
	e, err = s.Get(ctx, "imagenet-train", "s3://b/new/")
	if err != nil || e.Source != SourcePipeline || e.PerReplica != 200 || e.Observations != 2 || e.Job != "j2" {
		t.Fatalf("a new dataset: %+v, %v; want the pipeline's 200/s over 2 observations", e, err)
	}
	if _, err := s.Get(ctx, "imagenet-eval", ""); !errors.Is(err, ErrNoRate) {
		t.Fatalf("another pipeline: %v, want ErrNoRate", err)
	}
}

// TestStoreConcurrentRecords: controllers recording at once lose no
// observation (compare-and-set on the revision).
func TestStoreConcurrentRecords(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			errs <- s.Record(ctx, "p", "", Observation{PerReplica: 100, ReplicaSeconds: 1})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	e, err := s.Get(ctx, "p", "")
	if err != nil || e.Observations != 4 {
		t.Fatalf("%+v, %v; want 4 observations", e, err)
	}
}

// TestStorePlansASweep: the store is a ByRate planner's rate source,
// so a sweep's jobs are pre-warmed from what earlier runs learned, and a
// pipeline never run falls back to its min_replicas.
func TestStorePlansASweep(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	p := ByRate{PerReplica: s.PerReplica}
	spec := wire.JobSpec{Pipeline: "imagenet-train", Dataset: "s3://b/a/", MinReplicas: 1}
	if n, err := p.Replicas(ctx, spec, 1000); err != nil || n != 1 {
		t.Fatalf("nothing learned: %d replicas, %v; want min_replicas 1", n, err)
	}
	if err := s.Record(ctx, "imagenet-train", "s3://b/other/", Observation{Job: "j1", PerReplica: 300, ReplicaSeconds: 60, At: time.Unix(1000, 0)}); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Replicas(ctx, spec, 1000); err != nil || n != 4 {
		t.Fatalf("learned 300/s on another dataset: %d replicas, %v; want ceil(1000/300) = 4", n, err)
	}
}

// TestOpenBeforeAnyControllerRan: on a NATS where no controller ran (no
// plans bucket yet), nothing was learned: `sluice sweep submit` pre-warms
// from min_replicas and `sluice plan` says no rate was learned, rather
// than failing with "bucket not found" (a fresh clone's getting started).
func TestOpenBeforeAnyControllerRan(t *testing.T) {
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatalf("Open on a store with no plans bucket: %v", err)
	}
	if _, err := s.Get(ctx, "imagenet-train", "s3://b/a/"); !errors.Is(err, ErrNoRate) {
		t.Errorf("Get: %v, want ErrNoRate", err)
	}
	if r, err := s.PerReplica(ctx, wire.JobSpec{Pipeline: "imagenet-train", Dataset: "s3://b/a/"}); r != 0 || err != nil {
		t.Errorf("PerReplica: %v, %v; want 0, nil", r, err)
	}
	err = s.Record(ctx, "imagenet-train", "s3://b/a/", Observation{Job: "j1", PerReplica: 300, ReplicaSeconds: 60, At: time.Unix(1000, 0)})
	if err == nil || !strings.Contains(err.Error(), wire.PlansBucket) {
		t.Errorf("Record: %v, want an error naming %s", err, wire.PlansBucket)
	}
}
