package httpserve

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
)

// short timeouts: each test waits for one to pass, within a generous
// deadline, and asserts no duration.
const short = 100 * time.Millisecond

// start serves h with o on loopback.
func start(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := New(h, o)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// closedWithin says whether the server closed conn (EOF or reset) before
// the deadline; what it sent before is returned.
func closedWithin(t *testing.T, conn net.Conn, within time.Duration) (string, bool) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestSlowBodyIsCut: headers and one byte of a 100-byte body, then
// silence: the handler's read fails and the connection is closed.
func TestSlowBodyIsCut(t *testing.T) {
	readErr := make(chan error, 1)
	addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	}), Options{ReadTimeout: short})
	conn := dial(t, addr)
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	if _, closed := closedWithin(t, conn, 10*time.Second); !closed {
		t.Fatal("the slow connection is still open 10s on")
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Error("the handler read a whole body that never came")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's read never ended")
	}
}

// TestSilentConnectionIsClosed: a connection that sends no header is
// closed after ReadHeaderTimeout.
func TestSilentConnectionIsClosed(t *testing.T) {
	addr := start(t, http.NotFoundHandler(), Options{ReadHeaderTimeout: short})
	if _, closed := closedWithin(t, dial(t, addr), 10*time.Second); !closed {
		t.Fatal("a silent connection is still open 10s on")
	}
}

// TestIdleConnectionIsClosed: after its answer, a kept-alive connection
// that sends nothing more is closed after IdleTimeout.
func TestIdleConnectionIsClosed(t *testing.T) {
	addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		Options{IdleTimeout: short})
	conn := dial(t, addr)
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	got, closed := closedWithin(t, conn, 10*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 200") || !closed {
		t.Fatalf("got %q, closed %v: want a 200 and then the connection closed", got, closed)
	}
}

// TestLongHandlerIsNotCut: a handler that runs well past ReadTimeout
// after reading its body (a streamed shard) keeps its connection and
// context.
func TestLongHandlerIsNotCut(t *testing.T) {
	addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		for range 5 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(short):
			}
			io.WriteString(w, "frame\n")
			http.NewResponseController(w).Flush()
		}
	}), Options{ReadTimeout: short})
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, "http://"+addr+"/", strings.NewReader("task"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || strings.Count(string(b), "frame") != 5 {
			t.Errorf("%s: %q, %v: want 5 frames over 5 read timeouts", method, b, err)
		}
	}
}

func TestTokenAndPublicPaths(t *testing.T) {
	tok, err := bearer.Parse("a-token-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		Options{Token: tok, Source: bearer.Function})
	get := func(method, path string, auth bool) int {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		if auth {
			tok.Authorize(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range Public {
		if got := get("GET", p, false); got != 200 {
			t.Errorf("GET %s without the token: %d", p, got)
		}
	}
	if got := get("POST", "/", false); got != 401 {
		t.Errorf("POST / without the token: %d, want 401", got)
	}
	if got := get("POST", "/", true); got != 200 {
		t.Errorf("POST / with the token: %d", got)
	}
}

func TestHeadersAreBounded(t *testing.T) {
	addr := start(t, http.NotFoundHandler(), Options{})
	conn := dial(t, addr)
	go io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 2*MaxHeaderBytes)+"\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("%d, want 431", resp.StatusCode)
	}
}
