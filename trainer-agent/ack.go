package traineragent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

const (
	// ackTimeout bounds the wait for the server to confirm one ack.
	ackTimeout = 2 * time.Second
	// ackTries is how often an ack is tried (one try per sync) before
	// settle is left to catch it.
	ackTries = 8
	// settlePoll is how long settle waits for redeliveries per round.
	settlePoll = time.Second
)

// ackAll acks msgs and waits for the server to confirm each: a plain ack
// written to a connection that is about to drop (a nats-server restart) is
// lost without a word, and the reader's consumer would then never drain,
// so the job would never count as done. An ack that fails is tried again
// on the next sync (a batch, or the keep-alive tick), up to ackTries
// times. a.posMu must be held.
func (a *Agent) ackAll(ctx context.Context, msgs []jetstream.Msg) {
	var retry []jetstream.Msg
	for _, m := range msgs {
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		err := errors.New("nats disconnected")
		if a.nc.IsConnected() {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
			err = m.DoubleAck(actx)
			cancel()
		}
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			delete(a.ackTries, seq)
			continue
		}
		if a.ackTries == nil {
			a.ackTries = map[uint64]int{}
		}
		if a.ackTries[seq]++; a.ackTries[seq] >= ackTries {
			a.log.Warn("giving up acking an output message; it will come back as a copy", "stream_seq", seq, "error", err)
			delete(a.ackTries, seq)
			continue
		}
		a.log.Debug("acking an output message; retrying", "stream_seq", seq, "error", err)
		retry = append(retry, m)
	}
	if len(retry) > 0 {
		a.mu.Lock()
		a.asm.acks = append(retry, a.asm.acks...)
		a.mu.Unlock()
	}
}

// settle runs once every batch was handed out: it waits until the reader's
// consumer holds nothing pending or unacked, acking what comes back. That
// covers acks lost in a reconnect and deliveries that reached a dying
// connection but never the agent (the server redelivers them after
// streams.ReaderAckWait), and copies re-published after the agent stopped
// pulling. The controller counts the job done only once every reader's
// consumer is drained. A job whose output is gone has nothing to settle.
func (a *Agent) settle(ctx context.Context) error {
	stream, name := wire.OutputStream(a.job.Spec.ID), wire.ReaderConsumer(a.reader)
	cons, err := a.js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("binding to consumer %s on %s: %w", name, stream, err)
	}
	deadline := time.Now().Add(streams.ReaderAckWait + 15*time.Second)
	logged := false
	for {
		if err := a.sync(ctx, false); err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			return nil
		case err == nil && info.NumPending == 0 && info.NumAckPending == 0:
			return nil
		case err == nil && !logged:
			a.log.Info("every batch delivered; settling the reader's consumer", "pending", info.NumPending, "unacked", info.NumAckPending)
			logged = true
		}
		if time.Now().After(deadline) {
			a.log.Warn("the reader's consumer still holds messages; leaving them", "pending", info.NumPending, "unacked", info.NumAckPending)
			return nil
		}
		batch, err := cons.Fetch(16, jetstream.FetchMaxWait(settlePoll))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		for msg := range batch.Messages() {
			a.handle(msg)
		}
	}
}
