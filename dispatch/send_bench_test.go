package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// The reader's CPU per GB of a shard stream, as the agent reads it on a
// trainer node: from the function directly, and through a Go reverse
// proxy that copies with 32 KB buffers and flushes after every read, then
// a second one (Traefik, then Knative's queue-proxy), so that the body
// comes as HTTP/1.1 chunks and TCP segments of at most 32 KB. The function and the proxy run in a child
// process, so that this process's rusage is the reader's alone; wall time
// means nothing on a loaded machine.
//
//	nice -n 19 go test -run '^$' -bench BenchmarkSendStream -benchtime 3x -count 10 ./dispatch/
//
// and compare the medians of cpu-s/GB (the runs of each count are
// interleaved, so a neighbour's load falls on all the clients alike).

const (
	sbChildEnv    = "SLUICE_SEND_BENCH_CHILD"
	sbFrames      = 1000
	sbFrameBytes  = 150 << 10 // one 224x224x3 uint8 image and its header, as the e2e stream's
	sbChunkMaxCfg = 4 << 20   // the e2e stream's ChunkMaxBytes
)

// TestSendBenchChild is the benchmark's function and proxy when run as
// its child; it skips otherwise. It prints "READY <direct> <proxied>"
// and serves until its stdin closes.
func TestSendBenchChild(t *testing.T) {
	if os.Getenv(sbChildEnv) == "" {
		t.Skip("the child of BenchmarkSendStream")
	}
	payload := make([]byte, sbFrameBytes)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	fn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task wire.ShardTask
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		// As functions/server's responseSink: each frame written (header,
		// then payload) and flushed; no Content-Length, so chunked.
		for i := range sbFrames {
			if wire.WriteFrame(w, wire.FrameChunk, i, payload) != nil || rc.Flush() != nil {
				return
			}
		}
		end, _ := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunks: sbFrames})
		_ = wire.WriteFrame(w, wire.FrameEnd, 0, end)
	})
	fnURL := sbServe(t, fn)
	target, err := url.Parse(fnURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.BufferPool = &bufferPool{}
	proxy.FlushInterval = -1
	// A second proxy in front, as Traefik is in front of queue-proxy.
	inner, err := url.Parse(sbServe(t, proxy))
	if err != nil {
		t.Fatal(err)
	}
	outer := httputil.NewSingleHostReverseProxy(inner)
	outer.BufferPool = &bufferPool{}
	outer.FlushInterval = -1
	proxyURL := sbServe(t, outer)
	fmt.Printf("READY %s %s\n", fnURL, proxyURL)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// bufferPool hands out 32 KB buffers, as Traefik's and queue-proxy's do.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v := b.p.Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

func sbServe(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// startSendBenchChild starts TestSendBenchChild and returns its URLs.
func startSendBenchChild(b *testing.B) (direct, proxied string) {
	b.Helper()
	_, urls := testenv.StartChild(b, "TestSendBenchChild", sbChildEnv+"=1")
	if len(urls) != 2 {
		b.Fatalf("the benchmark's child said it is ready at %q, want two URLs", urls)
	}
	return urls[0], urls[1]
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSendStream reports the reading side's CPU seconds and
// allocated bytes per GB of a shard's frames, for each client.
func BenchmarkSendStream(b *testing.B) {
	direct, proxied := startSendBenchChild(b)
	clients := []struct {
		name string
		hc   func() *http.Client
	}{
		// NewHTTPClient with net/http's default read buffer (4 KB): the
		// client before ReadBufferSize.
		{"client=rbuf4k", func() *http.Client {
			hc := NewHTTPClient()
			hc.Transport.(*http.Transport).ReadBufferSize = 0
			return hc
		}},
		// The 1 MB buffer without read batching (lowwater): the client
		// before it.
		{"client=rbuf1m", func() *http.Client {
			hc := NewHTTPClient()
			hc.Transport.(*http.Transport).DialContext = (&net.Dialer{}).DialContext
			return hc
		}},
		{"client=new", NewHTTPClient},
	}
	for _, path := range []struct{ name, url string }{{"direct", direct}, {"proxied", proxied}} {
		for _, c := range clients {
			b.Run("path="+path.name+"/"+c.name, func(b *testing.B) {
				hc := c.hc()
				var reads atomic.Int64
				countReads(hc, &reads)
				defer hc.CloseIdleConnections()
				// A connection per send. Kept alive, a send through the
				// proxy was now and then cut (unexpected EOF, with either
				// read buffer) when the reader reused its connection: a
				// matter for the proxy, not for the reader's CPU, and one
				// connection per 150 MB costs nothing here.
				hc.Transport.(*http.Transport).DisableKeepAlives = true
				s := Sender{Client: hc}
				task := wire.ShardTask{Job: "bench", Epoch: 1, Shard: 0, Bucket: "b", Key: "k", ChunkMaxBytes: sbChunkMaxCfg}
				var got int64
				take := func(_ int, data []byte) { got += int64(len(data)) }
				// One send first: the child's connections to the function
				// and this process's heap are warm.
				if _, err := s.Send(context.Background(), path.url, task, nil); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				reads.Store(0)
				cpu0 := cpuTime(b)
				b.ResetTimer()
				for range b.N {
					if _, err := s.Send(context.Background(), path.url, task, take); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu := cpuTime(b) - cpu0
				runtime.ReadMemStats(&m1)
				gb := float64(got) / 1e9
				b.SetBytes(got / int64(b.N))
				b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
				b.ReportMetric(float64(reads.Load())/gb, "reads/GB")
				b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/gb/1e9, "alloc-GB/GB")
			})
		}
	}
}

// countReads counts the reads of hc's connections.
func countReads(hc *http.Client, n *atomic.Int64) {
	tr := hc.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, n: n}, nil
	}
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Read(b)
}
