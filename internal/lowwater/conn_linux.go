package lowwater

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Wrap returns conn batching its reads as c says; conn itself when it is
// not TCP or its socket cannot be reached.
func Wrap(c Config, conn net.Conn) net.Conn {
	tc, ok := conn.(*net.TCPConn)
	if !ok || c.Mark <= 1 || c.Wait <= 0 {
		return conn
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return conn
	}
	return &Conn{TCPConn: tc, raw: raw, cfg: c}
}

// Conn is a TCP connection whose reads batch once it streams. Reads are
// from one goroutine at a time, as net/http's are; deadlines may be set
// from any.
type Conn struct {
	*net.TCPConn
	raw syscall.RawConn
	cfg Config

	// Read's own: whether the mark is set, bytes streamed since the
	// last pause.
	marked bool
	streak int64

	mu       sync.Mutex
	deadline time.Time // the caller's read deadline
	batch    time.Time // a batched read's, while one waits
}

// Read reads as net.Conn's Read does. Batching, it sleeps until Mark
// bytes are queued or Wait has passed, then takes what is there; a read
// that then still waits is a pause, and batching stops until the
// connection has streamed After again.
func (c *Conn) Read(p []byte) (int, error) {
	if !c.marked {
		start := time.Now()
		n, err := c.TCPConn.Read(p)
		if time.Since(start) > c.cfg.Wait {
			c.streak = 0
		}
		c.streak += int64(n)
		if err == nil && c.streak >= c.cfg.After && c.setMark(c.cfg.Mark) {
			c.marked = true
		}
		return n, err
	}
	c.batchDeadline(time.Now().Add(c.cfg.Wait))
	n, err := c.TCPConn.Read(p)
	user := c.batchDeadline(time.Time{})
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || (!user.IsZero() && !time.Now().Before(user)) {
		return n, err
	}
	// Fewer than Mark bytes came within Wait: take what is queued, or
	// wait for the next byte as an unbatched read.
	c.setMark(1)
	c.marked = false
	start := time.Now()
	n, err = c.TCPConn.Read(p)
	if time.Since(start) > c.cfg.Wait/10 {
		c.streak = 0 // a pause, not a slow stream
		return n, err
	}
	if err == nil && c.setMark(c.cfg.Mark) {
		c.marked = true
	}
	return n, err
}

// setMark sets the socket's receive low-water mark, reporting whether it
// could.
func (c *Conn) setMark(v int) bool {
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v)
	}); err != nil || serr != nil {
		return false
	}
	return true
}

// batchDeadline sets the socket's read deadline to the earlier of d and
// the caller's (the caller's alone for a zero d) and returns the caller's.
func (c *Conn) batchDeadline(d time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batch = d
	c.TCPConn.SetReadDeadline(earlier(c.deadline, d))
	return c.deadline
}

// earlier is the earlier of two deadlines, a zero one meaning none.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// SetReadDeadline sets the caller's read deadline, which batching keeps.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.TCPConn.SetReadDeadline(earlier(t, c.batch))
}

// SetDeadline sets the caller's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.TCPConn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
