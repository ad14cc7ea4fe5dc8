package autoscale

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// lifecycleActuator is a fakeActuator that also records StartJob and EndJob.
type lifecycleActuator struct {
	*fakeActuator
	startErr error
}

func (l *lifecycleActuator) StartJob(_ context.Context, job string, b JobBounds) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("start %s %d..%d", job, b.MinReplicas, b.MaxReplicas))
	return l.startErr
}

func (l *lifecycleActuator) EndJob(_ context.Context, job string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "end "+job)
	return nil
}

func TestRunnerStartsAndEndsJobsInTheActuatorOnce(t *testing.T) {
	act := &lifecycleActuator{fakeActuator: newFakeActuator(), startErr: errors.New("api server down")}
	r, err := NewRunner(act, DefaultConfig(), nil, nil)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Unix(1000, 0)
	f.add(r, "j", Job{MinReplicas: 1, MaxReplicas: 4}, &fakeBacklog{pending: 5})

	f.tick(ctx, r, now)
	// A failed StartJob does not hold the scaling back, and is retried.
	if d := cmp.Diff([]string{"start j 1..4", "j=1"}, act.takeCalls()); d != "" {
		t.Errorf("first tick (-want,+got)\n%s", d)
	}
	act.mu.Lock()
	act.startErr = nil
	act.mu.Unlock()
	f.tick(ctx, r, now.Add(time.Second))
	if d := cmp.Diff([]string{"start j 1..4", "j=1"}, act.takeCalls()); d != "" {
		t.Errorf("second tick (-want,+got)\n%s", d)
	}
	for i := range 5 {
		f.tick(ctx, r, now.Add(time.Duration(2+i)*time.Second))
	}
	if d := cmp.Diff([]string{"j=1", "j=1", "j=1", "j=1", "j=1"}, act.takeCalls()); d != "" {
		t.Errorf("later ticks: Scale only (-want,+got)\n%s", d)
	}
	r.RemoveJob("j")
	f.tick(ctx, r, now.Add(10*time.Second))
	f.tick(ctx, r, now.Add(11*time.Second))
	if d := cmp.Diff([]string{"j=0", "end j"}, act.takeCalls()); d != "" {
		t.Errorf("after removal (-want,+got)\n%s", d)
	}
}
