package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

const (
	// ackConfirmTimeout bounds the flush that confirms acks.
	ackConfirmTimeout = 5 * time.Second
	// settlePoll is how long settle waits for redeliveries per round.
	settlePoll = time.Second
	// settleAckPoll is how often settle looks again while only acks in
	// flight keep the consumer from drained.
	settleAckPoll = 20 * time.Millisecond
)

// sentAck is an ack written to the connection, not yet known to have
// reached the server: the message's ack subject (not the message, whose
// payload can then be collected) and the connection's reconnect count.
type sentAck struct {
	reply string
	conn  uint64
}

// ackBody is what JetStream takes as an ack on a message's reply subject.
var ackBody = []byte("+ACK")

// ackAll acks msgs. The acks are fire-and-forget, so that handing out a
// batch waits for no round trip; confirmAcks later makes sure they
// arrived.
func (a *Agent) ackAll(msgs []jetstream.Msg) {
	conn := a.nc.Stats().Reconnects
	a.ackMu.Lock()
	defer a.ackMu.Unlock()
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			a.log.Debug("acking an output message", "error", err)
		}
		a.unconfirmed = append(a.unconfirmed, sentAck{m.Reply(), conn})
	}
}

// confirmAcks makes sure the acks sent so far reached the server. An ack
// written to a connection that then drops (a nats-server restart) is lost
// without a word, and the reader's consumer would never drain, so the job
// would never count as done. The server reads a connection in order, so a
// flush round trip confirms every ack written before it on the same
// connection; acks written before a reconnect are sent again (acking a
// message twice is harmless). It runs on the keep-alive tick and in
// settle, and holds no lock a batch needs while it waits.
func (a *Agent) confirmAcks(ctx context.Context) error {
	a.ackMu.Lock()
	n := len(a.unconfirmed) // acks written before the flush
	a.ackMu.Unlock()
	if n == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, ackConfirmTimeout)
	err := a.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return fmt.Errorf("confirming acks: %w", err)
	}
	conn := a.nc.Stats().Reconnects
	a.ackMu.Lock()
	defer a.ackMu.Unlock()
	var again []sentAck
	for _, s := range a.unconfirmed[:n] {
		if s.conn == conn {
			continue // written to this connection, before the flush
		}
		if err := a.nc.Publish(s.reply, ackBody); err != nil {
			a.log.Debug("acking an output message again after a reconnect", "error", err)
		}
		again = append(again, sentAck{s.reply, conn})
	}
	a.unconfirmed = append(again, a.unconfirmed[n:]...)
	if len(again) > 0 {
		a.log.Info("acks sent again after a reconnect", "messages", len(again))
	}
	return nil
}

// settle runs once every batch was handed out: it waits until the reader's
// consumer holds nothing pending or unacked, acking what comes back. That
// covers acks lost in a reconnect and deliveries that reached a dying
// connection but never the agent (the server redelivers them after
// streams.ReaderAckWait), and copies re-published after the agent stopped
// pulling. The controller counts the job done only once every reader's
// consumer is drained. A job whose output is gone has nothing to settle.
func (a *Agent) settle(ctx context.Context, jobs jetstream.KeyValue) error {
	stream, name := wire.OutputStream(a.job.Spec.ID), wire.ReaderConsumer(a.reader)
	cons, err := a.js.Consumer(ctx, stream, name)
	if outputGone(err) {
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
		if err := a.confirmAcks(ctx); err != nil {
			a.log.Debug("settling", "error", err)
		}
		info, err := cons.Info(ctx)
		switch {
		case outputGone(err):
			return nil // the job was released: nothing left to settle
		case err != nil:
			if a.jobOver(ctx, jobs) {
				return nil // its controller saw every reader drained, or it ended
			}
			if time.Now().After(deadline) {
				a.log.Warn("could not check the reader's consumer; leaving it", "error", err)
				return nil
			}
			a.log.Debug("checking the reader's consumer", "error", err)
			if err := sleepCtx(ctx, settlePoll); err != nil {
				return err
			}
			continue
		case info.NumPending == 0 && info.NumAckPending == 0:
			return nil
		case !logged:
			a.log.Info("every batch delivered; settling the reader's consumer", "pending", info.NumPending, "unacked", info.NumAckPending)
			logged = true
		}
		if time.Now().After(deadline) {
			a.log.Warn("the reader's consumer still holds messages; leaving them", "pending", info.NumPending, "unacked", info.NumAckPending)
			return nil
		}
		var batch jetstream.MessageBatch
		if info.NumPending == 0 {
			// Mostly acks the server has not applied yet (they are sent
			// without waiting), for which a waiting fetch would sit out
			// its whole wait; take any redelivery there is and look again.
			batch, err = cons.FetchNoWait(16)
			if err == nil {
				for msg := range batch.Messages() {
					a.handle(msg)
				}
			}
			if err := sleepCtx(ctx, settleAckPoll); err != nil {
				return err
			}
			continue
		}
		batch, err = cons.Fetch(16, jetstream.FetchMaxWait(settlePoll))
		if err != nil {
			if outputGone(err) {
				return nil
			}
			if err := sleepCtx(ctx, settlePoll/4); err != nil {
				return err
			}
			continue
		}
		for msg := range batch.Messages() {
			a.handle(msg)
		}
	}
}

// outputGone reports whether err says the job's output stream or the
// reader's consumer no longer exists (the controller released the job).
func outputGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDeleted)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// jobOver reports whether the job's record is gone or in a terminal state.
func (a *Agent) jobOver(ctx context.Context, jobs jetstream.KeyValue) bool {
	e, err := jobs.Get(ctx, a.job.Spec.ID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	if err != nil {
		return false
	}
	var job wire.Job
	return json.Unmarshal(e.Value(), &job) == nil && job.State.Terminal()
}
