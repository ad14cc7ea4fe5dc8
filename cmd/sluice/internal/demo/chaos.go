package demo

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/wire"
)

// chaos SIGKILLs a random replica every period.
func chaos(ctx context.Context, act *local.Actuator, every time.Duration, seed uint64, logger *slog.Logger) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if act.KillRandom(jobID, rng) {
				logger.Info("chaos: killed a replica")
			}
		}
	}
}

// chaosMidShard is the agent's transport to the replicas (the
// dispatcher's own, wrapped): it SIGKILLs a random replica when a shard's
// first chunk arrives, up to kills times.
func chaosMidShard(ctx context.Context, act *local.Actuator, kills int, seed uint64, logger *slog.Logger) http.RoundTripper {
	return &chaosTransport{ctx: ctx, act: act, kills: kills, rng: rand.New(rand.NewPCG(seed, 0xc4a06)), log: logger,
		next: dispatch.NewHTTPClient().Transport}
}

type chaosTransport struct {
	ctx  context.Context
	act  *local.Actuator
	log  *slog.Logger
	next http.RoundTripper

	mu    sync.Mutex
	kills int
	rng   *rand.Rand
}

func (c *chaosTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = &firstFrame{ReadCloser: resp.Body, arrived: c.kill}
	return resp, nil
}

// kill SIGKILLs a replica, while kills are left.
func (c *chaosTransport) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kills == 0 || c.ctx.Err() != nil {
		return
	}
	if c.act.KillRandom(jobID, c.rng) {
		c.kills--
		c.log.Info("chaos: killed a replica mid-shard")
	}
}

// firstFrame calls arrived once a whole frame header was read: the shard's
// first chunk is arriving.
type firstFrame struct {
	io.ReadCloser
	n       int
	arrived func()
}

func (f *firstFrame) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.n < wire.FrameHeaderLen && f.n+n >= wire.FrameHeaderLen {
		f.arrived()
	}
	f.n += n
	return n, err
}
