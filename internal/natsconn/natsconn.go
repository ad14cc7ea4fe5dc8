// Package natsconn connects Sluice components to NATS the same way
// everywhere: a name for the server's monitoring pages, bounded reconnects,
// and one clear error when the server cannot be reached at start.
package natsconn

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect dials url and opens JetStream on the connection.
func Connect(url, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(60),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			logger.Warn("nats async error", "subject", subjectOf(sub), "err", err)
		}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to nats at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("opening jetstream at %s: %w", url, err)
	}
	return nc, js, nil
}

func subjectOf(s *nats.Subscription) string {
	if s == nil {
		return ""
	}
	return s.Subject
}
