package image

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/sluice-project/sluice/internal/bytesize"
)

// BudgetShare is the share of a process's memory limit that decoded
// images may hold at once, as a divisor: a half. The other half holds the
// samples being read (each at most wds.DefaultMaxSampleBytes), the
// outputs and chunks being built, the Go runtime and the garbage
// collector's headroom.
const BudgetShare = 2

// OverBudgetError is an image whose decoding alone needs more than the
// whole decode budget: it can never be decoded here.
type OverBudgetError struct {
	Need, Budget int64
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("decoding takes %s, over the %s decode budget", bytesize.Format(e.Need), bytesize.Format(e.Budget))
}

// Budget bounds the bytes decoded images hold at once, across everything
// a process decodes concurrently: a decode reserves what DecodeCost says
// it needs before it starts and waits until that much is free. So the
// pixel memory of a replica is the budget, however many shards it
// processes at once, rather than concurrency x the largest image. Waiters
// are served in order, so a large image is not starved by small ones. A
// nil *Budget bounds nothing.
type Budget struct {
	total int64
	sem   *semaphore.Weighted
	inUse atomic.Int64
}

// NewBudget is a budget of total bytes.
func NewBudget(total int64) *Budget {
	return &Budget{total: total, sem: semaphore.NewWeighted(total)}
}

// BudgetFor is the budget of a process whose memory limit is memoryLimit:
// its BudgetShare.
func BudgetFor(memoryLimit int64) *Budget { return NewBudget(memoryLimit / BudgetShare) }

// Total is the budget's size in bytes (0 for a nil budget).
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// InUse is how many bytes are reserved now (0 for a nil budget).
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.inUse.Load()
}

// Reserve waits until n bytes of the budget are free and takes them, or
// returns ctx's error. n over the whole budget fails at once with an
// *OverBudgetError. release gives the bytes back; call it once.
func (b *Budget) Reserve(ctx context.Context, n int64) (release func(), err error) {
	if b == nil || n <= 0 {
		return func() {}, nil
	}
	if n > b.total {
		return nil, &OverBudgetError{Need: n, Budget: b.total}
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("waiting for %s of the decode budget: %w", bytesize.Format(n), err)
	}
	b.inUse.Add(n)
	return func() {
		b.inUse.Add(-n)
		b.sem.Release(n)
	}, nil
}
