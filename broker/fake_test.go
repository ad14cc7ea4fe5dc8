package broker

import (
	"context"
	"errors"
	"sync"

	"github.com/sluice-project/sluice/wire"
)

// fakeTarget plays the function side of the seam: it records every send and
// fails the tasks it is told to.
type fakeTarget struct {
	// failFirst fails a task's first send transiently; permanent fails
	// every send permanently; always fails every send transiently.
	failFirst, permanent, always map[string]bool
	// hold, if set, runs inside each send before it is answered.
	hold func(ctx context.Context, task wire.ShardTask) error

	mu          sync.Mutex
	calls       map[string]int
	succeeded   map[string]int
	inflight    int
	maxInflight int
}

func (f *fakeTarget) Send(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error) {
	id := task.ID()
	f.mu.Lock()
	if f.calls == nil {
		f.calls, f.succeeded = map[string]int{}, map[string]int{}
	}
	f.calls[id]++
	n := f.calls[id]
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()

	if f.hold != nil {
		if err := f.hold(ctx, task); err != nil {
			return wire.ShardResult{}, err
		}
	}
	switch {
	case f.permanent[id]:
		return wire.ShardResult{}, &PermanentError{Task: id, Endpoint: "fake", StatusCode: 400, Body: "unknown pipeline"}
	case f.always[id], f.failFirst[id] && n == 1:
		return wire.ShardResult{}, errors.New("fake replica went away")
	}
	f.mu.Lock()
	f.succeeded[id]++
	f.mu.Unlock()
	return wire.ShardResult{Task: id, Samples: 2, Chunks: 1, Bytes: 100}, nil
}

func (f *fakeTarget) snapshot() (calls, succeeded map[string]int, maxInflight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls, succeeded = map[string]int{}, map[string]int{}
	for k, v := range f.calls {
		calls[k] = v
	}
	for k, v := range f.succeeded {
		succeeded[k] = v
	}
	return calls, succeeded, f.maxInflight
}

func (f *fakeTarget) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight
}
