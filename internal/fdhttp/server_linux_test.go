package fdhttp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-project/sluice/wire"
)

// serve serves h on a socket in a temporary directory; its path.
func serve(t *testing.T, h http.Handler) (string, *Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := New(h, Options{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return path, s
}

func dial(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *net.UnixConn, req string) {
	t.Helper()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(req)))
	if _, err := c.Write(append(frame, req...)); err != nil {
		t.Fatal(err)
	}
}

// answer is a response as a client reads it: the head, the inline body or
// the memfd's bytes, and that file's seals when it came with the answer.
type answer struct {
	head  wire.AgentSocketHead
	body  []byte
	seals int
}

// client is the client side of a connection: the buffers it keeps mapped
// (MAP_SHARED, as the Python client does).
type client struct {
	c    *net.UnixConn
	maps map[uint32][]byte
}

func newClient(t *testing.T, path string) *client {
	t.Helper()
	cl := &client{c: dial(t, path), maps: map[uint32][]byte{}}
	t.Cleanup(func() {
		for _, m := range cl.maps {
			_ = unix.Munmap(m)
		}
	})
	return cl
}

func (cl *client) receive(t *testing.T) (answer, error) {
	t.Helper()
	var a answer
	c := cl.c
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4))
	k, oobn, _, _, err := c.ReadMsgUnix(n, oob)
	if err != nil {
		return a, err
	}
	if k != 4 {
		if _, err := io.ReadFull(c, n[k:]); err != nil {
			return a, err
		}
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			f, err := unix.ParseUnixRights(&m)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, f...)
		}
	}
	js := make([]byte, binary.BigEndian.Uint32(n))
	if _, err := io.ReadFull(c, js); err != nil {
		return a, err
	}
	if err := json.Unmarshal(js, &a.head); err != nil {
		t.Fatal(err)
	}
	if len(fds) != map[bool]int{false: 0, true: 1}[a.head.FD] {
		t.Fatalf("%d files passed with an answer of head %+v", len(fds), a.head)
	}
	switch {
	case a.head.FD:
		f := os.NewFile(uintptr(fds[0]), "passed")
		defer f.Close()
		a.seals, err = unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		flags := unix.MAP_SHARED
		if a.head.Buffer == 0 {
			flags = unix.MAP_PRIVATE // a write-sealed file maps shared read-only only
		}
		m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, flags)
		if err != nil {
			t.Fatalf("mapping the passed memfd: %v", err)
		}
		a.body = bytes.Clone(m[:a.head.Length])
		if a.head.Buffer != 0 {
			cl.maps[a.head.Buffer] = m
		} else {
			_ = unix.Munmap(m)
		}
	case a.head.Buffer != 0:
		m := cl.maps[a.head.Buffer]
		if m == nil {
			t.Fatalf("answer in buffer %d, never passed", a.head.Buffer)
		}
		a.body = bytes.Clone(m[:a.head.Length])
	default:
		a.body = make([]byte, a.head.Length)
		_, err = io.ReadFull(c, a.body)
	}
	return a, err
}

func receive(t *testing.T, c *net.UnixConn) (answer, error) {
	t.Helper()
	return (&client{c: c, maps: map[uint32][]byte{}}).receive(t)
}

// body is n bytes that differ along their length.
func body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 3)
	}
	return b
}

func TestLargeBodiesComeInMemfdsReusedOnceReleased(t *testing.T) {
	big := body(3<<20 + 5)
	round := 0
	path, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			round++
			b := bytes.Clone(big)
			b[0], b[len(b)-1] = byte(round), byte(round)
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Header().Set("Sluice-Step", strconv.Itoa(round))
			// In pieces, as a batch is written: head, then each tensor.
			w.Write(b[:100])
			w.Write(b[100:])
		case "/post":
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s got %q, release header %q", r.Method, r.Header.Get("Authorization"), body,
				r.Header.Get(wire.AgentSocketHeaderRelease))
		default:
			http.Error(w, "no such thing", http.StatusNotFound)
		}
	}))
	cl := newClient(t, path)
	get := func(release string) answer {
		t.Helper()
		h := ""
		if release != "" {
			h = wire.AgentSocketHeaderRelease + ": " + release + "\r\n"
		}
		send(t, cl.c, "GET /big HTTP/1.1\r\nHost: a\r\n"+h+"\r\n")
		a, err := cl.receive(t)
		if err != nil {
			t.Fatal(err)
		}
		step := a.head.Header["Sluice-Step"]
		if a.head.Status != 200 || a.head.Length != int64(len(big)) || len(step) != 1 {
			t.Fatalf("head %+v", a.head)
		}
		n, _ := strconv.Atoi(step[0])
		want := bytes.Clone(big)
		want[0], want[len(want)-1] = byte(n), byte(n)
		if !bytes.Equal(a.body, want) {
			t.Fatalf("answer %d: the memfd's bytes differ from the handler's", n)
		}
		return a
	}
	const resize = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	// The first two: new buffers, each passed with its answer.
	for i := uint32(1); i <= 2; i++ {
		a := get("")
		if !a.head.FD || a.head.Buffer != i || a.seals&resize != resize {
			t.Fatalf("answer %d: head %+v seals %#x, want buffer %d passed, sealed against resizing", i, a.head, a.seals, i)
		}
	}
	// Buffer 1 released: the next answer is in it, nothing passed, and the
	// client's mapping shows the new bytes.
	if a := get("1"); a.head.FD || a.head.Buffer != 1 {
		t.Fatalf("after releasing buffer 1: head %+v, want buffer 1 reused", a.head)
	}
	// Held, every buffer: up to AgentSocketMaxBuffers, then memfds of
	// their own, sealed against writes too.
	for i := uint32(3); i <= wire.AgentSocketMaxBuffers; i++ {
		if a := get(""); a.head.Buffer != i {
			t.Fatalf("head %+v, want new buffer %d", a.head, i)
		}
	}
	const all = resize | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if a := get(""); !a.head.FD || a.head.Buffer != 0 || a.seals&all != all {
		t.Fatalf("with every buffer held: head %+v seals %#x, want a memfd of its own, sealed %#x", a.head, a.seals, all)
	}
	// A small answer comes inline; the release header is not the handler's.
	send(t, cl.c, "POST /post HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n"+wire.AgentSocketHeaderRelease+": 2,3\r\nContent-Length: 5\r\n\r\nhello")
	a, err := cl.receive(t)
	if err != nil {
		t.Fatal(err)
	}
	if a.head.FD || a.head.Buffer != 0 || a.head.Status != 200 || string(a.body) != `POST Bearer x got "hello", release header ""` {
		t.Fatalf("small answer: head %+v body %q", a.head, a.body)
	}
	if a := get(""); a.head.Buffer != 2 {
		t.Fatalf("after releasing 2 and 3: head %+v, want buffer 2", a.head)
	}
	send(t, cl.c, "GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n")
	if a, err = cl.receive(t); err != nil || a.head.Status != 404 || !strings.Contains(string(a.body), "no such thing") {
		t.Fatalf("404: head %+v body %q err %v", a.head, a.body, err)
	}
	// Releasing what it does not hold ends the connection, saying why.
	send(t, cl.c, "GET /big HTTP/1.1\r\nHost: a\r\n"+wire.AgentSocketHeaderRelease+": 4,9\r\n\r\n")
	if a, err = cl.receive(t); err != nil || a.head.Status != 400 || !strings.Contains(string(a.body), "buffer 9: this connection has no such buffer") {
		t.Fatalf("a bad release: head %+v body %q err %v", a.head, a.body, err)
	}
	if _, err := cl.receive(t); err == nil {
		t.Fatal("the connection stayed open after a bad release")
	}
}

func TestBadFramesAreRefusedWithTheReason(t *testing.T) {
	path, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler reached") }))
	for _, tc := range []struct {
		name, frame string
		status      int
		says        string
	}{
		{"too large", string(binary.BigEndian.AppendUint32(nil, wire.AgentSocketMaxRequest+1)), 413, "want 1 to"},
		{"empty", string(binary.BigEndian.AppendUint32(nil, 0)), 413, "want 1 to"},
		{"not http", string(binary.BigEndian.AppendUint32(nil, 5)) + "hello", 400, "not an HTTP/1.1 request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, path)
			if _, err := c.Write([]byte(tc.frame)); err != nil {
				t.Fatal(err)
			}
			a, err := receive(t, c)
			if err != nil || a.head.Status != tc.status || !strings.Contains(string(a.body), tc.says) {
				t.Fatalf("head %+v body %q err %v; want %d saying %q", a.head, a.body, err, tc.status, tc.says)
			}
			if _, err := receive(t, c); err == nil {
				t.Fatal("the connection stayed open after a refused frame")
			}
		})
	}
}

// TestAHungUpClientEndsItsRequest: a handler waiting (as GET /v1/batch
// waits for a batch) sees its context end when the client goes away.
func TestAHungUpClientEndsItsRequest(t *testing.T) {
	ended := make(chan error, 1)
	path, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(30 * time.Second):
			ended <- errors.New("still waiting after 30s")
		}
	}))
	c := dial(t, path)
	send(t, c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestShutdownLetsTheAnswerBeingMadeFinish, and closes idle connections.
func TestShutdownLetsTheAnswerBeingMadeFinish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	path, s := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		fmt.Fprint(w, "done")
	}))
	idle, busy := dial(t, path), dial(t, path)
	send(t, busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := receive(t, idle); err == nil {
		t.Fatal("an idle connection got an answer during shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request being served", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if a, err := receive(t, busy); err != nil || string(a.body) != "done" {
		t.Fatalf("the request being served: %+v %q %v", a.head, a.body, err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

func TestListenReplacesAStaleSocketOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	if _, err := Listen(path, 0o600); err == nil || !strings.Contains(err.Error(), "another process serves on it") {
		t.Fatalf("a served socket: %v", err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // a process gone, its file left
	ln, err = Listen(path, 0o600)
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	ln.Close()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o600)
	if _, err := Listen(file, 0o600); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a regular file: %v", err)
	}
}
