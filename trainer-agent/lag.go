package traineragent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// A job's readers (a sweep's trials) share its output buffer: a reader
// whose trainer lags leaves its chunks in the stream and, once the buffer
// nears full, the dispatcher pauses for every reader. A lagging reader
// therefore sheds: while the stream holds at least its lag bound, this
// reader holds its oldest message and another reader has caught up with
// the stream (holdsBuffer), the agent pulls past its prefetch and
// acks what it pulls without keeping it, noting the message's shard as
// owed in its position (written before the acks). When its ranks reach an
// epoch with owed shards and run out of steps, it asks for those shards
// again through broker.Replay: functions are deterministic, so they come
// byte for byte, on this reader's own replay subject, and the copies of
// chunks it had kept are dropped by ChunkRef as after a resume. The cost
// is producing those shards twice; the other readers never wait for it.

// lagCheckEvery is how often a reader blocked on its prefetch bound asks
// the server whether it is the one holding the shared buffer.
const lagCheckEvery = time.Second

// holdsBuffer is the shedding rule, a pure function of what the server
// says: the stream holds at least limit bytes, this reader has not acked
// the stream's oldest message (so the buffer waits for it), and another
// reader has been delivered everything the stream has (so it is that
// reader that waits: when producers are merely ahead of every reader, no
// one sheds).
func holdsBuffer(limit, streamBytes int64, firstSeq, ackFloor uint64, otherCaughtUp bool) bool {
	return limit > 0 && streamBytes >= limit && ackFloor < firstSeq && otherCaughtUp
}

// lagLimit is the stream bytes past which a lagging reader sheds; 0 never.
func (a *Agent) lagLimit() int64 {
	switch {
	case a.opts.MaxLagBytes < 0:
		return 0
	case a.opts.MaxLagBytes > 0:
		return a.opts.MaxLagBytes
	case len(a.job.Spec.Readers) < 2:
		return 0 // alone, the reader holds back nobody
	}
	return a.job.Spec.OutputBufferBytes / 2
}

// lagging asks the server whether this reader holds the shared buffer.
func (a *Agent) lagging(ctx context.Context, cons jetstream.Consumer) (bool, error) {
	limit := a.lagLimit()
	if limit == 0 {
		return false, nil
	}
	stream, err := a.js.Stream(ctx, wire.OutputStream(a.job.Spec.ID))
	if err != nil {
		return false, fmt.Errorf("reading the output stream's state: %w", err)
	}
	si, err := stream.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the output stream's state: %w", err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the reader's consumer: %w", err)
	}
	if !holdsBuffer(limit, int64(si.State.Bytes), si.State.FirstSeq, ci.AckFloor.Stream, true) {
		return false, nil
	}
	caughtUp := false
	infos := stream.ListConsumers(ctx)
	for info := range infos.Info() {
		if info.Name != ci.Name && strings.HasPrefix(info.Name, wire.ReaderConsumer("")) && info.NumPending == 0 {
			caughtUp = true
		}
	}
	if err := infos.Err(); err != nil {
		return false, fmt.Errorf("reading the other readers' consumers: %w", err)
	}
	return caughtUp, nil
}

// shed takes msg off the stream unkept: acked once the position records
// its shard as owed. A replay (on this reader's own subject) is never
// shed: it is what the reader asked for.
func (a *Agent) shed(msg jetstream.Msg) {
	if msg.Subject() != wire.OutputSubject(a.job.Spec.ID) {
		a.handle(msg)
		return
	}
	ref, err := wire.ParseChunkRef(a.job.Spec.ID, msg.Headers())
	if err != nil {
		a.log.Warn("dropping an output message", "subject", msg.Subject(), "error", err)
		a.term(msg)
		return
	}
	a.mu.Lock()
	owed := a.asm.shed(ref, msg)
	if owed {
		a.stats.ShedMessages++
	}
	a.mu.Unlock()
}

// askOwed asks for the owed shards of the ranks' epoch once it has no
// step ready, and notes them as being replayed.
func (a *Agent) askOwed(ctx context.Context) error {
	a.mu.Lock()
	e := a.ranks.epoch
	var shards []int
	if e < a.job.Spec.Epochs && !a.stepReady() {
		shards = a.asm.owedDue(e)
	}
	a.mu.Unlock()
	if len(shards) == 0 {
		return nil
	}
	n, err := a.replay(ctx, a.js, a.job, a.reader, map[int][]int{e: shards})
	if err != nil {
		return fmt.Errorf("asking for the %d owed shards of epoch %d: %w", len(shards), e, err)
	}
	a.mu.Lock()
	a.asm.markReplayed(map[int][]int{e: shards})
	a.mu.Unlock()
	a.log.Info("asked for owed shards again", "epoch", e, "shards", n)
	return nil
}

// shedFor pulls and sheds messages for up to d, while the reader still
// holds the buffer; it returns early once the ranks need data.
func (a *Agent) shedFor(ctx context.Context, iter jetstream.MessagesContext, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		need := !a.stepReady()
		a.mu.Unlock()
		if need {
			return nil
		}
		nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		msg, err := iter.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case err == nil:
			a.shed(msg)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoHeartbeat):
			return nil // nothing more to take now
		default:
			return fmt.Errorf("consuming %s: %w", wire.OutputStream(a.job.Spec.ID), err)
		}
	}
	return nil
}

// shed records msg (of ref) as taken off the stream unkept; false when it
// is a copy of what is complete or out of the open epochs, acked as a
// duplicate.
func (a *assembler) shed(ref wire.ChunkRef, msg jetstream.Msg) bool {
	a.ackLater(msg)
	if ref.Epoch < a.finished || ref.Epoch >= a.epochs || ref.Shard < 0 || ref.Shard >= a.shards {
		return false
	}
	ep := a.epoch(ref.Epoch)
	if ep.complete.has(ref.Shard) {
		return false
	}
	if !ep.owed.has(ref.Shard) {
		ep.owed.add(ref.Shard)
		a.version++
	}
	return true
}

// owedDue are the shards of epoch e owed and not asked for yet.
func (a *assembler) owedDue(e int) []int {
	ep := a.open[e]
	if ep == nil {
		return nil
	}
	var out []int
	for s := range a.shards {
		if ep.owed.has(s) && !ep.replayed.has(s) && !ep.complete.has(s) {
			out = append(out, s)
		}
	}
	return out
}
