package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestWaitReplicasCurrentOnACluster: on three nodes with an R3 bucket,
// the wait ends at once while every replica is current; with a node
// stopped (a shutdown tells the others) it ends too: an offline replica
// answers no read.
func TestWaitReplicasCurrentOnACluster(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	for i := range 3 {
		cluster.Start(i)
	}
	js := cluster.JetStream(0)
	ctx := context.Background()
	var kv jetstream.KeyValue
	testenv.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		var err error
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.ReadersBucket, Replicas: 3})
		return err
	})
	if _, err := kv.Put(ctx, "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := streams.WaitReplicasCurrent(ctx, kv, 10*time.Second); err != nil {
		t.Fatalf("three nodes up: %v", err)
	}
	t.Logf("three nodes up: waited %v", time.Since(start))

	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader
	stop := 1
	if leader == "n1" {
		stop = 2
	}
	cluster.Server(stop).Shutdown()
	start = time.Now()
	err = streams.WaitReplicasCurrent(ctx, kv, 30*time.Second)
	t.Logf("node n%d stopped: waited %v", stop, time.Since(start))
	if err != nil {
		t.Errorf("node n%d stopped: %v; want its replica taken for offline", stop, err)
	}
}
