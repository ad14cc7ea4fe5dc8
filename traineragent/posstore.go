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
	mu    sync.Mutex
	kv    jetstream.KeyValue
	key   string
	seals recordSeals
	log   *slog.Logger
	rev   uint64 // revision of the stored position, 0 if none
	// written is the assembler version last written; broken says a write
	// for a batch failed (no write may follow: it would record the batch).
	written uint64
	broken  bool
	// recorded is the position last written or loaded (nil: none).
	recorded []byte
}

// recordSeals seal the reader's records as its node, and check those
// read: a record another node of the job wrote in this reader's agent's
// name (not sealed by a node the job's key certifies), or an earlier
// record of this node put back, is refused and told to refused (a
// reason of the node_refused series), and the reader's own written again.
// node nil: records are plain (the job's record has no node key).
type recordSeals struct {
	node    *wire.NodeIdentity
	check   *wire.NodeVerifier
	refused func(reason string, err error)
}

// seal is record as stored under key over revision over.
func (s recordSeals) seal(key string, over uint64, record []byte) ([]byte, error) {
	if s.node == nil {
		return record, nil
	}
	return s.node.SealRecord(key, over, record)
}

// open is the record stored under key, the node that wrote it ("" for a
// plain record) and the revision it was written over.
func (s recordSeals) open(key string, value []byte) (record []byte, node string, over uint64, err error) {
	if s.check == nil {
		return value, "", 0, nil
	}
	return s.check.OpenRecord(key, value)
}

// errRefusedRecord marks a record under the reader's key that is not its
// agent's to take: it is written over.
var errRefusedRecord = errors.New("refused record")

// judge decides an entry found under the key in place of the one last
// written at revision rev, data: nil if it is that write landed (a retry);
// an error wrapping errRefusedRecord if it is refused (told to refused);
// else one wrapping ErrReaderTaken, naming the node that took it.
func (s *positionStore) judge(e jetstream.KeyValueEntry, data []byte) error {
	rec, node, over, err := s.seals.open(s.key, e.Value())
	switch {
	case err != nil:
		s.seals.refused("record_seal", err)
		return fmt.Errorf("%w: %w", errRefusedRecord, err)
	case bytes.Equal(rec, data):
		return nil
	case s.seals.node != nil && node == s.seals.node.Node && over != s.rev:
		// Another run of this node writes over the revision it read:
		// this one's last. An earlier record of this node, put back,
		// does not.
		err := fmt.Errorf("%w: the position under %s is a record of this node written over revision %d, not over its last write (%d): an earlier record put back", wire.ErrNodeSeal, s.key, over, s.rev)
		s.seals.refused("record_copy", err)
		return fmt.Errorf("%w: %w", errRefusedRecord, err)
	case node != "":
		return fmt.Errorf("%w (node %s wrote the position under %s)", ErrReaderTaken, node, s.key)
	}
	return fmt.Errorf("%w (the position under %s changed)", ErrReaderTaken, s.key)
}

// positionWriteTimeout bounds the retries of one position write; past it
// the agent stops rather than hand out batches it cannot record. It
// outlasts a NATS member lost with its node: 15-20 s for the client to
// find its server silent, a reconnect through the auth callout (whose
// controller may be reconnecting too), and the stream's new leader.
const positionWriteTimeout = 90 * time.Second

// replicaCatchUp bounds the wait, before the position is read, for the
// bucket's replicas to catch up with their leader.
const replicaCatchUp = 30 * time.Second

// ErrReaderTaken means another agent wrote this reader's position: two
// agents must not read a job as the same reader.
var ErrReaderTaken = errors.New("another agent is reading as this reader")

// openPositionStore binds to key in wire.ReadersBucket and reads the
// position stored there: nil if none, or if it is an earlier job's under
// the same id (submitted differs; it is then overwritten, not resumed).
//
// A position no node of the job sealed is not resumed from, nor taken
// for none (the reader would hand out again what it recorded): the agent
// stops, saying so.
func openPositionStore(ctx context.Context, js jetstream.JetStream, key, submitted string, seals recordSeals, log *slog.Logger) (*positionStore, *assembly.Position, error) {
	kv, err := streams.OpenBucket(ctx, js, wire.ReadersBucket, log)
	if err != nil {
		return nil, nil, fmt.Errorf("opening reader positions: %w", err)
	}
	// A replica behind its leader would answer with an earlier position
	// (its first write over it would then look like another agent's).
	if err := streams.WaitReplicasCurrent(ctx, kv, replicaCatchUp); err != nil {
		return nil, nil, fmt.Errorf("not reading the position under %s from a replica that may be behind: %w", key, err)
	}
	s := &positionStore{kv: kv, key: key, seals: seals, log: log}
	// A read sent to a replica on a lost node gets no answer; another
	// attempt may reach a live one.
	var e jetstream.KeyValueEntry
	rctx, cancel := context.WithTimeout(ctx, positionWriteTimeout)
	defer cancel()
	err = retry.Do(rctx, log, retry.Startup(), "reading the position", retry.Transient, func(ctx context.Context) error {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		e, err = kv.Get(gctx, key)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return s, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the position under %s: %w", key, err)
	}
	rec, node, _, err := seals.open(key, e.Value())
	if err != nil {
		seals.refused("record_seal", err)
		return nil, nil, fmt.Errorf("%w: not resuming from it; if the job was deleted and submitted again, or the record is known bad, delete the key (nats kv del %s %s) to start the reader afresh",
			err, wire.ReadersBucket, key)
	}
	if node != "" {
		log.Info("the recorded position was written by node", "key", key, "node", node)
	}
	p, err := assembly.DecodePosition(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("position under %s: %w", key, err)
	}
	s.rev = e.Revision()
	if p.Submitted != submitted {
		log.Warn("ignoring the position of an earlier job under this id", "key", key,
			"position_of", p.Submitted, "job_submitted", submitted)
		return s, nil, nil
	}
	s.recorded = rec
	return s, &p, nil
}

// write stores data, retrying transient failures; s.mu must be held.
func (s *positionStore) write(ctx context.Context, data []byte) error {
	deadline := time.Now().Add(positionWriteTimeout)
	wait := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var rev uint64
		value, err := s.seals.seal(s.key, s.rev, data)
		if err != nil {
			cancel()
			return err
		}
		if s.rev == 0 {
			rev, err = s.kv.Create(wctx, s.key, value)
		} else {
			rev, err = s.kv.Update(wctx, s.key, value, s.rev)
		}
		cancel()
		if err == nil {
			s.rev, s.recorded = rev, data
			return nil
		}
		if streams.IsCASConflict(err) {
			// A retried write that did land looks like a conflict.
			e, gerr := s.readPast(ctx, deadline)
			if gerr != nil {
				return fmt.Errorf("%w (the position under %s changed: %w)", ErrReaderTaken, s.key, gerr)
			}
			switch jerr := s.judge(e, data); {
			case jerr == nil:
				s.rev, s.recorded = e.Revision(), data
				return nil
			case errors.Is(jerr, errRefusedRecord) && time.Now().Before(deadline):
				s.rev = e.Revision() // written over at once
				continue
			default:
				return jerr
			}
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

// readPast reads the entry that made a write over s.rev conflict, reading
// again until deadline while the replica that answers has nothing past
// s.rev: it is behind (a member back from a partition), and judging its
// earlier entry would take this reader's own last write for another's.
func (s *positionStore) readPast(ctx context.Context, deadline time.Time) (jetstream.KeyValueEntry, error) {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := s.kv.Get(gctx, s.key)
		cancel()
		switch {
		case err == nil && e.Revision() > s.rev:
			return e, nil
		case err == nil:
			err = fmt.Errorf("read revision %d, not past this reader's last write (%d): a replica behind", e.Revision(), s.rev)
		}
		if !time.Now().Add(wait).Before(deadline) {
			return nil, err
		}
		if serr := retry.Sleep(ctx, wait); serr != nil {
			return nil, err
		}
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
	if err != nil || e.Revision() <= s.rev {
		return nil // none, not readable now, or read from a replica behind: the next tick looks again
	}
	err = s.judge(e, s.recorded)
	if err == nil {
		s.rev = e.Revision() // its own record, written again: not taken
		return nil
	}
	if !errors.Is(err, errRefusedRecord) {
		return err
	}
	// Refused: the reader's own record goes back over it (none yet: the
	// key is deleted).
	if s.recorded == nil {
		_ = s.kv.Delete(gctx, s.key, jetstream.LastRevision(e.Revision()))
		return nil
	}
	value, err := s.seals.seal(s.key, e.Revision(), s.recorded)
	if err != nil {
		return err
	}
	rev, err := s.kv.Update(gctx, s.key, value, e.Revision())
	if err != nil {
		return nil // written meanwhile, or not writable now: the next tick looks again
	}
	s.rev = rev
	return nil
}

// put writes data under another key of the bucket (the reader's done
// record), retrying until ctx or positionWriteTimeout ends.
func (s *positionStore) put(ctx context.Context, key string, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, positionWriteTimeout)
	defer cancel()
	value, err := s.seals.seal(key, 0, data)
	if err != nil {
		return err
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := s.kv.Put(wctx, key, value)
		if err == nil {
			return nil
		}
		s.log.Warn("writing "+key+"; retrying", "err", err)
		if err := retry.Sleep(wctx, wait); err != nil {
			return fmt.Errorf("writing %s: %w", key, err)
		}
	}
}
