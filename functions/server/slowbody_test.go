package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/httpserve"
)

// firstRead signals when a request's body is first read.
type firstRead struct {
	io.ReadCloser
	read chan<- struct{}
	once bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	if !f.once {
		f.once = true
		close(f.read)
	}
	return f.ReadCloser.Read(p)
}

// TestSlowBodyHoldsNoSlot: a client that sends a task's headers and one
// byte of its body, then nothing, holds no processing slot (the replica
// takes one only once the body is read): a real task sent meanwhile to
// the replica of concurrency 1 is served, and the slow connection is
// answered 408 and closed once the read timeout passes. The replica is
// served as `fn serve` serves it (httpserve), its read timeout short.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	e := setup(t, Config{Concurrency: 1})
	bodyRead := make(chan struct{})
	h := e.srv.Handler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpserve.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 500 { // the slow client's
			r.Body = &firstRead{ReadCloser: r.Body, read: bodyRead}
		}
		h.ServeHTTP(w, r)
	}), httpserve.Options{ReadTimeout: 300 * time.Millisecond})
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	url := "http://" + ln.Addr().String()

	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST / HTTP/1.1\r\nHost: fn\r\nContent-Type: application/json\r\nCe-Specversion: 1.0\r\n"+
		"Ce-Id: slow\r\nCe-Source: x\r\nCe-Type: x\r\nContent-Length: 500\r\n\r\n{")
	// The handler began reading the body: a slot taken before the read
	// would be held by now.
	select {
	case <-bodyRead:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow request never reached the handler")
	}

	out := complete(t, post(t, url, taskEvent(t, task(0))))
	if out.end.Samples == 0 {
		t.Errorf("the real task's end: %+v", out.end)
	}

	slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(slow)
	if err != nil {
		t.Fatalf("the slow connection is still open 30s on (read %q): %v", got, err)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 408") || !strings.Contains(string(got), "reading event body") {
		t.Errorf("the slow client got %q, want 408 saying the body did not come", got)
	}
	if n := metricValue(t, e.reg, "sluice_function_requests_rejected_total", "reason", "timeout"); n != 1 {
		t.Errorf("rejected{timeout} = %v, want 1", n)
	}
}
