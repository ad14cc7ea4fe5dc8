package lowwater

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair is a loopback TCP connection: the server's end and the client's,
// wrapped with c.
func pair(t *testing.T, c Config) (server net.Conn, client *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- s
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { s.Close(); raw.Close() })
	w, ok := Wrap(c, raw).(*Conn)
	if !ok {
		t.Fatal("a TCP connection was not wrapped")
	}
	return s, w
}

// mark is the socket's receive low-water mark.
func mark(t *testing.T, c *Conn) int {
	t.Helper()
	var v int
	var gerr error
	if err := c.raw.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// readN reads n bytes, failing the test when they do not come within 10
// s (a stall, not a slow read).
func readN(t *testing.T, c *Conn, n int) []byte {
	t.Helper()
	done := make(chan error, 1)
	buf := make([]byte, n)
	go func() {
		_, err := io.ReadFull(c, buf)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("reading %d bytes: stalled", n)
	}
	return buf
}

var testConfig = Config{Mark: 256 << 10, Wait: 20 * time.Millisecond, After: 1 << 20}

func TestBatchesOnlyOnceStreaming(t *testing.T) {
	s, c := pair(t, testConfig)
	if _, err := s.Write([]byte("short reply")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 11); string(got) != "short reply" {
		t.Fatalf("read %q", got)
	}
	if m := mark(t, c); m != 1 {
		t.Fatalf("after a short reply the mark is %d, want 1 (unbatched)", m)
	}
	go s.Write(make([]byte, 2<<20))
	readN(t, c, 2<<20)
	if m := mark(t, c); m != testConfig.Mark {
		t.Fatalf("after 2 MB streamed the mark is %d, want %d", m, testConfig.Mark)
	}
}

func TestTailBelowTheMarkIsRead(t *testing.T) {
	s, c := pair(t, testConfig)
	go s.Write(make([]byte, 2<<20))
	readN(t, c, 2<<20)
	// The stream ends with fewer bytes than the mark, and the sender
	// waits for an answer: the read must not wait for the mark.
	if _, err := s.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 4); string(got) != "tail" {
		t.Fatalf("read %q", got)
	}
	// The reader waits through a pause for the next reply on the same
	// connection: unbatched again.
	go func() {
		time.Sleep(3 * testConfig.Wait)
		s.Write([]byte("next"))
	}()
	if got := readN(t, c, 4); string(got) != "next" {
		t.Fatalf("read %q", got)
	}
	if m := mark(t, c); m != 1 {
		t.Fatalf("after a pause the mark is %d, want 1", m)
	}
	if c.streak >= testConfig.After {
		t.Fatalf("after a pause the streak is %d", c.streak)
	}
}

func TestCallersDeadlineKept(t *testing.T) {
	s, c := pair(t, testConfig)
	go s.Write(make([]byte, 2<<20))
	readN(t, c, 2<<20)
	if !c.marked {
		t.Fatal("not batching after 2 MB")
	}
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past the caller's deadline: %v, want a deadline error", err)
	}
	// A deadline set while a batched read waits ends that read.
	c.SetReadDeadline(time.Time{})
	c.cfg.Wait = time.Hour
	c.marked = true
	c.setMark(c.cfg.Mark)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline set during a batched read did not end it")
	}
}

// TestStreamIntact streams writes of random sizes with random pauses and
// checks every byte arrives, in order.
func TestStreamIntact(t *testing.T) {
	s, c := pair(t, testConfig)
	r := rand.New(rand.NewPCG(1, 2))
	want := sha256.New()
	total := 0
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		defer s.Close()
		w := io.MultiWriter(s, want)
		for total < 24<<20 {
			b := make([]byte, 1+r.IntN(200<<10))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if _, err := w.Write(b); err != nil {
				return
			}
			total += len(b)
			if r.IntN(20) == 0 {
				time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond)
			}
		}
	}()
	got := sha256.New()
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(got, struct{ io.Reader }{c}, make([]byte, 1<<20))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stalled")
	}
	<-wrote
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("the %d bytes read differ from those written", total)
	}
}

func TestNotTCPLeftAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(Default, a) != a {
		t.Fatal("a pipe was wrapped")
	}
}
