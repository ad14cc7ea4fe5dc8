package streams

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/retry"
)

// How OpenBucket retries. A bucket whose stream leader (or the meta
// leader) was on a lost member answers again once the others elect one,
// within seconds; a request meanwhile gets no answer.
const (
	openRetryWindow = time.Minute
	openAttempt     = 5 * time.Second
)

// OpenBucket opens the key-value bucket, retrying what retry.Transient
// calls transient for at most openRetryWindow: a process started just
// after a NATS member was lost (an agent on the node a trainer moved to)
// waits out the election instead of failing.
func OpenBucket(ctx context.Context, js jetstream.JetStream, bucket string, logger *slog.Logger) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, openRetryWindow)
	defer cancel()
	var kv jetstream.KeyValue
	err := retry.JetStream(ctx, logger, js.Conn(), "opening key-value bucket "+bucket, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		defer cancel()
		var err error
		kv, err = js.KeyValue(actx, bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening key-value bucket %s: %w", bucket, err)
	}
	return kv, nil
}
