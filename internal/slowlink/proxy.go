package slowlink

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Options shape the link. Zero values add nothing.
type Options struct {
	// Latency is added before each request is forwarded (time to first byte).
	Latency time.Duration
	// BytesPerS caps the response bytes of all requests together.
	BytesPerS int64
}

// Proxy forwards to one target. Create it with Start.
type Proxy struct {
	opts   Options
	srv    *http.Server
	ln     net.Listener
	link   *link
	bytes  atomic.Int64
	gets   atomic.Int64
	others atomic.Int64
}

// Start listens on a free loopback port and forwards to target.
func Start(target string, o Options) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("slow link target %q: want http://host:port", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slow link: listening: %w", err)
	}
	p := &Proxy{opts: o, ln: ln, link: &link{rate: o.BytesPerS}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &slowBody{rc: resp.Body, p: p, ctx: resp.Request.Context()}
		return nil
	}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			p.gets.Add(1)
		} else {
			p.others.Add(1)
		}
		select {
		case <-time.After(o.Latency):
		case <-r.Context().Done():
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Bytes is the response body bytes passed so far.
func (p *Proxy) Bytes() int64 { return p.bytes.Load() }

// Requests counts the GETs and the other requests (HEAD, PUT, LIST) so far.
func (p *Proxy) Requests() (gets, others int64) { return p.gets.Load(), p.others.Load() }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// link is one shared pipe: each read reserves its bytes' transfer time
// after whatever was reserved before it.
type link struct {
	rate int64
	mu   sync.Mutex
	next time.Time
}

// wait blocks until n bytes have had their turn on the link.
func (l *link) wait(ctx context.Context, n int) {
	if l.rate <= 0 || n <= 0 {
		return
	}
	l.mu.Lock()
	now := time.Now()
	start := l.next
	if start.Before(now) {
		start = now
	}
	l.next = start.Add(time.Duration(float64(n) / float64(l.rate) * float64(time.Second)))
	until := l.next
	l.mu.Unlock()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// slowBody passes a response body through the link in small pieces, so
// that concurrent responses share it fairly.
type slowBody struct {
	rc  io.ReadCloser
	p   *Proxy
	ctx context.Context
}

const piece = 32 << 10

func (b *slowBody) Read(buf []byte) (int, error) {
	if len(buf) > piece {
		buf = buf[:piece]
	}
	n, err := b.rc.Read(buf)
	b.p.link.wait(b.ctx, n)
	b.p.bytes.Add(int64(n))
	return n, err
}

func (b *slowBody) Close() error { return b.rc.Close() }
