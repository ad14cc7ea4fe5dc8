package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// FrameSink takes a shard's frames (wire.ShardStreamMediaType) in order.
// WriteFrame should pass each frame on at once (flush it): the caller may
// start on a chunk before the shard is finished. An error means the
// frames have nowhere to go (the client left); the shard is then given up.
type FrameSink interface {
	WriteFrame(kind wire.FrameKind, chunk int, payload []byte) error
}

// WriterSink writes frames to w in the wire format, flushing w after each
// when it can be (http.Flusher, or a Flush() error method like
// bufio.Writer's).
func WriterSink(w io.Writer) FrameSink { return writerSink{w} }

type writerSink struct{ w io.Writer }

func (s writerSink) WriteFrame(kind wire.FrameKind, chunk int, payload []byte) error {
	if err := wire.WriteFrame(s.w, kind, chunk, payload); err != nil {
		return err
	}
	switch f := s.w.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case http.Flusher:
		f.Flush()
	}
	return nil
}

// responseSink sends frames as an HTTP response body. The 200 goes out
// with the first frame, not before, so that a shard failing before it
// has any output can still be answered with a status.
type responseSink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // per frame; <= 0 none

	mu      sync.Mutex // the shard's writer and keepAlive's
	started bool       // the 200 was sent
	err     error      // the first write error: the client is gone
	last    time.Time  // when the last frame went out
}

func (s *responseSink) WriteFrame(kind wire.FrameKind, chunk int, payload []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeFrame(kind, chunk, payload)
}

// keepAlive sends a heartbeat frame whenever no frame went out for every
// (the first one starts the 200), until stop is called; stop returns once
// no heartbeat is being written. every <= 0 sends none.
func (s *responseSink) keepAlive(every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			s.mu.Lock()
			next := every - time.Since(s.last)
			if next <= 0 {
				if err := s.writeFrame(wire.FrameHeartbeat, 0, nil); err != nil {
					s.mu.Unlock()
					return
				}
				next = every
			}
			s.mu.Unlock()
			t.Reset(next)
		}
	}()
	return func() { close(done); <-exited }
}

func (s *responseSink) writeFrame(kind wire.FrameKind, chunk int, payload []byte) error {
	if s.err != nil {
		return s.err
	}
	if !s.started {
		s.w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if s.timeout > 0 {
		// Not every ResponseWriter can; the frame is then unbounded.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	err := wire.WriteFrame(s.w, kind, chunk, payload)
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.err = fmt.Errorf("sending the response: %w", err)
	}
	s.last = time.Now()
	return s.err
}

// writeError ends a started response with an error frame saying why the
// shard could not be finished.
func (s *responseSink) writeError(err error) error {
	// JSON may escape a byte as six: cut well within the frame's bound.
	msg := err.Error()
	if max := wire.MaxErrorFrameBytes / 8; len(msg) > max {
		msg = msg[:max] + "..."
	}
	payload, jerr := json.Marshal(wire.ShardError{Permanent: permanent(err), Message: msg})
	if jerr != nil {
		return fmt.Errorf("encoding shard error: %w", jerr)
	}
	return s.WriteFrame(wire.FrameError, 0, payload)
}

// permanent says whether retrying the task cannot help.
func permanent(err error) bool {
	return errors.Is(err, ErrInvalidTask) || errors.Is(err, ErrShardNotFound)
}
