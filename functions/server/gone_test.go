package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// stallingTransport serves S3 normally, but the first object body it
// serves stalls after limit bytes until its request's context ends, as a
// slow S3 would: the shard is then mid-way for as long as the test needs.
type stallingTransport struct {
	limit int64
	gets  atomic.Int32
}

func (s *stallingTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK || s.gets.Add(1) > 1 {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(resp.Body, s.limit), ctxReader{req.Context()}), resp.Body}
	return resp, nil
}

type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// waitIdle waits until the replica has no shard in flight.
func waitIdle(t *testing.T, e *env) {
	t.Helper()
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := metricValue(t, e.reg, "sluice_function_shards_in_flight", "", ""); n != 0 {
			return fmt.Errorf("%v shards still in flight", n)
		}
		return nil
	})
}

// TestClientGoneFreesTheSlot: a client that disconnects mid-shard stops
// the shard (even one waiting on S3), and the replica takes the next task.
func TestClientGoneFreesTheSlot(t *testing.T) {
	e := setup(t, Config{})
	srv, reg, url := serve(t, Config{}, withTransport(e, &stallingTransport{limit: int64(len(e.shards[0].Data) / 2)}))
	e.srv, e.reg = srv, reg
	tk := task(0)
	tk.ChunkMaxBytes = 256 << 10 // a chunk per image

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := cehttp.NewHTTPRequestFromEvent(ctx, url, taskEvent(t, tk))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	f, err := wire.NewFrameReader(resp.Body, tk.ChunkMaxBytes).Next()
	if err != nil || f.Kind != wire.FrameChunk || f.Chunk != 0 {
		t.Fatalf("first frame %s %d, %v: want chunk 0", f.Kind, f.Chunk, err)
	}
	// The shard now waits on S3 for good; only the client leaving ends it.
	cancel()
	resp.Body.Close()
	waitIdle(t, e)
	if got := metricValue(t, reg, "sluice_function_shards_total", "outcome", "abandoned"); got != 1 {
		t.Errorf("shards_total{abandoned} = %v, want 1", got)
	}
	// The slot is free: the next task (S3 no longer stalls) completes.
	if end := complete(t, post(t, url, taskEvent(t, task(0)))).end; end.Samples == 0 {
		t.Errorf("the next task: %+v", end)
	}
}

// TestClientThatStopsReadingFreesTheSlot: a client that keeps its
// connection but reads nothing holds the shard only for
// Config.FrameWriteTimeout.
func TestClientThatStopsReadingFreesTheSlot(t *testing.T) {
	e := setup(t, Config{})
	// 45 MB of output, more than the socket buffers of both ends can hold
	// (Linux: tcp_wmem and tcp_rmem at most 4 and 32 MiB by default).
	shards, err := synth.Images(synth.ImageOptions{Samples: 300, Shards: 1, Seed: 3, MinSide: 32, MaxSide: 48, Quality: 80, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), e.s3, bucket, "big/", shards); err != nil {
		t.Fatal(err)
	}
	srv, reg, url := serve(t, Config{FrameWriteTimeout: 200 * time.Millisecond}, e.s3)
	e.srv, e.reg = srv, reg
	tk := task(0)
	tk.Key = "big/" + shards[0].Name
	resp := post(t, url, taskEvent(t, tk))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	waitIdle(t, e) // reading nothing
	if got := metricValue(t, reg, "sluice_function_shards_total", "outcome", "abandoned"); got != 1 {
		t.Errorf("shards_total{abandoned} = %v, want 1", got)
	}
	// What did arrive is a cut stream: no end frame.
	fr := wire.NewFrameReader(resp.Body, tk.ChunkMaxBytes)
	for {
		f, err := fr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrFrame) {
				t.Fatal(err)
			}
			break
		}
		if f.Kind != wire.FrameChunk {
			t.Fatalf("a %s frame from a shard given up", f.Kind)
		}
	}
}
