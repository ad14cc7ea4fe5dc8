package integration

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what FaultProxy does to one request.
type Fault int

const (
	FaultNone     Fault = iota
	FaultSlowDown       // 503 with an S3 SlowDown error body
	FaultInternal       // 500 with an S3 InternalError body
	FaultReset          // the connection reset before any response
	FaultSlowBody       // the real response, its body trickled out slowly
	numFaults
)

func (f Fault) String() string {
	return [...]string{"none", "slowdown", "internal", "reset", "slowbody"}[f]
}

// FaultOptions say how often each fault happens: each request draws one
// fault with these probabilities (their sum at most 1).
type FaultOptions struct {
	Seed     uint64
	SlowDown float64
	Internal float64
	Reset    float64
	SlowBody float64
	// SlowBodyChunk bytes are written every SlowBodyEvery (defaults 16 KiB, 20ms).
	SlowBodyChunk int
	SlowBodyEvery time.Duration
}

// FaultProxy is a reverse proxy on loopback in front of an S3 server that
// answers a seeded fraction of requests with a fault, and counts them.
type FaultProxy struct {
	opts     FaultOptions
	srv      *http.Server
	ln       net.Listener
	proxy    *httputil.ReverseProxy
	mu       sync.Mutex
	rng      *rand.Rand
	requests atomic.Int64
	counts   [numFaults]atomic.Int64
}

// StartFaultProxy listens on a free loopback port and forwards to target.
func StartFaultProxy(target string, o FaultOptions) (*FaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("fault proxy target %q: %w", target, err)
	}
	if o.SlowBodyChunk <= 0 {
		o.SlowBodyChunk = 16 << 10
	}
	if o.SlowBodyEvery <= 0 {
		o.SlowBodyEvery = 20 * time.Millisecond
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{opts: o, ln: ln, rng: rand.New(rand.NewPCG(o.Seed, 0xfa017)), proxy: httputil.NewSingleHostReverseProxy(u)}
	// The request goes on with the Host header the client signed (the
	// proxy's address): SigV4 signs the host, and the single-host
	// director changes only the URL it dials.
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Endpoint is the URL clients use instead of the S3 server's.
func (p *FaultProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *FaultProxy) Close() error { return p.srv.Close() }

// Requests is the number of requests seen.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Injected is how many requests got fault f.
func (p *FaultProxy) Injected(f Fault) int64 { return p.counts[f].Load() }

// InjectedTotal is how many requests got any fault.
func (p *FaultProxy) InjectedTotal() int64 {
	var n int64
	for f := FaultSlowDown; f < numFaults; f++ {
		n += p.counts[f].Load()
	}
	return n
}

// Summary is "slowdown=N internal=N reset=N slowbody=N of requests=N".
func (p *FaultProxy) Summary() string {
	return fmt.Sprintf("slowdown=%d internal=%d reset=%d slowbody=%d requests=%d",
		p.Injected(FaultSlowDown), p.Injected(FaultInternal), p.Injected(FaultReset), p.Injected(FaultSlowBody), p.Requests())
}

func (p *FaultProxy) draw() Fault {
	p.mu.Lock()
	x := p.rng.Float64()
	p.mu.Unlock()
	for _, c := range []struct {
		f Fault
		p float64
	}{{FaultSlowDown, p.opts.SlowDown}, {FaultInternal, p.opts.Internal}, {FaultReset, p.opts.Reset}, {FaultSlowBody, p.opts.SlowBody}} {
		if x < c.p {
			return c.f
		}
		x -= c.p
	}
	return FaultNone
}

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	f := p.draw()
	p.counts[f].Add(1)
	switch f {
	case FaultSlowDown:
		s3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
	case FaultInternal:
		s3Error(w, r, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
	case FaultReset:
		// Drain the request body, so the client is past sending when the
		// connection dies, then reset it (RST, not FIN).
		_, _ = io.Copy(io.Discard, r.Body)
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("fault proxy: response writer cannot hijack")
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
	case FaultSlowBody:
		p.proxy.ServeHTTP(&trickleWriter{ResponseWriter: w, chunk: p.opts.SlowBodyChunk, every: p.opts.SlowBodyEvery}, r)
	default:
		p.proxy.ServeHTTP(w, r)
	}
}

func s3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>itest-fault</RequestId></Error>`, code, msg, r.URL.Path)
}

// trickleWriter writes the body in small pieces with pauses between them.
type trickleWriter struct {
	http.ResponseWriter
	chunk int
	every time.Duration
}

func (t *trickleWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), t.chunk)
		m, err := t.ResponseWriter.Write(b[:k])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		b = b[k:]
		time.Sleep(t.every)
	}
	return n, nil
}
