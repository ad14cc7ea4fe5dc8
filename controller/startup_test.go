package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
)

// TestTwoControllersWaitForAFormingCluster: two controllers started at
// the same moment as a 3-node JetStream cluster (stream replicas 3), with
// one node up, exited with "creating stream SLUICE_TASKS: context deadline
// exceeded". Now each retries, logging a Warn line each time, and both
// run once the cluster has formed.
func TestTwoControllersWaitForAFormingCluster(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	first := cluster.Start(0)
	logger, logs := logbuf.Logger(slog.LevelWarn)
	o := Options{Streams: streams.Options{Replicas: 3}, Actuator: newPool("http://127.0.0.1:1"),
		LeaseTTL: 2 * time.Second, Tick: 100 * time.Millisecond}
	type run struct {
		c    *Controller
		done chan struct{}
		err  error
	}
	var runs []*run
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 2 {
		nc, err := nats.Connect(first.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		o.ID, o.NC, o.JS, o.Broker = fmt.Sprintf("ctl-%d", i), nc, js, broker.New(js, nil, o.Streams, nil)
		c, err := New(o, logger, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		r := &run{c: c, done: make(chan struct{})}
		runs = append(runs, r)
		go func() { defer close(r.done); r.err = c.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range runs {
			<-r.done
			if r.err != nil {
				t.Errorf("controller %s: Run = %v", r.c.ID(), r.err)
			}
		}
	})
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, r := range runs {
			select {
			case <-r.done:
				t.Fatalf("controller %s returned with one node of three up", r.c.ID())
			default:
			}
			if !strings.Contains(logs.String(), "msg=\"creating streams and buckets: not ready yet; retrying\" controller="+r.c.ID()) {
				return errors.New("not both retrying yet")
			}
		}
		return nil
	})
	cluster.Start(1)
	cluster.Start(2)
	testenv.CheckFor(t, 90*time.Second, 20*time.Millisecond, func() error {
		for _, r := range runs {
			if !r.c.Ready() {
				return fmt.Errorf("controller %s not ready\n%s", r.c.ID(), logs)
			}
		}
		return nil
	})
}
