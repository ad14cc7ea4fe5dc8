package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a cluster that cannot answer yet.
const (
	codeNoPeers         = 10005 // too few peers known for the replicas asked
	codeClusterNotAvail = 10008 // no meta leader yet
	codeNotLeader       = 10009
	codeIncomplete      = 10004
	codeStreamOffline   = 10118
)

// Transient reports whether err, from a JetStream API call, may go away
// by itself while a NATS cluster forms or a server restarts: a request
// that timed out or found no responder, no meta leader, too few peers for
// a replicated stream yet, a connection being re-established, a stream
// with no leader for the moment (a publish no stream answered).
func Transient(err error) bool {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return false // configuration, not timing
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	case errors.As(err, &api):
		switch api.ErrorCode {
		case codeNoPeers, codeClusterNotAvail, codeNotLeader, codeIncomplete, codeStreamOffline:
			return true
		}
		return api.Code == 503
	}
	return false
}

// JetStream is Do with Startup backoff for start-up calls to JetStream
// over nc (creating streams and buckets, checking the account), retrying
// what Transient calls transient. A request the server refused for
// permissions only times out on the client; it is not retried, and the
// error names the violation the server reported.
func JetStream(ctx context.Context, logger *slog.Logger, nc *nats.Conn, what string, fn func(context.Context) error) error {
	err := Do(ctx, logger, Startup(), what, func(err error) bool { return Transient(err) && denied(nc) == nil }, fn)
	if v := denied(nc); err != nil && v != nil {
		return fmt.Errorf("%w (%v)", err, v)
	}
	return err
}

// denied is the permissions violation the server last reported on nc.
func denied(nc *nats.Conn) error {
	if nc == nil {
		return nil
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return nil
}
