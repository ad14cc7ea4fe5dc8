package fdhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/wire"
)

// Options configure a Server. Zero durations take httpserve's defaults,
// so both listeners of one process bound a client alike.
type Options struct {
	// ReadTimeout bounds a request frame from its first byte to its last.
	ReadTimeout time.Duration
	// IdleTimeout is how long a connection may wait for its next request.
	IdleTimeout time.Duration
	Logger      *slog.Logger // nil discards
}

// Server serves one handler on Unix sockets.
type Server struct {
	h    http.Handler
	opts Options

	mu       sync.Mutex
	conns    map[*net.UnixConn]struct{}
	lns      []*net.UnixListener
	closing  bool
	inflight sync.WaitGroup
}

// New is a server for h.
func New(h http.Handler, o Options) *Server {
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = httpserve.DefaultReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = httpserve.DefaultIdleTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{h: h, opts: o, conns: map[*net.UnixConn]struct{}{}}
}

// Listen makes the socket at path with the given mode. A socket file left
// there by a process gone is replaced; one something still serves on is
// an error, as is any other file.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("unix socket %s: a %s is there, not a socket", path, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("unix socket %s: another process serves on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unix socket %s: removing the stale one: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on unix socket %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	return ln, nil
}

// ErrServerClosed is Serve's error after Shutdown.
var ErrServerClosed = errors.New("fdhttp: server closed")

// Serve accepts connections on ln until Shutdown, serving each in its own
// goroutine.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accepting on %s: %w", ln.Addr(), err)
		}
		if !s.track(c) {
			c.Close()
			return ErrServerClosed
		}
		go s.serveConn(c)
	}
}

func (s *Server) track(c *net.UnixConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *net.UnixConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections, and waits until the
// requests being served are answered or ctx ends (then it closes the
// rest).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		// Wakes a connection waiting for its next request; one being
		// served only stops watching for a hang-up.
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// peer names the connection's other process, for the request's RemoteAddr.
func peer(c *net.UnixConn) string {
	raw, err := c.SyscallConn()
	if err != nil {
		return "unix"
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return "unix"
	}
	return fmt.Sprintf("unix:pid=%d,uid=%d", cred.Pid, cred.Uid)
}

func (s *Server) serveConn(c *net.UnixConn) {
	defer s.untrack(c)
	defer c.Close()
	remote := peer(c)
	log := s.opts.Logger.With("remote", remote)
	bufs := newPool(wire.AgentSocketMaxBuffers, wire.AgentSocketMaxBufferBytes)
	defer bufs.close()
	for {
		req, status, err := s.readRequest(c) // ErrServerClosed once Shutdown began

		if err != nil {
			if status != 0 {
				log.Debug("refused a request frame", "err", err)
				_ = writeError(c, status, err.Error())
			}
			return
		}
		req.RemoteAddr = remote
		// Transport, not the handler's: the buffers the client let go.
		ids, err := parseRelease(req.Header.Get(wire.AgentSocketHeaderRelease), wire.AgentSocketMaxBuffers)
		if err == nil {
			err = bufs.release(ids)
		}
		if err != nil {
			log.Debug("refused a release", "err", err)
			_ = writeError(c, http.StatusBadRequest, wire.AgentSocketHeaderRelease+": "+err.Error())
			return
		}
		req.Header.Del(wire.AgentSocketHeaderRelease)
		keep, err := s.serveOne(c, req, bufs, log)
		if err != nil {
			log.Debug("answering a request", "method", req.Method, "path", req.URL.Path, "err", err)
			return
		}
		if !keep {
			return
		}
	}
}

// readRequest reads one request frame. A non-zero status means the frame
// was refused: the client is told why before the connection closes.
func (s *Server) readRequest(c *net.UnixConn) (*http.Request, int, error) {
	var n [4]byte
	s.mu.Lock()
	closing := s.closing
	if !closing {
		_ = c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
	}
	s.mu.Unlock()
	if closing {
		return nil, 0, ErrServerClosed
	}
	if _, err := io.ReadFull(c, n[:1]); err != nil {
		return nil, 0, err // the client left, went idle too long, or we shut down
	}
	_ = c.SetReadDeadline(time.Now().Add(s.opts.ReadTimeout))
	if _, err := io.ReadFull(c, n[1:]); err != nil {
		return nil, 0, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size == 0 || size > wire.AgentSocketMaxRequest {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request frame of %d bytes: want 1 to %d", size, wire.AgentSocketMaxRequest)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, 0, err
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf)))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("request frame: not an HTTP/1.1 request: %w", err)
	}
	if req.ContentLength < 0 && req.Method != http.MethodGet && req.Method != http.MethodHead {
		return nil, http.StatusLengthRequired, errors.New("request frame: a body needs its Content-Length")
	}
	return req, 0, nil
}

// serveOne runs the handler on req and sends its answer; keep says whether
// the connection takes another request.
func (s *Server) serveOne(c *net.UnixConn, req *http.Request, bufs *pool, log *slog.Logger) (keep bool, err error) {
	// Counted under the lock Shutdown sets closing with: none is added
	// once it waits.
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false, ErrServerClosed
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client sends nothing while it waits: a read returning means it
	// hung up (or broke the protocol), and the handler should stop.
	_ = c.SetReadDeadline(time.Time{})
	watched := make(chan bool, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		gone := !errors.Is(err, os.ErrDeadlineExceeded)
		if gone {
			cancel()
		}
		watched <- gone
	}()
	w := &response{header: http.Header{}, bufs: bufs}
	defer w.discard()
	func() {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					err = errors.New("handler aborted")
					return
				}
				log.Error("handler panicked", "method", req.Method, "path", req.URL.Path, "panic", p)
				err = fmt.Errorf("handler panicked: %v", p)
			}
		}()
		s.h.ServeHTTP(w, req.WithContext(ctx))
	}()
	_ = c.SetReadDeadline(time.Now())
	gone := <-watched
	if err != nil {
		return false, err
	}
	if gone {
		return false, errors.New("the client hung up or sent before its answer")
	}
	if err := w.send(c); err != nil {
		return false, err
	}
	return !req.Close && w.header.Get("Connection") != "close", nil
}

// response collects a handler's answer: a 200 body of at least
// wire.AgentSocketMinFD bytes (by its Content-Length) goes into a memfd,
// the connection's buffer when one is free or may be made, anything else
// into memory.
type response struct {
	header http.Header
	status int
	bufs   *pool
	buf    *buffer  // the pooled buffer the body goes to
	f      *os.File // the memfd the body goes to (buf's, or its own)
	want   int64    // the body's Content-Length, when it goes to f
	n      int64
	sent   bool
	inline bytes.Buffer
	err    error
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code != http.StatusOK {
		return
	}
	n, err := strconv.ParseInt(w.header.Get("Content-Length"), 10, 64)
	if err != nil || n < wire.AgentSocketMinFD {
		return
	}
	w.want = n
	if w.buf = w.bufs.free(n); w.buf != nil {
		w.f = w.buf.f
		return
	}
	pooled := w.bufs.room(n)
	if w.f, w.err = memfd(n, pooled); w.err == nil && pooled {
		w.buf = w.bufs.add(n, w.f)
	}
}

// memfd is a memfd for a body of n bytes: one to reuse has its size and
// is sealed against resizing; one for a single answer is sealed when sent.
func memfd(n int64, pooled bool) (*os.File, error) {
	fd, err := unix.MemfdCreate("sluice-body", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for a %d-byte body: %w", n, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:sluice-body")
	if !pooled {
		return f, nil
	}
	err = f.Truncate(n)
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing a memfd of %d bytes: %w", n, err)
	}
	return f, nil
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.f != nil {
		if w.n+int64(len(p)) > w.want {
			w.err = fmt.Errorf("body over its Content-Length of %d bytes", w.want)
			return 0, w.err
		}
		k, err := w.f.WriteAt(p, w.n)
		w.n += int64(k)
		if err != nil {
			w.err = fmt.Errorf("writing the body's memfd: %w", err)
		}
		return k, w.err
	}
	if w.inline.Len()+len(p) > wire.AgentSocketMaxInline {
		w.err = fmt.Errorf("an answer of over %d bytes not passed as a memfd", wire.AgentSocketMaxInline)
		return 0, w.err
	}
	return w.inline.Write(p)
}

// discard lets go of what an answer not sent holds: its pooled buffer is
// free again, its own memfd closed.
func (w *response) discard() {
	switch {
	case w.buf != nil:
		if !w.sent {
			w.buf.lent = false
		}
	case w.f != nil:
		w.f.Close()
	}
}

// send writes the answer: the head frame, then the inline body, or with
// the head's first bytes the memfd when the client has not got it yet.
func (w *response) send(c *net.UnixConn) error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return w.err
	}
	head := wire.AgentSocketHead{Status: w.status, Header: w.header, Length: int64(w.inline.Len())}
	var rights []byte
	if w.f != nil {
		if w.n != w.want {
			return fmt.Errorf("body of %d bytes, short of its Content-Length of %d", w.n, w.want)
		}
		head.Length = w.n
		if w.buf != nil {
			head.Buffer = w.buf.id
		} else {
			const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
			if _, err := unix.FcntlInt(w.f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
				return fmt.Errorf("sealing the body's memfd: %w", err)
			}
		}
		if w.buf == nil || !w.buf.passed {
			head.FD = true
			rights = unix.UnixRights(int(w.f.Fd()))
		}
	}
	if err := writeFrame(c, head, w.inline.Bytes(), rights); err != nil {
		return err
	}
	w.sent = true
	if w.buf != nil {
		w.buf.passed = true
	}
	return nil
}

func writeFrame(c *net.UnixConn, head wire.AgentSocketHead, body, rights []byte) error {
	js, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if len(js) > wire.AgentSocketMaxHead {
		return fmt.Errorf("answer head of %d bytes: over %d", len(js), wire.AgentSocketMaxHead)
	}
	frame := make([]byte, 4, 4+len(js)+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(js)))
	frame = append(append(frame, js...), body...)
	// The file rides on the frame's first bytes: four always go in one
	// sendmsg, so the client meets it before anything else of the answer.
	n, _, err := c.WriteMsgUnix(frame[:4], rights, nil)
	if err == nil && n != 4 {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("sending an answer: %w", err)
	}
	if _, err := c.Write(frame[4:]); err != nil {
		return fmt.Errorf("sending an answer: %w", err)
	}
	return nil
}

func writeError(c *net.UnixConn, status int, msg string) error {
	h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	return writeFrame(c, wire.AgentSocketHead{Status: status, Header: h, Length: int64(len(msg) + 1)}, []byte(msg+"\n"), nil)
}
