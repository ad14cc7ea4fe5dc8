// Package lowwater batches a long stream's reads on a TCP connection: once
// a connection has streamed a while, its reader sleeps until a mark's worth
// of bytes is queued (the socket's receive low-water mark, SO_RCVLOWAT) or
// a short wait has passed, instead of waking for every segment. Behind
// proxies that write every 32 KB (an ingress, Knative's queue-proxy), a
// reader woken per segment spends more CPU in the kernel's receive path
// than in its own code; docs/knative.md has the figures. On systems other
// than Linux connections are left as they are.
package lowwater

import (
	"context"
	"net"
	"time"
)

// Config sets when a connection batches its reads and how.
type Config struct {
	// Mark is the bytes a waiting read sleeps for.
	Mark int
	// Wait bounds that sleep: a stream that pauses is read at most Wait
	// late.
	Wait time.Duration
	// After is the bytes a connection streams, no read waiting longer
	// than Wait, before its reads batch: a short reply never waits.
	After int64
}

// Default batches reads by 1 MB (a read then fills net/http's buffer of
// dispatch.ReadBufferSize), at most 10 ms late, once 4 MB streamed. On
// the real cluster (test/e2e's streaming test) the reader through
// Traefik and queue-proxy took 1.13-1.23x its CPU per GB direct so,
// 1.29-1.30x with 5 ms, 2.4x unbatched.
var Default = Config{Mark: 1 << 20, Wait: 10 * time.Millisecond, After: 4 << 20}

// Dial wraps dial so that the TCP connections it makes batch their reads
// as c says; a nil dial is net.Dialer's.
func Dial(c Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c, conn), nil
	}
}
