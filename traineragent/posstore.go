package traineragent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/wire"
)

// positionStore is where one reader's position is kept: its key in
// wire.ReadersBucket, written by compare-and-set on the revision last
// written or read, so that two agents of one reader stop rather than
// interleave. mu serialises the writes (and a resume's rewind, which must
// see no write); every other field belongs to it. It is the first lock
// of the agent's order (see Reader): Reader.mu is taken under it.
type positionStore struct {
	mu  sync.Mutex
	kv  jetstream.KeyValue
	key string
	log *slog.Logger
	rev uint64 // revision of the stored position, 0 if none
	// written is the assembler version last written; broken says a write
	// for a batch failed (no write may follow: it would record the batch).
	written uint64
	broken  bool
	// recorded is the position last written or loaded (nil: none).
	recorded []byte
}

// positionWriteTimeout bounds the retries of one position write; past it
// the agent stops rather than hand out batches it cannot record.
const positionWriteTimeout = 30 * time.Second

// ErrReaderTaken means another agent wrote this reader's position: two
// agents must not read a job as the same reader.
var ErrReaderTaken = errors.New("another agent is reading as this reader")

// openPositionStore binds to key in wire.ReadersBucket and reads the
// position stored there: nil if none, or if it is an earlier job's under
// the same id (submitted differs; it is then overwritten, not resumed).
func openPositionStore(ctx context.Context, js jetstream.JetStream, key, submitted string, log *slog.Logger) (*positionStore, *assembly.Position, error) {
	kv, err := js.KeyValue(ctx, wire.ReadersBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("opening reader positions (bucket %s): %w", wire.ReadersBucket, err)
	}
	s := &positionStore{kv: kv, key: key, log: log}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return s, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the position under %s: %w", key, err)
	}
	p, err := assembly.DecodePosition(e.Value())
	if err != nil {
		return nil, nil, fmt.Errorf("position under %s: %w", key, err)
	}
	s.rev = e.Revision()
	if p.Submitted != submitted {
		log.Warn("ignoring the position of an earlier job under this id", "key", key,
			"position_of", p.Submitted, "job_submitted", submitted)
		return s, nil, nil
	}
	s.recorded = e.Value()
	return s, &p, nil
}

// write stores data, retrying transient failures; s.mu must be held.
func (s *positionStore) write(ctx context.Context, data []byte) error {
	deadline := time.Now().Add(positionWriteTimeout)
	wait := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var rev uint64
		var err error
		if s.rev == 0 {
			rev, err = s.kv.Create(wctx, s.key, data)
		} else {
			rev, err = s.kv.Update(wctx, s.key, data, s.rev)
		}
		cancel()
		if err == nil {
			s.rev, s.recorded = rev, data
			return nil
		}
		if streams.IsCASConflict(err) {
			// A retried write that did land looks like a conflict.
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, gerr := s.kv.Get(gctx, s.key)
			cancel()
			if gerr == nil && bytes.Equal(e.Value(), data) {
				s.rev, s.recorded = e.Revision(), data
				return nil
			}
			return fmt.Errorf("%w (the position under %s changed)", ErrReaderTaken, s.key)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("writing %s: %w", s.key, err)
		}
		s.log.Warn("writing the position; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("writing %s: %w", s.key, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// taken returns an error wrapping ErrReaderTaken if another agent wrote
// the position since this one last did. Two agents of one reader split
// the job's tasks; one whose shards make no step of the ranks' epoch has
// nothing to write and would otherwise hold them (and the other agent's
// next step) forever.
func (s *positionStore) taken(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := s.kv.Get(gctx, s.key)
	if err != nil || e.Revision() == s.rev {
		return nil // none, or not readable now: the next tick looks again
	}
	return fmt.Errorf("%w (the position under %s changed)", ErrReaderTaken, s.key)
}

// put writes data under another key of the bucket (the reader's done
// record), retrying until ctx or positionWriteTimeout ends.
func (s *positionStore) put(ctx context.Context, key string, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, positionWriteTimeout)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := s.kv.Put(wctx, key, data)
		if err == nil {
			return nil
		}
		s.log.Warn("writing "+key+"; retrying", "err", err)
		if err := retry.Sleep(wctx, wait); err != nil {
			return fmt.Errorf("writing %s: %w", key, err)
		}
	}
}
