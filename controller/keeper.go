package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// keepLeases runs a lease round every LeaseTTL/3, and at once when the
// watcher sees a new job or a run ends, until ctx ends.
func (c *Controller) keepLeases(ctx context.Context) {
	t := time.NewTicker(renewEvery(c.opts.LeaseTTL))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.leaseRound(ctx)
	}
}

// leaseRound decides and applies the lease of every job known or owned.
func (c *Controller) leaseRound(ctx context.Context) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.known)+len(c.owned))
	seen := map[string]bool{}
	for id, j := range c.known {
		if !j.State.Terminal() {
			ids, seen[id] = append(ids, id), true
		}
	}
	for id := range c.owned {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		c.leaseOne(ctx, id)
	}
}

// leaseOne reads job id's lease, decides, writes by compare-and-set, and
// starts or stops the job's run to match.
func (c *Controller) leaseOne(ctx context.Context, id string) {
	cur, rev, err := c.getLease(ctx, id)
	if err != nil {
		c.log.Warn("reading lease", "job", id, "err", err)
		return // an owned run stops by its watchdog if this persists
	}
	now := time.Now()
	want := c.wants(id)
	action, next := DecideLease(cur, want, c.opts.ID, now, c.opts.LeaseTTL)
	c.mu.Lock()
	jr := c.owned[id]
	stopping := jr != nil && jr.stopping != stopNone
	c.mu.Unlock()

	switch action {
	case LeaseNone:
	case LeaseWait:
		if jr != nil {
			c.log.Warn("another controller holds the lease of a job running here; stopping it", "job", id, "owner", cur.Owner)
			c.m.lost.Inc()
			c.stopJobAsync(id, stopLost)
		}
	case LeaseRelease:
		if jr == nil { // a run releases once it has cleaned up
			c.releaseLease(ctx, id)
		}
	case LeaseCreate, LeaseTakeOver, LeaseRenew:
		if err := c.writeLease(ctx, id, action, next, rev); err != nil {
			if errors.Is(err, errLeaseConflict) && jr != nil {
				c.log.Warn("lease changed under this controller; stopping the job", "job", id)
				c.m.lost.Inc()
				c.stopJobAsync(id, stopLost)
			} else if !errors.Is(err, errLeaseConflict) {
				c.log.Warn("writing lease", "job", id, "action", action, "err", err)
			}
			return
		}
		if action != LeaseRenew {
			c.log.Info("took job lease", "job", id, "action", action, "previous_owner", ownerOf(cur))
		}
		switch {
		case jr == nil:
			c.startJob(id, next)
		case !stopping:
			jr.leaseRenewed(next)
		}
	}
}

func ownerOf(l *wire.Lease) string {
	if l == nil {
		return ""
	}
	return l.Owner
}

// errLeaseConflict means the lease changed since it was read.
var errLeaseConflict = errors.New("lease changed concurrently")

// getLease returns job id's lease and its revision; nil and 0 when there is none.
func (c *Controller) getLease(ctx context.Context, id string) (*wire.Lease, uint64, error) {
	e, err := c.leasesKV.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading lease of job %s: %w", id, err)
	}
	var l wire.Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		// A lease nobody can read is treated as expired: taken over by CAS.
		c.log.Warn("undecodable lease, treating it as expired", "job", id, "err", err)
		return &wire.Lease{Owner: "?"}, e.Revision(), nil
	}
	return &l, e.Revision(), nil
}

// writeLease applies a create, takeover or renew by compare-and-set on
// rev, the revision the decision read.
func (c *Controller) writeLease(ctx context.Context, id string, action LeaseAction, l wire.Lease, rev uint64) error {
	data, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encoding lease of job %s: %w", id, err)
	}
	if action == LeaseCreate {
		_, err = c.leasesKV.Create(ctx, id, data)
	} else {
		_, err = c.leasesKV.Update(ctx, id, data, rev)
	}
	switch {
	case err == nil:
		c.m.leaseOps.WithLabelValues(action.String(), "ok").Inc()
		return nil
	case streams.IsCASConflict(err):
		c.m.leaseOps.WithLabelValues(action.String(), "conflict").Inc()
		return errLeaseConflict
	}
	c.m.leaseOps.WithLabelValues(action.String(), "error").Inc()
	return fmt.Errorf("%s lease of job %s: %w", action, id, err)
}

// releaseLease deletes job id's lease if it is still this controller's,
// by compare-and-set on its revision.
func (c *Controller) releaseLease(ctx context.Context, id string) {
	cur, rev, err := c.getLease(ctx, id)
	if err != nil {
		c.log.Warn("releasing lease", "job", id, "err", err)
		return
	}
	if cur == nil || cur.Owner != c.opts.ID {
		return
	}
	err = c.leasesKV.Delete(ctx, id, jetstream.LastRevision(rev))
	switch {
	case err == nil:
		c.m.leaseOps.WithLabelValues(LeaseRelease.String(), "ok").Inc()
		c.log.Info("released job lease", "job", id)
	case streams.IsCASConflict(err):
		c.m.leaseOps.WithLabelValues(LeaseRelease.String(), "conflict").Inc()
	default:
		c.m.leaseOps.WithLabelValues(LeaseRelease.String(), "error").Inc()
		c.log.Warn("releasing lease", "job", id, "err", err)
	}
}
